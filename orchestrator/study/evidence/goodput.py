"""The answer of a goodput study: per config its capacity within the SLO, the concurrency with the
most total tok/s at which every target held (or, by request rate, the highest rate at which it held:
``RateCrossing``), and what happens above it.

A job with ``objective: {goodput: {max_concurrency: N}}`` measures each launch by the capacity
search over the load axis (``node.measure.goodput``, ``core.capacity``; the launch's record in
``core.measurement.GoodputResult``) and maximizes the total tok/s at the capacity point
(``history.best_rows`` by the row's value). ``goodput_answer(rows, objective, pricing)`` says it
in the words users deploy by: "#2 serves the most within the SLO at 64 streams: 19037 tok/s (TPOT
p99 2.9 ms); above 64 its graphs end (65: 7923 tok/s); the baseline #0 at 16 streams: 2100
tok/s", with, for each measured config, its curve (every measured load: ``core.capacity.curve``),
where the engine changes regime, and, with the job's ``cost:`` (``core.price``), $ per million
output tokens and tok/s per GPU at its capacity point. The run's last line, ``status`` (and
``status --json``), the report and ``export`` read it.

A launch recorded by the bisection before the capacity search (``GoodputResult.bisection``) is
said as it was: "holds the SLO up to 48 streams at 9800 tok/s (breaks at 52: ...)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core import capacity
from orchestrator.core.measurement import GoodputResult, Measurement, RateResult, rate_text
from orchestrator.core.price import Priced, Pricing, money
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.slo import Breach, Slo, Targets, breaches, ms
from orchestrator.study.evidence.history import baseline_row, best_rows
from orchestrator.study.storage import objective as objectives


def tok(value: float | None) -> str:
    """'9800', '858.8': a total tok/s as the answer prints it."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 1000 else f"{value:.1f}"


