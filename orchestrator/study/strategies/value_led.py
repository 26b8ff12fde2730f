"""The search the per-value model leads: every launch is the unmeasured config with the highest
upper confidence bound on its decode speed under the study's own per-value model.

The model (``study.belief.Belief``) is the additive shape of ``study.additive``: the log of a
config's decode speed is a center plus one effect per parameter value (``interaction`` > 0 adds
small effects of pairs of values), fitted on the study's working launches as a Gaussian process,
so it says both what a config should measure and how unsure that is. On the spaces this tool
tunes that shape is close to the truth: the layout, the graph mode, the NCCL protocol, algorithm
and P2P each contribute a factor.

The rule (``ValueLed.scores``), in log decode speed:

    score(c) = mean(c) + exploration x sd(c) + log P(c works)

- ``mean(c)``, ``sd(c)``: the model's posterior for c. A value never launched keeps the prior's
  spread (``scale``: the standard deviation of the log values the study's working launches
  measured, how much the values it tried moved the speed; 1.0, a factor of e, before two worked),
  values seen only together (the baseline's) stay uncertain apart, a value seen in many launches
  is known. ``exploration`` (1.0: a one-sigma bound) weighs that uncertainty against the mean:
  the classic upper-confidence-bound rule (GP-UCB) with a constant factor, the form that keeps
  trying what could still be best and stops once what is left cannot beat the best guess. At 0.5
  the search stopped exploring too early on the motivating table (the best layout was seen only
  in the eager baseline, its effect confounded with eager's); at 2 it spent launches confirming
  what it knew
  (docs/benchmarks.md, "Search strategies");
- ``P(c works)``: the product over c's values of the chance that the value does not make a launch
  fail (``failure_odds``). A config-caused failure is blamed on its values that never worked in a
  launch (a banned value alone where it carried one: the policy's bans, ``study.bans``, name the
  culprit), shared equally, and a value its log names (as NCCL names an algorithm it refuses) is
  blamed besides, before the bans' second launch confirms it; a value that worked once can work.
  A launch that failed says nothing about how fast its values are, so the speed model learns
  from working launches only.

What it does with it: after the baseline every value not in it is equally uncertain, so the first
picks are the configs that share the least with what was measured (the baseline's complement
first), like a diverse start-up; as values are seen, a config is chosen for what its values
measured elsewhere, and a value still untried is tried where the rest of the config is good. The
policy never offers a config the study may not launch (a banned value, one measured or in flight),
and a config in flight narrows the model's spread where it runs, so parallel launches spread out.
Scores within ``EQUAL_WITHIN`` (1%) of the best are equal; of them the one with the most decode
per second of launch goes (``picks.most_worth_launching``), then the policy's seeded RNG; configs
the pre-screen's prior puts last are left out while others remain. On a space too large to
enumerate the strategy is never asked and the study's sampler (TPE:
``samplers.make_sampler("model")``) proposes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from orchestrator.core.records import COMPLETE, FAIL, NOT_THE_CONFIGS_FAULT, PRUNED, Config, TrialRow
from orchestrator.study import additive
from orchestrator.study.bans import named_in_log
from orchestrator.study.belief import Belief
from orchestrator.study.culprits import Culprits
from orchestrator.study.promise import row_value
from orchestrator.study.strategies import picks
from orchestrator.study.strategies.base import Pick, View

DEFAULT_EXPLORATION = 1.0
# how much pairs of values may vary a config, against single values (``belief.Belief``): 0, the
# additive shape. 0.25 needed 2 launches more at the median on the motivating table and no fewer
# on any other (docs/benchmarks.md, "Search strategies")
DEFAULT_INTERACTION = 0.0
PRIOR_SCALE = 1.0  # the spread of a value's log effect before two launches worked: a factor of e
MIN_SCALE = 0.01  # never below measurement noise: a study whose launches all measured alike still explores
NOISE = 0.05  # a launch's log value around its config's true one: noise and what the additive shape misses
MIN_WORKS = 1e-9  # a value that failed every time is not impossible, only (almost) never worth a launch
UNEXPLAINED = 0.1  # the chance that a config-caused failure is no single value's doing
# scores this close (log: 1%, one benchmark sample's noise) are equal, and of them the most decode per
# second of launch goes. On motivating-case-startup.csv 12 launches to the optimum (median, 60-100 seeds)
# against 13 for the strict argmax; a wider band weighs cost more: 5% took 12 launches on the 672-config
# table, not 9, and 2% was nowhere better (docs/benchmarks.md, "Search strategies")
EQUAL_WITHIN = 0.01


@dataclass(frozen=True)
class ValueLed:
    """The per-value model leads (module docstring)."""

    name: str = "model"
    startup: int = 0  # the policy picks every launch: nothing is left to a sampler's start-up
    exploration: float = DEFAULT_EXPLORATION
    interaction: float = DEFAULT_INTERACTION
    cost_aware: bool = True
    blame: str = "posterior"  # how failures weigh against a config: "posterior" (study.culprits) or "share"
    local_share: float = 0.0
    reach: float = 0.5
    shapes: tuple = ()
    trust: int = 0
    retry: int = 0
    tau: float = 0.9
    trust_after: int = 3
    radius: int = 2

    def __post_init__(self) -> None:
        if not self.exploration >= 0:
            raise ValueError(f"exploration must be >= 0, not {self.exploration}")
        if not self.interaction >= 0:
            raise ValueError(f"interaction must be >= 0, not {self.interaction}")

    def pick(self, view: View) -> Pick | None:
        return Pick(self.best(view), "model")

    def instead(self, view: View) -> str:
        return self.best(view)

    def best(self, view: View) -> str:
        """The highest score among the candidates; those within ``EQUAL_WITHIN`` of it are equal, and
        of them the one with the most decode per second of launch goes (then the RNG)."""
        keys = view.not_late(view.remaining)
        if self.trust:
            keys = self.near_incumbent(view, keys)
        if self.retry:
            again = self.retries(view, keys)
            if again:
                keys = again
        scores = self.scores(view, keys)
        top = max(scores.values())
        tied = [k for k in keys if scores[k] >= top - EQUAL_WITHIN]
        return view.rng.choice(picks.most_worth_launching(view, tied, cost_aware=self.cost_aware))

    def scores(self, view: View, keys: list[str]) -> dict[str, float]:
        """The upper confidence bound of each candidate (module docstring), in log decode speed."""
        rows = [r for r in view.rows() if r.counted and not r.skipped and r.cached_from is None]
        names = sorted(set().union(*view.configs.values()))
        data: list[tuple[Config, float | None]] = [
            (r.params or {}, math.log(v)) for r in rows if (v := row_value(r, view.objective))]
        data += [(cfg, None) for cfg in view.in_flight]  # known to be measured soon: less uncertain
        if self.shapes:
            belief = Belief.fit_best(list(view.configs.values()), data, effect=self.scale(data), noise=NOISE,
                                     shapes=self.shapes)
        else:
            belief = Belief.fit(list(view.configs.values()), data, effect=self.scale(data), noise=NOISE,
                                interaction=self.interaction, local=self.local_share, reach=self.reach)
        configs = [view.configs[k] for k in keys]
        means, sds = belief.predict(configs)
        blame = self.blame
        if blame == "alternate":
            blame = "absolute" if view.launched % 2 == 0 else "posterior"
        if blame == "posterior":
            works = Culprits.fit(rows, names, view.bans()).works(configs)
        elif blame == "absolute":
            works = Culprits.fit(rows, names, view.bans()).works_absolute(configs)
        else:
            odds = failure_odds(rows, view.bans(), names)
            works = [math.prod(1.0 - odds[pair] for n in names if (pair := (n, additive.value_of(cfg, n))) in odds)
                     for cfg in configs]
        return {k: mean + self.exploration * sd + math.log(max(MIN_WORKS, w))
                for k, mean, sd, w in zip(keys, means, sds, works)}

    def retries(self, view: View, keys: list[str]) -> list[str]:
        """Experimental: every ``retry``-th launch, the values seen only in configs well below the
        incumbent (or never seen working) are tried in the incumbent's context: the candidates
        nearest to it that carry one, the values of the parameters that moved the speed most first."""
        rows = [r for r in view.rows() if r.counted and not r.skipped and r.cached_from is None]
        worked = [(v, r.params or {}) for r in rows if (v := row_value(r, view.objective))]
        if len(worked) < self.trust_after or (view.launched % self.retry) != 0:
            return []
        top, best = max(worked, key=lambda p: p[0])
        names = sorted(set().union(*view.configs.values()))
        bans = view.bans()
        suspect = Culprits.fit(rows, names, bans).bad
        together = _companions(list(view.configs.values()), names)
        def apart(cfg) -> int:
            return len({together[(n, additive.value_of(cfg, n))] for n in names
                        if additive.value_of(cfg, n) != additive.value_of(best, n)})
        dist = {k: apart(view.configs[k]) for k in keys}
        importance = {}
        for n in names:
            per = {}
            for v, cfg in worked:
                x = additive.value_of(cfg, n)
                per[x] = max(per.get(x, 0.0), v)
            importance[n] = math.log(max(per.values()) / min(per.values())) if len(per) > 1 else 0.0
        chosen: list[tuple[float, int, int, str]] = []
        for n in names:
            mine = additive.value_of(best, n)
            for x in sorted({additive.value_of(view.configs[k], n) for k in keys}, key=repr):
                if x == mine or (n, x) in bans or suspect.get((n, x), 0.0) > 0.5:
                    continue
                carried = [v for v, cfg in worked if additive.value_of(cfg, n) == x]
                if carried and max(carried) >= self.tau * top:
                    continue  # seen in a good context already
                if any(apart(cfg) <= self.radius for v, cfg in worked if additive.value_of(cfg, n) == x):
                    continue  # tried near the incumbent already
                near = [k for k in keys if additive.value_of(view.configs[k], n) == x]
                if not near:
                    continue
                d = min(dist[k] for k in near)
                if d > self.radius:
                    continue
                chosen += [(-importance[n], len(carried), d, k) for k in near if dist[k] == d]
        if not chosen:
            return []
        first = min(c[:2] for c in chosen)
        return [c[3] for c in chosen if c[:2] == first]

    def near_incumbent(self, view: View, keys: list[str]) -> list[str]:
        """Experimental trust region: every ``trust``-th launch after the start, the candidates within
        ``radius`` values of the best working launch (all of them when none is that near)."""
        rows = [r for r in view.rows() if r.counted and not r.skipped and r.cached_from is None]
        worked = [(v, r) for r in rows if (v := row_value(r, view.objective))]
        if len(worked) < self.trust_after or (view.launched % self.trust) != 0:
            return keys
        best = max(worked, key=lambda p: p[0])[1].params or {}
        names = sorted(set().union(*view.configs.values()))
        def apart(cfg) -> int:
            return sum(additive.value_of(cfg, n) != additive.value_of(best, n) for n in names)
        near = [k for k in keys if apart(view.configs[k]) <= self.radius]
        return near or keys

    @staticmethod
    def scale(data: list[tuple[Config, float | None]]) -> float:
        """The prior's spread of a value's log effect: the standard deviation of the log values the
        study's working launches measured (``PRIOR_SCALE`` before two worked)."""
        logs = [y for _, y in data if y is not None]
        return max(MIN_SCALE, statistics.stdev(logs)) if len(logs) >= 2 else PRIOR_SCALE


