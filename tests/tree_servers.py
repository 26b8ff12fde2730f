"""What the process-tree tests share: the multi-process fake server
(tests/fake_openai_server.py ``--workers N``) launched as a real process, its workers' pids,
and waiting for processes to be gone."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from conftest import REPO, TESTS
from orchestrator.core.launch import LaunchSpec
from orchestrator.node import proctree

FAKE = str(TESTS / "fake_openai_server.py")
REPO_DIR = str(REPO)  # put on sys.path by scripts that a test runs in a child interpreter


def fake_spec(port: int, *args: str) -> LaunchSpec:
    """The fake server on ``port`` with its own flags (``--workers``, ``--pid-dir``, ...)."""
    return LaunchSpec(argv=[sys.executable, FAKE, "--port", str(port), *args], host="127.0.0.1", port=port,
                      model_name="fake")


def worker_pids(pid_dir: Path, n: int, timeout: float = 20.0) -> list[int]:
    """The pids of the ``n`` workers the fake server wrote into ``pid_dir`` (waits for them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(pid_dir.glob("worker-*.pid"))
        if len(files) == n and all(f.read_text().strip() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"{n} workers did not start")


def gone(pids: list[int], timeout: float) -> bool:
    """Whether every one of ``pids`` is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(proctree.alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(proctree.alive(p) for p in pids)