def streams_text(n: int) -> str:
    """'1 stream', '64 streams'."""
    return f"{n} stream" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Crossing:
    """One trial's config under the SLO (``core.measurement.GoodputResult``): its capacity point
    (``holds``), the lowest load above it that broke a target (``breaks``) and what broke there."""

    row: TrialRow
    # the capacity point: the load with the most tok/s within the SLO (None: none held); streams (a rate
    # crossing's: req/s)
    holds: float | None
    breaks: float | None  # the lowest load above it at which a target broke (None: none did)
    value: float | None  # total tok/s at ``holds`` (0.0 when none held)
    broken: tuple[Breach, ...] = ()  # what broke at ``breaks``
    max_concurrency: int = 0
    result: GoodputResult | None = None
    slo: Targets | None = None
    priced: Priced | None = None  # with the job's cost: its price at the capacity point
    gpus_per_node: int = 0

    @classmethod
    def of(cls, row: TrialRow, got: Measurement, slo: Targets | None, priced: Priced | None,
           gpus_per_node: int) -> Crossing:
        """The crossing of ``got``'s search over concurrency: what broke at ``breaks`` is read at that level."""
        g = got.goodput
        assert g is not None
        found = tuple(breaches(got.at(g.breaks), slo.at(g.breaks))) if slo and g.breaks is not None else ()
        return cls(row, g.holds, g.breaks, got.value, found, g.max_concurrency, result=g, slo=slo, priced=priced,
                   gpus_per_node=gpus_per_node)

    @property
    def bisection(self) -> bool:
        """Measured by the bisection before the capacity search (module docstring)."""
        return self.result is None or self.result.bisection

    @property
    def whole_run(self) -> float | None:
        """The whole run's output tok/s at the capacity point (``vllm bench serve``'s way)."""
        got = self.row.at(int(self.holds)) if self.holds is not None else None
        return got.whole_run_tok_s if got is not None else None

    def curve(self) -> list[capacity.CurvePoint]:
        return capacity.curve(self.row.measurement, self.slo)

    def price_text(self) -> str:
        """'$0.036 per million output tokens at $2.5 a GPU-hour, 19037 tok/s per GPU (1 GPU)' ('': no cost)."""
        return self.priced.describe(self.gpus_per_node) if self.priced is not None and self.holds is not None else ""

    def short_price(self) -> str:
        """'$0.036/Mtok' ('': no cost, or nothing served)."""
        dollars = self.priced.dollars(self.gpus_per_node) if self.priced is not None and self.holds else None
        return f"{money(dollars)}/Mtok" if dollars is not None else ""

    def targets_text(self) -> str:
        """'TPOT p99 2.9 ms': the targeted percentiles at the capacity point."""
        got = self.row.at(int(self.holds)) if self.holds is not None else None
        if got is None or self.slo is None:
            return ""
        parts = []
        for slo in self.slo.at(int(self.holds)):  # type: ignore[arg-type]
            lat = got.latency(slo.kind)
            if lat is not None:
                parts.append(f"{slo.label} {ms(lat.at(slo.quantile))}")
        return ", ".join(parts)

    def above(self) -> str:
        """What the next measured load above the capacity point did: 'above 64 its graphs end
        (65: 7923 tok/s)', 'above 16 it breaks the SLO: TPOT p99 ...', '128 streams is the most
        asked'."""
        load = int(self.holds) if self.holds is not None else None
        if load is None:
            return ""
        higher = sorted(lv for lv in self.row.levels if lv > load)
        if not higher:
            return f"{streams_text(load)} is the most asked (max_concurrency {self.max_concurrency})" \
                if load >= self.max_concurrency else "nothing above it measured"
        nxt = higher[0]
        if nxt == self.breaks:
            why = f": {self.broken[0].describe()}" if self.broken else ""
            return f"above {load} it breaks the SLO{why}"
        mark = capacity.mark_between(self.result.marks if self.result else (), load, nxt)
        there = self.row.at(nxt)
        return (f"above {load} {mark.above if mark else 'its throughput falls'} "
                f"({nxt}: {tok(there.value if there is not None else None)} tok/s)")

    def describe(self) -> str:
        """'serves the most within the SLO at 64 streams: 19037 tok/s (TPOT p99 2.9 ms); above 64 its
        graphs end (65: 7923 tok/s)'; a bisection's 'holds the SLO up to 48 stream(s) at 9800 tok/s
        (breaks at 52: TPOT p99 ...)'."""
        why = f": {self.broken[0].describe()}" if self.broken else ""
        if self.holds is None:
            return f"breaks the SLO at {self.breaks or 1} stream(s) already{why}"
        if self.bisection:
            above = (f" (breaks at {self.breaks}{why})" if self.breaks is not None
                     else f" (all {self.max_concurrency} tried)")
            return f"holds the SLO up to {self.holds} stream(s) at {tok(self.value)} tok/s{above}"
        said = self.targets_text()
        price = self.price_text()
        head = f"serves the most within the SLO at {streams_text(int(self.holds))}: {tok(self.value)} tok/s" + (
            f" ({said})" if said else "") + (f", {price}" if price else "")
        most = self.result.highest_held if self.result is not None else None
        held = f"; it holds the SLO up to {most}" if most is not None and most > self.holds else ""
        return f"{head}; {self.above()}{held}"

    def brief(self) -> str:
        """The baseline's part of the answer: 'at 16 streams: 2100 tok/s' (a bisection's 'up to 16
        at 2100 tok/s')."""
        price = f" ({self.short_price()})" if self.short_price() else ""
        if self.bisection:
            return f"up to {self.holds} at {tok(self.value)} tok/s{price}"
        return f"at {streams_text(int(self.holds or 0))}: {tok(self.value)} tok/s{price}"

    def to_dict(self) -> dict[str, Any]:
        out = {"trial": self.row.number, "config": dict(self.row.params), "holds": self.holds,
               "breaks": self.breaks, "value": self.value, "max_concurrency": self.max_concurrency,
               "broken": [b.to_record() for b in self.broken], "text": self.describe(),
               "whole_run_tok_s": self.whole_run, "search": "bisection" if self.bisection else "capacity",
               "highest_held": self.result.highest_held if self.result is not None else self.holds,
               "marks": [m.to_record() for m in (self.result.marks if self.result else ())],
               "curve": [p.to_record() for p in self.curve()]}
        if self.priced is not None:
            out["price"] = self.priced.to_record(self.gpus_per_node) if self.holds is not None else None
        return out


