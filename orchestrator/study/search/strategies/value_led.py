"""The search the per-value model leads: every launch is the unmeasured config with the highest
upper confidence bound on its decode speed under the study's own per-value model, times the chance
it works; once the model stops finding better configs, every other launch fills what the study has
not explored beside the best config.

The model (``study.belief.Belief``) is the additive shape of ``study.additive``: the log of a
config's decode speed is a center plus one effect per parameter value (``interaction`` > 0 adds
small effects of pairs of values), fitted on the study's working launches as a Gaussian process,
so it says both what a config should measure and how unsure that is.

The rule (``ValueLed.scores``), in log decode speed:

    score(c) = mean(c) + exploration x sd(c) + log P(c works)

- ``mean(c)``, ``sd(c)``: the model's posterior for c. A value never launched keeps the prior's
  spread (``scale``: the standard deviation of the log values the study's working launches
  measured; 1.0, a factor of e, before two worked), values seen only together (the baseline's) stay
  uncertain apart, a value seen in many launches is known. ``exploration`` (1.0: a one-sigma bound)
  weighs that uncertainty against the mean (GP-UCB with a constant factor);
- ``P(c works)``: ``study.culprits``, a posterior over which values (or combinations) make launches
  fail, failures explained away: a value a failure's log names takes the blame from its bystanders,
  two failures that shared two values leave each half suspect until a third tells them apart, and a
  combination that crashed where each of its values worked elsewhere is suspected as one. Relative
  to a value never tried: the search is optimistic about what it has not tried. A launch that failed
  says nothing about how fast its values are, so the speed model learns from working launches only.

The gaps (``study.coverage``, issue 49). The additive shape reads a launch that changed many values at
once as evidence about each of them: on the GLM-5 stand-in TP=8 was measured with eager kernels (the
baseline) and with Tree and P2P off, looked slow, and was never launched with LL over a Ring, the
optimum; what was slow was the combination. So once ``STALL`` search launches in a row have not beaten
the best by 2% (the model is exploiting what it believes), every other launch goes to the study's first
gap that a config beside the best can fill: a value seen only in configs far below the best (or never
measured working), tried in the best config's context, one setting changed (values that always go
together, TP with PP, count as one). A run that continues a study (``run --trials N``) starts there.

What it does with it: after the baseline every value not in it is equally uncertain, so the first
picks are the configs that share the least with what was measured, like a diverse start-up; as
values are seen, a config is chosen for what its values measured elsewhere. The policy never offers a
config the study may not launch (a banned value, one measured or in flight), and a config in flight
narrows the model's spread where it runs, so parallel launches spread out. Scores within
``EQUAL_WITHIN`` (1%) of the best are equal; of them the one with the most decode per second of launch
goes (``picks.most_worth_launching``), then the policy's seeded RNG; configs the pre-screen's prior
puts last are left out while others remain. On a space too large to enumerate the strategy is never
asked and the study's sampler (TPE: ``samplers.make_sampler("model")``) proposes.

Measured on the suite of stand-in boxes (``study.suite``, ``ncclsweep simulate --suite``; figures in
docs/benchmarks.md, "Search on spaces it has not seen").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from orchestrator.core.records import Config
from orchestrator.study.model import additive, coverage, pairs
from orchestrator.study.model.belief import Belief
from orchestrator.study.model.culprits import Culprits
from orchestrator.study.model.promise import row_value
from orchestrator.study.search.strategies import picks
from orchestrator.study.search.strategies.base import Pick, View

DEFAULT_EXPLORATION = 1.0
# how much pairs of values may vary a config, against single values (``belief.Belief``): 0, the
# additive shape. 0.25 and more needed more launches at the median on most stand-ins of the suite
# (docs/benchmarks.md, "Search on spaces it has not seen")
DEFAULT_INTERACTION = 0.0
PRIOR_SCALE = 1.0  # the spread of a value's log effect before two launches worked: a factor of e
MIN_SCALE = 0.01  # never below measurement noise: a study whose launches all measured alike still explores
NOISE = 0.05  # a launch's log value around its config's true one: noise and what the additive shape misses
MIN_WORKS = 1e-9  # a value that failed every time is not impossible, only (almost) never worth a launch
# scores this close (log: 1%, one benchmark sample's noise) are equal, and of them the most decode per
# second of launch goes (docs/benchmarks.md, "Search strategies")
EQUAL_WITHIN = 0.01
# the gaps: every GAP_EVERY-th launch of a run once STALL search launches in a row gained less than
# BETTER on the best (the model exploiting what it believes); the first launch of a continued run
STALL = 3
GAP_EVERY = 2
BETTER = 0.02
GAP_FROM = 3  # working launches before a best config is worth filling gaps beside
# the pairwise design (options ``cover``, ``cover_near``; ``study.pairs``): a config the culprit model gives
# less than this chance to work is not a cover's pick (its pairs would stay unmeasured)
COVER_WORKS = 0.5


@dataclass(frozen=True)
class ValueLed:
    """The per-value model leads (module docstring). ``gaps``: fill the study's gaps beside the best
    as the module docstring says (off: the model's bound alone, the search of issue 37). ``learn``:
    the model's kernel weights and noise from the launches' evidence (``study.kernel.most_likely``;
    ``interaction`` then unused), not the fixed ones. ``cover``: the first ``cover`` launches after the
    baseline a greedy pairwise covering design (``covering``); ``cover_near``: once stalled, the launches
    that are not a gap's turn go to the config covering the most new pairs among those whose score is
    within ``cover_near`` (a fraction) of the best (issue 49: unconfounded evidence about value pairs;
    both off by default)."""

    name: str = "model"
    startup: int = 0  # the policy picks every launch: nothing is left to a sampler's start-up
    exploration: float = DEFAULT_EXPLORATION
    interaction: float = DEFAULT_INTERACTION
    cost_aware: bool = True
    gaps: bool = True
    learn: bool = False
    cover: int = 0
    cover_near: float = 0.0

    def __post_init__(self) -> None:
        if not self.exploration >= 0:
            raise ValueError(f"exploration must be >= 0, not {self.exploration}")
        if not self.interaction >= 0:
            raise ValueError(f"interaction must be >= 0, not {self.interaction}")

    def pick(self, view: View) -> Pick | None:
        keys = view.not_late(view.remaining)
        if self.cover and len(view.seen) <= self.cover:  # the baseline and the design's launches so far
            key = self.covering(view, keys)
            if key is not None:
                return Pick(key, "cover")
        gap = self.gap_candidates(view, keys) if self.gaps else []
        if gap:
            return Pick(self.best(view, gap), "gap")
        if self.cover_near and stalled(_launched(view), view) >= STALL:
            key = self.covering(view, keys, near=self.cover_near)
            if key is not None:
                return Pick(key, "cover")
        return Pick(self.best(view), "model")

    def covering(self, view: View, keys: list[str], near: float | None = None) -> str | None:
        """The candidate that carries the most value pairs no working (or running) launch carried
        together (``study.pairs``), of those likely to work (``COVER_WORKS``) and, with ``near``,
        whose score is within that fraction of the best; ties: the highest score (``best``). None
        when no candidate adds a pair."""
        scores = self.scores(view, keys)
        configs = list(view.configs.values())
        names = sorted(set().union(*configs))
        works = Culprits.fit(_launched(view), names, view.bans()).works([view.configs[k] for k in keys])
        ok = [k for k, w in zip(keys, works) if w >= COVER_WORKS]
        if near is not None and ok:
            top = max(scores[k] for k in ok)
            ok = [k for k in ok if scores[k] >= top - math.log1p(near)]
        if not ok:
            return None
        together = coverage.companions(configs, names)
        worked = [r.params or {} for r in _launched(view) if row_value(r, view.objective)]
        new = pairs.new_pairs([view.configs[k] for k in ok], worked + list(view.in_flight), names, together)
        most = max(new)
        if most == 0:
            return None
        return self.best(view, [k for k, n in zip(ok, new) if n == most])

    def instead(self, view: View) -> str:
        return self.best(view)

    def best(self, view: View, keys: list[str] | None = None) -> str:
        """The highest score among ``keys`` (default: the candidates); those within ``EQUAL_WITHIN``
        of it are equal, and of them the one with the most decode per second of launch goes (then
        the RNG)."""
        keys = keys or view.not_late(view.remaining)
        scores = self.scores(view, keys)
        top = max(scores.values())
        tied = [k for k in keys if scores[k] >= top - EQUAL_WITHIN]
        return view.rng.choice(picks.most_worth_launching(view, tied, cost_aware=self.cost_aware))

    def scores(self, view: View, keys: list[str]) -> dict[str, float]:
        """The upper confidence bound of each candidate times its chance to work (module docstring),
        in log decode speed."""
        rows = _launched(view)
        names = sorted(set().union(*view.configs.values()))
        data: list[tuple[Config, float | None]] = [
            (r.params or {}, math.log(v)) for r in rows if (v := row_value(r, view.objective))]
        data += [(cfg, None) for cfg in view.in_flight]  # known to be measured soon: less uncertain
        belief = Belief.fit(list(view.configs.values()), data, effect=self.scale(data), noise=NOISE,
                            interaction=self.interaction, learn=self.learn)
        configs = [view.configs[k] for k in keys]
        means, sds = belief.predict(configs)
        works = Culprits.fit(rows, names, view.bans()).works(configs)
        return {k: mean + self.exploration * sd + math.log(max(MIN_WORKS, w))
                for k, mean, sd, w in zip(keys, means, sds, works)}

    def gap_candidates(self, view: View, keys: list[str]) -> list[str]:
        """The candidates beside the best config that fill the study's first gap (``study.coverage``),
        when this launch is a gap's turn (module docstring); none otherwise or when no gap can be
        filled beside the best."""
        rows = _launched(view)
        worked = [r for r in rows if row_value(r, view.objective)]
        if len(worked) < GAP_FROM:
            return []
        continued = view.launched_this_run == 0 and view.launched > 0
        if not continued and view.launched_this_run % GAP_EVERY != 0:
            return []
        only_baseline = not continued and stalled(rows, view) < STALL  # before the stall: the baseline's values
        base = next((r.params or {} for r in rows if r.is_baseline), None)
        configs = list(view.configs.values())
        names = sorted(set().union(*configs))
        choices = {n: sorted({additive.value_of(c, n) for c in configs}, key=repr) for n in names}
        cov = coverage.coverage(rows, choices, view.objective, view.bans(), configs)
        if cov.best is None:
            return []
        together = coverage.companions(configs, names)
        for gap in cov.gaps:
            if only_baseline and (base is None or gap.seen != 1 or not all(
                    additive.value_of(base, n) == x for n, x in gap.values)):
                continue
            carrying = [k for k in keys if all(additive.value_of(view.configs[k], n) == x for n, x in gap.values)]
            apart = {k: coverage.settings_apart(view.configs[k], cov.best, names, together) for k in carrying}
            near = [k for k in carrying if apart[k] <= len(gap.values)]
            if near:
                closest = min(apart[k] for k in near)
                return [k for k in near if apart[k] == closest]
        return []

    @staticmethod
    def scale(data: list[tuple[Config, float | None]]) -> float:
        """The prior's spread of a value's log effect: the standard deviation of the log values the
        study's working launches measured (``PRIOR_SCALE`` before two worked)."""
        logs = [y for _, y in data if y is not None]
        return max(MIN_SCALE, statistics.stdev(logs)) if len(logs) >= 2 else PRIOR_SCALE


def _launched(view: View) -> list:
    return [r for r in view.rows() if r.counted and not r.skipped and r.cached_from is None]


def stalled(rows: list, view: View) -> int:
    """Search launches since the last one that beat the best before it by more than ``BETTER``."""
    ordered = sorted(rows, key=lambda r: r.number)
    record, at = 0.0, 0
    for i, r in enumerate(ordered):
        v = row_value(r, view.objective) or 0.0
        if v > record * (1.0 + BETTER):
            at = i
        record = max(record, v)
    return len(ordered) - 1 - at
