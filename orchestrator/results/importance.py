"""Which knobs mattered: what each parameter's values did in matched comparisons, and the share of
the tok/s variance each parameter explains on its own.

An effect is credited only from matched comparisons (``Matched``): a value against the reference
value (the baseline's, else the first) over configs that differ only in that parameter, each
pair's ratio over their launches with the study's launch noise (``study.launches``). A ratio is
given only where every pair says the same beyond launch noise; one launch of each side, a ratio
within the noise, noise not measured yet, or two configs the engine ran alike (it turned the
value off: the trial's ``server.fallbacks``, ``Backend.engine_fallbacks``) is said as such, never
a figure. The marginal means and the shares below are over unequal mixes of the other settings:
they are named marginal, with their n, a hint where to look.

Not Optuna's importance evaluator: its default changed between releases (fANOVA, which
needs scikit-learn; then PED-ANOVA, which rates what separates the top 10% of trials and,
on a study of 6-40 trials, ranks near-ties among the best above the knob that doubled
throughput). Study spaces here are small and categorical, so a one-way analysis of
variance per parameter is exact, deterministic and readable beside the mean tok/s of
each value.

Below ``FEW_TRIALS`` measured trials the shares come with a caveat: from a handful of trials a
knob's share is mostly which trials happened to be drawn (a value seen once carries that
launch's own noise), a hint where to look rather than a finding. Under 3 there is none.

Trials stopped early count with their one sample (they were stopped for being clearly
worse: leaving them out would hide exactly the knob that made them so). A conditional
parameter (absent where it does not apply, e.g. capture sizes without graphs) is rated
among the trials that set it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends import allreduce
from orchestrator.core import outcome
from orchestrator.core.records import PRUNED, TrialRow
from orchestrator.core.verdict import FASTER, SLOWER, RatioInterval, describe, verdict
from orchestrator.study.evidence.history import baseline_row
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.storage import objective as objectives

MIN_TRIALS = 3  # fewer measured trials: no shares at all
FEW_TRIALS = 10  # fewer: the shares are stated with a caveat


@dataclass(frozen=True)
class Matched:
    """``value`` against ``reference`` over configs that differ only in this parameter: per pair the
    interval of the value's config relative to the reference's over their launches, and the pairs
    whose two configs ran alike (the engine turned one's value off into the other's)."""

    value: Any
    reference: Any
    intervals: tuple[RatioInterval, ...] = ()
    ran_alike: int = 0

    @property
    def pairs(self) -> int:
        return len(self.intervals) + self.ran_alike

    @property
    def ratio(self) -> float | None:
        """The effect credited: the geometric mean of the pairs' ratios, only when every pair is
        beyond launch noise the same way (None: no effect shown)."""
        words = {verdict(iv) for iv in self.intervals}
        if self.ran_alike or not self.intervals or words not in ({FASTER}, {SLOWER}):
            return None
        return math.exp(sum(math.log(iv.ratio) for iv in self.intervals if iv.ratio) / len(self.intervals))

    def text(self) -> str:
        """'LL vs Simple: 1.31x faster (95% CI ...)', '... 1.28x faster in each of 3 matched pairs',
        'custom vs nccl: no effect shown (2 matched pairs: 1 within launch noise, 1 ran alike ...)'."""
        head = f"{value_text(self.value)} vs {value_text(self.reference)}"
        if not self.pairs:
            return f"{head}: no matched pair (configs that differ only in it)"
        if self.ratio is not None:
            if len(self.intervals) == 1:
                return f"{head}: {describe(self.intervals[0])}, 1 matched pair"
            return f"{head}: {self.ratio:.2f}x, {verdict(self.intervals[0])} beyond launch noise in each of " \
                   f"{self.pairs} matched pairs"
        words = [verdict(iv) for iv in self.intervals]
        counts = {f"{FASTER} beyond launch noise": words.count(FASTER),
                  f"{SLOWER} beyond launch noise": words.count(SLOWER),
                  "within launch noise": sum(1 for iv, w in zip(self.intervals, words, strict=True)
                                             if iv.bounded and w not in (FASTER, SLOWER)),
                  "with the launch noise not measured yet": sum(1 for iv in self.intervals if not iv.bounded),
                  "ran alike (the engine turned the value off)": self.ran_alike}
        said = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        return f"{head}: no effect shown ({self.pairs} matched pair{'' if self.pairs == 1 else 's'}: {said})"


@dataclass(frozen=True)
class KnobEffect:
    name: str
    share: float  # of the tok/s variance among its trials explained by this parameter alone (marginal)
    means: dict[Any, float]  # value -> mean tok/s of the trials with that value, in value order (marginal)
    counts: dict[Any, int]  # value -> trials
    trials: int  # trials it was rated over
    conditional: bool  # set in only some trials: rated among those
    matched: tuple[Matched, ...] = ()  # each other value against the reference, in matched pairs
    # value -> what the engine ran instead in the trials with it ("nccl in 2 of 2 trials")
    ran: dict[Any, str] = field(default_factory=dict)


def value_text(value: Any) -> str:
    """A parameter's value as the report shows it (a boolean as 0 / 1)."""
    return str(int(value)) if isinstance(value, bool) else str(value)


