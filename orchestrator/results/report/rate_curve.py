"""The report's capacity by request rate (``objective.goodput.max_rate``): its section and its plot.

A study by request rate has no concurrency levels: each launch probed open-loop loads at request
rates (``core.rate_search``), so what users deploy by is that curve, said in req/s and attainment:
each named config's probes (output tok/s, attainment, the percentiles the SLO targets), its
capacity (the highest rate that held) and what broke above it. The configs named are the baseline,
the best and each ``report --trial N`` (``curves``). ``plot_rates`` draws ``latency.png`` from them
(output tok/s, attainment and the targeted latency against req/s: markers at the probed rates, a
line only between neighbours the search left nothing between, ``core.rate_search.resolved``, the
targets as lines, the capacity starred) and returns what it drew, so a reader can check the plot's
points without reading pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core import rate_search
from orchestrator.core.errors import BadInput, brief
from orchestrator.core.measurement import RateProbe
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.slo import Targets, ms
from orchestrator.results.report import document as doc
from orchestrator.results.report.document import Block
from orchestrator.results.report.plots import BASELINE_COLOR, BEST_COLOR, _plt, _save, measured_runs
from orchestrator.study.evidence.goodput import GoodputAnswer, RateCrossing, crossing, tok
from orchestrator.study.evidence.history import short_params

OTHER_COLORS = ("#1f77b4", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")  # each --trial's, in turn
SLO_COLOR = "#d62728"
SPREAD = 4  # rates further apart than this ratio are drawn on a log axis
THROUGHPUT, ATTAINMENT, LATENCY = "output tok/s", "attainment", "latency"  # the plot's panels


@dataclass(frozen=True)
class Curve:
    """One named config's probes, by rate (the last of a rate probed twice), as the plot and the
    tables read them."""

    label: str  # 'baseline', 'best', 'baseline, best', 'trial 5'
    crossing: RateCrossing
    colour: str

    @property
    def name(self) -> str:
        """'best (#3)'."""
        return f"{self.label} (#{self.crossing.row.number})"

    @property
    def probes(self) -> list[RateProbe]:
        return self.crossing.rates.curve() if self.crossing.rates is not None else []

    @property
    def capacity(self) -> RateProbe | None:
        return self.crossing.rates.capacity if self.crossing.rates is not None else None


@dataclass(frozen=True)
class Drawn:
    """What ``plot_rates`` drew: on ``panel``, a ``kind`` of mark ("points", "line", "capacity",
    "target") for ``label`` at the points (x: req/s)."""

    panel: str
    kind: str
    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]


def curves(rows: list[TrialRow], answer: GoodputAnswer, trials: Sequence[int] = ()) -> list[Curve]:
    """The baseline, the best and each of ``trials`` (a trial the study measured by rate; BadInput for
    another), each config once with its labels joined."""
    measured = {r.number: r for r in rows if r.state == COMPLETE and r.measurement is not None
                and r.measurement.rate is not None and r.cached_from is None}
    picks: list[tuple[str, RateCrossing | None]] = [("baseline", _rate(answer.baseline)), ("best", _rate(answer.best))]
    for number in trials:
        if number not in measured:
            have = ", ".join(str(n) for n in sorted(measured)) or "none"
            raise BadInput(f"trial {brief(number)} is not a trial this study measured by request rate (trials "
                           f"measured: {have})", key="--trial")
        picks.append((f"trial {number}", _rate(crossing(measured[number], answer.slo, answer.pricing))))
    out: list[Curve] = []
    for label, got in picks:
        if got is None:
            continue
        same = next((i for i, c in enumerate(out) if c.crossing.row.config_key == got.row.config_key), None)
        if same is not None:
            if label not in out[same].label:
                out[same] = Curve(f"{out[same].label}, {label}", out[same].crossing, out[same].colour)
            continue
        colour = {"baseline": BASELINE_COLOR, "best": BEST_COLOR}.get(label, OTHER_COLORS[len(out) % len(OTHER_COLORS)])
        out.append(Curve(label, got, colour))
    return out


def _rate(got: Any) -> RateCrossing | None:
    return got if isinstance(got, RateCrossing) and got.rates is not None else None


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _searched(answer: GoodputAnswer, targets: Targets | None) -> str:
    """How each launch searched, and what a rate holding means."""
    said = next((c.rates for c in answer.configs if isinstance(c, RateCrossing) and c.rates is not None), None)
    where = (f"from {said.min_rate:g} to {said.max_rate:g} req/s" if said is not None else "")
    rule = targets.describe() if targets else "every request served"
    return (f"Each launch sent open-loop loads {where}: each probe its requests at one request rate on a seeded "
            f"arrival schedule, whatever the server was doing (past its capacity requests queue); a coarse sweep "
            f"doubling from the lowest rate, then bisection between the highest rate that held and the lowest above "
            f"it that broke, to {100 * rate_search.STEP:g}% of the rate. A rate holds where {rule} (attainment: the "
            f"share of the requests sent that met every per-request target; a failed or unfinished request met "
            f"none); a config's capacity is the highest rate that held, and its output tok/s there is what the study "
            f"ranks by, never assuming attainment falls as the rate rises. **{answer.text()}**.")


def rate_blocks(rows: list[TrialRow], answer: GoodputAnswer, trials: Sequence[int] = ()) -> list[Block]:
    """The capacity by request rate (module docstring): how it was searched, each config's capacity,
    and the curve of each named config."""
    targets = answer.slo
    out: list[Block] = [doc.heading(2, "Capacity within the SLO by request rate"), doc.para(_searched(answer, targets))]
    priced = answer.pricing is not None
    table = []
    for c in answer.configs:
        if not isinstance(c, RateCrossing):
            continue
        got = c.rates.capacity if c.rates is not None else None
        cells = [str(c.row.number) + (" (baseline)" if c.row.is_baseline else ""),
                 f"{c.holds:.3g}" if c.holds is not None else "none", tok(c.value if c.holds is not None else None),
                 _share(got.attainment if got is not None else None),
                 c.above() or (c.describe() if c.holds is None else "-")]
        if priced:
            cells += [c.short_price() or "-", tok(c.priced.per_gpu) if c.priced is not None and c.holds else "-"]
        table.append(cells + [short_params(c.row.params) or "(defaults)"])
    out.append(doc.table(["Trial", "Capacity (req/s)", "Output tok/s there", "Attainment there", "Above it"]
                         + (["$/Mtok", "tok/s per GPU"] if priced else []) + ["Config"], table))
    if priced and answer.best is not None and answer.best.price_text():
        out.append(doc.para(f"Cost at the best's capacity: {answer.best.price_text()}."))
    for curve in curves(rows, answer, trials):
        out += curve_table(curve, targets)
    return out


def curve_table(curve: Curve, targets: Targets | None) -> list[Block]:
    """'Curve of the best #3 (every rate probed)': per rate the rate the client kept, output tok/s,
    attainment (good of sent), the targeted percentiles and whether the SLO held."""
    probes = curve.probes
    if not probes:
        return []
    labels = [t.label for t in rate_search.targeted(probes[0], targets)]
    rows_out = []
    for p in probes:
        got = {t.label: t.measured_s for t in rate_search.targeted(p, targets)}
        rows_out.append([f"{p.rate:.3g}", f"{p.sent_rate:.3g}" if p.sent_rate is not None else "-", tok(p.tok_s),
                         f"{_share(p.attainment)} ({p.good} of {p.requests})"]
                        + [ms(got[n]) if n in got else "-" for n in labels]
                        + [("holds" if p.held else "breaks") + (" (capacity)" if p.rate == curve.crossing.holds
                                                                else "")])
    return [doc.para(f"Curve of the {curve.label} #{curve.crossing.row.number} (every rate probed):"),
            doc.table(["Req/s", "Sent (req/s)", "Output tok/s", "Attainment (good of sent)"] + labels + ["SLO"],
                      rows_out)]


def segments(points: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Runs of neighbouring rates the search left nothing between (``rate_search.resolved``;
    ``plots.measured_runs``)."""
    return measured_runs(points, rate_search.resolved)


