"""Stopping a study the ways a night can go: the wall-clock budget, one and two Ctrl-C,
and the circuit breaker. Each leaves the study resumable and no server behind."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import study_servers, write_job
from orchestrator.errors import CircuitOpen
from orchestrator.history import trial_rows
from orchestrator.job import load_job
from orchestrator.study import StudyDriver, open_study

pytestmark = pytest.mark.slow


def test_timeout_stops_starting_trials(tmp_path, ray_local, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="deadline", budget={"trials": 4}))
    summary = StudyDriver(job, timeout_s=1.0, out=io.StringIO()).run()
    assert summary.reason == "timeout"
    rows = [r for r in trial_rows(open_study(job, create=False)) if r["counted"]]
    assert len(rows) == 1 and rows[0]["state"] == "COMPLETE"  # the running trial finished cleanly


def test_circuit_breaker_stops_after_consecutive_failures(tmp_path, ray_local, no_leftover_servers):
    space = 'params:\n  backend.fault: {choices: [none, crash-on-start, "crash-after:1", garbage]}\n'
    job = load_job(write_job(tmp_path, study="breaker", space_text=space, baseline={"backend.fault": "none"},
                             budget={"trials": 4}, max_consecutive_failures=2,
                             sampler={"name": "bruteforce", "seed": 0}))
    with pytest.raises(CircuitOpen, match="2 consecutive failed trials"):
        StudyDriver(job, out=io.StringIO()).run()
    rows = [r for r in trial_rows(open_study(job, create=False)) if r["counted"]]
    assert [r["state"] for r in rows] == ["COMPLETE", "FAIL", "FAIL"]


def _start_driver(job_path, log_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(job_path)], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_text(path, text, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}:\n{path.read_text()}")


@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_once_finishes_the_trial_twice_kills_it(tmp_path, signals, no_leftover_servers):
    # one intra-op thread per rank: oversubscribed OpenMP threads stall on a loaded 2-core box
    space = "params:\n  tp_size: {choices: [1, 2]}\n  backend.max_batch: {choices: [8, 16]}\n"
    job_path = write_job(tmp_path, study=f"sig{signals}", budget={"trials": 3}, space_text=space,
                         baseline={"tp_size": 1, "backend.max_batch": 8},
                         bench={"output_tokens": 300, "warmup": 1, "repeats": 3, "max_repeats": 3})
    log_path = tmp_path / "driver.log"
    driver = _start_driver(job_path, log_path)
    try:
        _wait_text(log_path, "starting #0")
        time.sleep(2.5)  # the server is up, the benchmark running
        for _ in range(signals):
            os.kill(driver.pid, signal.SIGINT)
            time.sleep(0.5)
        assert driver.wait(90) == 0, log_path.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    text = log_path.read_text()
    assert "stopping after the running trial" in text
    rows = trial_rows(open_study(load_job(job_path), create=False))
    if signals == 1:
        assert [r["state"] for r in rows] == ["COMPLETE"] and "stopped by signal" in text
    else:
        assert "killing the running trial now" in text
        assert rows[0]["state"] == "FAIL" and rows[0]["failure_kind"] == "interrupted" and not rows[0]["counted"]
    assert not study_servers(tmp_path / "reports")
    # resumable: the next run completes the budget (the interrupted config re-queued and measured)
    rerun = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path)], capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    counted = [r for r in trial_rows(open_study(load_job(job_path), create=False)) if r["counted"]]
    assert len(counted) == 3 and all(r["state"] == "COMPLETE" for r in counted), \
        [(r["state"], r["failure_kind"], r["failure_reason"]) for r in counted]
