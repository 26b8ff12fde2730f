"""The answer of a study over several concurrency levels: a plan, not one number.

The best configuration depends on how many requests are in flight (CUDA graphs captured up
to 8 win for one request and are no faster than eager at 10). A study whose objective has
several levels (``objective.concurrency``) answers, from its rows (``history.trial_rows``):

- per level: the best config there (ranked like ``history.best_rows``: only what
  ``outcome.rankable`` allows, by the median over every launch of a config), its figure there
  (that median, over how many launches), its ratio to the baseline at that level with its
  interval and verdict over launches (the ratio is the interval's own estimate; ``study.launches``:
  "faster" only beyond that level's launch noise), and how the *anchor* (the best at the lowest
  level, what a single-request study would crown) does there, against the baseline and against
  that level's best;
- the Pareto set across levels (configs no other config beats or ties at every level, on
  medians);
- with ``objective.weights``, the best for the traffic mix (``objective.mix_value``) and its
  ratio to the baseline (the weighted geometric mean of the levels' ratios), with its interval
  over launches (each launch's weighted geometric mean, the mix's own launch noise);
- with latency targets (``objective.slo``, ``core.slo``): a config that breaks one at a level is
  not ranked at that level (it may still be the best at another), and the plan says, per
  level, which faster configs broke a target there and by how much (the anchor's among them),
  and whether the baseline does; the Pareto set counts a broken level as nothing.

A tie the finalists' race left (``study.race``) is broken by what else is known (``break_tie``,
which ``export`` names): the config that serves every level (``one_for_all``; at the tied level
the race's tie stands for the comparison), then the one with fewer settings changed from the
baseline, else the higher median.

``build_plan(rows, objective)`` is what the run's last line (``driver.progress``),
``status``, the report, ``export --concurrency N | --mix`` and ``compare --plan`` read;
``format_plan`` is the text ``status`` prints. A single-level job has a plan of one level
whose best is ``history.best_rows``' best.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core import slo as slos
from orchestrator.core import verdict
from orchestrator.core.level import context_of
from orchestrator.core.level import key as level_key
from orchestrator.core.measurement import Latency, LevelResult
from orchestrator.core.objectives import Measure
from orchestrator.core.records import TrialRow
from orchestrator.core.slo import Breach, Targets
from orchestrator.core.verdict import LaunchNoise, RatioInterval
from orchestrator.study.evidence.history import baseline_row, best_rows
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.storage import objective as objectives

MAX_BROKEN = 3  # faster configs a level names as kept out by the latency targets


# ---- one row at one level ---------------------------------------------------------------------
def level_value(row: TrialRow, level: int) -> float | None:
    """The row's median at ``level`` (None when not measured)."""
    return row.worth_at(level)


def level_samples(row: TrialRow, level: int) -> list[float]:
    """Every sample of the row at ``level`` (level 1: one per request; N: one per round)."""
    got = row.at(level)
    return list(got.samples) if got is not None else []


def mix_of(row: TrialRow, weights: dict[int, float]) -> float | None:
    """The row's weighted geometric mean over the weighted levels (``objective.mix_value``)."""
    return objectives.mix_value({lv: level_value(row, lv) for lv in weights}, weights)


def breaches_at(row: TrialRow | None, level: int, slo: Targets | None) -> list[Breach]:
    """The latency targets ``row`` breaks at ``level`` (``core.slo``: none without targets)."""
    if row is None or not slo:
        return []
    return slos.breaches(row.at(level), slo.at(level))


def best_at(rows: list[TrialRow], level: int, k: int = 1, slo: Targets | None = None) -> list[TrialRow]:
    """The k best distinct configs at ``level`` (``history.best_rows`` by that level's median);
    with ``slo``, only those that hold it there."""
    return best_rows(rows, k, value=lambda r: None if breaches_at(r, level, slo) else level_value(r, level))


def best_for_mix(rows: list[TrialRow], weights: dict[int, float], k: int = 1) -> list[TrialRow]:
    """The k best distinct configs for the traffic mix."""
    return best_rows(rows, k, value=lambda r: mix_of(r, weights))


