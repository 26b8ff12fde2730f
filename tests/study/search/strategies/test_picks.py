"""The picking rules strategies share (study/search/strategies/picks.py): the most diverse config, the
nearest to a reference, the most decode per second of launch among equals, each level's best."""

from __future__ import annotations

import itertools
import random

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.model.promise import ValueModel
from orchestrator.study.search.strategies import picks
from orchestrator.study.search.strategies.base import View

GRID = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]}
CONFIGS = {f"{a}{b}": {"a": a, "b": b} for a, b in itertools.product(*GRID.values())}


def view(seen=(), rows=(), objective=None, seed=0):
    objective = objective or Objective()
    keys = [k for k, c in CONFIGS.items() if c not in list(seen)]
    return View(remaining=keys, configs=CONFIGS, raw=CONFIGS, seen=list(seen), in_flight=[], launched=len(seen),
                rng=random.Random(seed), objective=objective, rows=lambda: list(rows),
                trial_params=lambda n: dict(rows[n].params), value_model=lambda: ValueModel.fit(rows),
                launch_cost=lambda: LaunchCost.fit(rows, started_only=True), bans=dict)


def test_the_most_diverse_config_shares_nothing_with_what_was_seen():
    v = view(seen=[CONFIGS["a0b0"]])
    for seed in range(4):
        v.rng = random.Random(seed)
        pick = CONFIGS[picks.most_diverse(v, v.remaining)]
        assert pick["a"] != "a0" and pick["b"] != "b0"


def test_the_nearest_config_differs_in_the_fewest_parameters():
    v = view(seen=[CONFIGS["a0b0"]])
    near = picks.nearest(v, [k for k in v.remaining if k != "a2b2"], [CONFIGS["a2b2"]])
    assert picks.differing(CONFIGS[near], CONFIGS["a2b2"]) == 1


def test_among_equals_the_most_decode_per_second_of_launch_goes_first():
    """a1 measured twice as fast as a0 for the same launch time; b2 costs four times b0: of the
    configs one parameter from the best, a1b0 is worth the most per second."""
    def row(n, a, b, value, seconds):
        return TrialRow(number=n, state=COMPLETE, params={"a": a, "b": b}, value=value, counted=True,
                        durations={"total_s": seconds}, startup_phases={"ready_s": seconds - 5})
    rows = [row(0, "a0", "b0", 10.0, 100.0), row(1, "a1", "b1", 20.0, 100.0), row(2, "a0", "b2", 10.0, 400.0)]
    v = view(seen=[r.params for r in rows], rows=rows)
    tied = ["a1b0", "a1b2", "a2b1"]
    assert picks.most_worth_launching(v, tied) == ["a1b0"]
    assert picks.most_worth_launching(v, tied, cost_aware=False) == tied


def test_a_plan_fills_from_every_levels_best():
    def row(n, a, b, one, many):
        return TrialRow(number=n, state=COMPLETE, params={"a": a, "b": b}, value=one, counted=True,
                        config_key=f"{a}{b}", levels={"1": {"value": one}, "8": {"value": many}})
    rows = [row(0, "a0", "b0", 10.0, 100.0), row(1, "a1", "b1", 20.0, 50.0), row(2, "a2", "b2", 5.0, 300.0)]
    v = view(seen=[r.params for r in rows], rows=rows, objective=Objective(concurrency=(1, 8)))
    assert sorted(c["a"] for c in picks.bests(v)) == ["a1", "a2"]  # the best at 1 and the best at 8
    assert picks.best_of_level(v, 8) == {"a": "a2", "b": "b2"}