def sort_values(values) -> list:
    """Parameter values in their natural order (mixed types by their text)."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def measured_points(rows: list[TrialRow]) -> list[tuple[dict[str, Any], float, bool]]:
    """(params, tok/s, stopped early) per launched trial whose measurement may be compared.

    Ranked COMPLETE trials (not cache answers) and trials stopped early with their first
    sample; never a config that failed the correctness gate or NCCL verification.
    """
    points = [(r.params, float(r.value), False) for r in outcome.rankable(rows) if r.value is not None]
    tainted = outcome.tainted_keys(rows)
    for r in rows:
        first = r.measured
        if (r.state == PRUNED and r.counted and r.cached_from is None and first
                and r.config_key not in tainted):
            points.append((r.params, float(first), True))
    return points


def span_text(values: list[float]) -> str:
    """'tok/s 102.6-193.6, a 47.0% range': what the shares divide, relative to its top."""
    lo, hi = min(values), max(values)
    return f"tok/s {lo:.1f}-{hi:.1f}, a {(hi - lo) / hi:.1%} range" if hi > 0 else "no tok/s"


def explained_share(values: list[float], levels: list[Any]) -> float:
    """Between-level sum of squares / total sum of squares (eta squared); 0 for no spread."""
    mean = sum(values) / len(values)
    total = sum((v - mean) ** 2 for v in values)
    if total <= 0:
        return 0.0
    groups: dict[Any, list[float]] = {}
    for v, level in zip(values, levels, strict=True):
        groups.setdefault(level, []).append(v)
    between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
    return between / total


def knob_effects(rows: list[TrialRow], objective: Any = None) -> tuple[list[KnobEffect], list[str]]:
    """(effects, notes): parameters over every trial first, by share; then conditional ones; each
    with its matched comparisons at the objective's first level (a goodput study's: its figure)."""
    level = _first_level(objective)
    points = measured_points(rows)
    if len(points) < MIN_TRIALS:
        return [], [f"parameter effects need at least {MIN_TRIALS} measured trials; this study has {len(points)}"]
    notes: list[str] = []
    if len(points) < FEW_TRIALS:
        notes.append(f"from only {len(points)} measured trials: a share from so few is a hint where to look, not a "
                     f"finding (a value seen in one or two trials carries their own noise); {FEW_TRIALS} or more "
                     "firm it up")
    stopped = sum(p for _, _, p in points)
    if stopped:
        notes.append(f"{stopped} of the {len(points)} trials {'was' if stopped == 1 else 'were'} stopped early "
                     "and count with their one sample")
    effects, single = _effects(points)
    if single:
        notes.append("not rated (one value in every measured trial): " + ", ".join(single))
    ev = Evidence(rows)
    return [_with_matched(e, rows, ev, level) for e in effects], notes


def _first_level(objective: Any) -> int | None:
    """The level effects are judged at: the objective's first (a goodput study's figure: ``HEADLINE``)."""
    obj = objectives.of(objective)
    return obj.headline


def effects_given_top(rows: list[TrialRow], effects: list[KnobEffect], best_params: dict[str, Any],
                      objective: Any = None) -> tuple[str, Any, list[KnobEffect], list[float]] | None:
    """(name, value, effects, tok/s values): the other knobs among the trials that share the
    best config's value of the dominant knob (their matched comparisons among those configs).

    One knob that explains most of the variance (graphs on/off) hides the rest: with graphs
    on, the NCCL protocol may still move tok/s by 20%, which is a few percent of a variance
    that graphs dominate. None when no knob dominates or too few trials share its value.
    """
    if not effects or effects[0].conditional or effects[0].share < 0.5 or effects[0].name not in best_params:
        return None
    name, value = effects[0].name, best_params[effects[0].name]
    subset = [p for p in measured_points(rows) if p[0].get(name) == value]
    if len(subset) < 3:
        return None
    others, _ = _effects(subset, skip=name)
    ev = Evidence(rows)
    others = [_with_matched(e, rows, ev, _first_level(objective), within=(name, value)) for e in others]
    return (name, value, others, [v for _, v, _ in subset]) if others else None


def _effects(points: list[tuple[dict[str, Any], float, bool]], skip: str | None = None
             ) -> tuple[list[KnobEffect], list[str]]:
    """(effects by share, names with one value) over ``points``."""
    observed: dict[str, set] = {}
    for params, _, _ in points:
        for k, v in params.items():
            if k != skip and isinstance(v, (str, int, float, bool)):
                observed.setdefault(k, set()).add(v)
    effects = []
    for name in (k for k, vs in observed.items() if len(vs) >= 2):
        with_it = [(params[name], value) for params, value, _ in points if name in params]
        levels = [level for level, _ in with_it]
        values = [value for _, value in with_it]
        order = sort_values(set(levels))
        means = {lv: _mean([v for lvl, v in with_it if lvl == lv]) for lv in order}
        counts = {lv: levels.count(lv) for lv in order}
        effects.append(KnobEffect(name, explained_share(values, levels), means, counts, len(with_it),
                                  conditional=len(with_it) < len(points)))
    effects.sort(key=lambda e: (e.conditional, -e.share, e.name))
    return effects, sorted(k for k, vs in observed.items() if len(vs) < 2)


def ran_as(row: TrialRow, name: str) -> tuple[Any, str] | None:
    """(the value of ``name`` that means what ``row``'s engine ran, the path it ran) where the engine
    turned the config's value off (its ``server.fallbacks``); None where it ran what was asked."""
    for found in allreduce.fallbacks_of(row.server):
        if found["param"] == name and found.get("ran_value") is not None:
            return found["ran_value"], str(found.get("ran"))
    return None


def _with_matched(effect: KnobEffect, rows: Sequence[TrialRow], ev: Evidence, level: int | None,
                  within: tuple[str, Any] | None = None) -> KnobEffect:
    """``effect`` with its matched comparisons (module docstring) and what the engine ran instead;
    ``within``: among the configs with that (param, value) only."""
    name = effect.name
    configs: dict[str, TrialRow] = {}  # key -> its first launch
    for key, launches in ev.by_key.items():
        if launches and name in launches[0].params and ev.values(key, level) and (
                within is None or launches[0].params.get(within[0]) == within[1]):
            configs[key] = launches[0]
    ran = {key: got for key in configs if (got := next(
        (a for r in ev.launches(key) if (a := ran_as(r, name)) is not None), None)) is not None}
    base = baseline_row(list(rows))
    values = sort_values({configs[k].params[name] for k in configs})
    reference = base.params[name] if base is not None and base.params.get(name) in values else \
        (values[0] if values else None)
    by_rest: dict[tuple, dict[Any, str]] = {}
    for key, first in configs.items():
        rest = tuple(sorted((k, repr(v)) for k, v in first.params.items() if k != name))
        by_rest.setdefault(rest, {})[first.params[name]] = key
    matched = []
    for value in values:
        if value == reference:
            continue
        intervals, alike = [], 0
        for group in by_rest.values():
            if value in group and reference in group:
                mine, theirs = group[value], group[reference]
                if (ran[mine][0] if mine in ran else value) == (ran[theirs][0] if theirs in ran else reference):
                    alike += 1
                else:
                    intervals.append(ev.interval(theirs, mine, level))
        matched.append(Matched(value, reference, tuple(intervals), alike))
    said: dict[Any, str] = {}
    for value in values:
        with_it = [k for k in configs if configs[k].params[name] == value]
        paths = sorted({ran[k][1] for k in with_it if k in ran})
        turned = sum(1 for k in with_it if k in ran)
        if turned:
            said[value] = f"the engine ran {', '.join(paths)} in {turned} of {len(with_it)} config(s)"
    return KnobEffect(effect.name, effect.share, effect.means, effect.counts, effect.trials, effect.conditional,
                      tuple(matched), said)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