def plot_title() -> str:
    """The plot's alternative text in the report."""
    return "Capacity curve: output tok/s, attainment and the targeted latency against request rate"


def plot_rates(named: list[Curve], targets: Targets | None, path: Path) -> list[Drawn]:
    """``latency.png`` (module docstring): output tok/s, attainment (%) and the first targeted
    percentile (ms) against req/s for each named config; what it drew."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13.0, 4.0))
    panels = dict(zip((THROUGHPUT, ATTAINMENT, LATENCY), axes))
    drawn: list[Drawn] = []
    first = next((rate_search.targeted(p, targets)[:1] for c in named for p in c.probes
                  if rate_search.targeted(p, targets)), [])
    latency = first[0] if first else None

    def draw(panel: str, kind: str, who: str, pts: list[tuple[float, float]], **style: Any) -> None:
        if pts:
            panels[panel].plot(*zip(*pts), **style)
            drawn.append(Drawn(panel, kind, who, tuple(x for x, _ in pts), tuple(y for _, y in pts)))

    for curve in named:
        probes = curve.probes
        series = {THROUGHPUT: [(p.rate, p.tok_s) for p in probes if p.tok_s is not None],
                  ATTAINMENT: [(p.rate, 100 * p.attainment) for p in probes if p.attainment is not None],
                  LATENCY: [(p.rate, 1000 * t.measured_s) for p in probes for t in rate_search.targeted(p, targets)
                            if latency is not None and t.label == latency.label]}
        for panel, pts in series.items():
            draw(panel, "points", curve.name, pts, linestyle="none", marker="o", color=curve.colour, label=curve.name)
            for run in segments(pts):
                draw(panel, "line", curve.name, run, color=curve.colour, linewidth=1.2)
        top = curve.capacity
        if top is not None:  # the capacity: the highest rate that held
            said = f"{curve.name}: capacity {top.rate:.3g} req/s"
            if top.tok_s is not None:
                draw(THROUGHPUT, "capacity", curve.name, [(top.rate, top.tok_s)], linestyle="none", marker="*",
                     markersize=14, color=curve.colour, label=said)
            if top.attainment is not None:
                draw(ATTAINMENT, "capacity", curve.name, [(top.rate, 100 * top.attainment)], linestyle="none",
                     marker="*", markersize=14, color=curve.colour)
    rates = [p.rate for c in named for p in c.probes]
    span = [(min(rates), 0.0), (max(rates), 0.0)] if rates else []
    if targets is not None and targets.attainment is not None and span:
        share = 100 * targets.attainment
        panels[ATTAINMENT].axhline(share, color=SLO_COLOR, linestyle="--", label=f"target {share:g}%")
        drawn.append(Drawn(ATTAINMENT, "target", f"target {share:g}%", (span[0][0], span[1][0]), (share, share)))
    if latency is not None and span:
        limit = 1000 * latency.limit_s
        panels[LATENCY].axhline(limit, color=SLO_COLOR, linestyle="--", label=f"target {ms(latency.limit_s)}")
        drawn.append(Drawn(LATENCY, "target", f"target {ms(latency.limit_s)}", (span[0][0], span[1][0]),
                           (limit, limit)))
    from matplotlib.ticker import FuncFormatter  # heavy and optional, as _plt's pyplot

    titles = {THROUGHPUT: ("output tok/s", "output tok/s (every output token over the probe)"),
              ATTAINMENT: ("attainment", "attainment (% of requests within every target)"),
              LATENCY: (latency.label if latency else "no latency target", f"{latency.label} (ms)" if latency else "")}
    for panel, ax in panels.items():
        if rates and min(rates) > 0 and max(rates) > SPREAD * min(rates):  # a sweep from far below: by ratio
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlabel("request rate (req/s)")
        ax.set_title(titles[panel][0])
        ax.set_ylabel(titles[panel][1])
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, frameon=False, loc="best")
    fig.tight_layout()
    _save(fig, path)
    return drawn
