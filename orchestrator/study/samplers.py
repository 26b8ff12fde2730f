"""Which Optuna sampler proposes configs, and with what settings.

``make_sampler(name, ...)`` builds one of ``SAMPLER_NAMES``, seeded, with settings chosen
with the replay harness (``orchestrator.study.replay``; the evidence is in
``docs/benchmarks.md``, section "Search efficiency"):

- ``tpe`` (the default): multivariate TPE, ``group=True`` (conditional parameters get
  their own sub-spaces), ``constant_liar=True`` (several trials in flight do not all
  get the same proposal), start-up trials sized to the budget and the space by
  ``default_startup_trials`` (on an enumerable space the search policy picks them:
  ``search.DEFAULT_STARTUP_ORDER``).
- ``gp``: Optuna's Gaussian-process sampler (needs torch and scipy; scipy is not a
  dependency of ncclsweep, so ``make_sampler("gp")`` says to install it when missing).
- ``random``, ``grid``, ``bruteforce``, ``nsga2``: baselines and exhaustive searches.
  ``grid`` needs the space's distributions; exhaustion of grid/brute force is decided by
  the search policy, not by ``study.stop()`` (which only works inside ``optimize``).

Failures teach the sampler through constraints: the search policy sets one constraint on
every COMPLETE and PRUNED trial with ``Trial.set_constraint`` (``search.CONSTRAINT``:
0.0 feasible, 1.0 for a config-caused failure), which TPE, GP and NSGA-II read from the
trial themselves (Optuna >= 5; its ``constraints_func`` is deprecated and not used).

The start-up trials a model-based sampler draws at random are sized here, once:
``startup_trials`` is what ``make_sampler`` builds TPE/GP with, and what whoever builds the
sampler hands the search policy (``SearchPolicy(startup=...)``), which picks them itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from orchestrator.config.sampler_options import DEFAULT_SAMPLER, MODEL_BASED, OPTIONS, SAMPLER_NAMES, missing_packages
from orchestrator.core.errors import brief


def default_startup_trials(budget: int | None, space_size: int | None = None) -> int:
    """Trials before TPE/GP model the objective, the baseline included (Optuna counts it).

    ``budget // 8`` clamped to [3, 5], and at most an eighth of a small space (never below 2).
    The search policy picks these start-up trials itself when the space can be enumerated
    (``search.DEFAULT_STARTUP_ORDER``): the baseline, then the config most different from
    it, and so on. Chosen with the harness (docs/benchmarks.md, "Search efficiency"):
    every launch is expensive and the constraint/value model learns from failures
    quickly; on the 84-config tables 5 start-up trials beat Optuna's default 10 by about
    2 launches (median), 3 was within half a launch. On spaces under 24 configs an
    uninformed start-up trial is a large share of the table: the baseline and its most
    different config (every parameter seen at two levels), then the model, was at or
    below random search on all ten small replay tables; 3 start-up trials lost to it on
    two.
    """
    n = 5 if budget is None else max(3, min(5, budget // 8))
    if space_size:
        n = min(n, max(2, space_size // 8))
    return n


def make_sampler(
    name: str,
    *,
    seed: int | None,
    budget: int | None,
    space_size: int | None = None,
    n_startup_trials: int | None = None,
    options: Mapping[str, Any] | None = None,
    search_space: Mapping[str, BaseDistribution] | None = None,
) -> optuna.samplers.BaseSampler:
    """Build the named sampler (see the module docstring).

    ``budget`` and ``space_size`` size TPE/GP start-up trials unless ``n_startup_trials``
    (or ``options["n_startup_trials"]``) says otherwise. ``search_space`` (name ->
    distribution) is required by ``grid``. Raises ``ValueError`` naming the allowed
    names/options for anything unknown.
    """
    key = _sampler_key(name)
    why = missing_packages(key)
    if why:
        raise ValueError(why)
    opts = _check_options(key, options or {})
    opts.pop("n_startup_trials", None)
    n_startup_trials = startup_trials(key, budget=budget, space_size=space_size,
                                      n_startup_trials=n_startup_trials, options=options)
    with warnings.catch_warnings():
        # group=True is flagged experimental; that is a choice made knowingly here.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if key == "tpe":
            multivariate = opts.pop("multivariate", True)
            group = opts.pop("group", multivariate)
            if group and not multivariate:
                raise ValueError("sampler option group=true needs multivariate=true")
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=n_startup_trials, multivariate=multivariate, group=group,
                constant_liar=opts.pop("constant_liar", True), **opts)
        if key == "gp":
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials,
                                             warn_independent_sampling=False, **opts)
        if key == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if key == "nsga2":
            opts.setdefault("population_size", max(4, min(50, (budget or 40) // 4)))
            return optuna.samplers.NSGAIISampler(seed=seed, **opts)
        if key == "bruteforce":
            return _QuietBruteForceSampler(seed=seed, **opts)
        # grid
        if not search_space:
            raise ValueError("the grid sampler needs the space's distributions (search_space=...)")
        return _QuietGridSampler(grid_values(search_space), seed=seed)


def startup_trials(name: str, *, budget: int | None, space_size: int | None = None,
                   n_startup_trials: int | None = None, options: Mapping[str, Any] | None = None) -> int:
    """The random start-up trials of the named sampler, as ``make_sampler`` builds it: for TPE
    and GP ``n_startup_trials``, else ``options["n_startup_trials"]``, else
    ``default_startup_trials(budget, space_size)``; 0 for every other sampler. The search
    policy is told this number (``SearchPolicy(startup=...)``); nothing reads it back from
    the sampler."""
    key = _sampler_key(name)
    if n_startup_trials is None:
        n_startup_trials = _check_options(key, options or {}).get("n_startup_trials")
    if n_startup_trials is not None and n_startup_trials < 0:
        raise ValueError(f"n_startup_trials must be >= 0, not {n_startup_trials}")
    if key not in MODEL_BASED:
        return 0
    return int(n_startup_trials) if n_startup_trials is not None else default_startup_trials(budget, space_size)


def _sampler_key(name: str | None) -> str:
    """A sampler's name as ``SAMPLER_NAMES`` spells it (``nsga-ii`` -> ``nsga2``), else ValueError."""
    key = (name or DEFAULT_SAMPLER).lower().replace("-", "").replace("_", "")
    key = {"nsgaii": "nsga2"}.get(key, key)
    if key not in SAMPLER_NAMES:
        raise ValueError(f"unknown sampler {brief(name)}; allowed: {', '.join(SAMPLER_NAMES)}")
    return key


