"""A server's whole tree dies with the process that launched it, however it dies: the
launcher killed with SIGKILL, the workers in the server's process group or in sessions of
their own (real processes: the multi-process fake server)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tree_servers import FAKE, REPO_DIR, gone, worker_pids

from conftest import kill_pids
from orchestrator.node.server import free_port

pytestmark = pytest.mark.timeout(90)


def _owner_script(tmp_path: Path, port: int, pid_dir: Path, *extra: str) -> str:
    return textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {REPO_DIR!r})
        from orchestrator.core.launch import LaunchSpec
        from orchestrator.node.server import ServerProcess, ServerRegistry
        spec = LaunchSpec(argv=[sys.executable, {FAKE!r}, "--port", "{port}", "--workers", "2",
                                "--pid-dir", {str(pid_dir)!r}, *{list(extra)!r}], port={port})
        sp = ServerProcess(spec, {str(tmp_path / 's.log')!r}, ServerRegistry({str(tmp_path / 'reg')!r}))
        sp.start()
        print(sp.pid, flush=True)
        time.sleep(1000)
        """)


@pytest.mark.parametrize("setsid", [False, True], ids=["same-group", "left-the-group"])
def test_the_whole_tree_dies_within_seconds_of_a_kill_9_of_its_owner(tmp_path, setsid):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    extra = ("--workers-setsid",) if setsid else ()
    owner = subprocess.Popen([sys.executable, "-c", _owner_script(tmp_path, free_port(), pid_dir, *extra)],
                             stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        front = int(owner.stdout.readline())
        workers = worker_pids(pid_dir, 2)
        time.sleep(1.5)  # the supervisor has seen the whole tree
        owner.send_signal(signal.SIGKILL)
        owner.wait(5)
        t0 = time.monotonic()
        assert gone([front, *workers], 20), "a process of the tree outlived its owner by 20 s"
        print(f"tree gone {time.monotonic() - t0:.2f} s after kill -9 of its owner")
    finally:
        owner.kill()
        kill_pids(workers)