def pareto(rows: list[TrialRow], levels: tuple[int, ...] | list[int], slo: Targets | None = None) -> list[TrialRow]:
    """The distinct rankable configs that no other one matches or beats at every level (on
    medians over their launches; a level where one breaks ``slo`` counts as nothing there), best
    at the lowest level first."""
    levels = sorted(levels)
    evidence = Evidence(rows)
    ranked = [r for r in best_at(rows, levels[0], len(rows))
              if all(evidence.median(r.config_key, lv) is not None for lv in levels)]
    point = {r.number: [0.0 if breaches_at(r, lv, slo) else evidence.median(r.config_key, lv) or 0.0 for lv in levels]
             for r in ranked}
    ranked = [r for r in ranked if any(point[r.number])]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [r for r in ranked if not any(dominates(point[o.number], point[r.number]) for o in ranked if o is not r)]


def prune_thresholds(rows: list[TrialRow], levels: tuple[int, ...] | list[int],
                     min_ratio: float, slo: Targets | None = None) -> dict[int, float] | None:
    """Per level, ``min_ratio`` x the best figure so far there (the median over its launches, of
    the configs that hold ``slo`` there): the early stop's thresholds (``core.outcome.early_stop``
    stops a trial below them at every level); None before any config may be ranked."""
    evidence = Evidence(rows)
    out = {}
    for level in levels:
        best = best_at(rows, level, slo=slo)
        value = (evidence.median(best[0].config_key, level) or level_value(best[0], level)) if best else None
        if value is not None:
            out[level] = value * min_ratio
    return out or None


# ---- the plan -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """``row`` against ``other`` (the baseline, a level's best) at one level or for the mix: the
    interval of the ratio over their launches (``launches.Evidence``), which alone decides the
    verdict, and whose own estimate is the ratio shown (``point``): one estimator for both."""

    row: TrialRow
    other: TrialRow
    interval: RatioInterval
    same_config: bool

    @property
    def point(self) -> float | None:
        """The ratio shown: the interval's own estimate (never a ratio of medians beside it)."""
        return self.interval.ratio

    @property
    def verdict(self) -> str:
        return verdict.verdict(self.interval, same_config=self.same_config)

    @property
    def beyond_noise(self) -> bool:
        return self.verdict in (verdict.FASTER, verdict.SLOWER)

    @property
    def text(self) -> str:
        """'4.58x faster (95% CI 4.10-5.11x)', '0.98x, within noise (...)', 'the same config',
        '2.19x, not shown: launch noise unknown (no config launched twice)'; in the objective's own
        words ('0.50x lower' for a latency: ``Measure.compared``)."""
        return self.row.measure.compared(self.interval, same_config=self.same_config)

    def than(self, other: str) -> str:
        """The comparison in a sentence: '4.58x faster (95% CI 4.10-5.11x) than the baseline', or 'the
        baseline itself' where the two are one config."""
        return f"{other} itself" if self.same_config else f"{self.text} than {other}"

    def to_dict(self) -> dict[str, Any]:
        shown = self.row.measure.oriented(self.interval)
        return {**shown.to_dict(), "point": shown.ratio, "trial": self.row.number,
                "against": self.other.number, "verdict": self.row.measure.word(self.verdict), "text": self.text}


def _compare(evidence: Evidence, row: TrialRow | None, other: TrialRow | None, level: int) -> Comparison | None:
    if row is None or other is None:
        return None
    return Comparison(row, other, evidence.interval(other.config_key, row.config_key, level),
                      row.config_key == other.config_key)


