"""The in-process executor honours the Executor contract with real reference servers:
a trial comes back through ``wait`` once, cancel_all ends a running server and its trial
comes back interrupted, a running trial's phase is there for the status line (and gone with
the trial), and nothing it started outlives it."""

from __future__ import annotations

import time

import pytest

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core.records import COMPLETE, FAIL
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.node.spec import TrialSpec


def _results(executor: InProcessExecutor, n: int, limit_s: float = 120.0) -> list:
    """``n`` results from ``wait`` (a guard against a hang, not a timing assertion)."""
    got: list = []
    deadline = time.monotonic() + limit_s
    while len(got) < n and time.monotonic() < deadline:
        got += executor.wait(0.5)
    return got


def test_a_trial_comes_back_once_through_wait(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path))
    executor = InProcessExecutor(parallel=2)
    try:
        assert executor.slots == 2
        tickets = {executor.submit(TrialSpec.from_job(job, n, job.baseline_config())) for n in (1, 2)}
        assert set(executor.running()) == tickets
        got = _results(executor, 2)
        assert {t for t, _ in got} == tickets and all(r.outcome == COMPLETE and r.value > 0 for _, r in got)
        assert executor.running() == {} and executor.wait(0.1) == []
    finally:
        executor.shutdown()


def test_cancel_all_ends_the_server_and_the_trial_is_interrupted(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, timeouts={"startup": "10m", "bench": "30s", "teardown": "5s"}))
    executor = InProcessExecutor()
    try:
        hangs = {**job.baseline_config(), "backend.fault": "hang-on-start"}
        ticket = executor.submit(TrialSpec.from_job(job, 7, hangs))
        log = tmp_path / "reports" / "t" / "logs" / "trial-0007.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        while executor.phases()[ticket].name == "launching" and time.monotonic() < deadline:
            time.sleep(0.2)  # the log watch reads the line within a poll
        phase = executor.phases()[ticket]
        assert phase.number == 7 and phase.name == "starting: NCCL init and weights", phase  # where it hangs
        executor.cancel_all()
        ((back, result),) = _results(executor, 1)
        assert back == ticket and result.outcome == FAIL and result.failure_kind == "interrupted"
        assert executor.phases() == {}
    finally:
        executor.shutdown()


def test_parallel_must_be_positive():
    with pytest.raises(ValueError, match="parallel must be >= 1"):
        InProcessExecutor(parallel=0)
