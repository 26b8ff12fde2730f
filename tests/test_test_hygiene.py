"""The test suite ends only what it started: a server of other work on the same machine
(e.g. a live study) survives the leftover check, a server this session started does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import SESSION_TAG_VAR, end_leftover_servers, server_processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)", "orchestrator.refserver"]


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def test_leftover_check_leaves_other_work_alone_and_ends_its_own():
    foreign_env = {k: v for k, v in os.environ.items() if k != SESSION_TAG_VAR}
    foreign = subprocess.Popen(SLEEPER, env=foreign_env, start_new_session=True)
    own = subprocess.Popen(SLEEPER, start_new_session=True)  # inherits this session's tag
    try:
        deadline = time.monotonic() + 10
        while own.pid not in {p for p, _ in server_processes()} and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = {p for p, _ in server_processes()}
        assert own.pid in seen and foreign.pid not in seen
        left = end_leftover_servers(before=set(), wait_s=0.5)
        assert [p for p, _ in left] == [own.pid]
        own.wait(timeout=10)
        time.sleep(0.3)
        assert _alive(foreign), "the leftover check ended a process this test session did not start"
    finally:
        for proc in (own, foreign):
            if _alive(proc):
                proc.kill()
            proc.wait(timeout=10)