@dataclass(frozen=True)
class LevelPlan:
    """One level of the plan (module docstring)."""

    level: int
    best: TrialRow | None  # the best config at this level
    baseline_value: float | None  # figures: medians over each config's launches
    best_value: float | None
    vs_baseline: Comparison | None  # the best here against the baseline here
    anchor_value: float | None  # the anchor (the best at the lowest level) here
    anchor_vs_baseline: Comparison | None
    anchor_vs_best: Comparison | None  # the anchor against the best here (< 1: what one number would lose)
    best_launches: int = 0  # launches the best's figure is the median of
    best_fresh: tuple[float, float] | None = None  # where a fresh launch of the best should measure (95%)
    noise: LaunchNoise = LaunchNoise()  # the launch noise at this level
    # latency targets: the configs faster than the best here that break one here (with their breaches,
    # fastest first), the anchor's breaches here, the baseline's
    broken: tuple[tuple[TrialRow, tuple[Breach, ...]], ...] = ()
    anchor_breaches: tuple[Breach, ...] = ()
    baseline_breaches: tuple[Breach, ...] = ()
    measure: Measure = field(default_factory=Measure)  # the objective's (the figures above are its worths)

    @property
    def unit(self) -> str:
        return self.measure.unit(self.level)

    def shown(self, worth: float | None) -> float | None:
        """A figure above as the user reads it (tok/s, ms)."""
        return self.measure.shown(worth) if worth is not None else None

    @property
    def fresh_shown(self) -> tuple[float, float] | None:
        return self.measure.shown_range(*self.best_fresh) if self.best_fresh else None

    def slo_lines(self, anchor: TrialRow | None, baseline: TrialRow | None) -> list[str]:
        """What the latency targets did here: '#3 (the best at 1) breaks the SLO at 32: TPOT p99
        31.2 ms at 32, over the 20 ms target by 56%' for each faster config (and the anchor) that
        broke one, and the baseline's."""
        out = []
        named = [(row, found) for row, found in self.broken]
        if anchor is not None and self.anchor_breaches and all(r.config_key != anchor.config_key for r, _ in named):
            named.append((anchor, self.anchor_breaches))
        for row, found in named:
            who = f"#{row.number}" + (" (the best at the lowest level)" if anchor is not None
                                      and row.config_key == anchor.config_key else "")
            out.append(f"{who} breaks the SLO at {self.level}: " + "; ".join(b.describe() for b in found))
        if baseline is not None and self.baseline_breaches:
            out.append(f"the baseline #{baseline.number} breaks the SLO at {self.level}: "
                       + "; ".join(b.describe() for b in self.baseline_breaches))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"level": level_key(self.level), "unit": self.unit,
                "best_trial": self.best.number if self.best else None,
                "best_config": dict(self.best.params) if self.best else None, "best_value": self.shown(self.best_value),
                "best_launches": self.best_launches,
                "best_fresh": list(self.fresh_shown) if self.fresh_shown else None,
                "launch_noise": self.noise.to_dict(),
                "baseline_value": self.shown(self.baseline_value), "anchor_value": self.shown(self.anchor_value),
                "vs_baseline": self.vs_baseline.to_dict() if self.vs_baseline else None,
                "anchor_vs_baseline": self.anchor_vs_baseline.to_dict() if self.anchor_vs_baseline else None,
                "anchor_vs_best": self.anchor_vs_best.to_dict() if self.anchor_vs_best else None,
                "slo_broken": [{"trial": row.number, "breaches": [b.to_record() for b in found]}
                               for row, found in self.broken],
                "anchor_breaches": [b.to_record() for b in self.anchor_breaches],
                "baseline_breaches": [b.to_record() for b in self.baseline_breaches]}


@dataclass(frozen=True)
class OneForAll:
    """A config a user can run at every level of the plan: the best at ``best_at``, and at each
    other level within launch noise of that level's best (``within``: its comparison with it), or,
    where a tie is broken (``break_tie``), tied with it in the race there (``tied_at``)."""

    row: TrialRow
    best_at: tuple[int, ...]
    within: tuple[tuple[int, Comparison], ...]  # (level, it against the best there) where another config is best
    tied_at: tuple[tuple[int, TrialRow], ...] = ()  # (level, the best there) where the race left them tied

    @property
    def where(self) -> str:
        """'10 and 64': the levels it is the best at."""
        return " and ".join([", ".join(map(str, self.best_at[:-1])), str(self.best_at[-1])] if len(self.best_at) > 1
                            else [str(self.best_at[0])])

    def text(self) -> str:
        """'#1, the best at 10 and 64, and at 1 within launch noise of #3 (0.99x, within noise (...))'; '...,
        and at 1 tied with #3 in the race'."""
        near = "; ".join([*(f"at {level} within launch noise of #{c.other.number} ({c.text})"
                            for level, c in self.within),
                          *(f"at {level} tied with #{best.number} in the race" for level, best in self.tied_at)])
        return f"#{self.row.number}, the best at {self.where}" + (f", and {near}" if near else "")

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.row.number, "config": dict(self.row.params),
                "best_at": [level_key(lv) for lv in self.best_at],
                "within_noise_of_best": [{"level": level_key(level), **c.to_dict()} for level, c in self.within],
                "text": self.text()}


