"""What the report says: its sections, built as blocks (``report.document``) from the rows.

``build_blocks`` is the whole report: headline (best vs baseline over every launch of each,
beyond the launch noise or not, where a fresh launch should measure, the race, fresh launches
of ``compare``, launches under very different load), launch noise and the race (the noise per
level, the relaunches in time order, the race's rounds), the plan (an objective over several
concurrency levels: per level the best config, its ratio to the baseline and the best-at-1's
there, the Pareto set and plot, the mix, ``compare --plan``'s relaunched rounds), summary
(counts, where the time went), the plots, the top configs and the runners-up within noise,
which knobs mattered, the concurrency comparison (from ``compare.json`` when present), the
ceiling, failures by kind, NCCL verification, and by node. Only rows ``outcome.rankable``
allows are ranked; a config that failed the correctness gate is never "best".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from orchestrator.backends import allreduce, speculative
from orchestrator.core import outcome, prescreened
from orchestrator.core.ceiling import ceiling_for, parse_bandwidth, speculative_ceiling
from orchestrator.core.golden_check import disputed
from orchestrator.core.logs import clip
from orchestrator.core.nccl import is_verification_warning
from orchestrator.core.outcome import TIMEOUT_KINDS
from orchestrator.core.records import NOT_THE_CONFIGS_FAULT, TrialRow
from orchestrator.core.study_dir import StudyDir
from orchestrator.core.verdict import (
    FASTER,
    NOT_SHOWN,
    SLOWER,
    WITHIN_NOISE,
    describe,
    estimate_text,
    interval_text,
    ratio_interval,
    ratio_text,
    verdict,
    why_unbounded,
)
from orchestrator.results import compare_file
from orchestrator.results.compare import closing_lines, plan_closing_lines, plan_table_rows, vs_best
from orchestrator.results.compare_file import BASELINE, BEST
from orchestrator.results.importance import (
    KnobEffect,
    effects_given_top,
    knob_effects,
    measured_points,
    span_text,
)
from orchestrator.results.report import document as doc
from orchestrator.results.report import latency
from orchestrator.results.report.document import Block
from orchestrator.results.report.plots import Span, trial_spans
from orchestrator.results.report.startup import startup_blocks
from orchestrator.study.evidence import bans as value_bans
from orchestrator.study.evidence import history
from orchestrator.study.evidence.history import (
    COMPLETE,
    FAIL,
    PRUNED,
    TOP_N,
    baseline_repeats,
    baseline_row,
    best_rows,
    short_params,
)
from orchestrator.study.evidence.launches import COMPARE, HEADLINE, Evidence, load_note
from orchestrator.study.evidence.plan import Plan, fmt, fresh_text, launches_text
from orchestrator.study.model import coverage
from orchestrator.study.search import race as races
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage import storage


class ReportJob(Protocol):
    """The job fields the report reads (``orchestrator.config.job.Job`` has them)."""

    study: str
    storage: str
    report_dir: Path
    backend: Any  # BackendSpec(kind, settings) or a Backend instance
    env: dict[str, str]


def _tok(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(s: float | None) -> str:
    return "-" if s is None else f"+-{100 * s:.1f}%"


def _noise_words(base: TrialRow, row: TrialRow, ev: Evidence, level: int) -> str:
    """The top table's "vs baseline": faster / slower (beyond the launch noise), within noise,
    same config, or not shown and why (no interval: the launch noise unknown, say)."""
    iv = history.row_interval(base, row, ev, level)
    word = verdict(iv, same_config=row.config_key == base.config_key)
    if word == NOT_SHOWN:  # the headline gives the whole reason; a cell, its gist
        return f"{NOT_SHOWN}: launch noise unknown" if iv.noise is not None and not iv.noise.known else \
            f"{NOT_SHOWN}: {why_unbounded(iv)}"
    return word


def _x_baseline(base: TrialRow | None, row: TrialRow, ev: Evidence, level: int) -> str:
    """The top table's "x baseline": the estimate of the interval the "vs baseline" column judges."""
    if base is None:
        return "-"
    iv = history.row_interval(base, row, ev, level)
    return ratio_text(iv) if iv.ratio is not None else "-"


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


