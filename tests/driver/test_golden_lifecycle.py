"""The golden reference's lifecycle on a real study: none before the baseline captured it (and
none at all with the gate off), the stored one on a resumed study; the baseline's capture comes
back as the study's reference, a failed capture stops the run without holding it against the
config; a gate failure while the reference is unconfirmed is held, and recorded as wrong output
when the run ends (real reference servers, a real journal)."""

from __future__ import annotations

import io

import pytest
from loop_parts import loop_state, wait_for

from orchestrator.core.correctness import Golden
from orchestrator.core.errors import RuntimeFailure
from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialResult
from orchestrator.driver.breaker import Breaker
from orchestrator.driver.golden import GoldenSource
from orchestrator.driver.golden_lifecycle import GoldenLifecycle
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.progress import Progress
from orchestrator.driver.recorder import Recorder
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage import storage

pytestmark = pytest.mark.slow


def lifecycle(job, run, out: io.StringIO) -> GoldenLifecycle:
    launcher = Launcher(job)
    recorder = Recorder(job, Progress(job, trials=3, timeout_s=None, out=out),
                        Breaker(job.max_consecutive_failures, job.dir.logs, job.path), launcher)
    return GoldenLifecycle(job, GoldenSource(job, job.baseline_config(), out.write), run.policy.baseline_key,
                           job.backend_obj().default_values(), recorder, launcher, out.write)


def reference_proposal(run):
    run.policy.ensure_baseline_next()
    proposal = run.policy.next()
    assert proposal is not None and proposal.key == run.policy.baseline_key
    run.policy.mark(proposal, baseline=True, reference=True)
    return proposal


def test_before_the_baseline_ran_there_is_no_reference_and_a_resumed_study_has_its_own(tmp_path):
    with loop_state(tmp_path) as (job, run):
        golden = lifecycle(job, run, io.StringIO())
        assert golden.golden(run) is None  # the baseline captures it, first and alone
        stored = Golden(prompts=list(job.correctness.prompts), texts=["a fox", "a time"])
        storage.store_golden(run.study, stored.to_dict(), 0)
        assert golden.golden(run) == stored


def test_with_the_gate_off_nothing_is_ever_compared(tmp_path):
    with loop_state(tmp_path, correctness={"enabled": False}) as (job, run):
        storage.store_golden(run.study, Golden(prompts=["p"], texts=["t"]).to_dict(), 0)
        assert lifecycle(job, run, io.StringIO()).golden(run) is None


def test_the_baselines_capture_becomes_the_studys_reference(tmp_path, no_leftover_servers):
    out = io.StringIO()
    with loop_state(tmp_path) as (job, run):
        golden = lifecycle(job, run, out)
        proposal = reference_proposal(run)
        run.executor.submit(golden.launcher.spec(run.policy, proposal.number, proposal.config, None))
        [(_, result)] = wait_for(run.executor)
        reference = golden.reference_back(run, proposal, result)
        assert reference is not None and reference.texts
        assert storage.stored_golden(run.study) == {**reference.to_dict(), "trial": proposal.number}
        [row] = trial_rows(run.study)
        assert row.state == COMPLETE and row.counted and row.correctness["reference"] is True


def test_a_failed_capture_stops_the_run_and_is_not_held_against_the_baseline(tmp_path):
    with loop_state(tmp_path) as (job, run):
        golden = lifecycle(job, run, io.StringIO())
        proposal = reference_proposal(run)
        crashed = TrialResult.failed(proposal.config, FailureKind.START_CRASH, "server exited with code 1")
        with pytest.raises(RuntimeFailure, match=r"golden reference is unusable: the baseline \(trial 0\) it failed"):
            golden.reference_back(run, proposal, crashed)
        [row] = trial_rows(run.study)
        assert row.state == FAIL and not row.counted
        assert storage.stored_golden(run.study) is None


def test_a_gate_failure_is_held_until_the_run_ends_then_recorded_as_wrong_output(tmp_path):
    out = io.StringIO()
    with loop_state(tmp_path) as (job, run):
        golden = lifecycle(job, run, out)
        run.golden = Golden(prompts=list(job.correctness.prompts), texts=["garbage one", "garbage two"])
        golden.start_votes(run)
        proposal = run.policy.next()
        assert proposal is not None
        wrong = TrialResult(outcome=FAIL, config=proposal.config, failure_kind=FailureKind.WRONG_OUTPUT,
                            failure_reason="greedy text differs from the reference",
                            outputs={"texts": ["the right text", "and more of it"]}, correctness={"ok": False})
        assert golden.tell(run, proposal, wrong) is None  # held: the reference is not confirmed yet
        assert f"#{proposal.number} -> FAIL wrong-output" in out.getvalue()
        assert [r.state for r in trial_rows(run.study)] == ["RUNNING"]
        golden.release_held(run.policy)
        [row] = trial_rows(run.study)
        assert row.failure_kind == FailureKind.WRONG_OUTPUT and row.counted
