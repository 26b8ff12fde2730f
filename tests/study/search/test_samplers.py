"""make_sampler: names, options, seeding, start-up sizing, constraints, no study.stop() in ask/tell."""

from __future__ import annotations

import importlib.util

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from orchestrator.study.search.samplers import (
    DEFAULT_SAMPLER,
    SAMPLER_NAMES,
    ExhaustiveSampler,
    default_startup_trials,
    make_sampler,
    make_strategy,
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
    with pytest.raises(ValueError, match="unknown sampler 'cmaes'; allowed: model, tpe, gp, random"):
        make_sampler("cmaes", seed=0, budget=10)
    with pytest.raises(ValueError, match="grid sampler needs"):
        make_sampler("grid", seed=0, budget=10)
    assert isinstance(make_sampler("NSGA-II", seed=0, budget=10), optuna.samplers.NSGAIISampler)
    assert isinstance(make_sampler("brute-force", seed=0, budget=10), ExhaustiveSampler)


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


# ---- every sampler with every declaration order (issue 38, item 5) ---------------------------------
# The same space declared in three orders: as a user might write it (a conditional parameter before
# the one it depends on), reversed, and alphabetical. The baseline reaches the policy as the job
# gives it (normalized: sorted by name), so its trial records its parameters in another order than
# the space suggests them; Optuna's BruteForceSampler refused such a study ("param_name mismatch"),
# on every resume too.
ORDERED_PARAMS = {
    "backend.mode": "{choices: [fast, slow]}",
    "capture_sizes": "{choices: [\"1,2\", \"1,2,4,8\"], when: {graph_capture: true}}",
    "graph_capture": "{choices: [false, true]}",
    "backend.delay": "{choices: [0, 1]}",
}
ORDERS = {"declared": list(ORDERED_PARAMS), "reversed": list(reversed(ORDERED_PARAMS)),
          "alphabetical": sorted(ORDERED_PARAMS)}
SPACE_CONFIGS = 12  # mode 2 x delay 2 x (graphs off, or on with 2 capture lists)


def _ordered_space(tmp_path, order):
    from orchestrator.config.space import load_space

    path = tmp_path / "space.yaml"
    path.write_text("params:\n" + "".join(f"  {name}: {ORDERED_PARAMS[name]}\n" for name in order))
    return load_space(path, {})


def _launch(policy, n=None):
    """Launch (and record) up to ``n`` configs (every one left when None); the keys launched."""
    from orchestrator.core.records import TrialResult

    keys = []
    while n is None or len(keys) < n:
        p = policy.next()
        if p is None:
            break
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        value = 10.0 + 5 * (p.config.get("graph_capture") is True) + (p.config.get("backend.mode") == "fast")
        policy.record(p, TrialResult(outcome="COMPLETE", config=p.config, value=value,
                                     metrics={"decode_tok_s": value, "decode_samples": [value] * 3}))
        keys.append(p.key)
    return keys


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("name", [n for n in SAMPLER_NAMES if n != "gp" or importlib.util.find_spec("scipy")])
def test_every_sampler_works_with_every_declaration_order_and_resumes(tmp_path, name, order):
    """A study in a real journal file, its baseline given sorted by name as the job gives it: 5
    launches, then a new driver (a new sampler and policy on the same journal) measures every
    other config; no config is launched twice, none is missed."""
    from orchestrator.study.search.policy import SearchPolicy
    from orchestrator.study.storage.storage import storage_for

    space = _ordered_space(tmp_path, ORDERS[order])
    assert space.size() == SPACE_CONFIGS
    baseline = dict(sorted({"graph_capture": False, "backend.mode": "slow", "backend.delay": 0}.items()))
    url = f"journal:{tmp_path / 'study.journal'}"

    def policy(create):
        sampler = make_sampler(name, seed=1, budget=SPACE_CONFIGS, space_size=SPACE_CONFIGS,
                               search_space=space.distributions())
        kw = dict(study_name="s", storage=storage_for(url), sampler=sampler)
        study = optuna.create_study(direction="maximize", **kw) if create else optuna.load_study(**kw)
        strategy = make_strategy(name, startup=startup_trials(name, budget=SPACE_CONFIGS, space_size=SPACE_CONFIGS))
        return SearchPolicy(study, space, dict, baseline=baseline, budget=None, seed=1, strategy=strategy)

    first = _launch(policy(create=True), 5)
    resumed = policy(create=False)
    rest = _launch(resumed)
    assert len(first) == 5 and first[0] == resumed.baseline_key
    assert len(set(first + rest)) == len(first + rest) == SPACE_CONFIGS
    assert resumed.exhausted