def _headline(rows, best, base, ev: Evidence, level: int, objective: Any = None) -> list[Block]:
    """The best against the baseline, each a figure over every launch of it (``study.launches``):
    its trials, the relaunches, the race and ``compare``'s fresh launches; the interval carries the
    launch noise, and the race (``study.race``) says whether the finalists were told apart."""
    out: list[Block] = [doc.heading(2, "Headline")]
    if not rows:
        return out + [doc.para("The study has no trials yet.")]
    if not best:
        why = disputed(rows)
        if why:
            return out + [doc.warn(f"There is no best config: {why}. No config is called best while the golden "
                                   "reference is in question.")]
        return out + [doc.warn("No trial completed and passed the correctness gate: there is no best config.")]
    b = best[0]
    m = objectives.of(objective).measure  # the figures are its worths: said in its unit and words
    value = ev.median(b.config_key, level) or b.worth
    n = ev.count(b.config_key, level)
    base_ok = base is not None and base.state == COMPLETE and base.value is not None
    over = f"the median of {launches_text(n)}"
    if base_ok and b.config_key == base.config_key:
        out.append(doc.para(f"**The baseline (trial {base.number}) is the best config found: "
                      f"{m.text(value, 2)} ({over}).** No other config beat it."))
    elif base_ok:
        base_value = ev.median(base.config_key, level) or base.worth
        iv = history.row_interval(base, b, ev, level)
        word = verdict(iv)
        fresh = sum(1 for k in (b.config_key, base.config_key) for r in ev.launches(k) if r.launch_role == COMPARE)
        by = f" ({fresh} of them fresh launches by `ncclsweep compare`)" if fresh else ""
        fresh_iv = ev.compared(base.config_key, b.config_key, level)  # compare's launches alone
        fresh_within = fresh_iv is not None and verdict(fresh_iv) == WITHIN_NOISE
        if word in (FASTER, SLOWER) and fresh_iv is not None and fresh_within:
            noise = (f"Over every launch the difference is beyond the launch noise ({interval_text(m.oriented(iv))})"
                     f"{by}, but `ncclsweep compare`'s fresh launches alone put it within noise "
                     f"({m.compared(fresh_iv)}): the "
                     "best is **not** shown to beat the baseline now; the machine may have changed since the study.")
        elif word in (FASTER, SLOWER):
            noise = f"The difference is beyond the launch noise ({interval_text(m.oriented(iv))}){by}."
        elif iv.bounded:
            noise = (f"The difference is within the launch noise ({interval_text(m.oriented(iv))}){by}: the best is "
                     "**not** shown to beat the baseline; treat the two as equal.")
        else:
            noise = f"Too few launches to tell whether this exceeds the noise ({interval_text(m.oriented(iv))}){by}."
        out.append(doc.para(f"**Best: trial {b.number}, {m.text(value, 2)} ({over}), "
                      f"{ratio_text(m.oriented(iv))} the baseline** (trial {base.number}, "
                      f"{m.text(base_value, 2)}, the median of {launches_text(ev.count(base.config_key, level))}; "
                      f"the ratio {estimate_text(iv)}). {noise}"))
        if fresh and word == WITHIN_NOISE:
            out.append(doc.warn(f"fresh launches put trial {b.number} within noise of the baseline: "
                                f"{m.compared(iv)}"))
        elif fresh_iv is not None and fresh_within:
            out.append(doc.warn(f"fresh launches put trial {b.number} within noise of the baseline: "
                                f"{m.compared(fresh_iv)} (`ncclsweep compare`'s launches alone)"))
    else:
        why = (f"{base.state}" + (f" ({base.failure_kind}: {clip(base.failure_reason, 120)})"
                                     if base and base.failure_kind else "")) if base else "missing"
        out.append(doc.para(f"**Best: trial {b.number}, {m.text(value, 2)} ({over}).** "
                      f"No ratio: the baseline is {why}."))
    to_come = ev.fresh(b.config_key, level)
    out.append(doc.para(fresh_text(m.shown_range(*to_come) if to_come else None).capitalize()
                        + f" ({ev.noise(level).text()})."))
    said = races.said(races.outcomes(rows, objective), races.trial_numbers(rows))
    if said:
        out.append(doc.para(said[0].upper() + said[1:] + "."))
    drift = ev.headline_drift(objective).text()
    if drift:  # a figure measured at another time will differ: the reader is told once, here
        out.append(doc.warn(drift))
    load = load_note(rows)
    if load:
        out.append(doc.warn(load))
    out.append(doc.para(f"Best config: `{short_params(b.params) or '(backend defaults)'}`"))
    if base is not None and b.config_key != base.config_key:
        out.append(doc.para(f"Changed from the baseline: {_diff_vs(b.params, base.params)}"))
    nccl_said = [w for w in b.warnings if is_verification_warning(w)]
    if nccl_said:
        out.append(doc.warn("the best config's NCCL settings could not be verified: " + "; ".join(nccl_said)))
    other = [w for w in b.warnings if not is_verification_warning(w)]
    if other:
        out.append(doc.warn("the best config's trial warned: " + "; ".join(other)))
    return out


def _launch_noise(rows, ev: Evidence, levels: tuple[int, ...], objective: Any) -> list[Block]:
    """How much launches of one config differ per level (what every verdict carries), the
    relaunches in time order (a machine that drifts shows there) and the race's rounds."""
    out: list[Block] = [doc.heading(2, "Launch noise and the race of the finalists")]
    out.append(doc.para("Every figure in this report is the median over a config's launches, and every interval is "
                        "over launches: each launch's figure is one value, and the launch noise is the spread of "
                        "launches of one config (the standard deviation of their logs, pooled over every config "
                        "launched more than once). A config measured on one launch gets the study's launch noise."))
    if objectives.of(objective).open_loop:  # a study by request rate has one figure, no concurrency
        out.append(doc.table(["Figure", "Launch noise"], [["output tok/s at the capacity (req/s within the SLO)",
                                                           ev.noise(HEADLINE).text()]]))
    else:
        out.append(doc.table(["Concurrency", "Launch noise"], [[str(lv), ev.noise(lv).text()] for lv in levels]))
    numbers = races.trial_numbers(rows)
    extra = [r for r in rows if r.launch_role in ("relaunch", "race", COMPARE) and r.state == COMPLETE]
    if extra:
        lines = []
        for r in sorted(extra, key=lambda r: r.number):
            what = {"relaunch": "relaunch", "race": f"race round {int(r.race.get('round', 0)) + 1}",
                    "compare": "compare"}[r.launch_role or ""]
            figs = ", ".join(f"{lv}: {fmt(r.at(lv).value if r.at(lv) else None)}" for lv in levels)
            lines.append([str(r.number), what, f"#{numbers.get(r.config_key, '?')}", figs, r.ended_at or "-"])
        out.append(doc.table(["Trial", "Launch", "Config", "Figures", "Ended"], lines))
    said = races.said(races.outcomes(rows, objective), numbers)
    out.append(doc.para(said[0].upper() + said[1:] + "." if said else
                        "The study ran no race (budget.confirm: 0, or no config within launch noise of the best)."))
    return out