@dataclass(frozen=True)
class RateCrossing(Crossing):
    """One trial's config under the SLO by request rate (``core.measurement.RateResult``): its
    capacity (``holds``: the highest rate, req/s, at which the SLO held), the lowest rate above it that
    broke (``breaks``) and every probe (``rates``). Said as the concurrency crossing is: '#2 serves
    the most within the SLO at 18.8 req/s: 950 tok/s (attainment 100.0%; breaks at 20 req/s: ...)'."""

    rates: RateResult | None = None

    @classmethod
    def of(cls, row: TrialRow, got: Measurement, slo: Targets | None, priced: Priced | None,
           gpus_per_node: int) -> Crossing:
        """The crossing of ``got``'s search by rate (its probes carry what broke)."""
        r = got.rate
        assert r is not None
        return cls(row, r.holds, r.breaks, got.value, (), 0, slo=slo, priced=priced, gpus_per_node=gpus_per_node,
                   rates=r)

    @property
    def bisection(self) -> bool:
        return False

    @property
    def whole_run(self) -> float | None:
        """An open-loop probe's tok/s is already its whole run's."""
        return self.value if self.holds is not None else None

    def curve(self) -> list[capacity.CurvePoint]:
        """Every rate probed: its tok/s (the whole run's), whether the SLO held, the targeted percentiles."""
        names = [s.name for s in self.slo.every] if self.slo else []
        out = []
        for p in self.rates.curve() if self.rates is not None else []:
            lat = [(n, got.at(Slo.named(n, 0).quantile)) for n in names
                   if (got := p.latency(Slo.named(n, 0).kind)) is not None]
            out.append(capacity.CurvePoint(p.rate, p.tok_s, p.tok_s, p.held, tuple(lat)))
        return out

    def targets_text(self) -> str:
        """'attainment 99.4%': the share of requests within every target at the capacity."""
        got = self.rates.capacity if self.rates is not None else None
        return f"attainment {100 * got.attainment:.1f}%" if got is not None and got.attainment is not None else ""

    def above(self) -> str:
        """'above 18.8 req/s it breaks the SLO (20 req/s: attainment 91.7%)'."""
        above = self.rates.at(self.breaks) if self.rates is not None else None
        if self.holds is None:
            return ""
        if above is None:
            return "nothing above it measured" if self.holds < self.max_rate else \
                f"{rate_text(self.holds)} is the most asked (max_rate {self.max_rate:g})"
        return f"above {rate_text(self.holds)} it breaks the SLO ({above.describe()})"

    @property
    def max_rate(self) -> float:
        return self.rates.max_rate if self.rates is not None else 0.0

    def describe(self) -> str:
        """'serves the most within the SLO at 18.8 req/s: 950.1 tok/s (attainment 100.0%; breaks at 20
        req/s: attainment 91.7%)', priced where the job has a cost."""
        if self.rates is None:
            return "measured no request rate"
        price = self.price_text()
        return self.rates.describe(self.value if self.holds is not None else None) + (f", {price}" if price else "")

    def brief(self) -> str:
        """The baseline's part of the answer: 'at 12.5 req/s: 640 tok/s'."""
        price = f" ({self.short_price()})" if self.short_price() else ""
        return f"at {rate_text(self.holds or 0)}: {tok(self.value)} tok/s{price}"

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        got = self.rates.capacity if self.rates is not None else None
        out.update(search="rate", unit="req/s", max_rate=self.max_rate, max_concurrency=None, highest_held=self.holds,
                   attainment=got.attainment if got is not None else None,
                   probes=[p.to_record() for p in self.rates.probes] if self.rates is not None else [],
                   trace_rate=self.rates.trace_rate if self.rates is not None else None)
        return out