def grid_values(search_space: Mapping[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every value of every (finite) distribution, for ``GridSampler``."""
    out: dict[str, list[Any]] = {}
    for name, dist in search_space.items():
        if isinstance(dist, CategoricalDistribution):
            out[name] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            out[name] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution) and dist.step is not None:
            n = int(round((dist.high - dist.low) / dist.step))
            out[name] = [dist.low + i * dist.step for i in range(n + 1)]
        else:
            raise ValueError(f"the grid sampler needs finite parameters; {brief(name)} is {dist}")
    return out


def _check_options(key: str, options: Mapping[str, Any]) -> dict[str, Any]:
    allowed = OPTIONS[key]
    out: dict[str, Any] = {}
    for opt, value in options.items():
        if opt not in allowed:
            names = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"unknown option {brief(opt)} for sampler {brief(key)}; allowed: {names}")
        kind = allowed[opt]
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(f"sampler option {opt} must be true or false, not {brief(value)}")
                value = value.lower() in ("true", "1", "yes")
            elif not isinstance(value, bool):
                raise ValueError(f"sampler option {opt} must be true or false, not {brief(value)}")
        else:
            try:
                value = kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"sampler option {opt} must be {kind.__name__}, not {brief(value)}") from None
        out[opt] = value
    return out


class _QuietGridSampler(optuna.samplers.GridSampler):
    """GridSampler whose ``after_trial`` does not call ``study.stop()``.

    ``Study.stop`` raises outside ``optimize``; with ask/tell the search policy decides
    when the space is exhausted (normalized configs, not raw grid points).
    """

    def after_trial(self, study, trial, state, values) -> None:
        return None


class _QuietBruteForceSampler(optuna.samplers.BruteForceSampler):
    """BruteForceSampler without ``study.stop()`` (see ``_QuietGridSampler``)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


__all__: Sequence[str] = ("SAMPLER_NAMES", "DEFAULT_SAMPLER", "make_sampler", "startup_trials",
                          "default_startup_trials", "grid_values")