def _summary(rows) -> list[Block]:
    counts: dict[str, int] = {}
    for r in rows:
        if not r.skipped:  # proposals never launched are not trials
            counts[r.state] = counts.get(r.state, 0) + 1
    cached = sum(1 for r in rows if r.cached_from is not None)
    counted = sum(1 for r in rows if r.counted)
    skipped = sum(1 for r in rows if r.skipped)
    items = [", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials",
             f"{counted} count toward the budget; {cached} answered from the cache of measured configs"
             + (f"; {skipped} proposals never launched (infeasible or duplicate; not trials)" if skipped else "")]
    spans = trial_spans(rows)
    if spans:
        runs = _by_run(spans)
        wall = sum(max(s.end for s in run) - min(s.start for s in run) for run in runs)
        busy = sum(s.end - s.start for s in spans)
        launch = sum(float((s.row.durations or {}).get("launch_s") or 0) for s in spans)
        teardown = sum(float((s.row.durations or {}).get("teardown_s") or 0) for s in spans)
        bench = sum(float((s.row.durations or {}).get("bench_s") or 0) for s in spans)
        over = f" over {len(runs)} runs of `ncclsweep run`" if len(runs) > 1 else ""
        items.append(f"wall clock {wall / 60:.1f} min{over}; trials busy {busy / 60:.1f} min; "
                     f"server start {launch / 60:.1f} min, teardown {teardown / 60:.1f} min, "
                     f"benchmark {bench / 60:.1f} min ({100 * bench / busy if busy else 0:.0f}% of trial time)")
        gaps: dict[str, float] = {}
        for run in runs:
            for node, idle in _idle_gaps(run).items():
                gaps[node] = gaps.get(node, 0.0) + idle
        if gaps:
            items.append("idle between trials: " + ", ".join(f"{n} {g:.0f}s" for n, g in sorted(gaps.items())))
    return [doc.heading(2, "Summary"), doc.items(items)]


def _by_run(spans: list[Span]) -> list[list[Span]]:
    """The spans grouped by the `run` that recorded them: the time between two runs (a night
    between a study and its resumption) is neither wall clock nor idle time. A trial recorded
    without its run (before runs were stored) is a group of its own, unless no trial has one
    (an older study: one group, as before)."""
    if not any(s.row.run for s in spans):
        return [spans]
    groups: dict[str, list[Span]] = {}
    for s in spans:
        groups.setdefault(s.row.run or f"#{s.row.number}", []).append(s)
    return list(groups.values())


def _idle_gaps(spans: list[Span]) -> dict[str, float]:
    """Node -> seconds it ran no trial between its first start and its last end."""
    out = {}
    for node in {s.node for s in spans}:
        mine = sorted((s for s in spans if s.node == node), key=lambda s: s.start)
        idle, last_end = 0.0, None
        for s in mine:
            if last_end is not None and s.start > last_end:
                idle += s.start - last_end
            last_end = s.end if last_end is None else max(last_end, s.end)
        out[node] = idle
    return out


def _acceptance(r: TrialRow) -> str:
    """A speculative trial's acceptance as the server counted it: drafted tokens accepted and
    tokens per target step; "-" for a trial that reported none."""
    parts = []
    if r.acceptance_rate is not None:
        parts.append(f"{100 * r.acceptance_rate:.0f}% accepted")
    if r.mean_accepted_length is not None:
        parts.append(f"{r.mean_accepted_length:.2f} tokens/step")
    return ", ".join(parts) or "-"


def _top_table(rows, best, base, ev: Evidence, level: int) -> list[Block]:
    if not best:
        return []
    base_v = (ev.median(base.config_key, level) or base.value) if base and base.state == COMPLETE else None
    speculating = any(r.acceptance_rate is not None or r.mean_accepted_length is not None for r in best)
    table = []
    for i, r in enumerate(best, 1):
        value = ev.median(r.config_key, level) or r.value
        table.append([i, r.number, _tok(value), _pct(r.spread), _x_baseline(base, r, ev, level) if base_v else "-",
                      _noise_words(base, r, ev, level) if base_v else "-", r.n_measurements]
                     + ([_acceptance(r)] if speculating else [])
                     + [f"`{short_params(r.params)}`"
                        + (" (baseline)" if base and r.config_key == base.config_key else "")])
    headers = ["Rank", "Trial", "tok/s (median of launches)", "Spread", "x baseline", "vs baseline", "Launches"]
    out = [doc.heading(2, f"Top {len(best)} configs"),
           doc.table(headers + (["Speculation"] if speculating else []) + ["Config"], table)]
    if speculating:
        out.append(doc.para("Speculation: the share of drafted tokens the target model accepted and the tokens each "
                            "target step yielded (mean accepted length), from the server's own counters over the "
                            "benchmark's prompts. Greedy speculative decoding is lossless by design; the correctness "
                            "gate checks it like any other config."))
    return out + _ties_with_best(best, ev, level)


def _not_explored(job: Any, rows: list[TrialRow]) -> list[Block]:
    """What the study has not explored (``study.coverage``): the values and pairs a crown does not
    cover; `run --trials N` goes there first."""
    lines = coverage.describe(coverage.of_job(job, rows), limit=12)
    if not lines:
        return []
    return [doc.heading(2, "Not explored"),
            doc.para("The search has not measured these, so the best above is the best of what it measured, not "
                     "of the space: values never measured working, values seen only in configs well below the "
                     "best and never beside a config near it, and pairs of values of the parameters that moved "
                     "the speed most never measured together. `ncclsweep run JOB --trials N` launches there first."),
            doc.items([line.strip() for line in lines[1:]])]


def _ties_with_best(best: list[TrialRow], ev: Evidence, level: int) -> list[Block]:
    """Which runners-up the objective cannot tell from the best over their launches, and in what
    they differ: the user picks among them by what the objective does not see (concurrency)."""
    top, ties = best[0], history.ties_with_best(best, ev, level)
    if not ties:
        return []
    differ = sorted({k for r in ties for k in set(r.params) | set(top.params)
                     if r.params.get(k) != top.params.get(k)}, key=lambda k: history._param_order((k, None)))
    values = [v for r in ties if (v := ev.median(r.config_key, level)) is not None]
    return [doc.para(f"Within the launch noise of the best (trial {top.number}): trial(s) "
               f"{', '.join(str(r.number) for r in ties)} ({_tok(min(values))}-"
               f"{_tok(max(values))} tok/s), differing from it in {', '.join(differ)}. "
               "Single-request decode cannot rank them: choose by the concurrency you serve "
               "(`ncclsweep compare JOB --also ties` measures them beside the best).")]


