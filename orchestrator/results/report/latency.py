"""The report's latency sections: what users deploy by besides a throughput figure.

- **Latency per level**: for the configs the report names (the baseline, the best, a plan's
  best at each level, goodput's best), each level's TTFT, TPOT, inter-token and end-to-end
  latency at p50/p90/p99 (``core.measurement.LevelResult``), beside the TTFT the share of the
  level's prompt tokens the server's prefix cache answered (where it counts them), and with latency targets
  (``slo:``, ``core.slo``) whether each level holds them, or what it broke and by how much;
  the configs that count nowhere under them (the baseline among them: reported, not a stop).
- **Capacity within the SLO** (``objective.goodput``): the answer (``study.goodput``), each
  measured config's capacity point (its total tok/s there, in the steady state and over the whole
  run, what it costs with the job's ``cost:``, what happens above it), the curves of the baseline
  and the best (every measured load), and ``latency.png``: throughput and the targeted latency
  against concurrency for the baseline and the best, a marker at each measured load and a line
  only between neighbours with nothing unseen between them (``core.capacity.resolved``), the
  target as a line and where each engine changes regime (its largest captured CUDA graph, ...)
  as a dotted one (drawn too for a plan with targets: its levels as markers).
  A study by request rate (``objective.goodput.max_rate``) is said and drawn against req/s instead
  (``report.rate_curve``).
- **Traffic** (``bench.traffic``, ``bench.context``): the requests sampled from the file (or the
  prompts made long), and the prompt and output lengths the launches measured
  (``core.measurement.Lengths``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.core import capacity
from orchestrator.core import slo as slos
from orchestrator.core.errors import BadInput, brief
from orchestrator.core.measurement import QUANTILES, LevelResult, cache_text
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.results.report import document as doc
from orchestrator.results.report import rate_curve
from orchestrator.results.report.document import Block
from orchestrator.results.report.plots import BASELINE_COLOR, BEST_COLOR, _plt, _save, measured_runs
from orchestrator.study.evidence.goodput import Crossing, GoodputAnswer, goodput_answer, tok
from orchestrator.study.evidence.history import baseline_row, best_rows, infeasible_lines, short_params
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.evidence.plan import Plan
from orchestrator.study.storage import objective as objectives

LATENCY_PLOT = "latency.png"
SLO_COLOR = "#d62728"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def _percentiles(got: LevelResult, kind: str) -> str:
    lat = got.latency(kind)
    if lat is None:
        return "-"
    cached = f" ({cache_text(got)})" if kind == "ttft" and cache_text(got) else ""
    return "/".join(_ms(lat.at(q)) for q in QUANTILES) + cached


def named_configs(rows: list[TrialRow], plan: Plan | None) -> list[tuple[str, TrialRow]]:
    """The configs the report names, each once: the baseline, the best, a plan's bests."""
    out: list[tuple[str, TrialRow]] = []
    base = baseline_row(rows)
    picks: list[tuple[str, TrialRow | None]] = [("baseline", base)]
    best = best_rows(rows, 1)
    picks.append(("best", best[0] if best else None))
    if plan is not None:
        picks += [(f"best at {lp.level}", lp.best) for lp in plan.per_level]
    for label, row in picks:
        if row is None or not row.levels:
            continue
        same = next((i for i, (_, r) in enumerate(out) if r.config_key == row.config_key), None)
        if same is None:
            out.append((label, row))
        elif label not in out[same][0]:
            out[same] = (f"{out[same][0]}, {label}", out[same][1])
    return out


