"""A study's trials as the user sees them: one plain record per trial.

Everything downstream of the driver (``status``, ``report``, ``export``, ``compare``)
reads the study through this module and never through raw Optuna states, because
storage encodes outcomes for the sampler's sake (see ``docs/architecture.md``,
"Trial records"): a config-caused FAIL is an *infeasible COMPLETE* trial with value
0.0, an interrupted one is an Optuna FAIL. The user-facing outcome is read only from
the ``outcome`` user attribute (for a trial a dead driver left RUNNING, from the record the
next driver kept: ``storage.trial_attrs``); a trial without one is RUNNING or WAITING while
Optuna says so, and otherwise a FAIL whose reason says that no outcome was recorded. Rows
are ``records.TrialRow``s (frozen: a consumer never changes what another one reads).

A record is checked against itself before it is believed (``_damage``): its config against
the space its parameters were drawn from (as Optuna stored it), its value against the samples
it was measured with. A record changed after it was written (edited by
hand: a value outside the space, 1e9 tok/s) is a FAIL row naming what does not match, left out
of every figure, and named once in a warning: one edited trial never bricks or misleads the
study.

    trial_rows(study)        one ``records.TrialRow`` per trial
    best_rows(rows, k)       the k best distinct configs that may be called "best"
    baseline_row(rows)       the baseline trial's row
    row_interval(a, b, ev)   b's figure relative to a's over their launches (``launches.Evidence``)
    ties_with_best(best, ev) the runners-up within the launch noise of the best
    format_status(rows)      compact human table for ``ncclsweep status``
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import statistics
import weakref
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from orchestrator.core import outcome
from orchestrator.core.golden_check import disputed
from orchestrator.core.level import context_of
from orchestrator.core.measurement import Measurement
from orchestrator.core.objectives import Measure, measure_of
from orchestrator.core.records import (
    COMPLETE,
    FAIL,
    NOT_THE_CONFIGS_FAULT,
    PRUNED,
    RUNNING,
    WAITING,
    TrialRow,
    config_key,
)
from orchestrator.core.verdict import WITHIN_NOISE, RatioInterval, verdict
from orchestrator.study.evidence.launches import Evidence, at_one_time, figures, measured_launches
from orchestrator.study.storage.storage import (
    ATTR_BASELINE,
    ATTR_BASELINE_REPEAT,
    ATTR_CACHED_FROM,
    ATTR_COUNTED,
    ATTR_ENQUEUED_BY,
    ATTR_KEY,
    ATTR_LAUNCH_ROLE,
    ATTR_RACE,
    ATTR_REFERENCE_RUN,
    ATTR_RUN,
    ATTR_SKIPPED,
    MEASURE_ATTR,
    OUTVOTED_ATTR,
    contains,
    recovered_attr,
    trial_attrs,
)

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial



log = logging.getLogger(__name__)

# the keys of a row in ``status --json`` (``TrialRow.to_json``)
ROW_KEYS = tuple(TrialRow(number=0, state="COMPLETE").to_json())  # what `status --json` prints, in order


# ---- rows ----------------------------------------------------------------------------------------
def _iso(ts: Any) -> str | None:
    if ts is None:
        return None
    if isinstance(ts, _dt.datetime):
        dt = ts if ts.tzinfo else ts.astimezone()
        return dt.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds")
    try:
        value = float(ts)
    except (TypeError, ValueError):
        return str(ts)
    return _dt.datetime.fromtimestamp(value, tz=_dt.timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(text: str | None) -> float | None:
    """Unix time of an ISO timestamp written by this module (None passes through)."""
    if not text:
        return None
    try:
        return _dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def nccl_summary(nccl: dict[str, Any] | None) -> str:
    """One short line from the parsed NCCL start-up info (version, settings, transports)."""
    if not nccl:
        return ""
    parts = []
    for key in ("version", "nccl_version"):
        if nccl.get(key):
            parts.append(f"NCCL {nccl[key]}")
            break
    env = nccl.get("env") or nccl.get("settings") or {}
    if isinstance(env, dict):
        parts.extend(f"{k}={v}" for k, v in sorted(env.items()))
    for key, value in sorted(nccl.items()):
        if key in ("version", "nccl_version", "env", "settings") or value in (None, "", [], {}):
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value[:4]) + ("..." if len(value) > 4 else "")
        elif isinstance(value, dict):
            continue
        parts.append(f"{key}={value}")
    return " ".join(parts)[:200]


def _row(trial: FrozenTrial, ua: dict[str, Any]) -> TrialRow:
    optuna_state = trial.state.name
    outcome = ua.get("outcome")
    failure_kind = ua.get("failure_kind")
    failure_reason = ua.get("failure_reason")
    if optuna_state == RUNNING and ATTR_COUNTED not in ua:
        state = RUNNING  # its record is being written, or was cut short (the next run recovers it)
    elif outcome in (COMPLETE, FAIL, PRUNED):
        state = outcome
    elif optuna_state in (RUNNING, WAITING):
        state = optuna_state
    elif optuna_state == PRUNED:
        state = PRUNED
    else:
        # never trust a value the driver did not record an outcome for
        state = FAIL
        failure_reason = failure_reason or f"no outcome recorded (storage state {optuna_state})"

    metrics = ua.get("metrics") or {}
    measured = Measurement.from_record(metrics)
    value = None
    if state == COMPLETE:
        value = _num(ua.get("value"))
        if value is None and measured is not None:
            value = measured.value
    if value is not None and (measured is None or not measured.levels):  # a record of only a value
        measured = Measurement.from_record(metrics, value)
    head = measured.headline if measured is not None else None
    cv, rel_ci = (head.cv, head.rel_ci) if head is not None else (None, None)
    node_info = ua.get("node") or {}
    if not isinstance(node_info, dict):
        node_info = {"hostname": str(node_info)}
    params = ua.get("config")
    if params is None:
        params = dict(trial.params)
    key = ua.get(ATTR_KEY) or config_key(params)
    cached_from = ua.get(ATTR_CACHED_FROM)
    counted = ua.get(ATTR_COUNTED)
    if counted is None:  # older records: a fresh, finished, not-interrupted trial counts
        counted = (cached_from is None and state in (COMPLETE, FAIL, PRUNED)
                   and failure_kind not in NOT_THE_CONFIGS_FAULT)
    started = ua.get("started_at") or (None if ua.get(ATTR_SKIPPED) else trial.datetime_start)
    ended = ua.get("ended_at") or (None if ua.get(ATTR_SKIPPED) else trial.datetime_complete)
    nccl = ua.get("nccl") or {}
    return TrialRow(
        number=trial.number,
        state=state,
        params=params,
        value=value,
        spread=rel_ci if rel_ci is not None else cv,
        cv=cv,
        rel_ci=rel_ci,
        failure_kind=failure_kind if state == FAIL else None,
        failure_reason=failure_reason if state in (FAIL, PRUNED) else None,
        node=node_info.get("hostname") or node_info.get("node_id"),
        node_id=node_info.get("node_id"),
        started_at=_iso(started),
        ended_at=_iso(ended),
        durations=dict(ua.get("timing") or {}),
        cached_from=cached_from,
        counted=bool(counted),
        is_baseline=bool(ua.get(ATTR_BASELINE, False)),
        config_key=key,
        warnings=list(ua.get("warnings") or []),
        nccl=nccl,
        nccl_summary=nccl_summary(nccl),
        metrics=metrics,
        correctness=ua.get("correctness") or {},
        node_info=node_info,
        optuna_state=optuna_state,
        skipped=ua.get(ATTR_SKIPPED),
        enqueued_by=ua.get(ATTR_ENQUEUED_BY),
        run=ua.get(ATTR_RUN),
        log_tail=ua.get("log_tail") or "",
        server=dict(ua.get("server") or {}),
        measurement=measured,
        acceptance_rate=head.acceptance_rate if head is not None else None,
        mean_accepted_length=head.mean_accepted_length if head is not None else None,
        startup_phases=dict(ua.get("startup_phases") or {}),
        launch_role=_launch_role(ua),
        race=dict(ua.get(ATTR_RACE) or {}),
        prompt_set=dict(ua.get("prompt_set") or {}),
    )


def _launch_role(ua: dict[str, Any]) -> str | None:
    """What a launch outside the search was (``TrialRow.launch_role``); None: a trial of the search."""
    if ua.get(ATTR_LAUNCH_ROLE):
        return str(ua[ATTR_LAUNCH_ROLE])
    if ua.get(ATTR_BASELINE_REPEAT):
        return "repeat"
    if ua.get(ATTR_REFERENCE_RUN):
        return "reference"
    return None


_WARNED: set[tuple[int, Any]] = set()  # damaged records already named in this process


def _damage(trial: FrozenTrial, config: Any, value: float | None, metrics: dict[str, Any]) -> str | None:
    """What in a trial's record does not match the rest of it (None: it is whole): a config
    value that is not a point of the space its parameter was drawn from (Optuna's stored
    distribution), or not the value Optuna recorded for the parameter (an edit within the space);
    a value that is no rate, or lies outside every sample it was measured with. (A config key is
    not checked: its spelling may differ between releases of the tool.)"""
    if isinstance(config, dict):
        for name, got in config.items():
            dist = trial.distributions.get(name)
            if dist is not None and not _drawn_from(dist, got):
                return f"its config's {name}={got!r} is not a value of the space it was drawn from"
            if name in trial.params and not _same_value(trial.params[name], got):
                return (f"its config's {name}={got!r} is not the value Optuna drew for it "
                        f"({trial.params[name]!r})")
    if value is None or (value == 0 and _holds_nowhere(metrics)):
        return None
    if not math.isfinite(value) or value <= 0:
        return f"its value {value!r} is no decode rate"
    levels = metrics.get("levels")
    levels = levels if isinstance(levels, dict) else {}
    sets = [metrics.get("decode_samples")] + [lv.get("samples") for lv in levels.values() if isinstance(lv, dict)]
    ranges = [(min(s), max(s)) for s in ([x for x in (s or []) if isinstance(x, (int, float))] for s in sets) if s]
    if ranges and not any(lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9) for lo, hi in ranges):
        lo, hi = ranges[0]
        return f"its value {value:g} tok/s lies outside the samples it was measured with ({lo:g}-{hi:g})"
    return None


def _holds_nowhere(metrics: dict[str, Any]) -> bool:
    """A goodput measurement whose SLO broke at the first concurrency it tried: its value, 0 tok/s
    within the SLO, is a measured rate (an eager baseline under a tight TPOT target), not damage."""
    gp, rate = metrics.get("goodput"), metrics.get("rate")
    if isinstance(rate, dict):  # by request rate: no rate held, and some was probed
        return rate.get("holds") is None and bool(rate.get("probes"))
    return isinstance(gp, dict) and not gp.get("holds") and gp.get("breaks") is not None


def _same_value(drawn: Any, recorded: Any) -> bool:
    """The config holds the value Optuna drew (in the spelling normalization gives it)."""
    if isinstance(drawn, str) and isinstance(recorded, str):
        return drawn.lower() == recorded.lower()
    return bool(drawn == recorded)


def _drawn_from(dist: Any, value: Any) -> bool:
    """``value`` is a point of ``dist``, or a choice in the spelling normalization gives it (a
    config is normalized: NCCL values in NCCL's case)."""
    if contains(dist, value):
        return True
    choices = getattr(dist, "choices", None)
    return isinstance(value, str) and choices is not None and value.lower() in {str(c).lower() for c in choices}


def _checked(trial: FrozenTrial, ua: dict[str, Any], row: TrialRow) -> TrialRow:
    """``row``, or when its record does not match itself (``_damage``) a FAIL row saying so,
    left out of every figure, and named once in a warning."""
    if row.state not in _FINISHED:
        return row
    damage = _damage(trial, ua.get("config"), row.value, ua.get("metrics") or {})
    if damage is None:
        return row
    if (trial.number, trial.datetime_start) not in _WARNED:
        _WARNED.add((trial.number, trial.datetime_start))
        log.warning("trial %d's record was changed after it was written (%s; edited by hand?): it is left out "
                    "of every figure", trial.number, damage)
    return replace(row, state=FAIL, value=None, counted=False, failure_kind=None,
                   failure_reason=f"its record was changed after it was written ({damage}): left out of every figure",
                   measurement=Measurement(), levels={}, acceptance_rate=None, mean_accepted_length=None)


# Rows of finished trials, per study object: Optuna refuses to change a finished trial, so its
# row changes only with the record a later driver keeps for it (``storage.recovered_attr``).
# The search policy reads the rows at every proposal; building them was a third of a replay.
_FINISHED_ROWS: weakref.WeakKeyDictionary[Any, dict[int, tuple[Any, TrialRow]]] = weakref.WeakKeyDictionary()
_FINISHED = ("COMPLETE", "FAIL", "PRUNED")


def trial_rows(study: optuna.Study) -> list[TrialRow]:
    """One row per trial, in trial-number order, with the user-facing state (``TrialRow``)."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    study_attrs = getattr(study, "user_attrs", None) or {}
    try:
        cache = _FINISHED_ROWS.setdefault(study, {})
    except TypeError:  # not weakly referenceable: no cache
        cache = {}
    rows = [_finished_row(t, study_attrs, cache) for t in trials]
    outvoted = set(study_attrs.get(OUTVOTED_ATTR) or [])
    rows = [replace(r, correctness={**r.correctness, "ok": False, "outvoted": True,
                                    "reason": "outvoted as the golden reference"})
            if r.number in outvoted else r for r in rows]  # a golden reference later trials outvoted was wrong
    measure = measure_of(study_attrs.get(MEASURE_ATTR))
    if measure != Measure():  # a study of another measure than throughput (per GPU, a latency): its rows read by it
        rows = [replace(r, measure=measure) for r in rows]
    hosts = _hosts_with_concurrent_nodes(rows)
    return [replace(r, node=f"{r.node}/{r.node_id[:8]}") if r.node in hosts and r.node_id else r for r in rows]


def _finished_row(trial: FrozenTrial, study_attrs: dict[str, Any], cache: dict[int, tuple[Any, TrialRow]]) -> TrialRow:
    """The trial's row, from ``cache`` where the trial had finished when it was built and its
    kept record (a recovered trial's) is the same."""
    if trial.state.name not in _FINISHED:
        return _row(trial, trial_attrs(trial, study_attrs))
    key = (trial.state, trial.datetime_complete, repr(study_attrs.get(recovered_attr(trial.number))))
    hit = cache.get(trial.number)
    if hit is None or hit[0] != key:
        attrs = trial_attrs(trial, study_attrs)
        hit = cache[trial.number] = (key, _checked(trial, attrs, _row(trial, attrs)))
    return hit[1]


def _hosts_with_concurrent_nodes(rows: list[TrialRow]) -> set[str]:
    """Hosts on which several Ray nodes ran trials at the same time (a local test cluster,
    containers): their rows need the node id to be told apart.

    A study resumed in a new run gets a new Ray node id on the same machine; those ids
    ran one after the other, so they stay one node.
    """
    spans: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        start, end = parse_iso(r.started_at), parse_iso(r.ended_at)
        if r.node_id and start is not None and end is not None:
            span = spans.setdefault(r.node or r.node_id, {}).setdefault(r.node_id, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    out = set()
    for host, by_id in spans.items():
        ordered = sorted(by_id.values())
        if any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:])):
            out.add(host)
    return out