def _failures(rows) -> list[Block]:
    failed = [r for r in rows if r.state == FAIL]
    pruned = [r for r in rows if r.state == PRUNED and not r.skipped]
    if not failed and not pruned:
        return [doc.heading(2, "Failures"), doc.para("No trial failed.")]
    out: list[Block] = [doc.heading(2, "Failures")]
    kinds: dict[str, list] = {}
    for r in failed:
        kinds.setdefault(r.failure_kind or "unrecorded", []).append(r)
    if kinds:
        out.append(doc.para("By kind: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(kinds.items()))
                      + ". Configs that failed by their own fault are never proposed again and never"
                      " ranked; `interrupted`/`node-lost`/`env-error` and a config's first timeout are not"
                      " (yet) the config's fault: never cached or banned, re-queued once."))
    else:
        out.append(doc.para("No trial failed; the trials below were stopped early."))
    for kind, members in sorted(kinds.items()):
        fault = (" (not the config's fault)" if kind in NOT_THE_CONFIGS_FAULT else
                 " (a first timeout or stall is re-queued once)" if kind in TIMEOUT_KINDS else "")
        out.append(doc.heading(3, f"{kind}: {len(members)} trial(s){fault}"))
        out.append(doc.table(["Trial", "Node", "Config", "Reason"],
                          [[r.number, r.node or "-", f"`{short_params(r.params)}`",
                            clip(r.failure_reason, 300)] for r in members]))
        last = next((r for r in reversed(members) if r.log_tail), None)
        if last is not None:
            tail = "\n".join(last.log_tail.splitlines()[-12:])
            out.append(doc.para(f"Server log tail of trial {last.number}:"))
            out.append(doc.pre(tail))
    if pruned:
        out.append(doc.heading(3, f"pruned: {len(pruned)} trial(s) (stopped early as clearly worse)"))
        out.append(doc.table(["Trial", "Config", "First sample tok/s", "Reason"],
                          [[r.number, f"`{short_params(r.params)}`",
                            _tok(r.measured), clip(r.failure_reason or "", 200)]
                           for r in pruned]))
    banned = value_bans.banned_values(rows)
    if banned:
        out.append(doc.heading(3, f"values not proposed any more: {len(banned)}"))
        out.append(doc.para("Each crashed servers at start in every launch that carried it, for a reason the log "
                      "attributes to it, or gave wrong output in two configs that share nothing else never found "
                      "right (once a config other than the reference's passed the correctness gate); the study "
                      "stopped proposing it."))
        out.append(doc.table(["Value", "Why"], [[f"`{value_bans.describe(pair)}`", clip(why, 300)]
                                             for pair, why in sorted(banned.items(), key=lambda kv: str(kv[0]))]))
    return out


def _fallbacks(rows: list[TrialRow], best: list[TrialRow]) -> list[Block]:
    """The values the engine turned off, each with what it ran instead (``allreduce.fallbacks_of``),
    per config: a value the engine disabled is reported as what ran, not as what was asked."""
    by_text: dict[str, list[int]] = {}
    best_keys = {b.config_key for b in best[:1]}
    for r in rows:
        for found in allreduce.fallbacks_of(r.server):
            by_text.setdefault(found["text"], []).append(r.number)
    if not by_text:
        return []
    tagged = {r.number for r in rows if r.config_key in best_keys}
    table = [[clip(text, 300), ", ".join(f"{n}{' **(best config)**' if n in tagged else ''}" for n in numbers)]
             for text, numbers in by_text.items()]
    return [doc.heading(2, "What the engine ran instead"),
            doc.para("Values of a config the engine turned off on its own (its log says so), and what it ran "
                     "instead: those trials measured the fallback, not the value asked for."),
            doc.table(["Asked (what ran)", "Trials"], table)]


def _nccl_warnings(rows, best) -> list[Block]:
    """The NCCL settings the logs did not confirm (``nccl.is_verification_warning``), then, under
    their own heading where there are any, every other warning a trial recorded (the
    benchmark's, the correctness gate's)."""
    out: list[Block] = [doc.heading(2, "NCCL verification")]
    nccl_rows = _warning_rows(rows, best, is_verification_warning)
    if nccl_rows:
        out.append(doc.table(["Trial", "State", "Warning"], nccl_rows))
    else:
        ran = [r for r in rows if (r.nccl or {}).get("version")]
        launched = [r for r in rows if not r.skipped and r.cached_from is None]
        if not ran:
            out.append(doc.para("Not applicable: NCCL ran in none of the trials (no trial's server log shows it: "
                                "a CPU study, or one device per server), so no NCCL setting was applied or "
                                "verified."))
        else:
            versions = sorted({str(r.nccl.get("version")) for r in ran})
            out.append(doc.para(f"No warnings: every requested NCCL setting was confirmed in the logs of the "
                                f"{len(ran)} of {len(launched)} trials where NCCL ran (NCCL {', '.join(versions)})."))
    other = _warning_rows(rows, best, lambda w: not is_verification_warning(w))
    if other:
        out += [doc.heading(2, "Other trial warnings"), doc.table(["Trial", "State", "Warning"], other)]
    return out


def _warning_rows(rows, best, keep) -> list[list[str]]:
    """One table row per warning ``keep`` accepts: trial (the best config tagged), state, warning."""
    best_keys = {b.config_key for b in best[:1]}
    table = []
    for r in rows:
        tag = " **(best config)**" if r.config_key in best_keys else ""
        table += [[f"{r.number}{tag}", r.state, clip(w, 300)] for w in r.warnings if keep(w)]
    return table


def _resolve_bandwidth(job: ReportJob, rows: list[TrialRow], best: list[TrialRow],
                       bandwidth_bytes_s: float | None) -> tuple[float | None, str]:
    if bandwidth_bytes_s:
        return float(bandwidth_bytes_s), "given"
    declared = _job_value(job, "memory_bandwidth_bytes_s", "memory_bandwidth", "mem_bandwidth", "bandwidth")
    if declared is not None:
        try:
            return parse_bandwidth(declared), "declared in the job"
        except ValueError:
            pass
    return _measured_bandwidth(rows, best)


