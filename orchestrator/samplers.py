"""Which Optuna sampler proposes configs, and with what settings.

``make_sampler(name, ...)`` builds one of ``SAMPLER_NAMES``, seeded, with settings chosen
with the replay harness (``orchestrator.simulate``; the evidence is in
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

Failures teach the sampler through constraints: the search policy stores a system
attribute ``constraints`` on every finished trial (``[0.0]`` feasible, ``[1.0]`` for a
config-caused failure). Optuna >= 5 reads it natively in TPE, GP and NSGA-II (and
deprecates ``constraints_func``); on Optuna 4 the samplers only look at constraints
when given a ``constraints_func``, so there ``constraints_from_attrs`` is passed.
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
from optuna.trial import FrozenTrial

SAMPLER_NAMES = ("tpe", "gp", "random", "grid", "bruteforce", "nsga2")
DEFAULT_SAMPLER = "tpe"
CONSTRAINTS_KEY = "constraints"  # == optuna.study._constrained_optimization._CONSTRAINTS_KEY

# Optuna 5 added Trial.set_constraint and made every constrained sampler read the trial's
# constraint system attributes itself; before that a constraints_func was required.
NATIVE_CONSTRAINTS = hasattr(optuna.trial.Trial, "set_constraint")

# Options each sampler accepts in ``options`` (the job's ``sampler.options``).
_TPE_OPTIONS = {"multivariate": bool, "group": bool, "constant_liar": bool, "n_ei_candidates": int,
                "n_startup_trials": int}
_GP_OPTIONS = {"deterministic_objective": bool, "n_startup_trials": int}
_NSGA2_OPTIONS = {"population_size": int, "mutation_prob": float, "crossover_prob": float,
                  "swapping_prob": float}
_BRUTEFORCE_OPTIONS = {"avoid_premature_stop": bool}
OPTIONS = {"tpe": _TPE_OPTIONS, "gp": _GP_OPTIONS, "random": {}, "grid": {}, "bruteforce": _BRUTEFORCE_OPTIONS,
           "nsga2": _NSGA2_OPTIONS}


def constraints_from_attrs(trial: FrozenTrial) -> tuple[float, ...]:
    """Constraint values of a finished trial: the stored ``constraints`` attr, else from ``outcome``.

    Feasible is <= 0. A trial whose user-facing ``outcome`` is FAIL is infeasible even if
    the storage encodes it as a COMPLETE trial with value 0.0.
    """
    stored = trial.system_attrs.get(CONSTRAINTS_KEY)
    if stored:
        return tuple(float(v) for v in stored)
    return (1.0,) if trial.user_attrs.get("outcome") == "FAIL" else (0.0,)


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
    key = (name or DEFAULT_SAMPLER).lower().replace("-", "").replace("_", "")
    aliases = {"bruteforce": "bruteforce", "nsgaii": "nsga2", "nsga2": "nsga2"}
    key = aliases.get(key, key)
    if key not in SAMPLER_NAMES:
        raise ValueError(f"unknown sampler {name!r}; allowed: {', '.join(SAMPLER_NAMES)}")
    opts = _check_options(key, options or {})
    startup = opts.pop("n_startup_trials", None)
    if n_startup_trials is None:
        n_startup_trials = startup if startup is not None else default_startup_trials(budget, space_size)
    if n_startup_trials < 0:
        raise ValueError(f"n_startup_trials must be >= 0, not {n_startup_trials}")
    extra: dict[str, Any] = {}
    if not NATIVE_CONSTRAINTS:
        extra["constraints_func"] = constraints_from_attrs

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
                constant_liar=opts.pop("constant_liar", True), **opts, **extra)
        if key == "gp":
            import importlib.util

            if importlib.util.find_spec("scipy") is None:
                raise ValueError("the gp sampler needs scipy (pip install scipy); or use sampler tpe")
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials,
                                             warn_independent_sampling=False, **opts, **extra)
        if key == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if key == "nsga2":
            opts.setdefault("population_size", max(4, min(50, (budget or 40) // 4)))
            return optuna.samplers.NSGAIISampler(seed=seed, **opts, **extra)
        if key == "bruteforce":
            return _QuietBruteForceSampler(seed=seed, **opts)
        # grid
        if not search_space:
            raise ValueError("the grid sampler needs the space's distributions (search_space=...)")
        return _QuietGridSampler(grid_values(search_space), seed=seed)


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
            raise ValueError(f"the grid sampler needs finite parameters; {name!r} is {dist}")
    return out


def _check_options(key: str, options: Mapping[str, Any]) -> dict[str, Any]:
    allowed = OPTIONS[key]
    out: dict[str, Any] = {}
    for opt, value in options.items():
        if opt not in allowed:
            names = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"unknown option {opt!r} for sampler {key!r}; allowed: {names}")
        kind = allowed[opt]
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(f"sampler option {opt} must be true or false, not {value!r}")
                value = value.lower() in ("true", "1", "yes")
            elif not isinstance(value, bool):
                raise ValueError(f"sampler option {opt} must be true or false, not {value!r}")
        else:
            try:
                value = kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"sampler option {opt} must be {kind.__name__}, not {value!r}") from None
        out[opt] = value
    return out


class _QuietGridSampler(optuna.samplers.GridSampler):
    """GridSampler whose ``after_trial`` does not call ``study.stop()``.

    ``Study.stop`` raises outside ``optimize``; with ask/tell the search policy decides
    when the space is exhausted (normalized configs, not raw grid points).
    """

    def after_trial(self, study, trial, state, values) -> None:  # noqa: D102
        return None


class _QuietBruteForceSampler(optuna.samplers.BruteForceSampler):
    """BruteForceSampler without ``study.stop()`` (see ``_QuietGridSampler``)."""

    def after_trial(self, study, trial, state, values) -> None:  # noqa: D102
        return None


def describe(sampler: optuna.samplers.BaseSampler) -> str:
    """One line naming a sampler and its main settings (for logs and reports)."""
    if isinstance(sampler, optuna.samplers.TPESampler):
        return (f"TPE(n_startup_trials={sampler._n_startup_trials}, multivariate={sampler._multivariate}, "
                f"group={sampler._group}, constant_liar={sampler._constant_liar})")
    return type(sampler).__name__.lstrip("_").replace("Quiet", "")


__all__: Sequence[str] = ("SAMPLER_NAMES", "DEFAULT_SAMPLER", "NATIVE_CONSTRAINTS", "make_sampler",
                          "default_startup_trials", "constraints_from_attrs", "grid_values", "describe")
