"""kill -9 of the driver in the middle of a trial, then `run` again: the study reaches its
trial count, no completed trial is lost, no server is left, and the interrupted config is
measured once. The servers: tests/fake_openai_server.py through the command backend, a front and
one worker process per rank (``--workers``: like an engine's, they outlive a front killed with
SIGKILL), real processes that a dead driver's trial leaves for its supervisor and the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (
    ANY_SERVER,
    FAKE_OPENAI,
    STANDINS,
    TEST_PROMPT,
    server_processes,
    start_driver,
    study_servers,
    wait_for,
    write_job,
)
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow




def test_kill_9_mid_trial_then_resume(tmp_path, no_leftover_servers):
    before = {pid for pid, _ in server_processes(ANY_SERVER)}
    space = "params:\n  tp_size: {choices: [1, 2]}\n  backend.max_batch: {choices: [8, 16]}\n"
    argv = ["{python}", str(FAKE_OPENAI), "--host", "{host}", "--port", "{port}", "--model", "tiny",
            "--workers", "{tp_size}", "--slots", "{backend.max_batch}", "--token-delay", "0.02"]
    job_path = write_job(tmp_path, study="kill9", budget={"trials": 3}, space_text=space,
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "tiny"}},
                         baseline={"tp_size": 1, "backend.max_batch": 8},
                         # a launch and 4 x 100 tokens at 50 tok/s (8 s): the kill, 1 s after the server is
                         # recorded, lands in it
                         bench={"prompt": TEST_PROMPT, "output_tokens": 100, "warmup": 1, "repeats": 3,
                                "max_repeats": 3})
    log_path = tmp_path / "driver1.log"
    driver = start_driver(job_path, log_path)
    try:
        wait_for(lambda: "starting #1" in log_path.read_text(), 120, "the second trial to start")
        # the second trial's server is up (it is recorded before it is trusted)
        wait_for(lambda: list((tmp_path / "reports" / "kill9" / "servers").glob("*.json")), 30, "a recorded server")
        time.sleep(1.0)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # our own Ray instance (fate-shared with the driver) goes; stragglers are the next run's job
    rerun = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path)], capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "marked interrupted, re-queued" in rerun.stdout + rerun.stderr
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    interrupted = [r for r in rows if r.failure_kind == "interrupted"]
    assert len(interrupted) == 1
    counted = [r for r in rows if r.counted]
    assert len(counted) == 3 and all(r.state == "COMPLETE" for r in counted)
    # the interrupted config was measured exactly once afterwards, and trial 0 was kept
    assert sum(r.config_key == interrupted[0].config_key for r in counted) == 1
    assert rows[0].state == "COMPLETE" and rows[0].is_baseline
    assert not study_servers(tmp_path / "reports", STANDINS), "a server outlived the killed driver and the resumed run"
    # nor a worker of one (their command lines name no port)
    assert not [(p, c) for p, c in server_processes(ANY_SERVER) if p not in before]
    assert not list((tmp_path / "reports" / "kill9" / "servers").glob("*.json"))