LOADED_PER_CPU = 1.0  # a 1-minute load average per CPU this high: the copy shared the machine


def _measured_bandwidth(rows: list[TrialRow], best: list[TrialRow]) -> tuple[float | None, str]:
    """The bandwidth the trials measured on the best's node (every node's when it has none):
    the highest of them, since other work on the machine only ever slows a copy down, with
    the range of the others and, when even that one ran on a loaded machine, the load."""
    found = []
    for r in rows:
        info = r.node_info or {}
        v = info.get("memory_bandwidth_bytes_s") or info.get("mem_bandwidth_bytes_s")
        if v:
            found.append((float(v), info.get("memory_bandwidth_load"), r.node))
    if best and any(node == best[0].node for _, _, node in found):
        found = [f for f in found if f[2] == best[0].node]
    if not found:
        return None, ""
    bw, load, node = max(found, key=lambda f: f[0])
    said = f"measured on {node or 'the node'}"
    others = sorted(v for v, _, _ in found)
    if len(others) > 1 and others[0] < 0.9 * bw:
        said += f", the highest of {len(others)} measurements, {others[0] / 1e9:.0f}-{bw / 1e9:.0f} GB/s"
    if isinstance(load, dict) and load.get("cpus") and load.get("load1") is not None \
            and load["load1"] / load["cpus"] >= LOADED_PER_CPU:
        said += (f"; under load: a 1-minute load of {load['load1']:.1f} on {load['cpus']} CPUs when measured, so "
                 "the ceiling may be low (declare `hardware.memory_bandwidth` to fix it)")
    return bw, said


def _resolve_latency(job: ReportJob, best: list[TrialRow], allreduce_latency_s: float | None,
                     report_dir: Path) -> tuple[float | None, str]:
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
        for src in (r.nccl or {}, r.node_info or {}, r.metrics or {}):
            if src.get("allreduce_latency_s") is not None:
                return float(src["allreduce_latency_s"]), "measured"
            if src.get("allreduce_latency_us") is not None:
                return float(src["allreduce_latency_us"]) * 1e-6, "measured"
    if best:
        return _prescreened_latency(StudyDir(report_dir).prescreen, best[0].params)
    return None, ""


def _prescreened_latency(path: Path, params: dict[str, Any]) -> tuple[float | None, str]:
    """The latency `ncclsweep prescreen` measured for the best config's NCCL setting."""
    data = prescreened.read(path)
    row = data.row_of(params) if data is not None else None
    if row is not None:
        return row.latency_us * 1e-6, "measured by `ncclsweep prescreen` for this setting"
    return None, ""


def _ceiling(job: ReportJob, rows: list[TrialRow], best: list[TrialRow], backend: Any,
             bandwidth_bytes_s: float | None, allreduce_latency_s: float | None,
             report_dir: Path) -> tuple[list[Block], dict | None]:
    out: list[Block] = [doc.heading(2, "Ceiling")]
    facts: dict[str, Any] = {}
    if backend is not None:
        try:
            facts = dict(backend.model_facts() or {})
        except Exception:  # noqa: BLE001 - facts are optional
            facts = {}
    bw, bw_source = _resolve_bandwidth(job, rows, best, bandwidth_bytes_s)
    if not best:
        return out + [doc.para("No completed trial to compare with a ceiling.")], None
    b = best[0]
    tp = b.params.get("tp_size", 1)
    try:
        tp = max(1, int(tp))
    except (TypeError, ValueError):
        tp = 1
    if not facts.get("bytes_per_token") or not bw:
        missing = [m for m, ok in (("the model's bytes read per decoded token (backend model facts)",
                                    facts.get("bytes_per_token")), ("the GPUs' memory bandwidth", bw)) if not ok]
        are = " are" if len(missing) > 1 else " is"
        return out + [doc.para("Not computed: " + " and ".join(missing) + are + " unknown. "
                               "Declare the GPUs' memory bandwidth in the job (`memory_bandwidth`, e.g. `4.8 TB/s`) "
                               "to get it.")], None
    latency, latency_source = _resolve_latency(job, best, allreduce_latency_s, report_dir)
    c = ceiling_for(facts, bw, tp=tp, allreduce_latency_s=latency)
    assert c is not None and b.value is not None  # bytes and bandwidth are known; a ranked row has a value
    frac = b.value / c["ceiling_tok_s"]
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
    lines.append(f"**The best config reaches {100 * frac:.0f}% of the ceiling** ({b.value:.2f} tok/s).")
    lines += _speculation_lines(b, c, frac)
    return out + [doc.items(lines)], c


def _speculation_lines(b: TrialRow, c: dict[str, Any], frac: float) -> list[str]:
    """The ceiling above is one token per weight pass; a speculative best is measured against
    its own tokens per pass (``ceiling.speculative_ceiling``), and only a best beyond that, or a
    best that does not speculate, is called impossible."""
    speculates = speculative.uses(b.params) or b.mean_accepted_length is not None
    if not speculates:
        return ["It exceeds the ceiling: the declared bandwidth or the model facts are wrong."] if frac > 1.05 else []
    if b.mean_accepted_length is None or b.mean_accepted_length < 1.0:
        return ["The best config speculates: a target step verifies several drafted tokens while reading the weights "
                "once, so the one-token ceiling does not bound it. The server reported no acceptance counters, so its "
                "tokens per weight pass are unknown" + (" (it is above the one-token ceiling: speculation explains "
                                                         "that)." if frac > 1.05 else ".")]
    spec = speculative_ceiling(c, b.mean_accepted_length)
    c.update(spec)
    reach = b.value / spec["speculative_ceiling_tok_s"] if b.value is not None else 0.0
    c["best_fraction_speculative"] = reach
    accepted = f", {100 * b.acceptance_rate:.0f}% of drafted tokens accepted" if b.acceptance_rate is not None else ""
    out = [f"The best config speculates ({speculative.method_of(b.params)}): **{spec['tokens_per_pass']:.2f} tokens "
           f"per weight pass** (mean accepted length{accepted}), so its ceiling is {spec['tokens_per_pass']:.2f} x "
           f"{c['ceiling_tok_s']:.2f} = **{spec['speculative_ceiling_tok_s']:.2f} tok/s**, of which it reaches "
           f"{100 * reach:.0f}% (drafting is not counted: the ceiling is optimistic)."]
    if frac > 1.05 and reach <= 1.05:
        out.append("Above the one-token ceiling, and explained: speculation yields several tokens per weight pass.")
    elif reach > 1.05:
        out.append("It exceeds even the speculative ceiling: the declared bandwidth or the model facts are wrong.")
    return out


