"""What a strategy sees (study/search/strategies/base.py): the pre-screen's prior leaves late configs
out while others remain, never all of them; the policy builds the view from the study."""

from __future__ import annotations

import random

import optuna

from orchestrator.config.job import Objective
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.model.promise import ValueModel
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.strategies.base import View
from orchestrator.study.search.strategies.sampler_led import SamplerLed


def view(configs, late=None):
    return View(remaining=list(configs), configs=configs, raw=configs, seen=[], in_flight=[], launched=0,
                rng=random.Random(0), objective=Objective(), rows=list, trial_params=lambda n: {},
                value_model=ValueModel, launch_cost=LaunchCost, bans=dict, late=late)


def test_late_configs_are_left_out_while_others_remain():
    configs = {"a": {"proto": "LL"}, "b": {"proto": "Simple"}}
    v = view(configs, late=lambda c: c["proto"] == "LL")
    assert v.not_late(["a", "b"]) == ["b"]
    assert v.not_late(["a"]) == ["a"]  # only late ones left: all of them
    assert view(configs).not_late(["a", "b"]) == ["a", "b"]


def test_the_policy_hands_its_strategy_the_enumerated_study():
    from itertools import product

    class Two:
        def suggest(self, trial):
            return {"x": trial.suggest_categorical("x", [0, 1]), "y": trial.suggest_categorical("y", [0, 1])}

        def active(self, config):
            return dict(config)

        def feasible(self, config):
            return None

        def enumerate(self):
            return [{"x": x, "y": y} for x, y in product([0, 1], [0, 1])]

        def distributions(self):
            return {n: optuna.distributions.CategoricalDistribution([0, 1]) for n in "xy"}

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    pol = SearchPolicy(study, Two(), dict, baseline={"x": 0, "y": 0}, budget=None, strategy=SamplerLed())
    first = pol.next()
    v = pol.view()
    assert len(v.configs) == 4 and first.key not in v.remaining and len(v.remaining) == 3
    assert v.in_flight == [first.config] and v.seen == [first.config] and v.launched == 1