def latency_blocks(rows: list[TrialRow], objective: Any, plan: Plan | None) -> list[Block]:
    """Latency per level of the named configs, and what the targets said (module docstring)."""
    named = named_configs(rows, plan)
    if not any(got.latency(k) is not None for _, r in named for got in r.levels.values() for k in ("ttft", "tpot")):
        return []
    targets = objectives.of(objective).slo
    out: list[Block] = [doc.heading(2, "Latency per level"), doc.para(
        "Per level, each request's latencies in ms as p50/p90/p99: TTFT (to the first token; beside it, where the "
        "server counts it, the share of the prompt tokens its prefix cache answered: a TTFT is a whole prefill only "
        "where that share is low), TPOT (per output "
        "token after the first), ITL (between streamed chunks) and E2E (the whole request)"
        + (f"; latency targets: {targets.describe()}." if targets else "."))]
    whole = any(got.whole_run_tok_s is not None for _, r in named for got in r.levels.values())
    table = []
    for label, row in named:
        for level, got in row.levels.items():
            cells = [f"{label} (trial {row.number})", str(level)] + [_percentiles(got, k)
                                                                     for k in ("ttft", "tpot", "itl", "e2e")]
            if targets:
                found = slos.breaches(got, targets.at(level))
                cells.append("; ".join(b.describe() for b in found) if found else "holds")
            if whole:  # the steady state's total tok/s, and the whole run's as ``vllm bench serve`` counts it
                cells.append(tok(got.value) + (f" ({tok(got.whole_run_tok_s)})" if got.whole_run_tok_s else ""))
            table.append(cells)
    out.append(doc.table(["Config", "Level", "TTFT", "TPOT", "ITL", "E2E"] + (["SLO"] if targets else [])
                         + (["tok/s (whole run)"] if whole else []), table))
    if whole:
        out.append(doc.para("tok/s at a level N is its steady state (every stream in flight); in brackets the whole "
                            "run's, every output token over the run's duration, as `vllm bench serve` counts it."))
    lines = infeasible_lines(rows) if targets else []
    if lines:
        out.append(doc.warn("Configs that count nowhere under the latency targets (never ranked; the baseline "
                            "among them is reported, not a reason to stop): " + "; ".join(lines)))
    return out


def answer_of(rows: list[TrialRow], job: Any) -> GoodputAnswer:
    """The study's goodput answer, priced by the job's ``cost:`` where it has one."""
    pricing = job.pricing() if callable(getattr(job, "pricing", None)) else None
    return goodput_answer(rows, objectives.of(getattr(job, "objective", None)), pricing)


def goodput_headline(rows: list[TrialRow], job: Any, ev: Evidence | None = None) -> list[Block]:
    """A goodput study's headline: its answer (where each config serves the most within the SLO),
    not a figure at one stream, which is not what the study ranked by; where the box drifted over
    the study, that too (``Evidence.headline_drift``, as the other headline and the run's last lines)."""
    obj = objectives.of(getattr(job, "objective", None))
    answer = answer_of(rows, job)
    out: list[Block] = [doc.heading(2, "Headline"), doc.para(
        f"**{answer.text()}**, under {obj.slo.describe() if obj.slo else 'every target'}.")]
    drift = (ev if ev is not None else Evidence(rows)).headline_drift(obj).text()
    if drift:  # a figure measured at another time will differ
        out.append(doc.warn(drift))
    if answer.best is not None:
        out.append(doc.para(f"Best config: `{short_params(answer.best.row.params) or '(defaults)'}`"))
    return out


def goodput_blocks(rows: list[TrialRow], job: Any, trials: Sequence[int] = ()) -> list[Block]:
    """The goodput answer, each config's capacity point, and the curves (module docstring); by request
    rate, ``rate_curve``'s (with each of ``trials``' curves)."""
    obj = objectives.of(getattr(job, "objective", None))
    if not obj.by_capacity:
        return []
    answer = answer_of(rows, job)
    if obj.open_loop:
        return rate_curve.rate_blocks(rows, answer, trials)
    targets = obj.slo.describe() if obj.slo else "every target"
    out: list[Block] = [doc.heading(2, "Capacity within the SLO"), doc.para(
        f"Each launch swept the load up to {obj.goodput} streams (1, every 4x, and where the engine changes "
        f"regime: its largest captured CUDA graph and the batch above it, the most sequences it runs at once, what "
        f"its KV cache holds), then refined the gap above the best point and each crossing of the target, at most "
        f"{capacity.MAX_PROBES} loads; a config's capacity is the load with the most total tok/s at which {targets} "
        f"held, never assuming throughput rises with load. **{answer.text()}**."), doc.para(
        "Total tok/s is the steady state: the tokens that arrived while every stream was in flight. `vllm bench "
        "serve` reports output throughput over the whole run (every output token over the run's duration, the ramp "
        "and the drain included), lower wherever they are slow: the whole run's figure, from the same requests, is "
        "beside it.")]
    priced = answer.pricing is not None
    rows_out = []
    for c in answer.configs:
        cells = [str(c.row.number) + (" (baseline)" if c.row.is_baseline else ""),
                 str(c.holds) if c.holds is not None else "none", tok(c.value), tok(c.whole_run),
                 c.targets_text() or "-", (c.above() if not c.bisection else
                                            f"breaks at {c.breaks}" if c.breaks is not None else "-")
                 or "-", "; ".join(b.describe() for b in c.broken) or "-"]
        if priced:
            cells += [c.short_price() or "-",
                      tok(c.priced.per_gpu) if c.priced is not None and c.holds is not None else "-"]
        rows_out.append(cells + [short_params(c.row.params) or "(defaults)"])
    out.append(doc.table(["Trial", "Capacity at", "Total tok/s there", "Whole run", "Targets there", "Above it",
                          "What broke"] + (["$/Mtok", "tok/s per GPU"] if priced else []) + ["Config"], rows_out))
    if priced and answer.best is not None and answer.best.price_text():
        out.append(doc.para(f"Cost at the best's capacity point: {answer.best.price_text()}."))
    for label, c in _curves(answer):
        points = c.curve()
        if not points:
            continue
        names = [name for name, _ in points[0].latency]
        out.append(doc.para(f"Curve of the {label} #{c.row.number} (every load measured):"))
        out.append(doc.table(["Streams", "Total tok/s", "Whole run"] + [slos.Slo.named(n, 0).label for n in names]
                             + ["SLO"],
                             [[str(pt.load), tok(pt.tok_s), tok(pt.whole_run_tok_s)]
                              + [_ms(dict(pt.latency).get(n)) + " ms" for n in names]
                              + ["holds" if pt.held else "breaks" if pt.held is False else "-"] for pt in points]))
    return out