def _compare(report_dir: Path) -> list[Block]:
    """``compare``'s rounds (``compare.json``), judged by today's rule whatever wrote the file."""
    record = compare_file.read(StudyDir(report_dir).compare)
    if record is None:
        return []
    out: list[Block] = [doc.heading(2, "Concurrency comparison (total output tok/s)")]
    others = record.others
    verdicts = record.level_verdicts()

    def fmt(which: str, c: str, v: float | None) -> str:
        if v is None:
            return "-"
        rng = record.samples(which, c)
        extra = f" ({min(rng):.1f}-{max(rng):.1f}, {len(rng)} rounds)" if rng and len(rng) > 1 else ""
        return f"{v:.1f} tok/s{extra}"

    table = []
    for c in map(str, record.concurrency):
        bv, wv = record.median(BASELINE, c), record.median(BEST, c)
        cell = verdicts[c].text if bv and wv is not None else "-"
        if verdicts[c].verdict == SLOWER:
            cell = f"**{cell}**"
        other_cells = [vs_best(record.median(o.label, c), record.vs_best(o.label)[c]) for o in others]
        table.append([c, fmt(BASELINE, c, bv), fmt(BEST, c, wv), cell] + other_cells)
    out.append(doc.table(["Concurrency", "baseline", "best", "Improvement"] + [f"trial {o.trial}" for o in others],
                         table))
    if others:
        out.append(doc.para("Other trials (`ncclsweep compare --also`): total tok/s and the ratio to the best at "
                            "the same concurrency, measured in the same rounds. "
                            + " ".join(f"Trial {o.trial}: `{short_params(dict(o.params))}`." for o in others)))
    for kind, text in closing_lines(record, verdicts):
        out.append(doc.warn(text) if kind == "warn" else doc.para(text))
    for rule in record.constraints():  # today's rule
        ratio = rule.interval.ratio
        shown = "not measured" if ratio is None else f"{ratio:.2f}x" + (f" ({rule.text})" if rule.text else "")
        line = (f"constraint: at concurrency {rule.concurrency} the best must reach {rule.min_ratio}x the baseline; "
                f"measured {shown}")
        out.append(doc.warn(line + ": VIOLATED.") if rule.ok is False else doc.para(f"{line}: {rule.state}."))
    for failure in record.failures:
        out.append(doc.warn(f"failed requests during compare: {clip(failure, 300)}"))
    if record.complete is False:
        out.append(doc.warn(f"compare stopped after {record.rounds_done} of {record.rounds_planned} rounds"
                            + (f" ({clip(record.stopped, 200)})" if record.stopped else "")
                            + ": the table shows the finished launches only."))
    trials = ""
    if record.baseline_trial is not None and record.best_trial is not None:
        trials = f" (baseline trial {record.baseline_trial}, best trial {record.best_trial})"
    out.append(doc.para(f"Baseline and best were relaunched in rounds, in alternating order{trials}, so drift and a "
                        "lucky launch show; values are medians over rounds, and a ratio is called faster or slower "
                        "only when its confidence interval from the per-round ratios excludes 1.0."))
    return out


def _by_node(rows) -> list[Block]:
    nodes = sorted({r.node for r in rows if r.node and r.started_at})
    if len(nodes) < 2:
        return []
    reps = baseline_repeats(rows)
    per_node: dict[str, tuple[float, float | None, int]] = {}
    samples: dict[str, list[float]] = {}
    for node in nodes:
        mine = [r for r in reps if r.node == node]
        if mine:
            spreads = [r.spread for r in mine if r.spread is not None]
            per_node[node] = (statistics.median(r.value for r in mine if r.value is not None),
                              statistics.median(spreads) if spreads else None, len(mine))
            samples[node] = [v for r in mine for v in history.decode_samples(r)]
    table = []
    rankable = {r.number for r in outcome.rankable(rows)}
    for node in nodes:
        mine = [r for r in rows if r.node == node and r.cached_from is None]
        done = [r for r in mine if r.state == COMPLETE]
        base = per_node.get(node)
        table.append([node, len(mine), len(done), sum(1 for r in mine if r.state == FAIL),
                      _tok(max((r.value for r in done if r.number in rankable and r.value is not None), default=None)),
                      f"{base[0]:.2f} {_pct(base[1])} (n={base[2]})" if base else "not measured here"])
    out: list[Block] = [doc.heading(2, "By node"),
                        doc.table(["Node", "Trials", "COMPLETE", "FAIL", "Best tok/s", "Baseline repeats"], table)]
    flagged, unknown = [], []
    if len(per_node) >= 2:
        ref_node = max(per_node, key=lambda n: per_node[n][2])
        ref = per_node[ref_node]
        for node, (v, _s, _n) in per_node.items():
            iv = ratio_interval(samples[ref_node], samples[node])
            if node != ref_node and verdict(iv) == NOT_SHOWN:
                unknown.append(f"{node} ({why_unbounded(iv)})")
            if node != ref_node and verdict(iv) in (FASTER, SLOWER):
                flagged.append(f"node {node}'s baseline ({v:.2f} tok/s) differs from {ref_node}'s "
                               f"({ref[0]:.2f} tok/s) beyond noise ({describe(iv)}): results from the two "
                               "nodes are not comparable")
    for f in flagged:
        out.append(doc.warn(f))
    missing = [n for n in nodes if n not in per_node]
    if missing and per_node:
        out.append(doc.para("The baseline was not repeated on " + ", ".join(missing)
                      + ", so those nodes cannot be checked against it."))
    elif unknown:
        out.append(doc.para(f"Not shown whether the baseline repeats of {', '.join(unknown)} agree with "
                            f"{ref_node}'s: too few samples for an interval."))
    elif not flagged and len(per_node) >= 2:
        out.append(doc.para("Baseline repeats agree across nodes within noise."))
    return out


