"""The answer of a study over several concurrency levels: a plan, not one number.

The best configuration depends on how many requests are in flight (CUDA graphs captured up
to 8 win for one request and are no faster than eager at 10). A study whose objective has
several levels (``objective.concurrency``) answers, from its rows (``history.trial_rows``):

- per level: the best config there (ranked like ``history.best_rows``: only what
  ``outcome.rankable`` allows, a config measured twice by its lower median), its ratio to
  the baseline at that level with its interval and verdict (``core.verdict``: "faster" only
  beyond the noise of the samples, per level), and how the *anchor* (the best at the lowest
  level, what a single-request study would crown) does there, against the baseline and
  against that level's best;
- the Pareto set across levels (configs no other config beats or ties at every level, on
  medians);
- with ``objective.weights``, the best for the traffic mix (``objective.mix_value``) and its
  ratio to the baseline (the weighted geometric mean of the levels' ratios), with an
  interval combined from the levels' intervals;
- with latency targets (``objective.slo``, ``core.slo``): a config that breaks one at a level is
  not ranked at that level (it may still be the best at another), and the plan says, per
  level, which faster configs broke a target there and by how much (the anchor's among them),
  and whether the baseline does; the Pareto set counts a broken level as nothing.

``build_plan(rows, objective)`` is what the run's last line (``driver.progress``),
``status``, the report, ``export --concurrency N | --mix`` and ``compare --plan`` read;
``format_plan`` is the text ``status`` prints. A single-level job has a plan of one level
whose best is ``history.best_rows``' best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core import slo as slos
from orchestrator.core import verdict
from orchestrator.core.records import TrialRow
from orchestrator.core.slo import Breach, Targets
from orchestrator.core.verdict import RatioInterval, ratio_interval
from orchestrator.study import objective as objectives
from orchestrator.study.history import baseline_row, best_rows

MAX_BROKEN = 3  # faster configs a level names as kept out by the latency targets


# ---- one row at one level ---------------------------------------------------------------------
def level_value(row: TrialRow, level: int) -> float | None:
    """The row's median at ``level`` (None when not measured)."""
    got = row.at(level)
    return got.value if got is not None else None


def level_samples(row: TrialRow, level: int) -> list[float]:
    """Every sample of the row at ``level`` (level 1: one per request; N: one per round)."""
    got = row.at(level)
    return list(got.samples) if got is not None else []


def level_spread(row: TrialRow, level: int) -> float | None:
    """The relative spread of the row's median at ``level`` (rel_ci, else cv)."""
    got = row.at(level)
    return got.spread if got is not None else None


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


def level_interval(a: TrialRow, b: TrialRow, level: int) -> RatioInterval:
    """b's median relative to a's at ``level``, with the unpaired interval of their samples."""
    return ratio_interval(level_samples(a, level), level_samples(b, level))


def mix_interval(a: TrialRow, b: TrialRow, weights: dict[int, float]) -> RatioInterval:
    """b relative to a for the mix: the weighted geometric mean of the levels' ratios, its
    interval the levels' log half-widths combined in quadrature with their weights (the
    levels are measured apart, so their errors add as independent ones); unbounded when a
    level's interval is."""
    total = sum(weights.values())
    centre, var, n, bounded = 0.0, 0.0, None, True
    for level, w in weights.items():
        iv = level_interval(a, b, level)
        if iv.ratio is None:
            return RatioInterval(None, None, None, 0, False)
        share = w / total
        centre += share * math.log(iv.ratio)
        n = iv.n if n is None else min(n, iv.n)
        if iv.bounded:
            half = (math.log(iv.hi) - math.log(iv.lo)) / 2  # type: ignore[arg-type]
            var += (share * half) ** 2
        else:
            bounded = False
    if not bounded:
        return RatioInterval(math.exp(centre), None, None, n or 0, False)
    half = math.sqrt(var)
    return RatioInterval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n or 0, False)


def pareto(rows: list[TrialRow], levels: tuple[int, ...] | list[int], slo: Targets | None = None) -> list[TrialRow]:
    """The distinct rankable configs that no other one matches or beats at every level (on
    medians; a level where one breaks ``slo`` counts as nothing there), best at the lowest level
    first."""
    levels = sorted(levels)
    ranked = [r for r in best_at(rows, levels[0], len(rows))
              if all(level_value(r, lv) is not None for lv in levels)]
    point = {r.number: [0.0 if breaches_at(r, lv, slo) else level_value(r, lv) or 0.0 for lv in levels]
             for r in ranked}
    ranked = [r for r in ranked if any(point[r.number])]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [r for r in ranked if not any(dominates(point[o.number], point[r.number]) for o in ranked if o is not r)]