def one_for_all(per_level: Sequence[LevelPlan], evidence: Evidence, slo: Targets | None,
                tie: tuple[int, Collection[str]] | None = None) -> OneForAll | None:
    """When the levels' bests differ: the config among them that is the best at the most levels and
    within launch noise of the best at every other (and holds the SLO there), so that one config
    serves the whole plan on this evidence; None when no config does, or there is only one best.

    ``tie``: a level and the configs the race left tied there (``export`` breaking that tie): only
    they are candidates, and at that level the race's tie stands for the comparison with the best
    (the race could not tell them apart, and two finalists get no interval before enough rounds:
    ``verdict.round_interval``)."""
    bests = [lp.best for lp in per_level if lp.best is not None]
    if len(bests) < len(per_level) or len({b.config_key for b in bests}) < 2:
        return None
    found = []
    for row in {b.config_key: b for b in bests}.values():
        if tie is not None and row.config_key not in tie[1]:
            continue
        best_at = tuple(lp.level for lp in per_level if lp.best is not None and lp.best.config_key == row.config_key)
        within = []
        tied_at = []
        for lp in per_level:
            if lp.level in best_at:
                continue
            if tie is not None and lp.level == tie[0] and lp.best is not None and lp.best.config_key in tie[1]:
                if breaches_at(row, lp.level, slo):
                    break
                tied_at.append((lp.level, lp.best))
                continue
            c = _compare(evidence, row, lp.best, lp.level)
            if c is None or c.verdict != verdict.WITHIN_NOISE or not c.interval.bounded \
                    or breaches_at(row, lp.level, slo):
                break
            within.append((lp.level, c))
        else:
            found.append(OneForAll(row, best_at, tuple(within), tuple(tied_at)))
    return max(found, key=lambda o: (len(o.best_at), -o.row.number)) if found else None


# How a tie the race left is broken (``break_tie``), in the order the rules are tried.
SERVES_EVERY_LEVEL = "one config for every level"
FEWER_CHANGES = "fewer settings changed from the baseline"
HIGHER_MEDIAN = "the higher median"


def changed_from(row: TrialRow, baseline: TrialRow) -> int:
    """How many settings ``row``'s config changes from the baseline's (set, unset or another value)."""
    return sum(1 for name in {*row.params, *baseline.params} if row.params.get(name) != baseline.params.get(name))


@dataclass(frozen=True)
class TieBreak:
    """A tie the race could not break (its configs within launch noise of each other), broken by
    what else is known (``break_tie``): ``chosen`` of ``tied`` (the highest median first) by ``rule``;
    ``changes``: trial -> settings it changes from the baseline (empty without a baseline)."""

    chosen: TrialRow
    tied: tuple[TrialRow, ...]
    rule: str
    where: str  # "at 1", "for the mix"
    changes: dict[int, int] = field(default_factory=dict)
    everywhere: OneForAll | None = None

    def text(self) -> str:
        """'the race left #3 and #1 tied at 1: #1 is exported, one config for every level (the best at
        10 and 64); #3 only has the higher median at 1'."""
        others = [r for r in self.tied if r.config_key != self.chosen.config_key]
        names = " and ".join(f"#{r.number}" for r in self.tied)
        head = f"the race left {names} tied {self.where}: #{self.chosen.number} is exported"
        top = self.tied[0]
        if self.rule == SERVES_EVERY_LEVEL and self.everywhere is not None:
            why = f"{SERVES_EVERY_LEVEL} (the best at {self.everywhere.where})"
        elif self.rule == FEWER_CHANGES:
            why = f"{FEWER_CHANGES} ({self.changes[self.chosen.number]} against " + ", ".join(
                f"#{r.number}'s {self.changes[r.number]}" for r in others) + ")"
        else:
            return f"{head}, {HIGHER_MEDIAN} {self.where} (nothing else tells them apart)"
        tail = f"; #{top.number} only has {HIGHER_MEDIAN} {self.where}" if top.config_key != self.chosen.config_key \
            else ""
        return f"{head}, {why}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "chosen_trial": self.chosen.number, "tied_trials": [r.number for r in self.tied],
                "higher_median_trial": self.tied[0].number,
                "settings_changed": {str(n): c for n, c in self.changes.items()} or None, "text": self.text()}


