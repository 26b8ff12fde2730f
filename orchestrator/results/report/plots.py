"""The report's four plots, each a PNG beside the report (matplotlib, no display needed).

    history.png     decode tok/s per trial with the best-so-far line and the baseline
    params.png      tok/s per value of each parameter (box + points; failures marked)
    importance.png  which knobs mattered: share of the tok/s variance per parameter (importance.py)
    timeline.png    start/stop of every trial per node, split into launch/bench/check/
                    teardown, so overhead and idle gaps show
    pareto.png      a plan only (several concurrency levels): each measured config at the
                    lowest level against every other level, the Pareto set joined, each
                    level's best and the baseline marked

``trial_spans`` (each launched trial's ``Span``: its start and end on its node) is also what the
report's summary counts busy and idle time from.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.core import files, outcome
from orchestrator.core.logs import clip
from orchestrator.core.records import TrialRow
from orchestrator.core.study_dir import StudyDir
from orchestrator.results.importance import KnobEffect, sort_values
from orchestrator.study.evidence import history
from orchestrator.study.evidence.history import COMPLETE, FAIL, PRUNED, baseline_row, parse_iso
from orchestrator.study.evidence.plan import Plan, level_value
from orchestrator.study.storage import objective as objectives

PLOTS = ("history.png", "params.png", "importance.png", "timeline.png")
PLAN_PLOT = "pareto.png"

STATE_COLORS = {"COMPLETE": "#1f77b4", "FAIL": "#d62728", "PRUNED": "#7f7f7f", "RUNNING": "#ff7f0e",
                "WAITING": "#bcbd22"}
BEST_COLOR = "#2ca02c"
BASELINE_COLOR = "#9467bd"
PHASE_COLORS = {"launch_s": "#ff7f0e", "warmup_s": "#ffbb78", "bench_s": "#2ca02c", "check_s": "#17becf",
                "teardown_s": "#8c564b"}
OTHER_COLOR = "#e7d9a8"  # not grey: grey outlines a PRUNED trial
REFUSED_COLOR = "#8b0000"  # a trial whose output failed the correctness gate
BENCH_FAILURES = ("bench-timeout", "bench-error")  # failures that happen while the benchmark runs
MIN_BOX_POINTS = 5  # a box (quartiles) needs at least this many points; fewer are drawn as points only
IMPORTANCE_COLOR = "#4c72b0"  # used by no other plot: the screenshot check can tell the plots apart
FIG_DPI = 100


def write_plots(rows: list[TrialRow], effects: list[KnobEffect], notes: list[str], report_dir: Path,
                plan: Plan | None = None) -> list[Path]:
    """The four plots into ``report_dir``, and with a ``plan`` of several levels the Pareto
    plot; returns their paths (in ``PLOTS`` order, then ``PLAN_PLOT``)."""
    plot_history(rows, StudyDir(report_dir).plot("history.png"))
    plot_params(rows, StudyDir(report_dir).plot("params.png"))
    plot_importance(effects, notes, StudyDir(report_dir).plot("importance.png"))
    plot_timeline(rows, StudyDir(report_dir).plot("timeline.png"))
    out = [StudyDir(report_dir).plot(name) for name in PLOTS]
    if plan is not None and len(plan.levels) > 1:
        plot_pareto(rows, plan, StudyDir(report_dir).plot(PLAN_PLOT))
        out.append(StudyDir(report_dir).plot(PLAN_PLOT))
    return out


def plot_pareto(rows: list[TrialRow], plan: Plan, path: Path) -> None:
    """One panel per level above the lowest: every ranked config's median at the lowest level
    (x) against its median there (y); the Pareto set joined, each level's best and the
    baseline marked. Where the best at the lowest level is not the best above, the panel shows
    what one number would give away."""
    plt = _plt()
    first, others = plan.levels[0], plan.levels[1:]
    ranked = [r for r in outcome.rankable(rows) if r.cached_from is None]
    fig, axes = plt.subplots(1, len(others), figsize=(4.2 * len(others) + 1.0, 4.0), squeeze=False)
    front = {r.config_key for r in plan.pareto}
    for ax, level in zip(axes[0], others):
        pts = [(level_value(r, first), level_value(r, level), r) for r in ranked]
        pts = [(x, y, r) for x, y, r in pts if x is not None and y is not None]
        rest = [(x, y) for x, y, r in pts if r.config_key not in front]
        if rest:
            ax.scatter(*zip(*rest), s=30, color=OTHER_COLOR, edgecolors="none", label="measured configs")
        line = sorted((level_value(r, first) or 0.0, level_value(r, level) or 0.0) for r in plan.pareto)
        if line:
            ax.plot(*zip(*line), marker="o", color=STATE_COLORS[COMPLETE], linewidth=1.0, linestyle="--",
                    label="Pareto set",
                    zorder=3)
        for row, colour, label in ((plan.anchor, BEST_COLOR, f"best at {first}"),
                                   (plan.at(level).best, "#d62728", f"best at {level}"),
                                   (plan.baseline, BASELINE_COLOR, "baseline")):
            if row is None or level_value(row, first) is None or level_value(row, level) is None:
                continue
            ax.scatter([level_value(row, first)], [level_value(row, level)], s=110, facecolors="none",
                       edgecolors=colour, linewidths=2, label=f"{label} (#{row.number})", zorder=4)
        ax.set_xlabel(f"{objectives.unit(first)} at concurrency {first}")
        ax.set_ylabel(f"{objectives.unit(level)} at concurrency {level}")
        ax.set_title(f"concurrency {first} vs {level}")
        ax.grid(alpha=0.3)
        if pts:
            ax.legend(fontsize=7, frameon=False, loc="best")
        else:
            ax.text(0.5, 0.5, "nothing measured at both levels yet", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    _save(fig, path)


def _plt():
    import matplotlib  # heavy: imported only when the report draws

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # heavy: imported only when the report draws

    return plt


def _save(fig, path: Path) -> None:
    """The figure as a PNG file, written whole (``core.files``): rendered in memory first."""
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=FIG_DPI, facecolor="white")
    finally:
        _plt().close(fig)
    files.write_whole(path, png.getvalue())


def measured_runs(points: list[tuple[Any, float]],
                  resolved: Callable[[Any, Any], bool]) -> list[list[tuple[Any, float]]]:
    """Runs of neighbouring points (by load) that ``resolved`` says have nothing unmeasured between them:
    a curve's line is drawn along each run, never across a gap no probe measured (runs of one point
    are markers only)."""
    runs: list[list[tuple[Any, float]]] = []
    for pt in points:
        if runs and resolved(runs[-1][-1][0], pt[0]):
            runs[-1].append(pt)
        else:
            runs.append([pt])
    return [run for run in runs if len(run) > 1]


def _note_figure(path: Path, title: str, note: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    ax.set_title(title)
    ax.text(0.5, 0.5, note, ha="center", va="center", wrap=True, fontsize=11, transform=ax.transAxes)
    ax.set_axis_off()
    _save(fig, path)


def history_points(rows: list[TrialRow]) -> dict[str, list[tuple[int, float]]]:
    """The history plot's points (trial, tok/s) by series: COMPLETE (ranked), PRUNED (its first
    repeat), FAIL (at 0), "refused" (a wrong output: at 0, its speed does not count), "never
    best" (a COMPLETE of a config found wrong elsewhere). Launched trials only."""
    eligible = {r.number for r in outcome.rankable(rows)}
    out: dict[str, list[tuple[int, float]]] = {COMPLETE: [], PRUNED: [], FAIL: [], "refused": [], "never best": []}
    for r in rows:
        if r.skipped or r.cached_from is not None:
            continue
        if r.state == COMPLETE and r.value is not None:
            out[COMPLETE if r.number in eligible else "never best"].append((r.number, r.value))
        elif r.state == PRUNED:
            out[PRUNED].append((r.number, r.measured or 0.0))
        elif r.state == FAIL:
            out["refused" if r.failure_kind == "wrong-output" else FAIL].append((r.number, 0.0))
    return out


