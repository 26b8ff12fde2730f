"""The driver's loop stops a study the ways a night can go: the wall-clock budget, the
circuit breaker, an error while two trials run. Each leaves no trial RUNNING, the study
resumable and no server behind (real reference servers, real journals). Stop signals through
`ncclsweep run`: tests/e2e/test_stop_signals.py."""

from __future__ import annotations

import io

import pytest

from conftest import run_in_process, study_servers, write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import CircuitOpen
from orchestrator.study.history import trial_rows
from orchestrator.study.storage import open_study

pytestmark = pytest.mark.slow


def test_timeout_stops_starting_trials(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="deadline", budget={"trials": 4}))
    summary = run_in_process(job, timeout_s=1.0, out=io.StringIO())
    assert summary.reason == "timeout"
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert len(rows) == 1 and rows[0].state == "COMPLETE"  # the running trial finished cleanly


def test_circuit_breaker_stops_after_consecutive_failures(tmp_path, no_leftover_servers):
    space = 'params:\n  backend.fault: {choices: [none, crash-on-start, "crash-after:1", garbage]}\n'
    job = load_job(write_job(tmp_path, study="breaker", space_text=space, baseline={"backend.fault": "none"},
                             budget={"trials": 4}, max_consecutive_failures=2,
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
                             budget={"trials": 3}, max_consecutive_failures=1, ray={"parallel": 2},
                             sampler={"name": "bruteforce", "seed": 0},
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
    assert not study_servers(tmp_path / "reports")




def test_the_search_stops_for_the_race_only_once_two_configs_are_measured(tmp_path):
    """Found running the demo beside the test suite on a busy 2-core box: its baseline's first
    launch cost so much that the time left looked like only the race's (8 launches), and the
    search stopped after the baseline, a race with nothing to race. One config has no race; with
    two, the search stops for it when the time left is what it needs."""
    import time
    from types import SimpleNamespace

    import recorded_study as fx

    from orchestrator.driver.run import StudyDriver
    from orchestrator.driver.time_budget import TimeBudget
    from orchestrator.study.policy import SearchPolicy

    job = load_job(write_job(tmp_path, study="race-time", budget={"trials": 8, "timeout": "15m", "confirm": 8}))
    study = open_study(job)
    policy = SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    choices = {"tp_size": [1, 2], "backend.threads": [1, 2]}
    base = {"tp_size": 1, "backend.threads": 1}
    fx.record(study, policy, base, fx.ok(base, 20.0), baseline=True, choices=choices)  # one launch: 60 s
    out = io.StringIO()
    driver = StudyDriver(job, executor=SimpleNamespace(), out=out)
    run = SimpleNamespace(time=TimeBudget(15 * 60, time.monotonic() - 600), policy=policy, search_over=False,
                          summary=SimpleNamespace(reason=None))  # 300 s left: less than 8 launches of 60 s
    assert driver._leave_time_for_race(run) is False and not run.search_over
    other = {"tp_size": 2, "backend.threads": 2}
    fx.record(study, policy, other, fx.ok(other, 30.0, at=70), choices=choices)
    assert driver._leave_time_for_race(run) is True and run.search_over and run.summary.reason == "timeout"
    assert "the race of the finalists needs ~" in out.getvalue()
