"""The tell step on a real study: a trial that came back is decided, recorded (counted, its line
printed) and counted by the breaker; a failure that trips the breaker is stored before the run
stops; a failure on the job itself stops the run (exit 2) and marks it; a relaunch that came back
is stored as an uncounted trial of its config (real reference servers, a real journal)."""

from __future__ import annotations

import io

import pytest
from loop_parts import loop_state, wait_for

from orchestrator.core.errors import BadInput, CircuitOpen
from orchestrator.core.outcome import Final
from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialResult
from orchestrator.driver.breaker import Breaker
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import EXTRA_NUMBERS, Launch
from orchestrator.driver.progress import Progress
from orchestrator.driver.recorder import Recorder
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.search.relaunch import RELAUNCH

pytestmark = pytest.mark.slow


def recorder(job, out: io.StringIO, limit: int = 0) -> Recorder:
    return Recorder(job, Progress(job, trials=3, timeout_s=None, out=out), Breaker(limit, job.dir.logs, job.path),
                    Launcher(job))


def test_a_trial_that_came_back_is_decided_recorded_and_said(tmp_path, no_leftover_servers):
    out = io.StringIO()
    with loop_state(tmp_path) as (job, run):
        tell = recorder(job, out)
        proposal = run.policy.next()
        assert proposal is not None
        run.executor.submit(tell.launcher.spec(run.policy, proposal.number, proposal.config, None))
        [(_, result)] = wait_for(run.executor)
        final = tell.decide(run, proposal, result, None)
        assert final.counted and final.result.outcome == COMPLETE, final.result.failure_reason
        tell.record(run.policy, proposal, final)
        [row] = trial_rows(run.study)
        assert (row.number, row.state, row.counted, row.value) == (proposal.number, COMPLETE, True,
                                                                   final.result.value)
        assert f"#{proposal.number} -> " in out.getvalue()
        assert tell.breaker.consecutive_failures == 0

        back = Launch("relaunch", EXTRA_NUMBERS + 1, key=proposal.key, config=proposal.config, shown="#0")
        tell.launch_back(run, back, result)  # the same config's measurement, back as a relaunch
        relaunch = trial_rows(run.study)[-1]
        assert relaunch.launch_role == RELAUNCH and not relaunch.counted and relaunch.config_key == proposal.key
        assert run.summary.relaunched == 1 and "relaunch of #0 -> " in out.getvalue()


def test_a_failure_that_trips_the_breaker_is_stored_before_the_run_stops(tmp_path):
    out = io.StringIO()
    with loop_state(tmp_path) as (job, run):
        tell = recorder(job, out, limit=1)
        proposal = run.policy.next()
        assert proposal is not None
        crashed = TrialResult.failed(proposal.config, FailureKind.START_CRASH, "server exited with code 1")
        with pytest.raises(CircuitOpen, match="1 consecutive failed trials"):
            tell.record(run.policy, proposal, tell.decide(run, proposal, crashed, None))
        [row] = trial_rows(run.study)
        assert row.failure_kind == FailureKind.START_CRASH and row.counted
        assert f"#{proposal.number} -> FAIL start-crash" in out.getvalue()


def test_a_failure_on_the_job_itself_stops_the_run_with_bad_input(tmp_path):
    with loop_state(tmp_path) as (job, run):
        tell = recorder(job, io.StringIO())
        refused = TrialResult.failed(job.baseline_config(), FailureKind.INTERRUPTED, "prompt too long")
        final = Final(refused, counted=False, blameless=True, requeue=False,
                      job_error="the server's limit is 2048 tokens; the prompts need 4096")
        with pytest.raises(BadInput, match="stopping: #3: the server's limit is 2048 tokens") as stop:
            tell.stop_on_job_error(final, "#3")
        assert stop.value.key == "bench" and tell.job_error
        tell.stop_on_job_error(Final(refused, counted=False, blameless=True, requeue=False), "#4")  # no job error
        assert refused.outcome == FAIL
