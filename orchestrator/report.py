"""The morning-after report: what won, by how much, why, what failed, how far from the ceiling.

``write_report(job)`` reads the study (``history.trial_rows``) and writes into
``job.report_dir``:

    trials.csv      one row per trial: params flattened (``param.<name>``), every scalar
                    metric (``metric.<key>``, sample lists ";"-joined), timings, failures
    history.png     decode tok/s per trial with the best-so-far line and the baseline
    params.png      tok/s per value of each parameter (box + points; failures marked)
    importance.png  which knobs mattered: share of the tok/s variance per parameter (importance.py)
    timeline.png    start/stop of every trial per node, split into launch/bench/check/
                    teardown, so overhead and idle gaps show
    report.md       headline, top configs, failures by kind, NCCL warnings, ceiling,
                    concurrency comparison (from ``compare.json`` when present), by node
    report.html     the same content, self-contained (plots embedded as base64 PNG)

The report is built once as a list of blocks and rendered to Markdown and to HTML, so the
two always say the same thing. Only rows the history module calls COMPLETE are ranked;
a config that failed the correctness gate is never "best".
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any, Protocol

from orchestrator import bans as value_bans
from orchestrator import history, outcome
from orchestrator.ceiling import ceiling_for, parse_bandwidth
from orchestrator.compare import check_constraints, closing_lines, level_verdicts, per_round, vs_best
from orchestrator.history import (
    COMPLETE,
    FAIL,
    PRUNED,
    TOP_N,
    baseline_repeats,
    baseline_row,
    best_rows,
    parse_iso,
    short_params,
)
from orchestrator.importance import (
    KnobEffect,
    effects_given_top,
    knob_effects,
    measured_points,
    sort_values,
    span_text,
)
from orchestrator.outcome import TIMEOUT_KINDS
from orchestrator.records import NOT_THE_CONFIGS_FAULT
from orchestrator.verdict import FASTER, SLOWER, WITHIN_NOISE, describe, interval_text, ratio_interval, verdict

PLOTS = ("history.png", "params.png", "importance.png", "timeline.png")

STATE_COLORS = {"COMPLETE": "#1f77b4", "FAIL": "#d62728", "PRUNED": "#7f7f7f", "RUNNING": "#ff7f0e",
                "WAITING": "#bcbd22"}
BEST_COLOR = "#2ca02c"
BASELINE_COLOR = "#9467bd"
PHASE_COLORS = {"launch_s": "#ff7f0e", "warmup_s": "#ffbb78", "bench_s": "#2ca02c", "check_s": "#17becf",
                "teardown_s": "#8c564b"}
OTHER_COLOR = "#c7c7c7"
IMPORTANCE_COLOR = "#4c72b0"  # used by no other plot: the screenshot check can tell the plots apart
FIG_DPI = 100


class ReportJob(Protocol):
    """The job fields the report reads (``orchestrator.job.Job`` has them)."""

    study: str
    storage: str
    report_dir: Path
    backend: Any  # BackendSpec(kind, settings) or a Backend instance
    env: dict[str, str]


# ---- blocks: one content model, two renderers -------------------------------------------------------
Block = tuple


def _h(level: int, text: str) -> Block:
    return ("h", level, text)


def _p(text: str) -> Block:
    return ("p", text)


def _warn(text: str) -> Block:
    return ("warn", text)


def _table(headers: list[str], rows: list[list[Any]]) -> Block:
    return ("table", headers, rows)


def _img(name: str, alt: str) -> Block:
    return ("img", name, alt)


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out.append("#" * b[1] + " " + b[2])
        elif kind == "p":
            out.append(b[1])
        elif kind == "warn":
            out.append(f"> **Warning:** {b[1]}")
        elif kind == "list":
            out.extend(f"- {item}" for item in b[1])
        elif kind == "pre":
            out.append("```\n" + b[1].rstrip("\n") + "\n```")
        elif kind == "img":
            out.append(f"![{b[2]}]({b[1]})")
        elif kind == "table":
            out.append("| " + " | ".join(_md_cell(h) for h in b[1]) + " |")
            out.append("|" + "|".join("---" for _ in b[1]) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b[2])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _inline_html(text: str) -> str:
    text = html.escape(str(text), quote=False)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1560px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;
font-size:13px;vertical-align:top}th{background:#f3f3f3}code,pre{font-family:ui-monospace,monospace;font-size:12px}
pre{background:#f6f6f6;padding:8px;overflow-x:auto}.warn{background:#fff3cd;border-left:4px solid #e0a800;padding:6px 10px}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots figure{margin:0}.plots img{max-width:none;border:1px solid #ddd}
figcaption{font-size:12px;color:#555}
"""