def break_tie(tied: list[TrialRow], where: str, everywhere: OneForAll | None = None,
              baseline: TrialRow | None = None) -> TieBreak:
    """Which of ``tied`` (configs the race could not tell apart, the highest median first) to name:
    the plan's one config for every level (``one_for_all``) if it is among them, else the one that
    changes the fewest settings from the baseline (what changes less has less to go wrong), else
    the highest median."""
    changes = {r.number: changed_from(r, baseline) for r in tied} if baseline is not None else {}
    keys = [r.config_key for r in tied]
    if everywhere is not None and everywhere.row.config_key in keys:
        chosen = tied[keys.index(everywhere.row.config_key)]
        return TieBreak(chosen, tuple(tied), SERVES_EVERY_LEVEL, where, changes, everywhere)
    if changes:
        fewest = min(changes.values())
        chosen = next(r for r in tied if changes[r.number] == fewest)
        if fewest < changes[tied[0].number]:
            return TieBreak(chosen, tuple(tied), FEWER_CHANGES, where, changes)
    return TieBreak(tied[0], tuple(tied), HIGHER_MEDIAN, where, changes)


@dataclass(frozen=True)
class Plan:
    """Per level the best config, the Pareto set, and with weights the best for the mix."""

    levels: tuple[int, ...]
    weights: dict[int, float] | None
    baseline: TrialRow | None
    anchor: TrialRow | None  # the best at the lowest level
    per_level: tuple[LevelPlan, ...] = ()
    pareto: tuple[TrialRow, ...] = ()
    mix: TrialRow | None = None
    mix_vs_baseline: Comparison | None = None
    mix_value: float | None = None
    mix_launches: int = 0
    evidence: Evidence | None = field(default=None, repr=False, compare=False)  # what the figures are over
    slo: Targets | None = None  # the objective's latency targets (a config is ranked only where it holds them)
    # one config that serves every level: the best at some, within launch noise of the best at the
    # others (``one_for_all``); None when the levels' bests are one config already, or none does
    everywhere: OneForAll | None = None
    _by_level: dict[int, LevelPlan] = field(default_factory=dict, repr=False, compare=False)

    def at(self, level: int) -> LevelPlan:
        return self._by_level[level]

    @property
    def found(self) -> bool:
        """Some level has a best (a config passed and was measured)."""
        return any(lp.best is not None for lp in self.per_level)

    @property
    def configs(self) -> list[TrialRow]:
        """The plan's distinct configs: each level's best, then the mix's (first trial of each)."""
        out: list[TrialRow] = []
        for row in [lp.best for lp in self.per_level] + [self.mix]:
            if row is not None and row.config_key not in {r.config_key for r in out}:
                out.append(row)
        return out

    def roles(self, row: TrialRow) -> list[str]:
        """What the plan picks this config for: 'best at 1', 'best at 64', 'the mix'."""
        out = [f"best at {lp.level}" for lp in self.per_level if lp.best is not None
               and lp.best.config_key == row.config_key]
        if self.mix is not None and self.mix.config_key == row.config_key:
            out.append("the mix")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"levels": [level_key(lv) for lv in self.levels],
                "weights": {str(k): v for k, v in (self.weights or {}).items()} or None,
                "baseline_trial": self.baseline.number if self.baseline else None,
                "anchor_trial": self.anchor.number if self.anchor else None,
                "per_level": [lp.to_dict() for lp in self.per_level],
                "pareto": [{"trial": r.number, "config": dict(r.params),
                            "values": {str(lv): self.at(lv).shown(level_value(r, lv)) for lv in self.levels}}
                           for r in self.pareto],
                "mix": None if self.mix is None else {
                    "trial": self.mix.number, "config": dict(self.mix.params),
                    "value": self.mix.measure.shown(self.mix_value) if self.mix_value is not None else None,
                    "launches": self.mix_launches,
                    "vs_baseline": self.mix_vs_baseline.to_dict() if self.mix_vs_baseline else None},
                "slo": self.slo.to_record() if self.slo else None,
                "slo_text": self.slo.describe() if self.slo else None,
                "one_config": self.everywhere.to_dict() if self.everywhere else None,
                "slo_lines": [line for lp in self.per_level for line in lp.slo_lines(self.anchor, self.baseline)]}


