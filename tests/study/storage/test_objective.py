"""What the study tells Optuna for the job's objective (study/storage/objective.py), and that a job
without ``objective:`` behaves exactly as before objectives existed, proved on the recorded
journals (real GPU studies under docs/gpu, the CPU study under tests/data/recorded): the
values Optuna holds are what the default objective tells, the identity is the stored one,
the best, the early stop's threshold, status and export are today's; a plan of several levels
is another study (refused with one line naming the objective), and one without a finished
trial takes the new objective."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import write_job
from orchestrator.config.job import Objective, load_job
from orchestrator.core.errors import BadInput
from orchestrator.core.records import COMPLETE, PRUNED, TrialResult
from orchestrator.core.slo import Slo, Targets
from orchestrator.results.export import export
from orchestrator.study.evidence import history
from orchestrator.study.evidence.plan import best_at, prune_thresholds
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage import storage

REPO = Path(__file__).resolve().parents[3]
RECORDED = [  # (journal, the job that recorded it)
    ("docs/gpu/h200-vllm-1b/study.journal", "jobs/h200-vllm-1b.yaml"),
    ("docs/gpu/h200x2-vllm-1b-tp2-p2p/study.journal", "jobs/h200x2-vllm-1b-tp2-p2p.yaml"),
    ("docs/gpu/h200-refserver-1b/study.journal", "jobs/h200-refserver-1b.yaml"),
    ("tests/data/recorded/cpu-faults/study.journal", "tests/data/recorded/cpu-faults/job.yaml"),
]
IDS = [Path(j).parent.name for j, _ in RECORDED]
PLAN = Objective(concurrency=(1, 10, 64))
MIX = Objective(concurrency=(1, 10, 64), weights={1: 0.5, 10: 0.25, 64: 0.25})


def levels_result(values: dict[int, float], outcome: str = COMPLETE) -> TrialResult:
    recs = {str(lv): {"value": v, "samples": [v, v], "unit": objectives.unit(lv)} for lv, v in values.items()}
    first = values[min(values)]
    return TrialResult(outcome=outcome, config={}, value=first, metrics={"levels": recs, "decode_tok_s": first})


# ---- what is told ---------------------------------------------------------------------------------
def test_one_level_is_told_its_value_a_plan_one_value_per_level_a_mix_one_weighted_value():
    res = levels_result({1: 400.0, 10: 3500.0, 64: 14000.0})
    assert objectives.directions(None) == ["maximize"] and objectives.told_values(None, res) == [400.0]
    assert objectives.directions(PLAN) == ["maximize"] * 3
    assert objectives.told_values(PLAN, res) == [400.0, 3500.0, 14000.0]
    assert objectives.directions(MIX) == ["maximize"]
    mixed = objectives.told_values(MIX, res)[0]
    assert mixed == pytest.approx(math.exp(0.5 * math.log(400) + 0.25 * math.log(3500) + 0.25 * math.log(14000)))
    # the same order as the weighted geometric mean of the ratios to any baseline: a constant factor apart
    base = levels_result({1: 100.0, 10: 800.0, 64: 4000.0})
    ratio_mix = math.exp(sum(w * math.log(res.measurement.value_at(lv) / v)
                             for lv, w, v in ((1, 0.5, 100.0), (10, 0.25, 800.0), (64, 0.25, 4000.0))))
    assert mixed / objectives.told_values(MIX, base)[0] == pytest.approx(ratio_mix)
    assert objectives.failed_values(PLAN) == [0.0, 0.0, 0.0] and objectives.failed_values(MIX) == [0.0]


def test_a_level_the_objective_needs_and_did_not_measure_is_refused():
    res = levels_result({1: 400.0, 10: 3500.0})
    with pytest.raises(ValueError, match="level.s. 64 missing"):
        objectives.told_values(PLAN, res)
    assert not objectives.has_values(PLAN, res) and objectives.has_values(None, res)


def test_an_early_stop_reports_its_first_round_only_where_optuna_takes_one():
    res = levels_result({1: 40.0, 10: 300.0, 64: 900.0}, outcome=PRUNED)
    assert objectives.intermediate(PLAN, res) is None  # Trial.report: not for several objectives
    assert objectives.intermediate(MIX, res) == pytest.approx(objectives.mix_value({1: 40, 10: 300, 64: 900},
                                                                                   MIX.weights))
    res.metrics["intermediate"] = 41.0
    assert objectives.intermediate(None, res) == 41.0


def test_the_default_objective_leaves_the_identity_alone():
    assert objectives.identity(None) is None and objectives.identity(Objective()) is None
    assert objectives.identity(Objective(concurrency=(10,))) == {"concurrency": [10], "weights": None}
    assert objectives.identity(PLAN) != objectives.identity(MIX)
    assert objectives.describe(MIX) == "concurrency 1, 10, 64 weighted 0.5/0.25/0.25"


# ---- a job without objective: exactly as before, on recorded journals ------------------------------
def job_copy(tmp_path: Path, journal: str, job_file: str, objective: dict | None = None) -> Path:
    src = REPO / job_file
    doc = yaml.safe_load(src.read_text())
    doc["space"] = str((src.parent / doc["space"]).resolve())
    doc.pop("output_dir", None)
    doc["report_dir"] = str(tmp_path / "study")
    doc["storage"] = f"journal:{tmp_path / 'study' / 'study.journal'}"
    if objective is not None:
        doc["objective"] = objective
    (tmp_path / "study").mkdir(exist_ok=True)
    if not (tmp_path / "study" / "study.journal").exists():
        shutil.copy(REPO / journal, tmp_path / "study" / "study.journal")
    path = tmp_path / f"job-{len(list(tmp_path.glob('job*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("journal,job_file", RECORDED, ids=IDS)
def test_a_recorded_study_holds_what_the_default_objective_tells(journal, job_file):
    job = load_job(REPO / job_file)
    assert "objective" not in yaml.safe_load((REPO / job_file).read_text()) and not job.objective.by_level
    read = storage.storage_for(f"journal:{REPO / journal}", create=False)
    study = optuna.load_study(study_name=optuna.get_all_study_names(read)[0], storage=read)
    assert [d.name.lower() for d in study.directions] == objectives.directions(job.objective)
    checked = 0
    for t in study.get_trials(deepcopy=False):
        attrs = storage.trial_attrs(t, study.user_attrs)
        if t.state == TrialState.COMPLETE:
            result = TrialResult.from_attrs(attrs)
            want = (objectives.told_values(job.objective, result) if result.outcome == COMPLETE
                    else objectives.failed_values(job.objective))
            assert t.values == want, t.number
            checked += 1
        elif t.state == TrialState.PRUNED and not attrs.get("skipped"):
            assert t.value == objectives.intermediate(job.objective, TrialResult.from_attrs(attrs)), t.number
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("journal,job_file", RECORDED, ids=IDS)
def test_a_recorded_study_reads_as_today_its_best_threshold_status_and_export(tmp_path, journal, job_file):
    job = load_job(job_copy(tmp_path, journal, job_file))
    study = storage.open_study(job)  # `run` opens it: no refusal, no new direction
    assert len(study.directions) == 1
    assert study.user_attrs[storage.FINGERPRINT_ATTR] == storage.space_fingerprint(job)
    rows = history.trial_rows(study)
    policy = SearchPolicy(study, job.space, job.backend_obj().normalize, baseline=job.baseline_config(),
                          budget=None, objective=job.objective)
    best = history.best_rows(rows, 1)
    assert best and best_at(rows, 1)[0].number == best[0].number
    assert policy.prune_thresholds(0.8) == {1: pytest.approx(policy.prune_threshold(0.8))}
    assert prune_thresholds(rows, (1,), 0.8) == policy.prune_thresholds(0.8)
    assert history.format_status(rows, width=160) == history.format_status(rows, width=160, levels=(1,))
    for fmt in ("env", "json"):
        text = export(job, rows, fmt)
        assert "chosen for" not in text and '"objective"' not in text  # nothing names a level: one number


@pytest.mark.parametrize("journal,job_file", RECORDED[:1] + RECORDED[-1:], ids=IDS[:1] + IDS[-1:])
def test_a_plan_on_a_recorded_single_level_study_is_another_study(tmp_path, journal, job_file):
    before = (REPO / journal).read_bytes()
    for objective, key in (({"concurrency": [1, 10, 64]}, "objective"),
                           ({"concurrency": [1, 10, 64], "weights": {1: 0.5, 10: 0.25, 64: 0.25}}, "study")):
        job = load_job(job_copy(tmp_path, journal, job_file, objective))
        with pytest.raises(BadInput, match="already exists") as err:
            storage.open_study(job)
        assert err.value.exit_code == 2 and err.value.key == key
        assert "objective" in str(err.value) and "concurrency 1, 10, 64" in str(err.value)
    assert (REPO / journal).read_bytes() == before


def test_a_study_without_a_finished_trial_takes_the_new_objective(tmp_path):
    job = load_job(write_job(tmp_path, study="fresh"))
    study = storage.open_study(job)
    study.enqueue_trial({"tp_size": 1})  # what a run left before any trial finished
    plan = load_job(write_job(tmp_path, study="fresh", objective={"concurrency": [1, 4]}))
    said: list[str] = []
    study = storage.open_study(plan, say=said.append)
    assert [d.name.lower() for d in study.directions] == ["maximize", "maximize"]
    assert said[0] == "study 'fresh' has no finished trial yet: it takes this job's objective (concurrency 1, 4 " \
                      "(a plan))"
    assert study.user_attrs[storage.FINGERPRINT_ATTR] == storage.space_fingerprint(plan)
    again: list[str] = []
    storage.open_study(plan, say=again.append)
    assert again == []
    t = study.ask()
    t.set_constraint(storage.CONSTRAINT, storage.INFEASIBLE)
    study.tell(t, objectives.failed_values(plan.objective))
    with pytest.raises(BadInput, match="another objective"):
        storage.open_study(job)  # a finished trial now: the single-level job may not take it back


# ---- latency targets and goodput (issue 35) ------------------------------------------------------
def test_a_plan_is_told_nothing_at_a_level_where_the_slo_broke_and_goodput_its_total():
    from orchestrator.core.measurement import GoodputResult, Latency, LevelResult, Measurement
    from orchestrator.core.slo import Slo, Targets

    targets = Targets(every=(Slo.named("tpot_p99", 0.020),))
    levels = {1: LevelResult(1, samples=(400.0,), tpot=Latency(0.002, 0.002, 0.0025, 9)),
              32: LevelResult(32, samples=(2600.0,), tpot=Latency(0.02, 0.03, 0.031, 9))}
    res = TrialResult(outcome=COMPLETE, config={}, value=400.0, measurement=Measurement(levels=levels))
    assert objectives.told_values(Objective(concurrency=(1, 32), slo=targets), res) == [400.0, 0.0]
    assert objectives.told_values(Objective(concurrency=(1, 32)), res) == [400.0, 2600.0]
    good = Measurement(levels={1: LevelResult(1, samples=(400.0,)), 16: LevelResult(16, samples=(850.0,))},
                       goodput=GoodputResult(64, (1, 64, 16), holds=16, breaks=24))
    goodput = Objective(goodput=64, slo=targets)
    res = TrialResult(outcome=COMPLETE, config={}, value=good.value, measurement=good)
    assert objectives.told_values(goodput, res) == [850.0] and objectives.directions(goodput) == ["maximize"]
    assert objectives.describe(goodput) == "goodput up to 64 streams under TPOT p99 <= 20 ms"


def test_the_slo_and_goodput_are_part_of_the_identity_and_nothing_else_moves():
    targets = Targets(every=(Slo.named("tpot_p99", 0.020),))
    assert objectives.identity(Objective()) is None
    assert objectives.identity(Objective(concurrency=(1, 64))) == {"concurrency": [1, 64], "weights": None}
    assert objectives.identity(Objective(slo=targets))["slo"] == {"tpot_p99": 0.020}
    assert objectives.identity(Objective(goodput=64, slo=targets))["goodput"] == {"max_concurrency": 64}