def render_html(blocks: list[Block], images: dict[str, bytes], title: str) -> str:
    """Self-contained HTML; consecutive images form one gallery, each shown at its natural size."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    i = 0
    while i < len(blocks):
        b = blocks[i]
        kind = b[0]
        if kind == "img":
            out.append('<div class="plots">')
            while i < len(blocks) and blocks[i][0] == "img":
                name, alt = blocks[i][1], blocks[i][2]
                data = images.get(name)
                if data is not None:
                    size = _png_size(data)
                    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
                    src = "data:image/png;base64," + base64.b64encode(data).decode()
                    out.append(f'<figure><img alt="{html.escape(alt)}" src="{src}"{dims}>'
                               f"<figcaption>{html.escape(alt)}</figcaption></figure>")
                i += 1
            out.append("</div>")
            continue
        if kind == "h":
            out.append(f"<h{b[1]}>{_inline_html(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(b[1])}</p>")
        elif kind == "warn":
            out.append(f'<p class="warn"><strong>Warning:</strong> {_inline_html(b[1])}</p>')
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in b[1]) + "</ul>")
        elif kind == "pre":
            out.append(f"<pre>{html.escape(b[1])}</pre>")
        elif kind == "table":
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in b[1])
            body = "".join("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>" for row in b[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        i += 1
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# ---- small helpers ------------------------------------------------------------------------------------
def _tok(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(s: float | None) -> str:
    return "-" if s is None else f"+-{100 * s:.1f}%"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def _clip(text: Any, width: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _noise_words(base: dict[str, Any], row: dict[str, Any]) -> str:
    """The top table's "vs baseline": faster / slower (beyond the noise of repeats), within noise,
    same config, or noise unknown (fewer than 2 repeats on a side)."""
    iv = history.row_interval(base, row)
    word = verdict(iv, same_config=row["config_key"] == base["config_key"])
    return "noise unknown" if word == WITHIN_NOISE and not iv.bounded else word


def _job_value(job: Any, *names: str) -> Any:
    """A job attribute by any of ``names``, also looked up in ``job.hardware``/``job.report``."""
    holders = [job] + [getattr(job, h, None) for h in ("hardware", "report", "ceiling")]
    for holder in holders:
        if holder is None:
            continue
        for name in names:
            value = holder.get(name) if isinstance(holder, dict) else getattr(holder, name, None)
            if value not in (None, ""):
                return value
    return None


def _diff_vs(config: dict[str, Any], base: dict[str, Any] | None) -> str:
    if base is None:
        return ""
    changes = []
    for key in sorted(set(config) | set(base)):
        if config.get(key) != base.get(key):
            name = key.split(".", 1)[1] if key.startswith(("env.", "backend.")) else key
            changes.append(f"{name} {base.get(key, '(unset)')} -> {config.get(key, '(unset)')}")
    return "; ".join(changes) if changes else "(same settings as the baseline)"


# ---- CSV ------------------------------------------------------------------------------------------------
def trials_frame(rows: list[dict[str, Any]]):
    """pandas DataFrame: one row per trial, params/metrics/timings flattened."""
    import pandas as pd

    records = []
    for r in rows:
        rec: dict[str, Any] = {
            "number": r["number"], "state": r["state"], "value": r["value"], "spread": r["spread"],
            "cv": r["cv"], "rel_ci": r["rel_ci"], "failure_kind": r["failure_kind"],
            "failure_reason": r["failure_reason"], "node": r["node"], "node_id": r["node_id"],
            "started_at": r["started_at"], "ended_at": r["ended_at"], "cached_from": r["cached_from"],
            "counted": r["counted"], "is_baseline": r["is_baseline"], "config_key": r["config_key"],
            "correctness_ok": (r["correctness"] or {}).get("ok"),
            "correctness_reason": (r["correctness"] or {}).get("reason"),
            "warnings": " | ".join(r["warnings"]), "nccl": r["nccl_summary"],
            "optuna_state": r["optuna_state"],
        }
        for k, v in sorted((r["params"] or {}).items()):
            rec[f"param.{k}"] = v
        for k, v in sorted((r["metrics"] or {}).items()):
            if isinstance(v, (list, tuple)):
                v = ";".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in v)
            elif isinstance(v, dict):
                v = json.dumps(v, sort_keys=True)
            rec[f"metric.{k}"] = v
        for k, v in sorted((r["durations"] or {}).items()):
            rec[f"timing.{k}"] = v
        records.append(rec)
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        frame = pd.DataFrame(columns=["number", "state", "value", "failure_kind", "failure_reason"])
    fixed = [c for c in frame.columns if not c.startswith(("param.", "metric.", "timing."))]
    grouped = [c for p in ("param.", "metric.", "timing.") for c in sorted(c for c in frame.columns if c.startswith(p))]
    return frame[fixed + grouped]


# ---- plots ------------------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=FIG_DPI, facecolor="white")
    _plt().close(fig)


def _note_figure(path: Path, title: str, note: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    ax.set_title(title)
    ax.text(0.5, 0.5, note, ha="center", va="center", wrap=True, fontsize=11, transform=ax.transAxes)
    ax.set_axis_off()
    _save(fig, path)


def plot_history(rows: list[dict[str, Any]], path: Path) -> None:
    """tok/s per trial; FAILs at 0 (x), PRUNED grey, best-so-far line, baseline dashed."""
    plt = _plt()
    eligible = {r["number"] for r in outcome.rankable(rows)}
    rows = [r for r in rows if not r.get("skipped")]  # proposals never launched are not trials
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    cached = [(r["number"], r["value"]) for r in rows if r["state"] == COMPLETE and r["cached_from"] is not None]
    if cached:
        ax.scatter(*zip(*cached), marker="o", facecolors="none", edgecolors=STATE_COLORS[COMPLETE], s=36,
                   label="answered from cache", zorder=3)
    for state, marker in ((COMPLETE, "o"), (PRUNED, "v"), (FAIL, "x")):
        pts = [(r["number"], r["value"] if state == COMPLETE else (r["metrics"] or {}).get("decode_tok_s") or 0.0)
               for r in rows if r["state"] == state and r["cached_from"] is None]
        if state == COMPLETE:
            bad = [(n, v) for n, v in pts if n not in eligible]
            pts = [(n, v) for n, v in pts if n in eligible]
            if bad:
                ax.scatter(*zip(*bad), marker="o", facecolors="none", edgecolors=STATE_COLORS[FAIL], s=36,
                           label="never best (wrong output)")
        if pts:
            kw = {"s": 36, "label": state}
            if marker != "x":
                kw["edgecolors"] = "none"
            ax.scatter(*zip(*pts), marker=marker, color=STATE_COLORS[state], zorder=3, **kw)
    best_x, best_y, best = [], [], None
    for r in rows:
        if r["state"] not in (COMPLETE, FAIL, PRUNED):
            continue
        if r["number"] in eligible and (best is None or r["value"] > best):
            best = r["value"]
        if best is not None:
            best_x.append(r["number"])
            best_y.append(best)
    if best_x:
        ax.step(best_x, best_y, where="post", color=BEST_COLOR, linewidth=2.5, label="best so far", zorder=2)
    base = baseline_row(rows)
    if base and base["value"] is not None:
        ax.axhline(base["value"], color=BASELINE_COLOR, linestyle="--", linewidth=1.5,
                   label=f"baseline ({base['value']:.1f})")
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


def _param_names(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({k for r in rows for k in (r["params"] or {})}, key=lambda k: history._param_order((k, None)))


def plot_params(rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per parameter: tok/s of COMPLETE trials per value (box + points), failures at 0."""
    plt = _plt()
    names = _param_names(rows)
    if not names:
        _note_figure(path, "tok/s per parameter value", "no parameters recorded yet")
        return
    ncols = min(3, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.2 if ncols < 3 else 10.8, 2.9 * nrows), squeeze=False)
    eligible = {r["number"] for r in outcome.rankable(rows)}
    rows = [r for r in rows if not r.get("skipped")]  # proposals never launched are not trials
    for ax, name in zip(axes.flat, names):
        values = sort_values({r["params"].get(name) for r in rows if name in (r["params"] or {})})
        groups, fails = [], []
        for v in values:
            groups.append([r["value"] for r in rows if r["number"] in eligible and r["cached_from"] is None
                           and r["params"].get(name, object()) == v])
            fails.append(sum(1 for r in rows if r["state"] == FAIL and r["counted"]  # the config's own failures
                             and r["params"].get(name, object()) == v))
        pos = list(range(1, len(values) + 1))
        filled = [(p, g) for p, g in zip(pos, groups) if g]
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
        ax.set_xticklabels([_clip(str(v), 10) for v in values], fontsize=8, rotation=30 if len(values) > 4 else 0)
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
    ax.set_xlabel("share of the tok/s variance explained by the parameter alone")
    ax.set_title("Which knobs mattered")
    ax.set_xlim(0, 1.0)
    ax.grid(alpha=0.3, axis="x")
    if notes:
        fig.text(0.01, 0.01, _clip("; ".join(notes), 120), fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.04 if notes else 0, 1, 1))
    _save(fig, path)


