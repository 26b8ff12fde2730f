"""The search an Optuna sampler leads (study/search/strategies/sampler_led.py): its settings checked, the
policy's start-up picks while the sampler would draw at random, then the sampler's proposals, and
the fill near the best or at random (the policy's behaviour with it: tests/study/search/test_policy.py)."""

from __future__ import annotations

import itertools
import random

import pytest

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.model.promise import ValueModel
from orchestrator.study.search.strategies.base import View
from orchestrator.study.search.strategies.sampler_led import SamplerLed

CONFIGS = {f"{a}{b}": {"a": a, "b": b} for a, b in itertools.product(["a0", "a1", "a2"], ["b0", "b1"])}


def view(launched, rows=()):
    return View(remaining=list(CONFIGS)[launched:], configs=CONFIGS, raw=CONFIGS,
                seen=list(CONFIGS.values())[:launched], in_flight=[], launched=launched, rng=random.Random(0),
                objective=Objective(), rows=lambda: list(rows), trial_params=lambda n: dict(rows[n].params),
                value_model=ValueModel, launch_cost=LaunchCost, bans=dict)


@pytest.mark.parametrize("option, value", [("fill", "closest"), ("startup_order", "lhs"), ("plan_step", "all")])
def test_a_setting_outside_its_values_is_refused(option, value):
    with pytest.raises(ValueError, match=f"{option} must be one of"):
        SamplerLed(**{option: value})
    with pytest.raises(ValueError, match="startup must be >= 0"):
        SamplerLed(startup=-1)


def test_the_policy_picks_the_start_up_then_leaves_the_sampler_to_propose():
    led = SamplerLed(startup=2)
    assert led.pick(view(1)).role == "startup"
    assert led.pick(view(2)) is None
    assert SamplerLed(startup=2, startup_order="sampler").pick(view(1)) is None


def test_the_fill_goes_next_to_the_best_or_anywhere():
    rows = [TrialRow(number=0, state=COMPLETE, params={"a": "a0", "b": "b0"}, value=10.0, counted=True,
                     config_key="a0b0")]
    near = SamplerLed().instead(view(1, rows))
    assert sum(CONFIGS[near][n] != v for n, v in rows[0].params.items()) == 1
    assert {SamplerLed(fill="random").instead(view(1, rows)) for _ in range(1)} <= set(list(CONFIGS)[1:])
