"""The driver's loop stops a study the ways a night can go: the wall-clock budget, the
circuit breaker, an error while two trials run. Each leaves no trial RUNNING, the study
resumable and no server behind (real server processes: the fake OpenAI server on the reference
server's command line, its faults as the fake's flags; real journals). Stop signals through
`ncclsweep run`: tests/e2e/test_stop_signals.py."""

from __future__ import annotations

import io

import pytest
from wrapped_server import fake_backend

from conftest import FAKE_MARKER, run_in_process, study_servers, write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import CircuitOpen
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow


def test_timeout_stops_starting_trials(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="deadline", budget={"trials": 4}, backend=fake_backend(tmp_path)))
    summary = run_in_process(job, timeout_s=1.0, out=io.StringIO())
    assert summary.reason == "timeout"
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert len(rows) == 1 and rows[0].state == "COMPLETE"  # the running trial finished cleanly


def test_circuit_breaker_stops_after_consecutive_failures(tmp_path, no_leftover_servers):
    space = 'params:\n  backend.fault: {choices: [none, crash-on-start, "crash-after:1", garbage]}\n'
    job = load_job(write_job(tmp_path, study="breaker", space_text=space, baseline={"backend.fault": "none"},
                             budget={"trials": 4}, backend=fake_backend(tmp_path), max_consecutive_failures=2,
                             sampler={"name": "bruteforce", "seed": 0}))
    with pytest.raises(CircuitOpen, match="2 consecutive failed trials"):
        run_in_process(job, out=io.StringIO())
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert [r.state for r in rows] == ["COMPLETE", "FAIL", "FAIL"]


def test_a_driver_that_stops_on_an_error_leaves_no_trial_running(tmp_path, no_leftover_servers):
    """Two trials in flight; one crashes and trips the breaker: the other's server is ended
    and its trial recorded interrupted (re-queued), not left RUNNING for the next run."""
    space = 'params:\n  backend.fault: {choices: [none, crash-on-start, "slow-start:60"]}\n'
    job = load_job(write_job(tmp_path, study="error-exit", space_text=space, baseline={"backend.fault": "none"},
                             budget={"trials": 3}, backend=fake_backend(tmp_path), max_consecutive_failures=1,
                             ray={"parallel": 2}, sampler={"name": "bruteforce", "seed": 0},
                             timeouts={"startup": "120s", "bench": "60s", "teardown": "5s"}))
    out = io.StringIO()
    with pytest.raises(CircuitOpen):
        run_in_process(job, out=out)
    rows = trial_rows(open_study(job, create=False))
    states = {r.params.get("backend.fault"): (r.state, r.failure_kind) for r in rows}
    assert "RUNNING" not in [r.state for r in rows], out.getvalue()
    assert states["crash-on-start"] == ("FAIL", "start-crash")
    assert states["slow-start:60"] == ("FAIL", "interrupted"), out.getvalue()
    assert "re-queued" in out.getvalue()
    assert not study_servers(tmp_path / "reports", FAKE_MARKER)