def best_rows(rows: list[TrialRow], k: int = 1,
              value: Callable[[TrialRow], float | None] | None = None) -> list[TrialRow]:
    """The k best distinct configs, best first.

    Only configs with a row ``outcome.rankable`` allows (COMPLETE, launched and counted, no
    constraint broken, never a config that failed the correctness gate or NCCL verification).
    A config is ranked by the median over *every launch* of it (``launches.measured_launches``:
    its trials, the relaunches and race launches of the study, the launches ``compare`` made),
    so one lucky launch does not win and fresh launches move it; ``n_measurements`` says how
    many. Where the box drifted, the figures are read at one time first (``launches.at_one_time``):
    a config launched late is not ranked below one launched early for the box's sake. It is
    represented by its lower-median counted trial, the baseline's config by the baseline trial,
    the reference every "x baseline" is computed against.
    ``value`` ranks by another number of a row (a concurrency level's median, the traffic
    mix: ``study.plan``); rows without it are not ranked. Default: ``TrialRow.value``.
    """
    score = value or (lambda r: r.worth)
    groups: dict[str, list[TrialRow]] = {}
    for r in outcome.rankable(rows):
        if score(r) is not None:
            groups.setdefault(r.config_key, []).append(r)
    evidence = measured_launches(rows)
    read, _ = at_one_time(figures({**evidence, **{k: evidence.get(k, m) for k, m in groups.items()}}, score))
    base = baseline_row(rows)
    ranked: list[tuple[float, TrialRow]] = []
    for key, members in groups.items():
        members = sorted(members, key=lambda r: (score(r) or 0.0, -r.number))
        if base is not None and any(r.number == base.number for r in members):
            rep = base  # the baseline config is represented by the baseline trial, the study's reference
        else:
            rep = members[(len(members) - 1) // 2]  # lower median: no lucky winner
        got = [v for _, v in read.get(key, ())] or [score(rep) or 0.0]
        ranked.append((statistics.median(got), replace(rep, n_measurements=len(got))))
    ranked.sort(key=lambda pair: (-pair[0], pair[1].number))
    return [rep for _, rep in ranked[: max(0, int(k))]]


def baseline_row(rows: list[TrialRow]) -> TrialRow | None:
    """The baseline trial (user attr ``is_baseline``, else trial 0): its latest launch that
    measured it with a sane output (a reference later outvoted is not), else its latest
    measurement, else its latest attempt (whose state may be FAIL)."""
    attempts = [r for r in rows if r.is_baseline and r.cached_from is None]
    measured = [r for r in attempts if r.state == COMPLETE and r.counted]
    sane = [r for r in measured if not outcome.failed_correctness(r)]
    if attempts:
        return (sane or measured or attempts)[-1]
    return next((r for r in rows if r.number == 0), None)


def baseline_repeats(rows: list[TrialRow]) -> list[TrialRow]:
    """Every measured (not cached) COMPLETE row of the baseline's config."""
    base = baseline_row(rows)
    if base is None:
        return []
    return [r for r in rows if r.config_key == base.config_key and r.state == COMPLETE
            and r.value is not None and r.cached_from is None]


def decode_samples(row: TrialRow) -> list[float]:
    """The trial's single-request decode samples (every timed repeat), [] when none were kept; of a
    goodput trial, the samples behind its value: the total tok/s where every SLO last held."""
    got = row.measurement
    one = got.headline if got is not None and got.by_capacity else row.at(1)
    return list(one.samples) if one is not None else []


def row_interval(a: TrialRow, b: TrialRow, evidence: Evidence, level: int = 1) -> RatioInterval:
    """Config b's figure relative to config a's at ``level``, over every launch of each with the
    study's launch noise (``launches.Evidence.interval``): the interval of the study's verdicts."""
    return evidence.interval(a.config_key, b.config_key, level)


TOP_N = 10  # configs the report's top table ranks (and ``compare --also ties`` looks among)


def ties_with_best(best: list[TrialRow], evidence: Evidence, level: int = 1) -> list[TrialRow]:
    """The runners-up in ``best`` (best first) within the launch noise of the best at ``level``:
    the interval of their ratio to it (``row_interval``) contains 1.0, so the objective cannot rank
    them. A runner-up without an interval (the launch noise not measured yet) is not named: unknown."""
    if not best:
        return []
    top = best[0]
    out = []
    for r in best[1:]:
        iv = row_interval(top, r, evidence, level)
        if iv.bounded and verdict(iv) == WITHIN_NOISE:
            out.append(r)
    return out


def _param_order(item: tuple[str, Any]) -> tuple[int, str]:
    name = item[0]
    group = 2 if name.startswith("backend.") else 1 if name.startswith("env.") else 0
    return group, name


def short_params(params: dict[str, Any] | None) -> str:
    """``tp_size=2 NCCL_PROTO=LL max_batch=8``: prefixes ``env.``/``backend.`` dropped."""
    if not params:
        return ""
    out = []
    for name, value in sorted(params.items(), key=_param_order):
        shown = name.split(".", 1)[1] if name.startswith(("env.", "backend.")) else name
        if isinstance(value, bool):
            value = "1" if value else "0"
        out.append(f"{shown}={value}")
    return " ".join(out)


def _fmt_s(seconds: Any) -> str:
    s = _num(seconds)
    if s is None:
        return "-"
    return f"{s:.0f}s" if s < 600 else f"{s / 60:.0f}m"


def _clip(text: Any, width: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _level_cell(row: TrialRow, level: int) -> str:
    got = row.at(level)
    value = got.value if got is not None else None
    if value is None or row.state not in (COMPLETE, PRUNED):
        return "-"
    return f"{value:.1f}" if value < 100_000 else f"{value:.0f}"


def format_status(rows: list[TrialRow], width: int | None = None, levels: Iterable[int] | None = None) -> str:
    """A compact table, one line per trial, then a one-line summary and the best so far.
    ``levels`` (a plan's objective): a column per level (its median: decode tok/s at 1,
    total tok/s above) instead of the one tok/s column."""
    if not rows:
        return "no trials yet"
    if width is None:
        try:
            width = os.get_terminal_size().columns
        except OSError:
            width = 160
    width = max(100, width)
    base = baseline_row(rows)
    base_value = base.value if base and base.state == COMPLETE else None
    tainted = outcome.tainted_keys(rows)
    shown_levels = sorted(levels or ())
    shown_levels = shown_levels if len(shown_levels) > 1 else []
    columns = ("".join(f" {str(lv) if context_of(lv) else '@' + str(lv):>9}" for lv in shown_levels) if shown_levels
               else f" {'tok/s':>8}")
    head = (f"{'#':>4} {'state':<8}{columns} {'+-%':>5} {'x base':>6} {'node':<12} {'time':>5} {'start':>5}  "
            "params / failure")
    lines = [head, "-" * min(width, len(head) + 40)]
    launched = [r for r in rows if not r.skipped]  # proposals never launched are not trials
    for r in launched:
        value = f"{r.value:.2f}" if r.value is not None else "-"
        spread = f"{100 * r.spread:.1f}" if r.spread is not None and r.value is not None else "-"
        ratio = f"{r.value / base_value:.2f}" if r.value is not None and base_value else "-"
        tags = []
        if r.is_baseline:
            tags.append("[baseline]")
        if r.cached_from is not None:
            tags.append(f"[cached #{r.cached_from}]")
        if r.launch_role == "race":
            tags.append(f"[race round {int(r.race.get('round', 0)) + 1}]")
        elif r.launch_role in ("relaunch", "compare", "repeat"):
            tags.append(f"[{r.launch_role}]")
        if r.state == COMPLETE and r.config_key in tainted:
            tags.append(f"[never best: wrong output in #{tainted[r.config_key]}]")
        if (r.startup_phases or {}).get("compile_cache"):
            tags.append(f"[compile {r.startup_phases['compile_cache']}]")
        detail = " ".join(tags + [short_params(r.params)])
        if r.state in (FAIL, PRUNED):
            detail += f"  | {r.failure_kind or r.state.lower()}: {r.failure_reason or ''}"
        if r.warnings:
            detail += f"  | warn: {r.warnings[0]}"
        cells = "".join(f" {_level_cell(r, lv):>9}" for lv in shown_levels) if shown_levels else f" {value:>8}"
        phases = r.startup_phases or {}
        start = _fmt_s(phases.get("ready_s", phases.get("ended_s")))  # spawn -> ready (or -> a failed start's end)
        prefix = (f"{r.number:>4} {r.state:<8}{cells} {spread:>5} {ratio:>6} "
                  f"{_clip(r.node or '-', 12):<12} {_fmt_s(r.durations.get('total_s')):>5} {start:>5}  ")
        lines.append(prefix + _clip(detail, max(20, width - len(prefix))))
    counts: dict[str, int] = {}
    for r in launched:
        counts[r.state] = counts.get(r.state, 0) + 1
    counted = sum(1 for r in rows if r.counted)
    skipped = len(rows) - len(launched)
    lines.append("")
    lines.append("trials: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 + f"; {counted} count toward the budget"
                 + (f"; {skipped} proposals never launched (infeasible or duplicate; in --json)" if skipped else ""))
    best = best_rows(rows, 1)
    b = best[0] if best else None
    if b is not None and b.value is not None:
        ev = Evidence(rows)
        level = b.headline.level if b.headline is not None else 1
        figure = ev.median(b.config_key, level) or b.worth or b.value
        base_fig = ev.median(base.config_key, level) if base is not None and base_value else None
        m = b.measure  # the figures are its worths: said in its unit
        ratio = f", {m.shown(figure) / m.shown(base_fig):.2f}x baseline" if base_fig else ""
        n = b.n_measurements
        lines.append(f"best: trial {b.number} {m.text(figure, 2)} (median of {n} launch{'' if n == 1 else 'es'})"
                     f"{ratio}  {short_params(b.params)}")
    else:
        why = disputed(rows)
        lines.append(f"best: none: {why}" if why else
                     "best: none yet (no COMPLETE trial that passed the correctness gate)")
    return "\n".join(lines)



def infeasible_lines(rows: list[TrialRow]) -> list[str]:
    """'#3 (baseline): breaks the SLO: ...': the measured configs the latency targets left
    nowhere to count (``outcome.judge_slo``), the baseline among them (reported, not a stop)."""
    out = []
    for r in rows:
        why = (r.metrics or {}).get("slo_violations")
        if r.state == COMPLETE and why and r.cached_from is None:
            out.append(f"#{r.number}{' (baseline)' if r.is_baseline else ''}: {'; '.join(map(str, why))}")
    return out