def _companions(configs: list[Config], names: list[str]) -> dict[tuple[str, Any], int]:
    """Values that always go together (TP=8 and PP=1 where TP x PP = 8) share one number: changing
    one is changing the other."""
    where: dict[tuple[str, Any], set[int]] = {}
    for i, cfg in enumerate(configs):
        for n in names:
            where.setdefault((n, additive.value_of(cfg, n)), set()).add(i)
    ids: dict[frozenset[int], int] = {}
    return {v: ids.setdefault(frozenset(at), len(ids)) for v, at in where.items()}


def failure_odds(rows: list[TrialRow], bans: dict[tuple[str, Any], str],
                 names: list[str]) -> dict[tuple[str, Any], float]:
    """The chance that a value makes a launch fail, from the study's launches. A config-caused
    failure is blamed on its suspects: its values that never worked (in a COMPLETE or PRUNED
    launch), or the banned one alone where it carried one; each suspect is the culprit with chance
    (1 - ``UNEXPLAINED``) over their number (a failure may be no single value's doing: a
    combination that does not fit, a server that fell over). A suspect the failure's log names
    (``bans.named_in_log``: the evidence a ban needs a second launch to confirm) is, besides, the
    culprit with chance (1 - ``UNEXPLAINED``) alone; the other suspects keep their share, which
    keeps the search off the rest of a config that failed (on the motivating table the named blame
    took the median first optimal launch from 15 to 9; the named value alone, from 15 to 14.5 with
    a p90 of 24, not 15: the search went back to the failed config's other values, as untried as
    before). A value's chance is that of being the culprit of at least one of its failures: 1 - the
    product of (1 - each chance). A value that worked has none."""
    launched = [r for r in rows if r.state in (COMPLETE, PRUNED) or
                (r.state == FAIL and r.failure_kind not in NOT_THE_CONFIGS_FAULT)]
    values = {id(r): [(n, additive.value_of(r.params or {}, n)) for n in names] for r in launched}
    cleared = {v for r in launched if r.state != FAIL for v in values[id(r)]}
    innocent: dict[tuple[str, Any], float] = {}

    def blame(v: tuple[str, Any], chance: float) -> None:
        innocent[v] = innocent.get(v, 1.0) * (1.0 - chance)

    for r in launched:
        if r.state != FAIL:
            continue
        suspects = [v for v in values[id(r)] if v not in cleared]
        banned = [v for v in suspects if v in bans]
        for v in banned or suspects:
            blame(v, (1.0 - UNEXPLAINED) / len(banned or suspects))
        named = {(n, additive.value_of({n: value}, n)) for n, value in named_in_log(r)}
        for v in ([] if banned else suspects):
            if v in named:
                blame(v, 1.0 - UNEXPLAINED)
    return {v: 1.0 - left for v, left in innocent.items()}