def prune_thresholds(rows: list[TrialRow], levels: tuple[int, ...] | list[int],
                     min_ratio: float, slo: Targets | None = None) -> dict[int, float] | None:
    """Per level, ``min_ratio`` x the best median so far there (of the configs that hold ``slo``
    there): the early stop's thresholds (``core.outcome.early_stop`` stops a trial below them at
    every level); None before any config may be ranked."""
    out = {}
    for level in levels:
        best = best_at(rows, level, slo=slo)
        value = level_value(best[0], level) if best else None
        if value is not None:
            out[level] = value * min_ratio
    return out or None


# ---- the plan -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """``row`` against ``other`` (the baseline, a level's best) at one level or for the mix:
    ``point`` the ratio of their medians (what the plan's numbers show), ``interval`` the
    interval of the ratio from their samples (``core.verdict``), which alone decides the verdict."""

    row: TrialRow
    other: TrialRow
    interval: RatioInterval
    same_config: bool
    point: float | None = None

    @property
    def verdict(self) -> str:
        return verdict.verdict(self.interval, same_config=self.same_config)

    @property
    def beyond_noise(self) -> bool:
        return self.verdict in (verdict.FASTER, verdict.SLOWER)

    @property
    def text(self) -> str:
        """'4.58x faster (95% CI 4.10-5.11x)', '0.98x, within noise (...)', '..., same config'."""
        shown = replace(self.interval, ratio=self.point) if self.point is not None and self.interval.ratio else \
            self.interval
        return verdict.describe(shown, same_config=self.same_config)

    def to_dict(self) -> dict[str, Any]:
        return {**self.interval.to_dict(), "point": self.point, "trial": self.row.number,
                "against": self.other.number, "verdict": self.verdict, "text": self.text}


def _compare(row: TrialRow | None, other: TrialRow | None, level: int) -> Comparison | None:
    if row is None or other is None:
        return None
    a, b = level_value(other, level), level_value(row, level)
    return Comparison(row, other, level_interval(other, row, level), row.config_key == other.config_key,
                      point=b / a if a and b is not None else None)


@dataclass(frozen=True)
class LevelPlan:
    """One level of the plan (module docstring)."""

    level: int
    best: TrialRow | None  # the best config at this level
    baseline_value: float | None
    best_value: float | None
    vs_baseline: Comparison | None  # the best here against the baseline here
    anchor_value: float | None  # the anchor (the best at the lowest level) here
    anchor_vs_baseline: Comparison | None
    anchor_vs_best: Comparison | None  # the anchor against the best here (< 1: what one number would lose)
    # latency targets: the configs faster than the best here that break one here (with their breaches,
    # fastest first), the anchor's breaches here, the baseline's
    broken: tuple[tuple[TrialRow, tuple[Breach, ...]], ...] = ()
    anchor_breaches: tuple[Breach, ...] = ()
    baseline_breaches: tuple[Breach, ...] = ()

    @property
    def unit(self) -> str:
        return objectives.unit(self.level)

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
        return {"level": self.level, "unit": self.unit, "best_trial": self.best.number if self.best else None,
                "best_config": dict(self.best.params) if self.best else None, "best_value": self.best_value,
                "baseline_value": self.baseline_value, "anchor_value": self.anchor_value,
                "vs_baseline": self.vs_baseline.to_dict() if self.vs_baseline else None,
                "anchor_vs_baseline": self.anchor_vs_baseline.to_dict() if self.anchor_vs_baseline else None,
                "anchor_vs_best": self.anchor_vs_best.to_dict() if self.anchor_vs_best else None,
                "slo_broken": [{"trial": row.number, "breaches": [b.to_record() for b in found]}
                               for row, found in self.broken],
                "anchor_breaches": [b.to_record() for b in self.anchor_breaches],
                "baseline_breaches": [b.to_record() for b in self.baseline_breaches]}


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
    slo: Targets | None = None  # the objective's latency targets (a config is ranked only where it holds them)
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
        return {"levels": list(self.levels), "weights": {str(k): v for k, v in (self.weights or {}).items()} or None,
                "baseline_trial": self.baseline.number if self.baseline else None,
                "anchor_trial": self.anchor.number if self.anchor else None,
                "per_level": [lp.to_dict() for lp in self.per_level],
                "pareto": [{"trial": r.number, "config": dict(r.params),
                            "values": {str(lv): level_value(r, lv) for lv in self.levels}} for r in self.pareto],
                "mix": None if self.mix is None else {
                    "trial": self.mix.number, "config": dict(self.mix.params), "value": self.mix_value,
                    "vs_baseline": self.mix_vs_baseline.to_dict() if self.mix_vs_baseline else None},
                "slo": self.slo.to_record() if self.slo else None,
                "slo_text": self.slo.describe() if self.slo else None,
                "slo_lines": [line for lp in self.per_level for line in lp.slo_lines(self.anchor, self.baseline)]}


def build_plan(rows: list[TrialRow], objective: Objective | None) -> Plan:
    """The plan of a study's rows for its objective (module docstring)."""
    obj = objectives.of(objective)
    levels = objectives.levels(obj)
    base = baseline_row(rows)
    base = base if base is not None and base.state == "COMPLETE" and base.value is not None else None
    slo = obj.slo or None
    anchor_rows = best_at(rows, levels[0], slo=slo)
    anchor = anchor_rows[0] if anchor_rows else None
    per_level = []
    for level in levels:
        got = best_at(rows, level, slo=slo)
        best = got[0] if got else None
        broken: list[tuple[TrialRow, tuple[Breach, ...]]] = []
        if slo:  # the configs faster than the best here that a target kept out
            floor = level_value(best, level) if best is not None else None
            for row in best_at(rows, level, len(rows)):
                value = level_value(row, level)
                if floor is not None and (value is None or value <= floor):
                    break
                found = breaches_at(row, level, slo)
                if found and len(broken) < MAX_BROKEN:
                    broken.append((row, tuple(found)))
        per_level.append(LevelPlan(
            level=level, best=best, baseline_value=level_value(base, level) if base else None,
            best_value=level_value(best, level) if best else None, vs_baseline=_compare(best, base, level),
            anchor_value=level_value(anchor, level) if anchor else None,
            anchor_vs_baseline=_compare(anchor, base, level), anchor_vs_best=_compare(anchor, best, level),
            broken=tuple(broken), anchor_breaches=tuple(breaches_at(anchor, level, slo)),
            baseline_breaches=tuple(breaches_at(base, level, slo))))
    mix = mix_vs = mix_val = None
    if obj.weights:
        got = best_for_mix(rows, obj.weights)
        mix = got[0] if got else None
        if mix is not None:
            mix_val = mix_of(mix, obj.weights)
            base_mix = mix_of(base, obj.weights) if base is not None else None
            if base is not None:
                mix_vs = Comparison(mix, base, mix_interval(base, mix, obj.weights),
                                    mix.config_key == base.config_key,
                                    point=mix_val / base_mix if mix_val is not None and base_mix else None)
    return Plan(levels=levels, weights=dict(obj.weights) if obj.weights else None, baseline=base, anchor=anchor,
                per_level=tuple(per_level), pareto=tuple(pareto(rows, levels, slo)), mix=mix, mix_vs_baseline=mix_vs,
                mix_value=mix_val, slo=slo, _by_level={lp.level: lp for lp in per_level})


# ---- text ---------------------------------------------------------------------------------------
def fmt(value: float | None) -> str:
    """A level's number as the plan prints it."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 10_000 else f"{value:.0f}"


def format_plan(plan: Plan) -> str:
    """The plan as ``status`` prints it: one line per level, then the Pareto set and the mix."""
    levels = ", ".join(map(str, plan.levels))
    if not plan.found:
        return f"plan over concurrency {levels}: no config may be called best yet"
    anchor = plan.anchor
    first = plan.levels[0]
    base = f"baseline #{plan.baseline.number}" if plan.baseline else "no baseline measured"
    head = f"plan over concurrency {levels} ({base}; the best at {first} is #{anchor.number if anchor else '-'}):"
    table = [["level", "unit", "baseline", f"best at {first}", "best here", "best here vs baseline",
              f"best at {first} vs best here"]]
    for lp in plan.per_level:
        table.append([str(lp.level), lp.unit, fmt(lp.baseline_value), fmt(lp.anchor_value),
                      f"#{lp.best.number} {fmt(lp.best_value)}" if lp.best else "-",
                      lp.vs_baseline.text if lp.vs_baseline else "-",
                      lp.anchor_vs_best.text if lp.anchor_vs_best else "-"])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = [head] + ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    if plan.pareto:
        lines.append("pareto set (medians at " + "/".join(map(str, plan.levels)) + "): " + ", ".join(
            f"#{r.number} " + "/".join(fmt(level_value(r, lv)) for lv in plan.levels) for r in plan.pareto))
    if plan.weights:
        mix = (f"#{plan.mix.number}" + (f", {plan.mix_vs_baseline.text} the baseline" if plan.mix_vs_baseline
                                         else "") if plan.mix else "none yet")
        lines.append("best for the mix (" + ", ".join(f"{lv}: {w:g}" for lv, w in plan.weights.items()) + f"): {mix}")
    if plan.slo:
        lines.append(f"slo: {plan.slo.describe()} (a config that breaks it at a level is not ranked there)")
        lines += ["  " + line for lp in plan.per_level for line in lp.slo_lines(anchor, plan.baseline)]
    return "\n".join(lines)