def _importance_blocks(effects: list[KnobEffect], notes: list[str],
                       given: tuple[str, Any, list[KnobEffect], list[float]] | None = None,
                       values: list[float] | None = None) -> list[Block]:
    out: list[Block] = [doc.heading(2, "Which knobs mattered")]
    if effects:
        out.append(doc.para(
            "Matched effect: each value against the reference (the baseline's value) over configs that differ only "
            "in this parameter, each pair's ratio over their launches with the study's launch noise; a ratio is "
            "given only where every pair is beyond that noise the same way, and two configs the engine ran alike "
            "(it turned the value off) count as no effect. The share of the variance in tok/s each parameter "
            "explains on its own (one-way analysis of variance over the measured trials) and the mean tok/s of "
            "each value are marginal: over whatever else each trial set, n the trials; a hint where to look"
            + (f"; {span_text(values)}." if values else ".")))
        out.append(_effects_table(effects))
    for n in notes:
        out.append(doc.para(n))
    if given is not None:
        name, value, others, sub_values = given
        out.append(doc.para(f"Among the {len(sub_values)} trials with {name}={_fmt_value(value)}, as in the best "
                      f"config ({span_text(sub_values)}):"))
        out.append(_effects_table(others))
    return out


def _effects_table(effects: list[KnobEffect]) -> Block:
    rows = []
    for e in effects:
        by_value = ", ".join(f"{_fmt_value(v)}{f' ({e.ran[v]})' if v in e.ran else ''}: {m:.1f} (n={e.counts[v]})"
                             for v, m in e.means.items())
        scope = f"{e.trials} where it applies" if e.conditional else f"all {e.trials}"
        matched = "; ".join(m.text() for m in e.matched) or "-"
        rows.append([e.name, matched, f"{e.share:.0%}", by_value, scope])
    return doc.table(["Parameter", "Matched effect", "Explains (marginal)", "Marginal mean tok/s by value", "Trials"],
                     rows)


def _fmt_value(v: Any) -> str:
    return str(int(v)) if isinstance(v, bool) else str(v)


def _plan_lead(plan: Plan) -> list[Block]:
    """A plan whose levels have different bests says so before anything else: the headline's
    best is the best at the lowest level, and deploying it alone gives the other levels away."""
    bests = {lp.level: lp for lp in plan.per_level if lp.best is not None}
    if len({lp.best.config_key for lp in bests.values()}) < 2:  # type: ignore[union-attr]
        return []
    parts = []
    for level, lp in bests.items():
        vs = f", {lp.vs_baseline.than('the baseline')}" if lp.vs_baseline is not None else ""
        parts.append(f"at {level} trial {lp.best.number}{vs}")  # type: ignore[union-attr]
    out = [doc.warn("The best config depends on the load: " + "; ".join(parts) + ". The headline's best is "
                    "the best at the lowest level; the Plan section below says what it gives away at the "
                    "others (`ncclsweep export JOB --concurrency N` exports the best at N).")]
    if plan.everywhere is not None:
        one = plan.everywhere
        out.append(doc.para(f"**One config serves every level on this evidence: trial {one.row.number}**, the best "
                            f"at {', '.join(map(str, one.best_at))}, and within launch noise of the best at the others "
                            "(" + "; ".join(f"at {lv}: {c.text} against trial {c.other.number}" for lv, c in one.within)
                            + ")"
                            f". `ncclsweep export JOB --concurrency {one.best_at[0]}` exports it."))
    return out


def _plan(plan: Plan, report_dir: Path) -> list[Block]:
    """The plan (``study.plan``): the motivating case's table shape, levels as rows (the
    baseline, the best at the lowest level, the best at this level, their ratios with
    verdicts beyond noise), then the Pareto set and plot, the mix and ``compare --plan``."""
    first = plan.levels[0]
    out: list[Block] = [doc.heading(2, "Plan: the best config per concurrency level")]
    if not plan.found:
        return out + [doc.warn("No config may be called best at any level yet.")]
    anchor = plan.anchor
    out.append(doc.para(
        f"Level 1 is single-request decode tok/s, a level N > 1 total output tok/s with N concurrent streams; every "
        f"trial measured every level. The best at {first} (trial {anchor.number if anchor else '-'}) is what a "
        "study of one number would deploy; the last column says what it gives away where another config is best. "
        "Verdicts are beyond the noise of each level's samples (repeats within one launch); `ncclsweep compare "
        "JOB --plan` relaunches the plan's configs side by side for the stronger claim."))
    table = []
    for lp in plan.per_level:
        table.append([str(lp.level), lp.unit, fmt(lp.baseline_value), fmt(lp.anchor_value),
                      f"{fmt(lp.best_value)} (trial {lp.best.number}, {launches_text(lp.best_launches)}; "
                      f"{fresh_text(lp.best_fresh)})" if lp.best else "-",
                      lp.anchor_vs_baseline.text if lp.anchor_vs_baseline else "-",
                      lp.vs_baseline.text if lp.vs_baseline else "-",
                      lp.anchor_vs_best.text if lp.anchor_vs_best else "-"])
    base = f"baseline (trial {plan.baseline.number})" if plan.baseline else "baseline (not measured)"
    out.append(doc.table(["Concurrency", "Unit", base, f"best at {first}", "best at this level",
                          f"best at {first} vs baseline", "best here vs baseline", f"best at {first} vs best here"],
                         table))
    configs = [[str(r.number), ", ".join(plan.roles(r)), short_params(r.params) or "(defaults)"] for r in plan.configs]
    out.append(doc.table(["Trial", "Picked as", "Config"], configs))
    ev = plan.evidence or Evidence(list(plan.configs))
    if plan.pareto:
        out.append(doc.para(f"Pareto set ({len(plan.pareto)} config(s) no other config matches or beats at every "
                            "level, on medians):"))
        out.append(doc.table(["Trial"] + [f"at {lv}" for lv in plan.levels] + ["Config"],
                             [[str(r.number)] + [fmt(ev.median(r.config_key, lv)) for lv in plan.levels]
                              + [short_params(r.params) or "(defaults)"] for r in plan.pareto]))
    if plan.weights:
        mix = ", ".join(f"{lv}: {w:g}" for lv, w in plan.weights.items())
        if plan.mix is None:
            out.append(doc.para(f"Best for the traffic mix ({mix}): none yet."))
        else:
            vs = f" = {plan.mix_vs_baseline.than('the baseline')}" if plan.mix_vs_baseline else ""
            out.append(doc.para(f"Best for the traffic mix ({mix}): trial {plan.mix.number}{vs} (the weighted "
                                "geometric mean of its ratios to the baseline; interval from the levels' intervals)."))
    if len(plan.levels) > 1:
        out.append(doc.image("pareto.png", "Pareto plot: each level against the lowest"))
    out += _compare_plan(report_dir)
    return out


