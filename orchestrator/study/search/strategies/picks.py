"""The picking rules strategies share: the most diverse config, the nearest to a reference, the
most decode per second of launch among equals, the bests a fill starts from.

Every rule answers with keys of ``view.remaining`` and breaks what is still tied with the
policy's seeded RNG (``view.rng``), so a seed gives one order.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.core.records import Config
from orchestrator.study.evidence.history import best_rows
from orchestrator.study.evidence.plan import best_at, best_for_mix
from orchestrator.study.search.strategies.base import View
from orchestrator.study.storage import objective as objectives

MAX_DIVERSE_CANDIDATES = 4096  # a larger enumerated space: the most diverse of a seeded sample
WORTH_RESOLUTION = 1e-6  # expected decode per second equal up to rounding: a tie
_MISSING = object()  # a parameter a normalized config does not have


def differing(a: Config, b: Config, names: set[str] | None = None) -> int:
    """How many parameters two configs differ in (one that only one of them has differs)."""
    return sum(1 for n in (names if names is not None else set(a) | set(b))
               if a.get(n, _MISSING) != b.get(n, _MISSING))


def most_diverse(view: View, keys: list[str], *, cost_aware: bool = True) -> str:
    """The candidate farthest from every measured or running config (greedy maximin design).

    Distance is the number of parameters two normalized configs differ in; the pick maximizes
    the distance to the nearest seen config, ties broken by ``most_worth_launching`` then the
    RNG. After the baseline that is its complement (every parameter at another level), then the
    config that differs most from both, so each parameter's levels are covered early and no
    region is sampled twice.
    """
    names: set[str] = set().union(*view.configs.values())  # the space's parameters, not the baseline's extras
    if len(keys) > MAX_DIVERSE_CANDIDATES:  # bounded cost on a large space; still seeded
        keys = view.rng.sample(keys, MAX_DIVERSE_CANDIDATES)
    scores = {k: min((differing(view.configs[k], o, names) for o in view.seen), default=0) for k in keys}
    top = max(scores.values())
    return view.rng.choice(most_worth_launching(view, [k for k in keys if scores[k] == top], cost_aware=cost_aware))


def nearest(view: View, keys: list[str], refs: list[Config], *, cost_aware: bool = True) -> str:
    """The candidate with the fewest raw parameters differing from the nearest of ``refs``
    (ties: ``most_worth_launching``, then the RNG); any when there is no reference yet."""
    if not refs:
        return view.rng.choice(most_worth_launching(view, keys, cost_aware=cost_aware))
    dist = {k: min(differing(view.raw[k], ref) for ref in refs) for k in keys}
    m = min(dist.values())
    return view.rng.choice(most_worth_launching(view, [k for k in keys if dist[k] == m], cost_aware=cost_aware))


def most_worth_launching(view: View, keys: list[str], *, cost_aware: bool = True) -> list[str]:
    """Of candidates a rule ranks equal, those with the most expected decode per expected second
    of launch (``study.promise`` over ``study.cost``); all of them when either is unknown, or
    without ``cost_aware``."""
    if not cost_aware or len(keys) < 2:
        return keys
    cost, value = view.launch_cost(), view.value_model()
    worth: dict[str, float] = {}
    for k in keys:
        seconds, expected = cost.predict(view.configs[k]), value.predict(view.configs[k])
        if seconds is None or expected is None:
            return keys
        worth[k] = math.log(expected) - math.log(max(seconds, 1.0))
    top = max(worth.values())
    return [k for k in keys if worth[k] >= top - math.log1p(WORTH_RESOLUTION)]


def bests(view: View) -> list[Config]:
    """The raw parameters of the best trial at each level of the objective (and for the mix),
    distinct by config: where a fill near the best looks next."""
    rows = view.rows()
    objective = view.objective
    levels = objectives.levels(objective)
    if objective.by_capacity:
        picked = best_rows(rows, 1)  # by the row's value: the goodput
    elif not objective.by_level:
        picked = best_at(rows, levels[0])  # the default objective: history.best_rows' best
    else:
        picked = [r for lv in levels for r in best_at(rows, lv, slo=objective.slo)]
        if objective.weights:
            picked += best_for_mix(rows, objective.weights)
    seen: dict[str, Any] = {}
    for r in picked:
        seen.setdefault(r.config_key, r.number)
    return [view.trial_params(n) for n in seen.values()]


def best_of_level(view: View, level: int) -> Config | None:
    """The raw parameters of the best trial at one level so far (None before any)."""
    best = best_at(view.rows(), level)
    return view.trial_params(best[0].number) if best else None