def build_plan(rows: list[TrialRow], objective: Objective | None) -> Plan:
    """The plan of a study's rows for its objective (module docstring)."""
    obj = objectives.of(objective)
    levels = objectives.levels(obj)
    evidence = Evidence(rows)
    base = baseline_row(rows)
    base = base if base is not None and base.state == "COMPLETE" and base.value is not None else None
    slo = obj.slo or None
    anchor_rows = best_at(rows, levels[0], slo=slo)
    anchor = anchor_rows[0] if anchor_rows else None

    def figure(row: TrialRow | None, level: int) -> float | None:
        return evidence.median(row.config_key, level) if row is not None else None

    per_level = []
    for level in levels:
        got = best_at(rows, level, slo=slo)
        best = got[0] if got else None
        broken: list[tuple[TrialRow, tuple[Breach, ...]]] = []
        if slo:  # the configs faster than the best here that a target kept out
            floor = figure(best, level)
            for row in best_at(rows, level, len(rows)):
                value = figure(row, level)
                if floor is not None and (value is None or value <= floor):
                    break
                found = breaches_at(row, level, slo)
                if found and len(broken) < MAX_BROKEN:
                    broken.append((row, tuple(found)))
        per_level.append(LevelPlan(
            level=level, best=best, baseline_value=figure(base, level), best_value=figure(best, level),
            vs_baseline=_compare(evidence, best, base, level), anchor_value=figure(anchor, level),
            anchor_vs_baseline=_compare(evidence, anchor, base, level),
            anchor_vs_best=_compare(evidence, anchor, best, level),
            best_launches=evidence.count(best.config_key, level) if best else 0,
            best_fresh=evidence.fresh(best.config_key, level) if best else None, noise=evidence.noise(level),
            broken=tuple(broken), anchor_breaches=tuple(breaches_at(anchor, level, slo)),
            baseline_breaches=tuple(breaches_at(base, level, slo)), measure=obj.measure))
    mix = mix_vs = mix_val = None
    mix_n = 0
    if obj.weights:
        got = best_for_mix(rows, obj.weights)
        mix = got[0] if got else None
        if mix is not None:
            mix_val = evidence.mix_median(mix.config_key, obj.weights)
            mix_n = len(evidence.mix_values(mix.config_key, obj.weights))
            if base is not None:
                mix_vs = Comparison(mix, base, evidence.mix_interval(base.config_key, mix.config_key, obj.weights),
                                    mix.config_key == base.config_key)
    return Plan(levels=levels, weights=dict(obj.weights) if obj.weights else None, baseline=base, anchor=anchor,
                per_level=tuple(per_level), pareto=tuple(pareto(rows, levels, slo)), mix=mix, mix_vs_baseline=mix_vs,
                mix_value=mix_val, mix_launches=mix_n, evidence=evidence, slo=slo,
                everywhere=one_for_all(per_level, evidence, slo), _by_level={lp.level: lp for lp in per_level})