def _curves(answer: GoodputAnswer) -> list[tuple[str, Crossing]]:
    """The configs whose curves the report draws: the baseline, the best (each once)."""
    out: list[tuple[str, Crossing]] = []
    for label, c in (("baseline", answer.baseline), ("best", answer.best)):
        if c is not None and all(c.row.config_key != o.row.config_key for _, o in out):
            out.append((label, c))
    return out


def traffic_blocks(job: Any, rows: list[TrialRow]) -> list[Block]:
    """The traffic file and the lengths measured (module docstring)."""
    bench = getattr(job, "bench", None)
    if bench is None or (getattr(bench, "traffic", None) is None and getattr(bench, "context", None) is None):
        return []
    what = ("Requests from `bench.traffic`: {}; each asked for its own output length." if bench.traffic is not None
            else "Prompts: {} (`bench.context`).")
    out: list[Block] = [doc.heading(2, "Traffic"), doc.para(what.format(bench.prompts_from))]
    table = []
    for label, row in named_configs(rows, None):
        lengths = row.measurement.lengths if row.measurement is not None else None
        if lengths is None:
            continue
        for name, got in (("input tokens", lengths.input), ("output tokens", lengths.output)):
            if got is not None:
                table.append([f"{label} (trial {row.number})", name, f"{got.low:.0f}", f"{got.p50:.0f}",
                              f"{got.p90:.0f}", f"{got.p99:.0f}", f"{got.high:.0f}", f"{got.mean:.1f}", str(got.n)])
        if lengths.mismatched:
            out.append(doc.warn(f"Trial {row.number}: {lengths.mismatched} request(s) returned another number of "
                                "tokens than they asked for (does the server honour ignore_eos?)."))
    if table:
        out.append(doc.para("Measured over every request of the launch, as the server counted them (`usage`):"))
        out.append(doc.table(["Config", "Length", "min", "p50", "p90", "p99", "max", "mean", "requests"], table))
    return out


def _plotted_target(objective: Any) -> slos.Slo | None:
    """The target the latency panel draws: the first every-level one (else TPOT p99, no line)."""
    targets = objectives.of(objective).slo
    if targets and targets.every:
        return targets.every[0]
    return None


def wants_plot(objective: Any) -> bool:
    """Goodput, or latency targets over several levels: the report draws ``latency.png``."""
    obj = objectives.of(objective)
    return obj.by_capacity or (bool(obj.slo) and obj.by_level)


def plot_title(objective: Any) -> str:
    """The plot's alternative text in the report."""
    if objectives.of(objective).open_loop:
        return rate_curve.plot_title()
    if objectives.of(objective).by_capacity:
        return "Capacity curve: throughput and the targeted latency against concurrency"
    return "Throughput and p99 latency against concurrency"


