"""The search policy for an objective over several levels (study/policy.py with
study/objective.py), on real in-memory Optuna studies over a per-level table: one direction per
level through Optuna's public API (TPE, NSGA-II and random search, wrapped in FeasibleSampler),
values per level, a config-caused failure 0.0 at every level and infeasible, an early stop
PRUNED without an intermediate value, the cache of measured configs, the per-level early-stop
thresholds, the neighbor fill from every level's best; the weighted mix as one value."""

from __future__ import annotations

import random

import optuna
import pytest
from optuna.trial import TrialState

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialResult
from orchestrator.study import objective as objectives
from orchestrator.study.feasible import FeasibleSampler
from orchestrator.study.policy import SearchPolicy
from orchestrator.study.replay import TableSpace, _replay_levels, load_table
from orchestrator.study.samplers import make_sampler
from orchestrator.study.storage import CONSTRAINT

TABLE = """\
mode,size,samples@1,samples@8,failure,baseline,note
solo,1,100;101;99,200;201;199,,1,
solo,2,250;251;249,240;241;239,,,
batch,1,120;121;119,600;601;599,,,
batch,2,130;131;129,700;701;699,,,
mega,1,,,start-crash,,
mega,2,90;91;89,300;301;299,,,
"""
PLAN = Objective(concurrency=(1, 8))


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "levels.csv"
    path.write_text(TABLE)
    return load_table(path)


def make(table, sampler: str = "tpe", objective: Objective = PLAN, seed: int = 0):
    space = TableSpace(table)
    study = optuna.create_study(directions=objectives.directions(objective),  # type: ignore[arg-type]
                                sampler=make_sampler(sampler, seed=seed, budget=6, space_size=space.size(),
                                                     search_space=space.distributions()))
    base = table.baseline
    baseline = {p: base.params.get(p, vals[0]) for p, vals in table.choices.items()}
    policy = SearchPolicy(study, space, space.normalize, baseline=baseline, budget=None, seed=seed,
                          objective=objective)
    return study, policy


def run_all(table, study, policy, thresholds=None):
    """Every config once, as the replay harness and the driver do."""
    rows = table.by_key()
    rng = random.Random(0)
    for _ in range(40):
        p = policy.next()
        if p is None:
            break
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        policy.record(p, _replay_levels(rows[p.key], p.config, rng, 3, thresholds(policy) if thresholds else None))
    return rows


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_a_plan_is_one_direction_per_level_and_every_value_is_told(table, sampler):
    study, policy = make(table, sampler)
    assert isinstance(study.sampler, FeasibleSampler) and len(study.directions) == 2
    rows = run_all(table, study, policy)
    assert policy.exhausted
    counted = {t.user_attrs["config_key"]: t for t in policy.counted_trials()}
    assert len(counted) == len(rows)  # every config measured exactly once
    for key, t in counted.items():
        row = rows[key]
        if row.failure:
            assert t.state == TrialState.COMPLETE and t.values == [0.0, 0.0]  # config-caused: 0 at every level
            assert t.system_attrs and t.user_attrs["outcome"] == FAIL
            assert study.get_trials()[t.number].user_attrs["failure_kind"] == FailureKind.START_CRASH
        else:
            levels = t.user_attrs["metrics"]["levels"]
            assert t.values == [levels["1"]["value"], levels["8"]["value"]]
    cached = [t for t in study.get_trials() if t.user_attrs.get("cached_from") is not None]
    for t in cached:  # a re-proposed measured config is answered from the study with its source's values
        assert t.values == study.get_trials()[t.user_attrs["cached_from"]].values
    assert {policy.best_row().params["size"], policy.best_row().params["mode"]} == {2, "solo"}


def test_an_early_stop_of_a_plan_is_pruned_without_an_intermediate_value(table):
    study, policy = make(table)
    run_all(table, study, policy, thresholds=lambda pol: pol.prune_thresholds(0.8))
    pruned = [t for t in study.get_trials() if t.state == TrialState.PRUNED and not t.user_attrs.get("skipped")]
    assert pruned, "mega/2 and solo/1 are below 0.8 x the best at both levels once the bests are measured"
    for t in pruned:
        assert t.values is None and t.intermediate_values == {}
        assert t.user_attrs["counted"] is True
    thresholds = policy.prune_thresholds(0.8)
    assert thresholds == {1: pytest.approx(0.8 * 250), 8: pytest.approx(0.8 * 700)}
    # a config best at one level is never stopped early: it is above the threshold there
    assert all(t.user_attrs["config"]["mode"] != "batch" or t.user_attrs["config"]["size"] != 2 for t in pruned)
    assert all(t.user_attrs["config"] != {"mode": "solo", "size": 2} for t in pruned)


def test_the_neighbor_fill_starts_from_every_levels_best(table):
    study, policy = make(table)
    run_all(table, study, policy)
    refs = sorted((t.user_attrs["config"]["mode"], t.user_attrs["config"]["size"]) for t in policy._bests())
    assert refs == [("batch", 2), ("solo", 2)]  # the best at 1 and the best at 8


def test_a_weighted_mix_is_one_value_the_weighted_geometric_mean(table):
    mix = Objective(concurrency=(1, 8), weights={1: 0.5, 8: 0.5})
    study, policy = make(table, objective=mix)
    assert len(study.directions) == 1
    run_all(table, study, policy, thresholds=lambda pol: pol.prune_thresholds(0.8))
    for t in study.get_trials():
        if t.state == TrialState.COMPLETE and t.user_attrs.get("outcome") == COMPLETE:
            lv = t.user_attrs["metrics"]["levels"]
            assert t.value == pytest.approx((lv["1"]["value"] * lv["8"]["value"]) ** 0.5)
        if t.state == TrialState.PRUNED and not t.user_attrs.get("skipped"):
            lv = t.user_attrs["metrics"]["levels"]  # the first round, on the mix's scale
            assert t.intermediate_values == {1: pytest.approx((lv["1"]["value"] * lv["8"]["value"]) ** 0.5)}


def test_a_plan_trial_a_dead_driver_left_with_its_record_is_told_as_recorded(table):
    study, policy = make(table)
    p = policy.next()
    result = _replay_levels(table.by_key()[p.key], p.config, random.Random(0), 3, None)
    for name, value in {**result.to_attrs(), "config_key": p.key, "counted": True}.items():
        p.trial.set_user_attr(name, value)
    p.trial.set_constraint(CONSTRAINT, 0.0)  # the whole record, all but Optuna's final state
    fresh = SearchPolicy(study, TableSpace(table), TableSpace(table).normalize, baseline=None, budget=None,
                         objective=PLAN)
    assert fresh.finish_recorded() == [p.number]
    t = study.get_trials()[p.number]
    assert t.state == TrialState.COMPLETE and t.values == objectives.told_values(PLAN, result)


def test_a_complete_result_missing_a_level_is_refused(table):
    study, policy = make(table)
    p = policy.next()
    bad = TrialResult(outcome=COMPLETE, config=p.config, value=100.0,
                      metrics={"levels": {"1": {"value": 100.0, "samples": [100.0]}}})
    with pytest.raises(ValueError, match="at every level"):
        policy.record(p, bad)
