"""Issue acceptance, end to end (a real driver, real multi-process servers through the command
backend): a worker that dies while the front stays up fails the trial in seconds, not after
the start-up timeout (the driver's trials in this process); a kill -9 of `ncclsweep run`
(real Ray) leaves nothing of the tree."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_PROMPT, TESTS, kill_pids, run_in_process, write_job
from orchestrator.config.job import load_job
from orchestrator.node import proctree
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

FAKE = str(TESTS / "fake_openai_server.py")


def _command_job(tmp_path: Path, study: str, *fake_args: str, **sections) -> Path:
    argv = ["{python}", FAKE, "--host", "{host}", "--port", "{port}", "--model", "fake", *fake_args]
    return write_job(tmp_path, study=study, space_text="params:\n  tp_size: {choices: [1]}\n",
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline={"tp_size": 1}, correctness={"enabled": False}, **sections)


def _worker_pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(pid_dir.glob("worker-*.pid")) if p.read_text().strip()]


def test_a_dead_worker_ends_the_trial_long_before_the_startup_timeout(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    job = load_job(_command_job(tmp_path, "deadworker", "--ready-after", "600", "--workers", "2",
                                "--pid-dir", str(pid_dir), "--worker-dies-after", "2",
                                budget={"trials": 1}, timeouts={"startup": "150s", "bench": "30s", "teardown": "5s"}))
    t0 = time.monotonic()
    run_in_process(job, out=io.StringIO())
    took = time.monotonic() - t0
    (row,) = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert row.state == "FAIL" and row.failure_kind == "start-crash", row
    assert "exited while the server's first process kept running" in row.failure_reason
    assert took < job.timeouts.startup_s, f"the run took {took:.0f} s (start-up timeout 150 s)"
    print(f"run with a worker dying 2 s after start: {took:.1f} s (start-up timeout 150 s)")
    workers = _worker_pids(pid_dir)
    assert len(workers) == 2 and not any(proctree.alive(p) for p in workers)


def test_kill_9_of_the_driver_leaves_no_process_of_the_tree(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    job_path = _command_job(tmp_path, "kill9tree", "--workers", "2", "--pid-dir", str(pid_dir),
                            "--token-delay", "0.2", budget={"trials": 1},
                            bench={"prompt": TEST_PROMPT, "output_tokens": 400, "warmup": 0, "repeats": 1,
                                   "max_repeats": 1})
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(job_path)], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
    tree: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(_worker_pids(pid_dir)) < 2 and time.monotonic() < deadline:
            assert driver.poll() is None, log_path.read_text()
            time.sleep(0.2)
        tree = _worker_pids(pid_dir)
        fronts = [m.pid for p in tree for m in proctree.tree(p)]  # the workers themselves
        assert len(tree) == 2
        front = os.getpgid(tree[0])  # the server's own process group: its first process's pid
        tree.append(front)
        time.sleep(2.0)  # the benchmark is running
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and anything in its session
        driver.wait(10)
        t0 = time.monotonic()
        while any(proctree.alive(p) for p in tree) and time.monotonic() - t0 < 20:
            time.sleep(0.2)
        print(f"tree gone {time.monotonic() - t0:.1f} s after kill -9 of the driver")
        left = [p for p in tree if proctree.alive(p)]
        assert not left, f"processes of the tree alive 20 s after kill -9 of the driver: {left} ({fronts})"
    finally:
        if driver.poll() is None:
            driver.kill()
        kill_pids(tree)