def segments(points: list[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    """Runs of neighbouring concurrencies with nothing unseen between them (``capacity.resolved``;
    ``plots.measured_runs``)."""
    return measured_runs(points, capacity.resolved)


def plot_capacity(rows: list[TrialRow], job: Any, path: Path, trials: Sequence[int] = ()) -> None:
    """``latency.png``: against request rate for a study by rate (``rate_curve.plot_rates``: the
    baseline, the best and each of ``trials``), else against concurrency (``plot_latency``)."""
    objective = getattr(job, "objective", None)
    obj = objectives.of(objective)
    if obj.open_loop:
        rate_curve.plot_rates(rate_curve.curves(rows, answer_of(rows, job), trials), obj.slo, path)
    else:
        plot_latency(rows, objective, path, trials)


def _named(rows: list[TrialRow], trials: Sequence[int]) -> list[tuple[str, TrialRow | None, str]]:
    """The rows the concurrency plot draws: the baseline, the best, each of ``trials`` (a measured
    trial; BadInput for another)."""
    best = best_rows(rows, 1)
    out: list[tuple[str, TrialRow | None, str]] = [("baseline", baseline_row(rows), BASELINE_COLOR),
                                                   ("best", best[0] if best else None, BEST_COLOR)]
    measured = {r.number: r for r in rows if r.state == COMPLETE and r.levels}
    for i, number in enumerate(trials):
        if number not in measured:
            have = ", ".join(str(n) for n in sorted(measured)) or "none"
            raise BadInput(f"trial {brief(number)} is not a measured trial of this study (trials with a "
                           f"measurement: {have})", key="--trial")
        out.append((f"trial {number}", measured[number], rate_curve.OTHER_COLORS[i % len(rate_curve.OTHER_COLORS)]))
    return out


def plot_latency(rows: list[TrialRow], objective: Any, path: Path, trials: Sequence[int] = ()) -> None:
    """Throughput (left) and the targeted latency (right) against concurrency for the baseline, the
    best and each of ``trials`` (module docstring): markers at the measured loads (hollow: the whole
    run's tok/s), lines only between resolved neighbours, the target as a line, the regime marks dotted."""
    plt = _plt()
    target = _plotted_target(objective)
    kind, quantile = (target.kind, target.quantile) if target else ("tpot", 99)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    marked: set[tuple[int, str]] = set()
    for label, row, colour in _named(rows, trials):
        if row is None or not row.levels:
            continue
        levels = sorted(row.levels)
        name = f"{label} (#{row.number})"
        tput = [(lv, row.levels[lv].value) for lv in levels if row.levels[lv].value is not None]
        lat = [(lv, 1000 * got.at(quantile)) for lv in levels
               if (got := row.levels[lv].latency(kind)) is not None]
        whole = [(lv, row.levels[lv].whole_run_tok_s) for lv in levels if row.levels[lv].whole_run_tok_s]
        for ax, pts in ((left, tput), (right, lat)):
            if pts:
                ax.plot(*zip(*pts), linestyle="none", marker="o", color=colour, label=name)
                for run in segments(pts):  # type: ignore[arg-type]
                    ax.plot(*zip(*run), color=colour, linewidth=1.2)
        if whole:
            left.plot(*zip(*whole), linestyle="none", marker="o", markerfacecolor="none", color=colour,
                      label=f"{name}, whole run")
        search = row.measurement.goodput if row.measurement is not None else None
        point = row.levels.get(search.holds) if search is not None and search.holds is not None else None
        if point is not None and point.value is not None:  # the capacity point: the most tok/s within the SLO
            left.plot([point.level], [point.value], linestyle="none", marker="*", markersize=14, color=colour,
                      label=f"{name}: capacity at {point.level}")
        for mark in search.marks if search is not None else ():
            if (mark.streams, mark.kind) in marked:
                continue
            marked.add((mark.streams, mark.kind))
            for ax in (left, right):
                ax.axvline(mark.streams, color=colour, linestyle=":", linewidth=1.0)
            left.annotate(mark.describe().split(" (")[0], (mark.streams, 0.02), xycoords=("data", "axes fraction"),
                          rotation=90, fontsize=6, color=colour, ha="right", va="bottom")
    if target is not None:
        right.axhline(1000 * target.limit_s, color=SLO_COLOR, linestyle="--", label=f"SLO {target.describe()}")
    from matplotlib.ticker import FuncFormatter  # heavy and optional, as _plt's pyplot

    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlabel("concurrency (streams)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False, loc="best")
    left.set_ylabel("tok/s (1: decode tok/s of a request; N: total)")
    left.set_title("throughput")
    right.set_ylabel(f"{slos.LABELS[kind]} p{quantile} (ms)")
    right.set_title(f"{slos.LABELS[kind]} p{quantile}")
    fig.tight_layout()
    _save(fig, path)
