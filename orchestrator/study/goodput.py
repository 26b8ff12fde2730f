"""The answer of a goodput study: per config, the most streams at which every SLO held, and the
total tok/s there.

A job with ``objective: {goodput: {max_concurrency: N}}`` measures each launch by a bisection
over concurrency (``node.measure.goodput``; the crossing in ``core.measurement.GoodputResult``)
and maximizes the total tok/s at the highest concurrency that held (``history.best_rows`` by the
row's value). ``goodput_answer(rows, objective)`` says it in the words users deploy by: "#5
holds the SLO up to 48 streams at 9800 tok/s; the baseline #0 up to 12 at 2100", with, for each
measured config, where it crossed and what it broke there (``core.slo``). The run's last line,
``status``, the report and ``export`` read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.slo import Breach, Targets, breaches
from orchestrator.study import objective as objectives
from orchestrator.study.history import baseline_row, best_rows


def tok(value: float | None) -> str:
    """'9800', '858.8': a total tok/s as the answer prints it."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 1000 else f"{value:.1f}"


@dataclass(frozen=True)
class Crossing:
    """Where one trial's config stopped holding the SLO (``core.measurement.GoodputResult``)."""

    row: TrialRow
    holds: int | None  # the most streams at which every SLO held (None: not even 1)
    breaks: int | None  # the fewest above it at which one broke (None: held up to max_concurrency)
    value: float | None  # total tok/s at ``holds`` (0.0 when none held)
    broken: tuple[Breach, ...] = ()  # what broke at ``breaks``
    max_concurrency: int = 0

    def describe(self) -> str:
        """'holds the SLO up to 48 streams at 9800 tok/s (breaks at 52: TPOT p99 ...)'."""
        why = f": {self.broken[0].describe()}" if self.broken else ""
        if self.holds is None:
            return f"breaks the SLO at {self.breaks or 1} stream(s) already{why}"
        above = (f" (breaks at {self.breaks}{why})" if self.breaks is not None
                 else f" (all {self.max_concurrency} tried)")
        return f"holds the SLO up to {self.holds} stream(s) at {tok(self.value)} tok/s{above}"

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.row.number, "config": dict(self.row.params), "holds": self.holds,
                "breaks": self.breaks, "value": self.value, "max_concurrency": self.max_concurrency,
                "broken": [b.to_record() for b in self.broken], "text": self.describe()}


def crossing(row: TrialRow | None, slo: Targets | None) -> Crossing | None:
    """The row's crossing (None: not a goodput measurement)."""
    got = row.measurement if row is not None else None
    if row is None or got is None or got.goodput is None:
        return None
    g = got.goodput
    found = tuple(breaches(got.at(g.breaks), slo.at(g.breaks))) if slo and g.breaks is not None else ()
    return Crossing(row, g.holds, g.breaks, got.value, found, g.max_concurrency)


@dataclass(frozen=True)
class GoodputAnswer:
    """The study's best by goodput, the baseline's crossing, and every measured config's."""

    best: Crossing | None
    baseline: Crossing | None
    configs: tuple[Crossing, ...]
    slo: Targets | None

    def text(self) -> str:
        """'#5 holds the SLO up to 48 streams at 9800 tok/s (...); the baseline #0 up to 12 at 2100'."""
        if self.best is None:
            head = "no config holds the SLO at any concurrency yet"
        elif self.baseline is not None and self.baseline.row.config_key == self.best.row.config_key:
            head = f"the baseline #{self.best.row.number} is the best: it {self.best.describe()}"
        else:
            head = f"#{self.best.row.number} {self.best.describe()}"
        base = self.baseline
        if base is None or (self.best is not None and base.row.config_key == self.best.row.config_key):
            return head
        if base.holds is None:
            return f"{head}; the baseline #{base.row.number} {base.describe()}"
        return f"{head}; the baseline #{base.row.number} up to {base.holds} at {tok(base.value)} tok/s"

    def to_dict(self) -> dict[str, Any]:
        return {"best": self.best.to_dict() if self.best else None,
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "configs": [c.to_dict() for c in self.configs],
                "slo": self.slo.to_record() if self.slo else None, "text": self.text()}


def goodput_answer(rows: list[TrialRow], objective: Objective | None) -> GoodputAnswer:
    """The goodput answer of a study's rows (module docstring): the best (``history.best_rows``),
    the baseline, and each measured config once (its ranked trial, else its latest)."""
    slo = objectives.of(objective).slo
    ranked = best_rows(rows, len(rows))
    best = crossing(ranked[0], slo) if ranked else None
    base_row = baseline_row(rows)
    base = crossing(base_row, slo) if base_row is not None and base_row.state == COMPLETE else None
    latest: dict[str, TrialRow] = {}  # the configs that may not be ranked (they hold the SLO nowhere)
    for r in rows:
        if r.state == COMPLETE and r.counted and r.cached_from is None:
            latest[r.config_key] = r
    others = [r for key, r in latest.items() if key not in {x.config_key for x in ranked}]
    configs = tuple(c for c in (crossing(r, slo) for r in ranked + others) if c is not None)
    return GoodputAnswer(best=best, baseline=base, configs=configs, slo=slo)


def format_goodput(answer: GoodputAnswer) -> str:
    """The answer as ``status`` prints it: the verdict, then every measured config's crossing."""
    slo = answer.slo.describe() if answer.slo else "none"
    lines = [f"goodput under {slo}: {answer.text()}"]
    lines += [f"  #{c.row.number}{' (baseline)' if c.row.is_baseline else ''} {c.describe()}" for c in answer.configs]
    return "\n".join(lines)