# ---- text ---------------------------------------------------------------------------------------
def fmt(value: float | None) -> str:
    """A level's number as the plan prints it."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 10_000 else f"{value:.0f}"


def launches_text(n: int) -> str:
    """'1 launch', '4 launches'."""
    return f"{n} launch" + ("" if n == 1 else "es")


def noise_text(noise: LaunchNoise) -> str:
    """'+-3.1%' or 'not measured yet'."""
    return f"+-{100 * (noise.relative or 0.0):.1f}%" if noise.known else "not measured yet"


def fresh_text(fresh: tuple[float, float] | None) -> str:
    """'a fresh launch: 940.2-1061.0 (95%)', or why there is no range."""
    if fresh is None:
        return "no range for a fresh launch yet (launch noise not measured)"
    return f"a fresh launch should measure {fmt(fresh[0])}-{fmt(fresh[1])} (95%)"


def format_verdict(plan: Plan) -> str:
    """A study of one level as ``status`` closes: the best's figure over its launches, its verdict
    against the baseline over launches, where a fresh launch should measure, the launch noise."""
    lp = plan.per_level[0]
    if lp.best is None:
        return "verdict: no config may be called best yet"
    vs = lp.vs_baseline
    against = ("the baseline itself" if vs is not None and vs.same_config else
               f"{vs.text} than baseline #{plan.baseline.number}" if vs is not None and plan.baseline else
               "no baseline measured")
    return (f"verdict: best #{lp.best.number} {fmt(lp.shown(lp.best_value))} {lp.unit} (median of "
            f"{launches_text(lp.best_launches)}) = {against}; {fresh_text(lp.fresh_shown)}; "
            f"launch noise {noise_text(lp.noise)}")


def _p99_text(got: LevelResult | None) -> str:
    """'812/21.4': p99 TTFT and TPOT in ms ('-' where not recorded)."""
    def one(lat: Latency | None) -> str:
        return f"{1000 * lat.p99:.1f}" if lat is not None else "-"
    return "-" if got is None else f"{one(got.ttft)}/{one(got.tpot)}"


def format_plan(plan: Plan) -> str:
    """The plan as ``status`` prints it: one line per level, then the Pareto set and the mix. With
    a context axis (``core.level``), the best's p99 TTFT and TPOT at each level too: what a longer
    prompt costs a user is the wait for the first token."""
    levels = ", ".join(map(str, plan.levels))
    long = any(context_of(lv) for lv in plan.levels)
    over = f"levels {levels} (concurrency@context tokens)" if long else f"concurrency {levels}"
    if not plan.found:
        return f"plan over {over}: no config may be called best yet"
    anchor = plan.anchor
    first = plan.levels[0]
    base = f"baseline #{plan.baseline.number}" if plan.baseline else "no baseline measured"
    head = f"plan over {over} ({base}; the best at {first} is #{anchor.number if anchor else '-'}):"
    table = [["level", "unit", "baseline", f"best at {first}", "best here", "best here vs baseline",
              f"best at {first} vs best here"] + (["best here p99 TTFT/TPOT ms"] if long else [])]
    for lp in plan.per_level:
        table.append([str(lp.level), lp.unit, fmt(lp.shown(lp.baseline_value)), fmt(lp.shown(lp.anchor_value)),
                      f"#{lp.best.number} {fmt(lp.shown(lp.best_value))} ({launches_text(lp.best_launches)})"
                      if lp.best else "-",
                      lp.vs_baseline.text if lp.vs_baseline else "-",
                      lp.anchor_vs_best.text if lp.anchor_vs_best else "-"]
                     + ([_p99_text(lp.best.at(lp.level) if lp.best else None)] if long else []))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = [head] + ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    if plan.everywhere is not None:
        lines.append(f"one config for every level: {plan.everywhere.text()}")
    lines.append("launch noise: " + "; ".join(f"at {lp.level} {noise_text(lp.noise)}" for lp in plan.per_level))
    if plan.pareto:
        ev = plan.evidence or Evidence([])
        lines.append("pareto set (medians at " + "/".join(map(str, plan.levels)) + "): " + ", ".join(
            f"#{r.number} " + "/".join(fmt(plan.at(lv).shown(ev.median(r.config_key, lv))) for lv in plan.levels)
            for r in plan.pareto))
    if plan.weights:
        mix = (f"#{plan.mix.number}" + (f", {plan.mix_vs_baseline.than('the baseline')}" if plan.mix_vs_baseline
                                         else "") if plan.mix else "none yet")
        lines.append("best for the mix (" + ", ".join(f"{lv}: {w:g}" for lv, w in plan.weights.items()) + f"): {mix}")
    if plan.slo:
        lines.append(f"slo: {plan.slo.describe()} (a config that breaks it at a level is not ranked there)")
        lines += ["  " + line for lp in plan.per_level for line in lp.slo_lines(anchor, plan.baseline)]
    return "\n".join(lines)