def plot_history(rows: list[TrialRow], path: Path) -> None:
    """tok/s per trial; FAILs at 0 (x; a wrong output as refused, its speed never drawn: it does
    not count), PRUNED grey, best-so-far line, baseline dashed."""
    plt = _plt()
    eligible = {r.number for r in outcome.rankable(rows)}
    series = history_points(rows)
    rows = [r for r in rows if not r.skipped]  # proposals never launched are not trials
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    cached = [(r.number, r.value) for r in rows if r.state == COMPLETE and r.cached_from is not None]
    if cached:
        ax.scatter(*zip(*cached), marker="o", facecolors="none", edgecolors=STATE_COLORS[COMPLETE], s=36,
                   label="answered from cache", zorder=3)
    if series["refused"]:
        ax.scatter(*zip(*series["refused"]), marker="X", color=REFUSED_COLOR, s=60, label="refused: wrong output",
                   zorder=4)
    if series["never best"]:
        ax.scatter(*zip(*series["never best"]), marker="o", facecolors="none", edgecolors=STATE_COLORS[FAIL], s=36,
                   label="never best (wrong output)")
    for state, marker in ((COMPLETE, "o"), (PRUNED, "v"), (FAIL, "x")):
        if series[state]:
            kw = {"s": 36, "label": state}
            if marker != "x":
                kw["edgecolors"] = "none"
            ax.scatter(*zip(*series[state]), marker=marker, color=STATE_COLORS[state], zorder=3, **kw)
    best_x, best_y, best = [], [], None
    for r in rows:
        if r.state not in (COMPLETE, FAIL, PRUNED):
            continue
        if r.number in eligible and r.value is not None and (best is None or r.value > best):
            best = r.value
        if best is not None:
            best_x.append(r.number)
            best_y.append(best)
    if best_x:
        ax.step(best_x, best_y, where="post", color=BEST_COLOR, linewidth=2.5, label="best so far", zorder=2)
    base = baseline_row(rows)
    if base and base.value is not None:
        ax.axhline(base.value, color=BASELINE_COLOR, linestyle="--", linewidth=1.5,
                   label=f"baseline ({base.value:.1f})")
    ax.set_xlabel("trial")
    ax.set_ylabel("decode tok/s (single request)")
    ax.set_title("Optimization history")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if rows:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    else:
        ax.text(0.5, 0.5, "no trials yet", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    _save(fig, path)


def _param_names(rows: list[TrialRow]) -> list[str]:
    return sorted({k for r in rows for k in (r.params or {})}, key=lambda k: history._param_order((k, None)))


def plot_params(rows: list[TrialRow], path: Path) -> None:
    """One panel per parameter: tok/s of COMPLETE trials per value (points, and a box where a
    value has ``MIN_BOX_POINTS`` of them: quartiles of fewer are not a distribution), failures at 0."""
    plt = _plt()
    names = _param_names(rows)
    if not names:
        _note_figure(path, "tok/s per parameter value", "no parameters recorded yet")
        return
    ncols = min(3, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.2 if ncols < 3 else 10.8, 2.9 * nrows), squeeze=False)
    eligible = {r.number for r in outcome.rankable(rows)}
    rows = [r for r in rows if not r.skipped]  # proposals never launched are not trials
    for ax, name in zip(axes.flat, names):
        values = sort_values({r.params.get(name) for r in rows if name in (r.params or {})})
        groups, fails = [], []
        for v in values:
            groups.append([r.value for r in rows if r.number in eligible and r.cached_from is None
                           and r.params.get(name, object()) == v])
            fails.append(sum(1 for r in rows if r.state == FAIL and r.counted  # the config's own failures
                             and r.params.get(name, object()) == v))
        pos = list(range(1, len(values) + 1))
        filled = boxed(pos, groups)
        if filled:
            ax.boxplot([g for _, g in filled], positions=[p for p, _ in filled], widths=0.5, showfliers=False,
                       medianprops={"color": BEST_COLOR, "linewidth": 2})
        for p, g in zip(pos, groups):
            jitter = [p + 0.12 * ((i % 5) - 2) / 2 for i in range(len(g))]
            ax.scatter(jitter, g, s=22, color=STATE_COLORS[COMPLETE], edgecolors="none", zorder=3)
        for p, n in zip(pos, fails):
            if n:
                ax.scatter([p], [0], marker="x", color=STATE_COLORS[FAIL], s=40, zorder=3)
                ax.annotate(f"{n} fail", (p, 0), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=STATE_COLORS[FAIL])
        ax.set_xticks(pos)
        ax.set_xticklabels([clip(str(v), 10) for v in values], fontsize=8, rotation=30 if len(values) > 4 else 0)
        shown = name.split(".", 1)[1] if name.startswith(("env.", "backend.")) else name
        ax.set_title(shown, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[len(names):]:
        ax.set_axis_off()
    axes[0][0].set_ylabel("tok/s")
    fig.suptitle("Decode tok/s per parameter value", fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def boxed(positions: list[int], groups: list[list[Any]]) -> list[tuple[int, list[Any]]]:
    """The (position, values) that get a box: ``MIN_BOX_POINTS`` values or more; the rest are
    drawn as their points alone."""
    return [(p, g) for p, g in zip(positions, groups) if len(g) >= MIN_BOX_POINTS]


def plot_importance(effects: list[KnobEffect], notes: list[str], path: Path) -> None:
    """Share of the tok/s variance each parameter explains alone (conditional ones labelled)."""
    plt = _plt()
    if not effects:
        _note_figure(path, "Which knobs mattered", "\n".join(notes) or "not enough data")
        return
    shown = effects[::-1]
    labels = [_short(e.name) + (f" (in {e.trials} trials)" if e.conditional else "") for e in shown]
    fig, ax = plt.subplots(figsize=(7.2, max(2.5, 0.45 * len(shown) + 1.5)))
    ax.barh(labels, [e.share for e in shown], color=[IMPORTANCE_COLOR if not e.conditional else "#bbbbbb"
                                                    for e in shown], height=0.6)
    ax.set_xlabel("share of the tok/s variance the parameter explains alone (marginal: over every trial)")
    ax.set_title("Which knobs mattered")
    ax.set_xlim(0, 1.0)
    ax.grid(alpha=0.3, axis="x")
    if notes:
        fig.text(0.01, 0.01, clip("; ".join(notes), 120), fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.04 if notes else 0, 1, 1))
    _save(fig, path)


def _short(name: str) -> str:
    return name.split(".", 1)[1] if name.startswith(("env.", "backend.")) else name


@dataclass(frozen=True)
class Span:
    """A launched trial's time on its node (unix times): one bar of the timeline, and what the
    report's summary counts busy and idle time from."""

    row: TrialRow
    start: float
    end: float
    node: str  # "unknown" where the trial did not record one
    lane: int = 0  # its line within the node, so parallel trials do not overlap (``_lanes``)


def trial_spans(rows: list[TrialRow]) -> list[Span]:
    """Each launched trial's span, in the rows' order (the end from its timings when missing; a
    trial never launched, or without a start or an end, has none)."""
    out = []
    for r in rows:
        start, end = parse_iso(r.started_at), parse_iso(r.ended_at)
        if start is None or r.skipped or r.cached_from is not None:  # never launched
            continue
        if end is None or end < start:
            total = (r.durations or {}).get("total_s")
            end = start + float(total) if total else None
        if end is None:
            continue
        out.append(Span(r, start, end, r.node or "unknown"))
    return out


def _lanes(spans: list[Span]) -> list[Span]:
    """The spans, in their order, each with a lane within its node so parallel trials do not overlap."""
    lane: dict[int, int] = {}  # index in ``spans`` -> its lane
    for node in {s.node for s in spans}:
        lanes: list[float] = []
        for i, s in sorted(((i, s) for i, s in enumerate(spans) if s.node == node), key=lambda p: p[1].start):
            for n, free_at in enumerate(lanes):
                if free_at <= s.start:
                    lanes[n] = s.end
                    lane[i] = n
                    break
            else:
                lanes.append(s.end)
                lane[i] = len(lanes) - 1
    return [dataclasses.replace(s, lane=lane[i]) for i, s in enumerate(spans)]


def _phase_seconds(r: TrialRow) -> dict[str, float]:
    """A trial's phase durations; a benchmark that failed (timed out, stalled) without its own
    ``bench_s`` (records before it was kept) spent the rest after its launch benchmarking."""
    d = {k: float(v) for k, v in (r.durations or {}).items() if isinstance(v, (int, float))}
    stalled_in = (r.startup_phases or {}).get("stalled_in")
    in_bench = r.failure_kind in BENCH_FAILURES or (r.failure_kind == "hang" and stalled_in == "benchmark")
    if in_bench and d.get("launch_s") and not d.get("bench_s") and d.get("total_s"):
        d["bench_s"] = max(0.0, d["total_s"] - sum(d.get(k, 0.0) for k in PHASE_COLORS))
    return d


def plot_timeline(rows: list[TrialRow], path: Path) -> None:
    """Start/stop of every trial per node; bars split into phases, outlined by state."""
    plt = _plt()
    spans = trial_spans(rows)
    if not spans:
        _note_figure(path, "Trial timeline", "no finished trials with start and end times yet")
        return
    spans = _lanes(spans)
    t0 = min(s.start for s in spans)
    nodes = sorted({s.node for s in spans})
    ylabels, ypos, y = [], {}, 0
    for node in nodes:
        for lane in range(1 + max(s.lane for s in spans if s.node == node)):
            ypos[(node, lane)] = y
            ylabels.append(f"{clip(node, 18)}" + (f" #{lane + 1}" if lane else ""))
            y += 1
    scale = 60.0 if max(s.end for s in spans) - t0 > 600 else 1.0
    unit = "min" if scale == 60.0 else "s"
    fig, ax = plt.subplots(figsize=(10.8 if len(spans) > 20 else 7.2, max(2.6, 0.5 * y + 1.8)))
    seen: set[str] = set()
    for s in spans:
        r, yy = s.row, ypos[(s.node, s.lane)]
        x = (s.start - t0) / scale
        width = (s.end - s.start) / scale
        cursor = x
        durations = _phase_seconds(r)
        for phase, color in PHASE_COLORS.items():
            d = durations.get(phase)
            if not d or d <= 0:
                continue
            w = min(float(d) / scale, x + width - cursor)
            if w <= 0:
                continue
            label = phase[:-2] if phase not in seen else None
            seen.add(phase)
            ax.barh(yy, w, left=cursor, height=0.6, color=color, label=label)
            cursor += w
        if cursor < x + width:
            label = "other" if "other" not in seen else None
            seen.add("other")
            ax.barh(yy, x + width - cursor, left=cursor, height=0.6, color=OTHER_COLOR, label=label)
        ax.barh(yy, width, left=x, height=0.6, fill=False, edgecolor=STATE_COLORS.get(r.state, "#000"),
                linewidth=1.5)
        ax.text(x, yy + 0.36, str(r.number), fontsize=7, va="bottom")
    ax.set_yticks(range(y))
    ax.set_yticklabels(ylabels, fontsize=8)
    ax.set_ylim(-0.6, y - 0.1)
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} since the first trial started (outline: red FAIL, blue COMPLETE, grey PRUNED)")
    ax.set_title("Trial timeline per node")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=6, fontsize=8, frameon=False)
    fig.tight_layout()
    _save(fig, path)
