"""The report's start-up part: where each trial's start-up time went, and the night's share of it.

A launch is the night's unit of cost (minutes per start on a large model), so the report says
how much of the trials' time went into starting servers, what each start spent its time on
(``TrialRow.startup_phases``, parsed from the engine's log by ``node.startup``: weights,
torch.compile with its cache hit or miss, graph capture, ...), and where a start that stalled
was. ``startup_blocks(rows)`` is the section, ``plot_startup(rows, path)`` its stacked bars
(``startup.png``).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from orchestrator.core.logs import clip
from orchestrator.core.records import FAIL, FailureKind, TrialRow
from orchestrator.results.report import document as doc
from orchestrator.results.report.document import Block
from orchestrator.results.report.plots import OTHER_COLOR, STATE_COLORS, _note_figure, _plt, _save
from orchestrator.study.evidence.history import short_params

STARTUP_PLOT = "startup.png"
# one color per phase name, the same in every report (names not listed take the next free one)
SEGMENT_COLORS = {"process start": "#aec7e8", "start-up": "#c5b0d5", "NCCL init": "#9edae5", "weights": "#1f77b4",
                  "torch.compile": "#ff7f0e", "graph capture": "#2ca02c", "profile, KV cache, warm-up": "#bcbd22",
                  "other": OTHER_COLOR}
_SPARE = ("#8c564b", "#e377c2", "#17becf", "#98df8a", "#ffbb78", "#f7b6d2")


def started(rows: list[TrialRow]) -> list[TrialRow]:
    """Launched trials with a start-up record."""
    return [r for r in rows if not r.skipped and r.cached_from is None and r.startup_phases]


def start_seconds(row: TrialRow) -> float | None:
    """Spawn -> ready, or -> the end of a start that never got ready."""
    p = row.startup_phases or {}
    value = p.get("ready_s", p.get("ended_s"))
    return float(value) if isinstance(value, (int, float)) else None


def _cache(row: TrialRow) -> str:
    return str((row.startup_phases or {}).get("compile_cache") or "-")


def startup_blocks(rows: list[TrialRow]) -> list[Block]:
    """The "Start-up" section (module docstring)."""
    mine = started(rows)
    out: list[Block] = [doc.heading(2, "Start-up")]
    if not mine:
        return out + [doc.para("No trial recorded its start-up phases (studies before issue 26 did not).")]
    starts = [s for r in mine if (s := start_seconds(r)) is not None]
    # the share: start-ups over the wall time of the same trials (a row without one of them is left out)
    paired = [(s, float(t)) for r in mine if (s := start_seconds(r)) is not None
              and isinstance(t := (r.durations or {}).get("total_s"), (int, float))]
    ran = sum(t for _, t in paired)
    share = (f" of the {ran / 60:.1f} min the trials ran ({100 * sum(s for s, _ in paired) / ran:.0f}%)"
             if ran > 0 else "")
    caches = [_cache(r) for r in mine if _cache(r) != "-"]
    cache = (f"; torch.compile cache: {caches.count('hit')} hit, {caches.count('miss')} miss"
             + (f", {caches.count('partial')} partial" if "partial" in caches else "") if caches else "")
    median = f" (median {statistics.median(starts):.0f}s from spawn to ready or failure)" if starts else ""
    out.append(doc.para(f"Starting servers took {sum(starts) / 60:.1f} min{share} over {len(starts)} launches"
                        f"{median}{cache}. "
                        "Every trial of a node keeps the engines' caches (vLLM's torch.compile cache, Triton's, "
                        "torch inductor's), so a config that differs from a measured one only in what does not "
                        "compile (NCCL variables) loads its graphs instead of compiling them."))
    stalled = [r for r in mine if r.state == FAIL and r.failure_kind == FailureKind.HANG]
    if stalled:
        out.append(doc.warn(f"{len(stalled)} launch(es) stalled (tree alive, no output for timeouts.stall): "
                            + "; ".join(f"trial {r.number} in {(r.startup_phases or {}).get('stalled_in', '?')}"
                                        for r in stalled)))
    out.append(doc.image(STARTUP_PLOT, "Start-up phases per trial"))
    table = []
    for r in mine:
        phases = r.startup_phases or {}
        segs = ", ".join(f"{name} {float(s):.0f}s" for name, s in phases.get("segments") or [])
        ready = start_seconds(r)
        where = phases.get("stalled_in") or ("" if phases.get("ready_s") is not None else phases.get("last_phase", ""))
        table.append([r.number, r.state if r.state != FAIL else f"FAIL {r.failure_kind}",
                      f"{ready:.0f}s" if ready is not None else "-", clip(segs, 200) or "-", _cache(r),
                      where or "-", f"`{clip(short_params(r.params), 80)}`"])
    out.append(doc.table(["Trial", "Outcome", "Spawn to ready", "Phases", "Compile cache", "Ended in", "Config"],
                         table))
    return out


def _colors(rows: list[TrialRow]) -> dict[str, str]:
    colors = dict(SEGMENT_COLORS)
    spare = iter(_SPARE * 4)
    for r in rows:
        for name, _ in (r.startup_phases or {}).get("segments") or []:
            if name not in colors:
                colors[name] = next(spare, OTHER_COLOR)
    return colors


def plot_startup(rows: list[TrialRow], path: Path) -> Path:
    """One stacked bar per launched trial: its start-up phases in seconds, outlined by outcome."""
    mine = [r for r in started(rows) if (r.startup_phases or {}).get("segments")]
    if not mine:
        _note_figure(path, "Start-up phases per trial", "no trial recorded its start-up phases")
        return path
    plt = _plt()
    colors = _colors(mine)
    fig, ax = plt.subplots(figsize=(7.2, max(2.6, 0.32 * len(mine) + 1.8)))
    scale = 60.0 if max(start_seconds(r) or 0.0 for r in mine) > 600 else 1.0
    seen: set[str] = set()
    for y, r in enumerate(mine):
        left = 0.0
        for name, seconds in (r.startup_phases or {}).get("segments") or []:
            width = float(seconds) / scale
            ax.barh(y, width, left=left, height=0.6, color=colors.get(name, OTHER_COLOR),
                    label=None if name in seen else name)
            seen.add(name)
            left += width
        ax.barh(y, left, height=0.6, fill=False, edgecolor=STATE_COLORS.get(r.state, "#000"), linewidth=1.2)
    ax.set_yticks(range(len(mine)))
    ax.set_yticklabels([f"#{r.number}" for r in mine], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{'min' if scale == 60.0 else 's'} from spawn to ready (or to the failure); outline: the outcome")
    ax.set_title("Start-up phases per trial")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    _save(fig, path)
    return path

