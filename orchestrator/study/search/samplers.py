"""Which Optuna sampler proposes configs, and with what settings.

``make_sampler(name, ...)`` builds one of ``SAMPLER_NAMES``, seeded, with settings chosen
with the replay harness (``orchestrator.study.simulation.replay``; the evidence is in
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
  ``bruteforce`` is Optuna's search (every point of a finite space once, in a seeded
  order) in a form that does not depend on the order a trial suggested its parameters in
  (``ExhaustiveSampler``): Optuna's own refuses a study where two trials did not (the
  baseline's trial records the parameters it sets in the order the job lists them).
- ``model``: the per-value model leads (``strategies.value_led``): on a space the policy can
  enumerate it picks every launch itself; on one too large to enumerate TPE, as ``tpe``, proposes.

``make_strategy(name, ...)`` builds what the search policy does with the sampler
(``study.strategies``): the per-value model's search for ``model``, else the search the sampler
leads with the policy's start-up, fill and plan steps (``strategies.sampler_led``).

Failures teach the sampler through constraints: the search policy sets one constraint on
every COMPLETE and PRUNED trial with ``Trial.set_constraint`` (``search.CONSTRAINT``:
0.0 feasible, 1.0 for a config-caused failure), which TPE, GP and NSGA-II read from the
trial themselves (Optuna >= 5; its ``constraints_func`` is deprecated and not used).

The start-up trials a model-based sampler draws at random are sized here, once:
``startup_trials`` is what ``make_sampler`` builds TPE/GP with, and what whoever builds the
sampler hands the search policy (``SearchPolicy(startup=...)``), which picks them itself.
"""

from __future__ import annotations

import random
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState

from orchestrator.config.sampler_options import (
    DEFAULT_SAMPLER,
    MODEL_BASED,
    MODEL_STRATEGY_OPTIONS,
    OPTIONS,
    SAMPLER_NAMES,
    missing_packages,
)
from orchestrator.core.errors import brief
from orchestrator.study.search.strategies.base import Strategy
from orchestrator.study.search.strategies.sampler_led import SamplerLed
from orchestrator.study.search.strategies.value_led import ValueLed


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
        if key == "model":  # what proposes where the policy cannot enumerate the space: TPE as configured
            for own in MODEL_STRATEGY_OPTIONS:  # the strategy's, not TPE's
                opts.pop(own, None)
            key = "tpe"
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
            return ExhaustiveSampler(seed=seed, **opts)
        # grid
        if not search_space:
            raise ValueError("the grid sampler needs the space's distributions (search_space=...)")
        return _QuietGridSampler(grid_values(search_space), seed=seed)


def make_strategy(name: str, *, startup: int = 0, options: Mapping[str, Any] | None = None,
                  **switches: Any) -> Strategy:
    """What the search policy does with the named sampler (module docstring): ``ValueLed`` for
    ``model`` (its ``exploration`` option), else ``SamplerLed`` with ``startup`` (the sampler's
    start-up trials: ``startup_trials``). ``switches``: the strategy's own settings, which only
    the replay harness changes (``fill``, ``startup_order``, ``plan_step``, ``cost_aware``);
    ValueError for one the strategy does not have or a value it does not allow."""
    key = _sampler_key(name)
    opts = _check_options(key, options or {})
    cls: Any = ValueLed if key == "model" else SamplerLed
    fields = set(cls.__dataclass_fields__) - {"name", "startup", *MODEL_STRATEGY_OPTIONS}
    unknown = sorted(set(switches) - fields)
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a setting of sampler {key} (it has: {', '.join(sorted(fields))})")
    if key == "model":
        own = {name: opts[name] for name in MODEL_STRATEGY_OPTIONS if name in opts}
        return ValueLed(**own, **switches)
    return SamplerLed(name=key, startup=startup, **switches)


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


_EXPLORED_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)


class ExhaustiveSampler(optuna.samplers.BaseSampler):
    """Every point of a finite define-by-run space once, in a seeded random order: Optuna's
    ``BruteForceSampler``'s search, independent of the order trials suggested their parameters in.

    For the parameter being drawn, each value is weighed by how much of the space under it (the
    values this trial already has, then that value) no trial has explored yet, half in proportion
    and half uniformly among the values with anything left (Optuna's blend, so no branch
    starves); when nothing is left, any value. The tree of what was explored is read from the
    trials by their parameter names, the parameters a trial has in common with more trials
    first: a parameter that only exists under another's value (a capture size under graphs on)
    is present in fewer trials than its parent, so the parent is always read first, whatever
    order the space lists them in. Running trials count as explored unless
    ``avoid_premature_stop``. It never calls ``study.stop()``: the search policy decides when
    the space is exhausted (normalized configs, not raw points).
    """

    def __init__(self, seed: int | None = None, avoid_premature_stop: bool = False) -> None:
        self._rng = random.Random(seed)
        self._running_explored = not avoid_premature_stop

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution) -> Any:
        choices = _finite_choices(param_name, param_distribution)
        states = _EXPLORED_STATES if self._running_explored else _EXPLORED_STATES[:-1]
        given = dict(trial.params)
        others = [t for t in study.get_trials(deepcopy=False, states=states)
                  if t.number != trial.number and all(n in t.params and t.params[n] == v for n, v in given.items())]
        done = set(given) | {param_name}
        left = [_unexplored([t for t in others if param_name in t.params and t.params[param_name] == v], done)
                for v in choices]
        total = sum(left)
        if not total:
            return self._rng.choice(choices)
        open_ = sum(1 for n in left if n)
        weights = [0.5 * n / total + (0.5 / open_ if n else 0.0) for n in left]
        return self._rng.choices(choices, weights=weights)[0]

    def reseed_rng(self) -> None:
        self._rng = random.Random()


def _finite_choices(name: str, dist: BaseDistribution) -> list[Any]:
    grid = grid_values({name: dist})  # ValueError for an infinite parameter
    return grid[name]


def _unexplored(trials: list[FrozenTrial], done: set[str]) -> int:
    """Points not yet explored under the node the ``trials`` share (they agree on ``done``): 1 for
    a node no trial reached, 0 for a point a trial ended on, else the sum over the values of the
    parameter the most of them have next (``ExhaustiveSampler``)."""
    if not trials:
        return 1
    onward = [t for t in trials if set(t.params) - done]
    if len(onward) < len(trials):
        return 0
    counts = Counter(n for t in onward for n in t.params if n not in done)
    name = min(counts, key=lambda n: (-counts[n], n))
    below = [t for t in onward if name in t.params]
    return sum(_unexplored([t for t in below if t.params[name] == v], done | {name})
               for v in _finite_choices(name, below[0].distributions[name]))


__all__: Sequence[str] = ("SAMPLER_NAMES", "DEFAULT_SAMPLER", "make_sampler", "make_strategy", "startup_trials",
                          "default_startup_trials", "grid_values", "ExhaustiveSampler")