def _compare_plan(report_dir: Path) -> list[Block]:
    """``compare --plan``'s relaunched rounds (``compare-plan.json``), when run."""
    record = compare_file.read(StudyDir(report_dir).compare_plan)
    if record is None or not record.plan or not record.configs:
        return []
    head = ["Concurrency"] + [c.column() for c in record.configs]
    out: list[Block] = [doc.heading(3, "The plan relaunched (`compare --plan`)"),
                        doc.para(f"{record.rounds_done} interleaved round(s) of fresh launches; ratios to the "
                                 "baseline paired by round."), doc.table(head, plan_table_rows(record))]
    out += [doc.para(line) for line in plan_closing_lines(record)]
    if record.complete is False:
        out.append(doc.warn(f"compare --plan stopped after {record.rounds_done} of {record.rounds_planned} rounds."))
    return out


def build_blocks(job: ReportJob, rows: list[TrialRow], report_dir: Path, backend: Any = None,
                 bandwidth_bytes_s: float | None = None, allreduce_latency_s: float | None = None,
                 importance: tuple[list[KnobEffect], list[str]] | None = None,
                 plan: Plan | None = None, trials: Sequence[int] = ()) -> tuple[list[Block], dict]:
    """The report's content (blocks) and a summary dict (best, baseline, ceiling, ...);
    ``plan``: the study's plan (an objective over several levels), as its own section; ``trials``:
    the configs the user names (a study by request rate shows their curves)."""
    best = best_rows(rows, TOP_N)
    base = baseline_row(rows)
    objective = getattr(job, "objective", None)
    levels = objectives.levels(objective)
    level = levels[0]
    ev = Evidence(rows)
    effects, notes = importance if importance is not None else knob_effects(rows, objective)
    title = f"ncclsweep report: {getattr(job, 'study', '?')}"
    blocks: list[Block] = [doc.heading(1, title)]
    kind = getattr(getattr(job, "backend", None), "kind", None) or getattr(backend, "kind", None)
    blocks.append(doc.para(f"Study `{getattr(job, 'study', '?')}` in `{getattr(job, 'storage', '?')}`"
                     + (f", backend {kind}" if kind else "")
                     + f". Open it interactively with `{storage.dashboard_command(getattr(job, 'storage', ''))}`."))
    if objectives.of(objective).by_capacity and rows:
        blocks += latency.goodput_headline(rows, job, ev)
    else:
        blocks += _headline(rows, best, base, ev, level, objective)
    if plan is not None:
        blocks += _plan_lead(plan)
    if plan is not None:
        blocks += _plan(plan, Path(report_dir))
    blocks += _launch_noise(rows, ev, levels, objective)
    blocks += latency.goodput_blocks(rows, job, trials)
    if latency.wants_plot(objective):
        blocks.append(doc.image(latency.LATENCY_PLOT, latency.plot_title(objective)))
    blocks += latency.latency_blocks(rows, objective, plan)
    blocks += latency.traffic_blocks(job, rows)
    blocks += _summary(rows)
    blocks += [doc.heading(2, "Plots")] + [doc.image(name, alt) for name, alt in (
        ("history.png", "Optimization history"), ("params.png", "tok/s per parameter value"),
        ("importance.png", "Parameter importance"), ("timeline.png", "Trial timeline per node"))]
    blocks += startup_blocks(rows)
    blocks += _top_table(rows, best, base, ev, level)
    blocks += _not_explored(job, rows)
    given = effects_given_top(rows, effects, best[0].params, objective) if best else None
    blocks += _importance_blocks(effects, notes, given, [v for _, v, _ in measured_points(rows)])
    blocks += _compare(report_dir)
    ceiling_blocks, ceiling = _ceiling(job, rows, best, backend, bandwidth_bytes_s, allreduce_latency_s,
                                       Path(report_dir))
    blocks += ceiling_blocks
    blocks += _failures(rows)
    blocks += _fallbacks(rows, best)
    blocks += _nccl_warnings(rows, best)
    blocks += _by_node(rows)
    blocks += [doc.para("Files: `trials.csv` (one row per trial), the PNG plots, `report.md`, `report.html`.")]
    summary = {"best": best[0] if best else None, "baseline": base, "ceiling": ceiling,
               "importance": {e.name: e.share for e in effects if not e.conditional},
               "plan": plan.to_dict() if plan is not None else None}
    return blocks, summary