def _short(name: str) -> str:
    return name.split(".", 1)[1] if name.startswith(("env.", "backend.")) else name


def _spans(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        start, end = parse_iso(r["started_at"]), parse_iso(r["ended_at"])
        if start is None or r.get("skipped") or r["cached_from"] is not None:  # never launched
            continue
        if end is None or end < start:
            total = (r["durations"] or {}).get("total_s")
            end = start + float(total) if total else None
        if end is None:
            continue
        out.append({"row": r, "start": start, "end": end, "node": r["node"] or "unknown"})
    return out


def _lanes(spans: list[dict[str, Any]]) -> None:
    """Assign each span a lane within its node so parallel trials do not overlap."""
    for node in {s["node"] for s in spans}:
        lanes: list[float] = []
        for s in sorted((s for s in spans if s["node"] == node), key=lambda s: s["start"]):
            for i, free_at in enumerate(lanes):
                if free_at <= s["start"]:
                    lanes[i] = s["end"]
                    s["lane"] = i
                    break
            else:
                lanes.append(s["end"])
                s["lane"] = len(lanes) - 1


def plot_timeline(rows: list[dict[str, Any]], path: Path) -> None:
    """Start/stop of every trial per node; bars split into phases, outlined by state."""
    plt = _plt()
    spans = _spans(rows)
    if not spans:
        _note_figure(path, "Trial timeline", "no finished trials with start and end times yet")
        return
    _lanes(spans)
    t0 = min(s["start"] for s in spans)
    nodes = sorted({s["node"] for s in spans})
    ylabels, ypos, y = [], {}, 0
    for node in nodes:
        for lane in range(1 + max(s["lane"] for s in spans if s["node"] == node)):
            ypos[(node, lane)] = y
            ylabels.append(f"{_clip(node, 18)}" + (f" #{lane + 1}" if lane else ""))
            y += 1
    scale = 60.0 if max(s["end"] for s in spans) - t0 > 600 else 1.0
    unit = "min" if scale == 60.0 else "s"
    fig, ax = plt.subplots(figsize=(10.8 if len(spans) > 20 else 7.2, max(2.6, 0.5 * y + 1.8)))
    seen: set[str] = set()
    for s in spans:
        r, yy = s["row"], ypos[(s["node"], s["lane"])]
        x = (s["start"] - t0) / scale
        width = (s["end"] - s["start"]) / scale
        cursor = x
        for phase, color in PHASE_COLORS.items():
            d = (r["durations"] or {}).get(phase)
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
        ax.barh(yy, width, left=x, height=0.6, fill=False, edgecolor=STATE_COLORS.get(r["state"], "#000"),
                linewidth=1.5)
        ax.text(x, yy + 0.36, str(r["number"]), fontsize=7, va="bottom")
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


# ---- report sections ---------------------------------------------------------------------------------------
def _headline(rows, best, base) -> list[Block]:
    out: list[Block] = [_h(2, "Headline")]
    if not rows:
        return out + [_p("The study has no trials yet.")]
    if not best:
        return out + [_warn("No trial completed and passed the correctness gate: there is no best config.")]
    b = best[0]
    base_ok = base is not None and base["state"] == COMPLETE and base["value"] is not None
    if base_ok and b["config_key"] == base["config_key"]:
        out.append(_p(f"**The baseline (trial {base['number']}) is the best config found: "
                      f"{b['value']:.2f} tok/s ({_pct(b['spread'])}).** No other config beat it."))
    elif base_ok:
        ratio = b["value"] / base["value"]
        iv = history.row_interval(base, b)
        word = verdict(iv)
        if word in (FASTER, SLOWER):
            noise = f"The difference is beyond the noise of repeats ({interval_text(iv)})."
        elif iv.bounded:
            noise = f"The difference is within the noise of repeats ({interval_text(iv)}): treat the two as equal."
        else:
            noise = f"Too few repeats to tell whether this exceeds noise ({interval_text(iv)})."
        out.append(_p(f"**Best: trial {b['number']}, {b['value']:.2f} tok/s ({_pct(b['spread'])}), "
                      f"{ratio:.2f}x the baseline** (trial {base['number']}, {base['value']:.2f} tok/s, "
                      f"{_pct(base['spread'])}). {noise}"))
    else:
        why = (f"{base['state']}" + (f" ({base['failure_kind']}: {_clip(base['failure_reason'], 120)})"
                                     if base and base["failure_kind"] else "")) if base else "missing"
        out.append(_p(f"**Best: trial {b['number']}, {b['value']:.2f} tok/s ({_pct(b['spread'])}).** "
                      f"No ratio: the baseline is {why}."))
    out.append(_p(f"Best config: `{short_params(b['params']) or '(backend defaults)'}`"))
    if base is not None and b["config_key"] != base["config_key"]:
        out.append(_p(f"Changed from the baseline: {_diff_vs(b['params'], base['params'])}"))
    if b.get("n_measurements", 1) > 1:
        out.append(_p(f"Measured in {b['n_measurements']} trials; the median measurement is shown."))
    if b["warnings"]:
        out.append(_warn("the best config's NCCL settings could not be verified: " + "; ".join(b["warnings"])))
    return out


def _summary(rows) -> list[Block]:
    counts: dict[str, int] = {}
    for r in rows:
        if not r.get("skipped"):  # proposals never launched are not trials
            counts[r["state"]] = counts.get(r["state"], 0) + 1
    cached = sum(1 for r in rows if r["cached_from"] is not None)
    counted = sum(1 for r in rows if r["counted"])
    skipped = sum(1 for r in rows if r.get("skipped"))
    items = [", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials",
             f"{counted} count toward the budget; {cached} answered from the cache of measured configs"
             + (f"; {skipped} proposals never launched (infeasible or duplicate; not trials)" if skipped else "")]
    spans = _spans(rows)
    if spans:
        wall = max(s["end"] for s in spans) - min(s["start"] for s in spans)
        busy = sum(s["end"] - s["start"] for s in spans)
        launch = sum(float((s["row"]["durations"] or {}).get("launch_s") or 0) for s in spans)
        teardown = sum(float((s["row"]["durations"] or {}).get("teardown_s") or 0) for s in spans)
        bench = sum(float((s["row"]["durations"] or {}).get("bench_s") or 0) for s in spans)
        items.append(f"wall clock {wall / 60:.1f} min; trials busy {busy / 60:.1f} min; "
                     f"server start {launch / 60:.1f} min, teardown {teardown / 60:.1f} min, "
                     f"benchmark {bench / 60:.1f} min ({100 * bench / busy if busy else 0:.0f}% of trial time)")
        gaps = _idle_gaps(spans)
        if gaps:
            items.append("idle between trials: " + ", ".join(f"{n} {g:.0f}s" for n, g in sorted(gaps.items())))
    return [_h(2, "Summary"), ("list", items)]


def _idle_gaps(spans) -> dict[str, float]:
    out = {}
    for node in {s["node"] for s in spans}:
        mine = sorted((s for s in spans if s["node"] == node), key=lambda s: s["start"])
        idle, last_end = 0.0, None
        for s in mine:
            if last_end is not None and s["start"] > last_end:
                idle += s["start"] - last_end
            last_end = s["end"] if last_end is None else max(last_end, s["end"])
        out[node] = idle
    return out


def _top_table(rows, best, base) -> list[Block]:
    if not best:
        return []
    base_v = base["value"] if base and base["state"] == COMPLETE else None
    table = []
    for i, r in enumerate(best, 1):
        table.append([i, r["number"], _tok(r["value"]), _pct(r["spread"]), _ratio(r["value"], base_v),
                      _noise_words(base, r) if base_v else "-", r.get("n_measurements", 1),
                      f"`{short_params(r['params'])}`" + (" (baseline)" if base and r["config_key"] == base["config_key"] else "")])
    return [_h(2, f"Top {len(best)} configs"),
            _table(["Rank", "Trial", "tok/s", "Spread", "x baseline", "vs baseline", "Measured", "Config"], table)
            ] + _ties_with_best(best)


def _ties_with_best(best: list[dict[str, Any]]) -> list[Block]:
    """Which runners-up the single-request objective cannot tell from the best, and in what
    they differ: the user picks among them by what the objective does not see (concurrency)."""
    top, ties = best[0], history.ties_with_best(best)
    if not ties:
        return []
    differ = sorted({k for r in ties for k in set(r["params"]) | set(top["params"])
                     if r["params"].get(k) != top["params"].get(k)}, key=lambda k: history._param_order((k, None)))
    return [_p(f"Within the noise of the best (trial {top['number']}): trial(s) "
               f"{', '.join(str(r['number']) for r in ties)} ({_tok(min(r['value'] for r in ties))}-"
               f"{_tok(max(r['value'] for r in ties))} tok/s), differing from it in {', '.join(differ)}. "
               "Single-request decode cannot rank them: choose by the concurrency you serve "
               "(`ncclsweep compare JOB --also ties` measures them beside the best).")]


def _failures(rows) -> list[Block]:
    failed = [r for r in rows if r["state"] == FAIL]
    pruned = [r for r in rows if r["state"] == PRUNED and not r.get("skipped")]
    if not failed and not pruned:
        return [_h(2, "Failures"), _p("No trial failed.")]
    out: list[Block] = [_h(2, "Failures")]
    kinds: dict[str, list] = {}
    for r in failed:
        kinds.setdefault(r["failure_kind"] or "unrecorded", []).append(r)
    if kinds:
        out.append(_p("By kind: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(kinds.items()))
                      + ". Configs that failed by their own fault are never proposed again and never"
                      " ranked; `interrupted`/`node-lost`/`env-error` and a config's first timeout are not"
                      " (yet) the config's fault: never cached or banned, re-queued once."))
    else:
        out.append(_p("No trial failed; the trials below were stopped early."))
    for kind, members in sorted(kinds.items()):
        fault = (" (not the config's fault)" if kind in NOT_THE_CONFIGS_FAULT else
                 " (a first timeout is re-queued once)" if kind in TIMEOUT_KINDS else "")
        out.append(_h(3, f"{kind}: {len(members)} trial(s){fault}"))
        out.append(_table(["Trial", "Node", "Config", "Reason"],
                          [[r["number"], r["node"] or "-", f"`{short_params(r['params'])}`",
                            _clip(r["failure_reason"], 300)] for r in members]))
        last = next((r for r in reversed(members) if r["log_tail"]), None)
        if last is not None:
            tail = "\n".join(last["log_tail"].splitlines()[-12:])
            out.append(_p(f"Server log tail of trial {last['number']}:"))
            out.append(("pre", tail))
    if pruned:
        out.append(_h(3, f"pruned: {len(pruned)} trial(s) (stopped early as clearly worse)"))
        out.append(_table(["Trial", "Config", "First sample tok/s", "Reason"],
                          [[r["number"], f"`{short_params(r['params'])}`",
                            _tok((r["metrics"] or {}).get("decode_tok_s")), _clip(r["failure_reason"] or "", 200)]
                           for r in pruned]))
    banned = value_bans.banned_values(rows)
    if banned:
        out.append(_h(3, f"values not proposed any more: {len(banned)}"))
        out.append(_p("Each crashed servers at start in every launch that carried it, for a reason the log "
                      "attributes to it; the study stopped proposing it."))
        out.append(_table(["Value", "Why"], [[f"`{value_bans.describe(pair)}`", _clip(why, 300)]
                                             for pair, why in sorted(banned.items(), key=lambda kv: str(kv[0]))]))
    return out


def _nccl_warnings(rows, best) -> list[Block]:
    flagged = [r for r in rows if r["warnings"]]
    out: list[Block] = [_h(2, "NCCL verification")]
    if not flagged:
        versions = sorted({str(r["nccl"].get("version")) for r in rows if (r["nccl"] or {}).get("version")})
        seen = f" (NCCL {', '.join(versions)})" if versions else ""
        return out + [_p(f"No warnings: every requested NCCL setting was confirmed in the logs where NCCL ran{seen}.")]
    best_keys = {b["config_key"] for b in best[:1]}
    table = []
    for r in flagged:
        tag = " **(best config)**" if r["config_key"] in best_keys else ""
        for w in r["warnings"]:
            table.append([f"{r['number']}{tag}", r["state"], _clip(w, 300)])
    return out + [_table(["Trial", "State", "Warning"], table)]


def _resolve_bandwidth(job, rows, best, bandwidth_bytes_s) -> tuple[float | None, str]:
    if bandwidth_bytes_s:
        return float(bandwidth_bytes_s), "given"
    declared = _job_value(job, "memory_bandwidth_bytes_s", "memory_bandwidth", "mem_bandwidth", "bandwidth")
    if declared is not None:
        try:
            return parse_bandwidth(declared), "declared in the job"
        except ValueError:
            pass
    for r in best[:1] + rows:
        for key in ("memory_bandwidth_bytes_s", "mem_bandwidth_bytes_s"):
            v = (r.get("node_info") or {}).get(key)
            if v:
                return float(v), f"measured on {r['node'] or 'the node'}"
    return None, ""


def _resolve_latency(job, best, allreduce_latency_s, report_dir: Path) -> tuple[float | None, str]:
    """(all-reduce latency in s, where it came from): given, declared, stored, pre-screened."""
    if allreduce_latency_s is not None:
        return float(allreduce_latency_s), "given"
    declared = _job_value(job, "allreduce_latency_s")
    if declared is not None:
        return float(declared), "declared in the job"
    declared_us = _job_value(job, "allreduce_latency_us")
    if declared_us is not None:
        return float(declared_us) * 1e-6, "declared in the job"
    for r in best[:1]:
        for src in (r.get("nccl") or {}, r.get("node_info") or {}, r.get("metrics") or {}):
            if src.get("allreduce_latency_s") is not None:
                return float(src["allreduce_latency_s"]), "measured"
            if src.get("allreduce_latency_us") is not None:
                return float(src["allreduce_latency_us"]) * 1e-6, "measured"
    if best:
        return _prescreened_latency(report_dir / "prescreen.json", best[0]["params"])
    return None, ""


def _prescreened_latency(path: Path, params: dict[str, Any]) -> tuple[float | None, str]:
    """The latency `ncclsweep prescreen` measured for the best config's NCCL setting."""
    data = load_compare(path) or {}
    for row in data.get("rows") or []:
        setting = {k: v for k, v in row.items() if k == "tp_size" or k.startswith("env.")}
        if row.get("ok") and setting and all(str(params.get(k)) == str(v) for k, v in setting.items()):
            return float(row["latency_us"]) * 1e-6, "measured by `ncclsweep prescreen` for this setting"
    return None, ""


def _ceiling(job, rows, best, backend, bandwidth_bytes_s, allreduce_latency_s,
             report_dir: Path) -> tuple[list[Block], dict | None]:
    out: list[Block] = [_h(2, "Ceiling")]
    facts: dict[str, Any] = {}
    if backend is not None:
        try:
            facts = dict(backend.model_facts() or {})
        except Exception:  # noqa: BLE001 - facts are optional
            facts = {}
    bw, bw_source = _resolve_bandwidth(job, rows, best, bandwidth_bytes_s)
    if not best:
        return out + [_p("No completed trial to compare with a ceiling.")], None
    b = best[0]
    tp = b["params"].get("tp_size", 1)
    try:
        tp = max(1, int(tp))
    except (TypeError, ValueError):
        tp = 1
    if not facts.get("bytes_per_token") or not bw:
        missing = [m for m, ok in (("the model's bytes read per decoded token (backend model facts)",
                                    facts.get("bytes_per_token")), ("the GPUs' memory bandwidth", bw)) if not ok]
        return out + [_p("Not computed: " + " and ".join(missing) + (" are" if len(missing) > 1 else " is") + " unknown. "
                         "Declare the GPUs' memory bandwidth in the job (`memory_bandwidth`, e.g. `4.8 TB/s`) "
                         "to get it.")], None
    latency, latency_source = _resolve_latency(job, best, allreduce_latency_s, report_dir)
    c = ceiling_for(facts, bw, tp=tp, allreduce_latency_s=latency)
    frac = b["value"] / c["ceiling_tok_s"]
    c["best_fraction"] = frac
    lines = [
        f"**Single-request decode ceiling at TP={tp}: {c['ceiling_tok_s']:.2f} tok/s** "
        f"({1e3 * c['time_per_token_s']:.3f} ms per token).",
        f"Memory: {facts['bytes_per_token'] / 1e9:.3f} GB read per token / {tp} GPU(s) / "
        f"{bw / 1e9:.0f} GB/s ({bw_source}) = {1e3 * c['memory_s']:.3f} ms.",
    ]
    if tp > 1 and latency is not None:
        lines.append(f"Communication: {c['allreduces_per_step']} all-reduces per step x {1e6 * latency:.1f} us "
                     f"({latency_source}) = {1e3 * c['comm_s']:.3f} ms.")
    elif tp > 1:
        lines.append(f"Communication: {c['allreduces_per_step']} all-reduces per step at unknown latency: not "
                     "included, so this ceiling is optimistic.")
    lines.append(f"**The best config reaches {100 * frac:.0f}% of the ceiling** ({b['value']:.2f} tok/s).")
    if frac > 1.05:
        lines.append("It exceeds the ceiling: the declared bandwidth or the model facts are wrong.")
    return out + [("list", lines)], c


def load_compare(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _by_conc(mapping: Any) -> dict[str, float]:
    if isinstance(mapping, dict):
        return {str(k): float(v) for k, v in mapping.items() if v is not None}
    return {}


def _compare(report_dir: Path) -> list[Block]:
    data = load_compare(report_dir / "compare.json")
    if data is None:
        return []
    out: list[Block] = [_h(2, "Concurrency comparison (total output tok/s)")]
    base, best = _by_conc(data.get("baseline")), _by_conc(data.get("best"))
    others = [o for o in data.get("others") or [] if isinstance(o, dict)]
    levels = [str(c) for c in (data.get("concurrency") or sorted({*base, *best}, key=lambda x: float(x)))]
    data = {**data, "concurrency": levels}
    verdicts = level_verdicts(data)  # recomputed from the rounds: today's rule, whatever wrote the file
    ranges: dict[tuple[str, str], list[float]] = {}
    for which in ("baseline", "best"):
        for c in levels:
            vals = [v for v in per_round(data, which, c).values() if v]
            if not vals:
                vals = [float(v) for v in ((data.get(f"{which}_samples") or {}).get(c) or []) if v is not None]
            ranges[(which, c)] = vals
    table = []
    for c in levels:
        bv, wv = base.get(c), best.get(c)
        cell = verdicts[c]["text"] if bv and wv is not None else "-"
        if verdicts[c]["verdict"] == SLOWER:
            cell = f"**{cell}**"

        def fmt(which, v):
            if v is None:
                return "-"
            rng = ranges.get((which, c))
            extra = f" ({min(rng):.1f}-{max(rng):.1f}, {len(rng)} rounds)" if rng and len(rng) > 1 else ""
            return f"{v:.1f} tok/s{extra}"

        other_cells = [vs_best(_by_conc(o.get("median")).get(c), (o.get("vs_best") or {}).get(c))
                       if c in (o.get("median") or {}) else "-" for o in others]
        table.append([c, fmt("baseline", bv), fmt("best", wv), cell] + other_cells)
    out.append(_table(["Concurrency", "baseline", "best", "Improvement"]
                      + [f"trial {o.get('trial')}" for o in others], table))
    if others:
        out.append(_p("Other trials (`ncclsweep compare --also`): total tok/s and the ratio to the best at "
                      "the same concurrency, measured in the same rounds. "
                      + " ".join(f"Trial {o.get('trial')}: `{short_params(o.get('params'))}`." for o in others)))
    for kind, text in closing_lines(data, verdicts):
        out.append(_warn(text) if kind == "warn" else _p(text))
    saved = [r for r in data.get("constraints") or [] if isinstance(r, dict) and r.get("concurrency") is not None]
    rules = check_constraints([(int(r["concurrency"]), float(r["min_ratio"])) for r in saved], data)  # today's rule
    for rule in rules:
        ratio = rule.get("ratio")
        shown = ("not measured" if ratio is None
                 else f"{ratio:.2f}x" + (f" ({rule['text']})" if rule.get("text") else ""))
        line = (f"constraint: at concurrency {rule.get('concurrency')} the best must reach "
                f"{rule.get('min_ratio')}x the baseline; measured {shown}")
        state = rule.get("state") or ("ok" if rule.get("ok") else "VIOLATED")
        out.append(_warn(line + ": VIOLATED.") if rule.get("ok") is False else _p(f"{line}: {state}."))
    for failure in data.get("failures") or []:
        out.append(_warn(f"failed requests during compare: {_clip(failure, 300)}"))
    if data.get("complete") is False:
        out.append(_warn(f"compare stopped after {data.get('rounds_done', 0)} of {data.get('rounds_planned')} rounds"
                         + (f" ({_clip(data['stopped'], 200)})" if data.get("stopped") else "")
                         + ": the table shows the finished launches only."))
    trials = ""
    if data.get("baseline_trial") is not None and data.get("best_trial") is not None:
        trials = f" (baseline trial {data['baseline_trial']}, best trial {data['best_trial']})"
    out.append(_p(f"Baseline and best were relaunched in rounds, in alternating order{trials}, so drift and a "
                  "lucky launch show; values are medians over rounds, and a ratio is called faster or slower "
                  "only when its confidence interval from the per-round ratios excludes 1.0."))
    return out


def _by_node(rows) -> list[Block]:
    nodes = sorted({r["node"] for r in rows if r["node"] and r["started_at"]})
    if len(nodes) < 2:
        return []
    reps = baseline_repeats(rows)
    per_node: dict[str, tuple[float, float | None, int]] = {}
    samples: dict[str, list[float]] = {}
    for node in nodes:
        mine = [r for r in reps if r["node"] == node]
        if mine:
            spreads = [r["spread"] for r in mine if r["spread"] is not None]
            per_node[node] = (statistics.median(r["value"] for r in mine),
                              statistics.median(spreads) if spreads else None, len(mine))
            samples[node] = [v for r in mine for v in history.decode_samples(r)]
    table = []
    rankable = {r["number"] for r in outcome.rankable(rows)}
    for node in nodes:
        mine = [r for r in rows if r["node"] == node and r["cached_from"] is None]
        done = [r for r in mine if r["state"] == COMPLETE]
        base = per_node.get(node)
        table.append([node, len(mine), len(done), sum(1 for r in mine if r["state"] == FAIL),
                      _tok(max((r["value"] for r in done if r["number"] in rankable), default=None)),
                      f"{base[0]:.2f} {_pct(base[1])} (n={base[2]})" if base else "not measured here"])
    out: list[Block] = [_h(2, "By node"),
                        _table(["Node", "Trials", "COMPLETE", "FAIL", "Best tok/s", "Baseline repeats"], table)]
    flagged = []
    if len(per_node) >= 2:
        ref_node = max(per_node, key=lambda n: per_node[n][2])
        ref = per_node[ref_node]
        for node, (v, _s, _n) in per_node.items():
            iv = ratio_interval(samples[ref_node], samples[node])
            if node != ref_node and verdict(iv) in (FASTER, SLOWER):
                flagged.append(f"node {node}'s baseline ({v:.2f} tok/s) differs from {ref_node}'s "
                               f"({ref[0]:.2f} tok/s) beyond noise ({describe(iv)}): results from the two "
                               "nodes are not comparable")
    for f in flagged:
        out.append(_warn(f))
    missing = [n for n in nodes if n not in per_node]
    if missing and per_node:
        out.append(_p("The baseline was not repeated on " + ", ".join(missing)
                      + ", so those nodes cannot be checked against it."))
    elif not flagged and len(per_node) >= 2:
        out.append(_p("Baseline repeats agree across nodes within noise."))
    return out


def _importance_blocks(effects: list[KnobEffect], notes: list[str],
                       given: tuple[str, Any, list[KnobEffect], list[float]] | None = None,
                       values: list[float] | None = None) -> list[Block]:
    out: list[Block] = [_h(2, "Which knobs mattered")]
    if effects:
        out.append(_p("Share of the variance in tok/s that each parameter explains on its own (one-way "
                      "analysis of variance over the measured trials), and the mean tok/s of each value"
                      + (f"; {span_text(values)}." if values else ".")))
        out.append(_effects_table(effects))
    for n in notes:
        out.append(_p(n))
    if given is not None:
        name, value, others, sub_values = given
        out.append(_p(f"Among the {len(sub_values)} trials with {name}={_fmt_value(value)}, as in the best "
                      f"config ({span_text(sub_values)}):"))
        out.append(_effects_table(others))
    return out


def _effects_table(effects: list[KnobEffect]) -> Block:
    rows = []
    for e in effects:
        by_value = ", ".join(f"{_fmt_value(v)}: {m:.1f} ({e.counts[v]})" for v, m in e.means.items())
        scope = f"{e.trials} where it applies" if e.conditional else f"all {e.trials}"
        rows.append([e.name, f"{e.share:.0%}", by_value, scope])
    return _table(["Parameter", "Explains", "Mean tok/s by value (trials)", "Trials"], rows)


def _fmt_value(v: Any) -> str:
    return str(int(v)) if isinstance(v, bool) else str(v)


def build_blocks(job: Any, rows: list[dict[str, Any]], report_dir: Path, backend: Any = None,
                 bandwidth_bytes_s: float | None = None, allreduce_latency_s: float | None = None,
                 importance: tuple[list[KnobEffect], list[str]] | None = None) -> tuple[list[Block], dict]:
    """The report's content (blocks) and a summary dict (best, baseline, ceiling, ...)."""
    best = best_rows(rows, TOP_N)
    base = baseline_row(rows)
    effects, notes = importance if importance is not None else knob_effects(rows)
    title = f"ncclsweep report: {getattr(job, 'study', '?')}"
    blocks: list[Block] = [_h(1, title)]
    kind = getattr(getattr(job, "backend", None), "kind", None) or getattr(backend, "kind", None)
    blocks.append(_p(f"Study `{getattr(job, 'study', '?')}` in `{getattr(job, 'storage', '?')}`"
                     + (f", backend {kind}" if kind else "")
                     + f". Open it interactively with `{history.dashboard_command(getattr(job, 'storage', ''))}`."))
    blocks += _headline(rows, best, base)
    blocks += _summary(rows)
    blocks += [_h(2, "Plots")] + [_img(name, alt) for name, alt in (
        ("history.png", "Optimization history"), ("params.png", "tok/s per parameter value"),
        ("importance.png", "Parameter importance"), ("timeline.png", "Trial timeline per node"))]
    blocks += _top_table(rows, best, base)
    given = effects_given_top(rows, effects, best[0]["params"]) if best else None
    blocks += _importance_blocks(effects, notes, given, [v for _, v, _ in measured_points(rows)])
    blocks += _compare(report_dir)
    ceiling_blocks, ceiling = _ceiling(job, rows, best, backend, bandwidth_bytes_s, allreduce_latency_s,
                                       Path(report_dir))
    blocks += ceiling_blocks
    blocks += _failures(rows)
    blocks += _nccl_warnings(rows, best)
    blocks += _by_node(rows)
    blocks += [_p("Files: `trials.csv` (one row per trial), the PNG plots, `report.md`, `report.html`.")]
    summary = {"best": best[0] if best else None, "baseline": base, "ceiling": ceiling,
               "importance": {e.name: e.share for e in effects if not e.conditional}}
    return blocks, summary


def write_report(job: ReportJob, out_dir: str | Path | None = None, *, backend: Any = None,
                 bandwidth_bytes_s: float | None = None, allreduce_latency_s: float | None = None,
                 study: Any = None, rows: list[dict[str, Any]] | None = None) -> list[Path]:
    """Write the report files into ``out_dir`` (default ``job.report_dir``); returns their paths.

    ``bandwidth_bytes_s``/``allreduce_latency_s`` override what the job declares or the trials
    measured; ``study``/``rows`` skip loading the study from ``job.storage``.
    """
    from orchestrator.export import resolve_backend

    report_dir = Path(out_dir if out_dir is not None else job.report_dir)
    if rows is None:  # before any folder is made: no study, no empty report folder
        rows = history.trial_rows(study if study is not None else history.load_study(job))
    report_dir.mkdir(parents=True, exist_ok=True)
    backend = resolve_backend(job, backend)
    written: list[Path] = []

    csv_path = report_dir / "trials.csv"
    trials_frame(rows).to_csv(csv_path, index=False)
    written.append(csv_path)

    effects, notes = knob_effects(rows)
    plot_history(rows, report_dir / "history.png")
    plot_params(rows, report_dir / "params.png")
    plot_importance(effects, notes, report_dir / "importance.png")
    plot_timeline(rows, report_dir / "timeline.png")
    written += [report_dir / name for name in PLOTS]

    blocks, _summary_dict = build_blocks(job, rows, report_dir, backend, bandwidth_bytes_s, allreduce_latency_s,
                                         importance=(effects, notes))
    md_path = report_dir / "report.md"
    md_path.write_text(render_markdown(blocks))
    images = {name: (report_dir / name).read_bytes() for name in PLOTS}
    html_path = report_dir / "report.html"
    html_path.write_text(render_html(blocks, images, f"ncclsweep report: {getattr(job, 'study', '')}"))
    written += [md_path, html_path]
    return written
