"""A run's start-up (driver.study_start): the sampler a job names or its refusal, the pre-flight's
refusal before anything is opened, the space the pre-screen leaves (the baseline's setting kept, the
slow ones late), a study the run created and left empty forgotten and one with a trial kept, what a
dead driver left, a shared study's takeovers and extras, the job's advice and the path warnings said
once per study."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import optuna
import pytest

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core import prescreened
from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.core.nccl import ENGINE_PATH_WARNING
from orchestrator.core.prescreened import Prescreen
from orchestrator.driver.prescreen_drop import PrescreenedSpace, setting_key
from orchestrator.driver.study_start import StudyStart, path_warnings
from orchestrator.study.storage import storage

SPACE = "params:\n  tp_size: {choices: [1, 2]}\n  env.NCCL_PROTO: {choices: [LL, Simple]}\n"
# at TP=2 Simple's all-reduce is 5x LL's: dropped under the default keep_within (4x), late if kept
SCREENED = Prescreen.from_record({"rows": [
    {"tp_size": 2, "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 10.0},
    {"tp_size": 2, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 50.0},
]})
LL, SIMPLE = {"tp_size": 2, "env.NCCL_PROTO": "LL"}, {"tp_size": 2, "env.NCCL_PROTO": "Simple"}


def start_of(job, said: list[str], trials: int | None = 3) -> StudyStart:
    return StudyStart(job, trials=trials, normalize=job.backend_obj().normalize, say=said.append)


@pytest.fixture
def job(tmp_path):
    return load_job(write_job(tmp_path))


def test_the_sampler_is_the_jobs_and_a_bad_option_is_the_jobs_error(job):
    sampler, strategy = start_of(job, []).sampler()
    assert isinstance(sampler, optuna.samplers.BaseSampler) and strategy is not None
    bad = dataclasses.replace(job, sampler=dataclasses.replace(job.sampler, name="tpe", options={"bogus": 1}))
    with pytest.raises(BadInput, match=None) as err:
        start_of(bad, []).sampler()
    assert err.value.key == "sampler" and str(job.path) in str(err.value.file)


def test_a_node_without_what_the_trials_need_refuses_the_run_before_anything_opens(job):
    asked = []
    ready = SimpleNamespace(preflight=lambda need: asked.append(need) or {"node-a": []})
    start_of(job, []).preflight(ready)
    assert asked and asked[0]["gpus"] == 0
    broken = SimpleNamespace(preflight=lambda need: {"node-a": [], "node-b": ["no such command: vllm"]})
    with pytest.raises(RuntimeFailure, match="pre-flight failed on 1 of 2 node"):
        start_of(job, []).preflight(broken)


def test_without_the_prescreen_the_space_is_the_jobs(job):
    start = start_of(job, [])
    assert start.space(job.baseline_config()) is job.space and start.late is None


@pytest.mark.parametrize("baseline, dropped, late", [(LL, True, False), (SIMPLE, False, True)])
def test_the_prescreen_drops_the_slow_settings_but_the_baselines_and_tries_the_kept_slow_ones_late(
        tmp_path, baseline, dropped, late):
    job = load_job(write_job(tmp_path, space_text=SPACE, baseline=baseline, prescreen={"enabled": True}))
    job.dir.root.mkdir(parents=True, exist_ok=True)
    prescreened.write(job.dir.prescreen, SCREENED)  # stored: the run reads it, measures nothing
    said: list[str] = []
    start = start_of(job, said)
    space = start.space(baseline)
    assert isinstance(space, PrescreenedSpace)
    assert (space.feasible(SIMPLE) is not None) is dropped and space.feasible(LL) is None
    assert ("pre-screen: 1 NCCL setting(s) dropped before launch" in said) is dropped
    assert (start.late is not None) is late
    if late:
        assert "pre-screen: 1 NCCL setting(s) 2x the fastest all-reduce or slower, tried late" in said
        assert start.late(SIMPLE) and not start.late(LL) and setting_key(SIMPLE) is not None


def test_a_study_the_run_created_and_left_empty_is_forgotten_and_one_with_a_trial_is_kept(job):
    start = start_of(job, [])
    sampler, _ = start.sampler()
    study = start.open(sampler)
    assert start.shared is None and job.journal_path.exists()
    start.forget_unlaunched(job_error=False)
    assert not job.journal_path.exists()  # the journal this run made, and nothing else in it
    start.forget_unlaunched(job_error=False)  # once per run: nothing left to forget

    again = start_of(job, [])
    study = again.open(sampler)
    study.add_trial(optuna.trial.create_trial(value=1.0))  # something measured
    again.forget_unlaunched(job_error=True)
    assert job.journal_path.exists() and len(storage.storage_for(job.storage).get_all_studies()) == 1


def test_a_study_that_failed_only_on_the_jobs_own_error_is_forgotten(job, tmp_path):
    start = start_of(job, [])
    study = start.open(start.sampler()[0])
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    start.forget_unlaunched(job_error=False)  # a failed trial of another cause: kept
    assert job.journal_path.exists()
    start = start_of(job, [])
    start.open(start.sampler()[0])  # reopened, not created empty: nothing to forget
    start.forget_unlaunched(job_error=True)
    assert job.journal_path.exists()

    (tmp_path / "fresh").mkdir()
    fresh = load_job(write_job(tmp_path / "fresh", study="fresh"))
    start = start_of(fresh, [])
    study = start.open(start.sampler()[0])
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    start.forget_unlaunched(job_error=True)
    assert not fresh.journal_path.exists()


def test_what_a_dead_driver_left_is_ended_kept_or_requeued_and_said(job):
    said: list[str] = []
    executor = SimpleNamespace(cleanup_orphans=lambda where: [101, 102] if where == job.dir.servers else [])
    policy = SimpleNamespace(finish_recorded=lambda: [3], recover_interrupted=lambda: [4, 5])
    start_of(job, said).recover(executor, policy)  # not shared: no takeover asked of the policy
    assert said == ["ended 2 server(s) left behind by a previous driver",
                    "#3 was left running by a dead driver after its result was stored: kept as recorded",
                    "#4 was left running by a dead driver: marked interrupted, re-queued",
                    "#5 was left running by a dead driver: marked interrupted, re-queued"]


def test_a_shared_studys_dead_drivers_trials_are_taken_over_once_a_heartbeat_period(job):
    said: list[str] = []
    looked = []
    start = start_of(job, said)
    start.shared = SimpleNamespace(heartbeat_s=3600.0, stale=lambda study: looked.append(study) or ["stale"])
    policy = SimpleNamespace(study="the study", account_stale=lambda stale: ([7], [8]))
    start.take_over(policy)
    start.take_over(policy)  # within the heartbeat period: not again
    assert looked == ["the study"]
    start.take_over(policy, now=True)
    assert looked == ["the study"] * 2
    assert said[:2] == ["#7 was left running by a driver that stopped after its result was stored: kept as recorded",
                        "#8 was left running by a driver that stopped (no heartbeat): marked interrupted, re-queued"]


@pytest.mark.parametrize("holds", [True, False])
def test_a_shared_study_beats_for_its_trials_and_leaves_the_extras_to_the_driver_holding_them(job, holds):
    said: list[str] = []
    beats = []
    start = start_of(job, said)
    start.shared = SimpleNamespace(start_beats=beats.append, take_extras=lambda: holds)
    in_flight = [SimpleNamespace(number=1, cached=None), SimpleNamespace(number=2, cached={"v": 1})]
    policy = SimpleNamespace(in_flight=lambda: in_flight)
    relaunches, race = SimpleNamespace(share=0.1), SimpleNamespace(budget=6)
    start.share(policy, relaunches, race)
    assert beats[0]() == [1]  # the trials launched, not a cached answer
    assert "is shared through" in said[0]
    assert (relaunches.share, race.budget) == ((0.1, 6) if holds else (0.0, 0))
    assert any("only searches" in line for line in said) is not holds


def test_the_jobs_advice_is_a_warning_of_the_run(job, caplog):
    advice = ("timeouts.startup of 60s is short for a 70B model",)
    with caplog.at_level(logging.WARNING, logger="orchestrator.driver.run"):
        StudyStart(SimpleNamespace(dir=job.dir), trials=None, normalize=dict, say=print).warn_advice()  # none
        StudyStart(SimpleNamespace(dir=job.dir, advice=advice), trials=None, normalize=dict, say=print).warn_advice()
    # the run's logger, as driver.log has always named it
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("orchestrator.driver.run", advice[0])]


def test_the_path_warnings_earlier_runs_recorded_are_said_once_per_study():
    study = optuna.create_study()
    path = f"{ENGINE_PATH_WARNING}allreduce.backend=custom ran nccl"
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"warnings": [path, "the client fell behind"]}))
    study.add_trial(optuna.trial.create_trial(value=2.0, user_attrs={"warnings": [path]}))
    study.add_trial(optuna.trial.create_trial(value=3.0))
    assert path_warnings(study) == {path}