def crossing(row: TrialRow | None, slo: Targets | None, pricing: Pricing | None = None) -> Crossing | None:
    """The row's crossing (None: not a goodput measurement)."""
    got = row.measurement if row is not None else None
    searched = got.capacity if got is not None else None
    if row is None or got is None or searched is None:
        return None
    priced = pricing.price(row.params, got.value) if pricing is not None else None
    return CROSSINGS[searched.record_key].of(row, got, slo, priced, pricing.gpus_per_node if pricing is not None else 0)


# each capacity record's crossing, by the record's key (``core.measurement.Capacity``)
CROSSINGS: dict[str, type[Crossing]] = {GoodputResult.record_key: Crossing, RateResult.record_key: RateCrossing}


@dataclass(frozen=True)
class GoodputAnswer:
    """The study's best by goodput, the baseline's, and every measured config's."""

    best: Crossing | None
    baseline: Crossing | None
    configs: tuple[Crossing, ...]
    slo: Targets | None
    pricing: Pricing | None = None
    axis: str = "concurrency"  # what the capacity is found along (the objective's ``axis``: or "request rate")

    def text(self) -> str:
        """'#2 serves the most within the SLO at 64 streams: ...; the baseline #0 at 16 streams: 2100 tok/s'."""
        if self.best is None:
            head = f"no config holds the SLO at any {self.axis} yet"
        elif self.baseline is not None and self.baseline.row.config_key == self.best.row.config_key:
            head = f"the baseline #{self.best.row.number} is the best: it {self.best.describe()}"
        else:
            head = f"#{self.best.row.number} {self.best.describe()}"
        base = self.baseline
        if base is None or (self.best is not None and base.row.config_key == self.best.row.config_key):
            return head
        if base.holds is None:
            return f"{head}; the baseline #{base.row.number} {base.describe()}"
        return f"{head}; the baseline #{base.row.number} {base.brief()}"

    def section(self) -> dict[str, Any]:
        """The answer as the run's summary carries it, under its key."""
        return {"goodput": self.to_dict()}

    def to_dict(self) -> dict[str, Any]:
        return {"best": self.best.to_dict() if self.best else None,
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "configs": [c.to_dict() for c in self.configs],
                "slo": self.slo.to_record() if self.slo else None, "text": self.text(),
                "cost": self.pricing.cost.to_record() if self.pricing is not None else None}


def goodput_answer(rows: list[TrialRow], objective: Objective | None,
                   pricing: Pricing | None = None) -> GoodputAnswer:
    """The goodput answer of a study's rows (module docstring): the best (``history.best_rows``),
    the baseline, and each measured config once (its ranked trial, else its latest); each priced
    by ``pricing`` (the job's ``cost:``, ``Job.pricing``) where given."""
    slo = objectives.of(objective).slo
    ranked = best_rows(rows, len(rows))
    best = crossing(ranked[0], slo, pricing) if ranked else None
    base_row = baseline_row(rows)
    base = crossing(base_row, slo, pricing) if base_row is not None and base_row.state == COMPLETE else None
    latest: dict[str, TrialRow] = {}  # the configs that may not be ranked (they hold the SLO nowhere)
    for r in rows:
        if r.state == COMPLETE and r.counted and r.cached_from is None:
            latest[r.config_key] = r
    others = [r for key, r in latest.items() if key not in {x.config_key for x in ranked}]
    configs = tuple(c for c in (crossing(r, slo, pricing) for r in ranked + others) if c is not None)
    return GoodputAnswer(best=best, baseline=base, configs=configs, slo=slo, pricing=pricing,
                         axis=objectives.of(objective).axis)


def format_goodput(answer: GoodputAnswer) -> str:
    """The answer as ``status`` prints it: the verdict, then every measured config's capacity."""
    slo = answer.slo.describe() if answer.slo else "none"
    lines = [f"goodput under {slo}: {answer.text()}"]
    lines += [f"  #{c.row.number}{' (baseline)' if c.row.is_baseline else ''} {c.describe()}" for c in answer.configs]
    return "\n".join(lines)
