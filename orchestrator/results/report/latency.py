"""The report's latency sections: what users deploy by besides a throughput figure.

- **Latency per level**: for the configs the report names (the baseline, the best, a plan's
  best at each level, goodput's best), each level's TTFT, TPOT, inter-token and end-to-end
  latency at p50/p90/p99 (``core.measurement.LevelResult``), beside the TTFT the share of the
  level's prompt tokens the server's prefix cache answered (where it counts them), and with latency targets
  (``slo:``, ``core.slo``) whether each level holds them, or what it broke and by how much;
  the configs that count nowhere under them (the baseline among them: reported, not a stop).
- **Goodput** (``objective.goodput``): the answer (``study.goodput``), each measured config's
  crossing, and ``latency.png``: throughput and the targeted p99 latency against concurrency
  for the baseline and the best, the target as a line (drawn too for a plan with targets).
- **Traffic** (``bench.traffic``, ``bench.context``): the requests sampled from the file (or the
  prompts made long), and the prompt and output lengths the launches measured
  (``core.measurement.Lengths``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.core import slo as slos
from orchestrator.core.measurement import QUANTILES, LevelResult, cache_text
from orchestrator.core.records import TrialRow
from orchestrator.results.report import document as doc
from orchestrator.results.report.document import Block
from orchestrator.results.report.plots import BASELINE_COLOR, BEST_COLOR, _plt, _save
from orchestrator.study import objective as objectives
from orchestrator.study.goodput import goodput_answer, tok
from orchestrator.study.history import baseline_row, best_rows, infeasible_lines, short_params
from orchestrator.study.plan import Plan

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
    table = []
    for label, row in named:
        for level, got in row.levels.items():
            cells = [f"{label} (trial {row.number})", str(level)] + [_percentiles(got, k)
                                                                     for k in ("ttft", "tpot", "itl", "e2e")]
            if targets:
                found = slos.breaches(got, targets.at(level))
                cells.append("; ".join(b.describe() for b in found) if found else "holds")
            table.append(cells)
    out.append(doc.table(["Config", "Level", "TTFT", "TPOT", "ITL", "E2E"] + (["SLO"] if targets else []), table))
    lines = infeasible_lines(rows) if targets else []
    if lines:
        out.append(doc.warn("Configs that count nowhere under the latency targets (never ranked; the baseline "
                            "among them is reported, not a reason to stop): " + "; ".join(lines)))
    return out


def goodput_headline(rows: list[TrialRow], objective: Any) -> list[Block]:
    """A goodput study's headline: its answer (the most streams each config serves within the SLO),
    not a figure at one stream, which is not what the study ranked by."""
    obj = objectives.of(objective)
    answer = goodput_answer(rows, obj)
    out: list[Block] = [doc.heading(2, "Headline"), doc.para(
        f"**{answer.text()}**, under {obj.slo.describe() if obj.slo else 'every target'}.")]
    if answer.best is not None:
        out.append(doc.para(f"Best config: `{short_params(answer.best.row.params) or '(defaults)'}`"))
    return out


def goodput_blocks(rows: list[TrialRow], objective: Any) -> list[Block]:
    """The goodput answer, each config's crossing, and the plot (module docstring)."""
    obj = objectives.of(objective)
    if obj.goodput is None:
        return []
    answer = goodput_answer(rows, obj)
    out: list[Block] = [doc.heading(2, "Goodput: the most streams within the SLO"), doc.para(
        f"Each launch bisected the concurrency up to {obj.goodput} streams and kept the highest at which "
        f"{obj.slo.describe() if obj.slo else 'every target'} held; its total tok/s there is the config's "
        f"goodput. **{answer.text()}**.")]
    out.append(doc.table(["Trial", "Holds up to", "Total tok/s there", "Breaks at", "What broke", "Config"],
                         [[str(c.row.number) + (" (baseline)" if c.row.is_baseline else ""),
                           str(c.holds) if c.holds is not None else "none", tok(c.value),
                           str(c.breaks) if c.breaks is not None else f"- (all {c.max_concurrency} held)",
                           "; ".join(b.describe() for b in c.broken) or "-", short_params(c.row.params) or
                           "(defaults)"] for c in answer.configs]))
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
    return obj.goodput is not None or (bool(obj.slo) and obj.is_plan)


def plot_latency(rows: list[TrialRow], objective: Any, path: Path) -> None:
    """Throughput (left) and the targeted p99 latency (right) against concurrency for the
    baseline and the best, the target drawn as a line (module docstring)."""
    plt = _plt()
    target = _plotted_target(objective)
    kind, quantile = (target.kind, target.quantile) if target else ("tpot", 99)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    best = best_rows(rows, 1)
    for label, row, colour in (("baseline", baseline_row(rows), BASELINE_COLOR),
                               ("best", best[0] if best else None, BEST_COLOR)):
        if row is None or not row.levels:
            continue
        levels = sorted(row.levels)
        values = [row.levels[lv].value for lv in levels]
        lat = [row.levels[lv].latency(kind) for lv in levels]
        name = f"{label} (#{row.number})"
        left.plot(levels, values, marker="o", color=colour, label=name)
        pts = [(lv, 1000 * got.at(quantile)) for lv, got in zip(levels, lat) if got is not None]
        if pts:
            right.plot(*zip(*pts), marker="o", color=colour, label=name)
    if target is not None:
        right.axhline(1000 * target.limit_s, color=SLO_COLOR, linestyle="--", label=f"SLO {target.describe()}")
    left.set_xlabel("concurrency (streams)")
    left.set_ylabel("tok/s (1: decode tok/s of a request; N: total)")
    left.set_title("throughput")
    right.set_xlabel("concurrency (streams)")
    right.set_ylabel(f"{slos.LABELS[kind]} p{quantile} (ms)")
    right.set_title(f"{slos.LABELS[kind]} p{quantile}")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, frameon=False, loc="best")
    fig.tight_layout()
    _save(fig, path)
