"""A study over broken servers: every fault of the reference server ends in the right
trial state and reason, the study goes on, and a failed config is never proposed again."""

from __future__ import annotations

import io

import pytest

from conftest import TEST_PROMPT, run_in_process, timeouts_until_blamed, write_job
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import best_rows, trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

SPACE = """\
params:
  backend.fault:
    choices: [none, crash-on-start, hang-on-start, hang-in-decode, garbage, "slow-start:3", "crash-after:2"]
"""
EXPECTED = {
    "none": ("COMPLETE", None),
    "crash-on-start": ("FAIL", "start-crash"),
    "hang-on-start": ("FAIL", "start-timeout"),
    "hang-in-decode": ("FAIL", "bench-timeout"),
    "garbage": ("FAIL", "wrong-output"),
    "slow-start:3": ("COMPLETE", None),
    "crash-after:2": ("FAIL", "bench-error"),
}


def test_each_fault_gets_its_state_and_the_study_continues(tmp_path, no_leftover_servers):
    job_path = write_job(
        tmp_path, study="faults", space_text=SPACE, baseline={"backend.fault": "none"},
        budget={"trials": 7}, sampler={"name": "bruteforce", "seed": 0},
        timeouts={"startup": "20s", "bench": "6s", "teardown": "3s"},  # slow-start:3 on a loaded box
        bench={"prompt": TEST_PROMPT, "output_tokens": 16, "warmup": 1, "repeats": 2, "max_repeats": 2},
        max_consecutive_failures=10)
    job = load_job(job_path)
    out = io.StringIO()
    run_in_process(job, out=out)
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    got = {r.params["backend.fault"]: (r.state, r.failure_kind) for r in rows}
    assert got == EXPECTED, out.getvalue()
    by_fault = {r.params["backend.fault"]: r for r in rows}
    # a crash is noticed when it happens, not when the startup timeout would have ended the trial
    assert by_fault["crash-on-start"].durations["total_s"] < job.timeouts.startup_s
    assert by_fault["slow-start:3"].durations["launch_s"] >= 3
    for fault, (state, _) in EXPECTED.items():
        if state == "FAIL":
            row = by_fault[fault]
            assert row.failure_reason and row.log_tail, row
    assert "differs from the reference" in by_fault["garbage"].failure_reason
    # a timeout bans its config only once it reproduces: the first one was re-queued, uncounted
    every = trial_rows(open_study(job, create=False))
    for fault, kind in (("hang-on-start", "start-timeout"), ("hang-in-decode", "bench-timeout")):
        runs = [r for r in every if r.params["backend.fault"] == fault and r.cached_from is None]
        assert [r.failure_kind for r in runs] == [kind] * len(runs), runs
        timeouts_until_blamed(runs)  # the first re-queued (a second too, on a busy host), the last counted
    # failed configs are never best, and a bigger budget proposes nothing new: space exhausted
    assert {b.params["backend.fault"] for b in best_rows(rows, 5)} <= {"none", "slow-start:3"}
    summary = run_in_process(job, trials=9, out=io.StringIO())
    assert summary.reason == "space exhausted" and summary.launched == 0
