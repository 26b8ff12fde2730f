"""make_sampler: names, options, seeding, start-up sizing, constraints, no study.stop() in ask/tell."""

from __future__ import annotations

import importlib.util

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from orchestrator.study.samplers import (
    DEFAULT_SAMPLER,
    SAMPLER_NAMES,
    default_startup_trials,
    make_sampler,
    startup_trials,
)

optuna.logging.set_verbosity(optuna.logging.ERROR)
SPACE = {"a": CategoricalDistribution(["x", "y", "z"]), "b": CategoricalDistribution([1, 2])}


def proposals(sampler, n=8):
    study = optuna.create_study(direction="maximize", sampler=sampler)
    out = []
    for _ in range(n):
        t = study.ask()
        params = (t.suggest_categorical("a", ["x", "y", "z"]), t.suggest_categorical("b", [1, 2]))
        study.tell(t, float(len(params[0]) + params[1]))
        out.append(params)
    return study, out


@pytest.mark.parametrize("name", [n for n in SAMPLER_NAMES if n != "gp"])
def test_every_sampler_builds_is_seeded_and_survives_ask_tell(name):
    a = make_sampler(name, seed=3, budget=8, search_space=SPACE)
    b = make_sampler(name, seed=3, budget=8, search_space=SPACE)
    # grid and bruteforce exhaust their 6 points: ask/tell must not raise (no study.stop()).
    assert proposals(a)[1] == proposals(b)[1]


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="GPSampler needs scipy")
def test_gp_builds():
    assert isinstance(make_sampler("gp", seed=0, budget=20), optuna.samplers.GPSampler)


def test_default_is_multivariate_grouped_tpe_sized_to_the_budget():
    s = make_sampler(DEFAULT_SAMPLER, seed=0, budget=40, space_size=84)
    assert isinstance(s, optuna.samplers.TPESampler)
    assert s._multivariate is True and s._group is True and s._constant_liar is True
    assert s._n_startup_trials == default_startup_trials(40, 84) == 5


def test_startup_sizing():
    assert default_startup_trials(None) == 5
    assert default_startup_trials(8) == 3
    assert default_startup_trials(32) == 4
    assert default_startup_trials(200) == 5
    assert default_startup_trials(200, space_size=32) == 4
    # a small space: the baseline and its most different config, then the model
    assert default_startup_trials(200, space_size=6) == 2
    assert default_startup_trials(12, space_size=12) == 2
    assert default_startup_trials(200, space_size=18) == 2
    assert default_startup_trials(200, space_size=24) == 3
    assert make_sampler("tpe", seed=0, budget=40, n_startup_trials=7)._n_startup_trials == 7
    assert make_sampler("tpe", seed=0, budget=40, options={"n_startup_trials": 2})._n_startup_trials == 2


def test_options_are_validated_and_parsed():
    s = make_sampler("tpe", seed=0, budget=10, options={"multivariate": "false", "constant_liar": False})
    assert s._multivariate is False and s._group is False and s._constant_liar is False
    with pytest.raises(ValueError, match="unknown option 'bogus' for sampler 'tpe'; allowed: constant_liar"):
        make_sampler("tpe", seed=0, budget=10, options={"bogus": 1})
    with pytest.raises(ValueError, match="must be true or false"):
        make_sampler("tpe", seed=0, budget=10, options={"group": "maybe"})
    with pytest.raises(ValueError, match="group=true needs multivariate=true"):
        make_sampler("tpe", seed=0, budget=10, options={"multivariate": False, "group": True})


def test_unknown_name_and_grid_without_space():
    with pytest.raises(ValueError, match="unknown sampler 'cmaes'; allowed: tpe, gp, random"):
        make_sampler("cmaes", seed=0, budget=10)
    with pytest.raises(ValueError, match="grid sampler needs"):
        make_sampler("grid", seed=0, budget=10)
    assert isinstance(make_sampler("NSGA-II", seed=0, budget=10), optuna.samplers.NSGAIISampler)
    assert isinstance(make_sampler("brute-force", seed=0, budget=10), optuna.samplers.BruteForceSampler)


@pytest.mark.parametrize("name", [n for n in SAMPLER_NAMES if n != "gp" or importlib.util.find_spec("scipy")])
@pytest.mark.parametrize("sizing", [dict(budget=40, space_size=84), dict(budget=6, space_size=6),
                                    dict(budget=40, n_startup_trials=7), dict(budget=None)])
def test_startup_trials_is_what_the_sampler_is_built_with(name, sizing):
    """The search policy is told ``startup_trials`` (it never reads the sampler's private
    fields): it must be the count the sampler itself draws at random, 0 where it draws none."""
    sampler = make_sampler(name, seed=0, search_space=SPACE, **sizing)
    assert startup_trials(name, **sizing) == getattr(sampler, "_n_startup_trials", 0)
    if name in ("tpe", "gp"):
        assert startup_trials(name, budget=40, options={"n_startup_trials": 2}) == 2
    with pytest.raises(ValueError, match="n_startup_trials must be >= 0"):
        startup_trials(name, budget=40, n_startup_trials=-1)
