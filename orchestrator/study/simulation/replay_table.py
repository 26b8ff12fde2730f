"""Replay tables: the recorded measurements a search is replayed against, read, checked,
indexed and written (``study.replay`` replays them; ``study.suite`` builds stand-ins as tables).

A *table* is a CSV with one row per distinct configuration:

    <param columns...>, samples, failure[, baseline][, note]

- every column not in ``RESERVED_COLUMNS`` is a parameter; its values are categorical
  (typed as int, float or bool when every value of the column parses so). An empty
  cell means "this parameter does not matter for this row" (inactive, or dropped by
  normalization, e.g. NCCL_* at tp_size=1): the row answers every value of it;
- ``samples``: repeated decode tok/s of that config, ``;``-separated (empty when it fails);
  or, for a table over concurrency levels (a *plan* table), one column per level instead,
  ``samples@1``, ``samples@10``, ``samples@64``: that level's repeated samples (level 1
  single-request decode tok/s, level N total tok/s with N streams), every level filled on a
  working row;
- ``failure``: a config-caused failure kind (``start-crash``, ``wrong-output``, ...) or empty;
- ``baseline``: ``1`` on the row the study enqueues first (optional);
- ``startup_s``: seconds that config's server takes to start with warm engine caches, or to
  fail at start (optional; a table without it counts launches only);
- ``compile_s``: seconds a cold compile adds to the first launch of the row's compile key
  (its parameters but the NCCL variables: ``study.cost.compile_key``) in a run; later launches
  of the key load it (optional; empty or 0: nothing is compiled);
- ``noise``: the coefficient of variation of one benchmark sample (measurement noise, e.g. 0.01);
  with it the row's samples are its true value, and a replayed sample is their median x a normal
  draw with that CV (optional; empty: a replayed sample is one of the row's recorded samples);
- ``launch_noise``: the coefficient of variation of one launch (optional): every launch multiplies
  all of its samples by one normal draw with that CV (a server measures a little faster or slower
  from one launch to the next: clocks, placement, what the box did meanwhile), apart from and on
  top of the per-sample noise;
- ``log``: what a failing row's server log says (optional), e.g. the line where NCCL names the value it
  refused; the replayed failure carries it, so the study's value bans read it as a real log
  (``orchestrator.study.evidence.bans``: a value a failure's log names is the one it blames);
- ``note``: free text, ignored.

``load_table`` reads a CSV (``table_from_frame`` a DataFrame, ``index_table`` rows already built),
refusing a bad one with ``TableError`` (one line naming the file, row and rule); ``table_from_study``
writes a finished study back in this format, so real runs become tables (a plan study with one
``samples@N`` column per level); ``write_table`` writes a ``Table`` as one.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from orchestrator.core import files
from orchestrator.core.errors import BadInput, brief
from orchestrator.core.level import parse as parse_level
from orchestrator.core.level import streams
from orchestrator.core.measurement import Measurement
from orchestrator.core.objectives import Measure, measure_of
from orchestrator.core.records import FAILURE_KINDS, NOT_THE_CONFIGS_FAULT, PRUNED, config_key
from orchestrator.study.storage.storage import ATTR_BASELINE, ATTR_COUNTED, ATTR_KEY, MEASURE_ATTR

LEVEL_PREFIX = "samples@"  # a plan table's per-level sample columns: samples@1, samples@10, ...
RESERVED_COLUMNS = ("samples", "failure", "baseline", "startup_s", "compile_s", "noise", "launch_noise", "log",
                    "note")
OPTIMAL_TOLERANCE = 1e-6  # a row whose true median is this close (relative) to the best is optimal
CONFIG_FAILURES = tuple(k for k in FAILURE_KINDS if k not in NOT_THE_CONFIGS_FAULT)


class TableError(BadInput, ValueError):
    """A table that cannot be replayed; the message names the file, row and rule (exit 2)."""


@dataclass
class Row:
    """One distinct configuration of a table."""

    params: dict[str, Any]  # non-empty cells only (typed)
    samples: list[float]  # the first level's (a plan table: its lowest level's)
    failure: str | None
    baseline: bool = False
    line: int = 0
    levels: dict[int, list[float]] = field(default_factory=dict)  # a plan table: level -> samples
    startup_s: float | None = None  # seconds to start (or to fail at start); None: the table has none
    compile_s: float = 0.0  # seconds a cold compile adds to the first launch of its compile key
    noise: float | None = None  # CV of one sample around the true value; None: draw a recorded sample
    launch_noise: float = 0.0  # CV of the factor one launch multiplies all of its samples by
    log: str = ""  # a failing row's server log (the replayed failure's log tail)

    @property
    def median(self) -> float | None:
        return None if self.failure or not self.samples else float(statistics.median(self.samples))

    def median_at(self, level: int) -> float | None:
        """The true median at ``level`` (a table of one level: ``median``)."""
        if not self.levels:
            return self.median
        got = self.levels.get(level) or []
        return None if self.failure or not got else float(statistics.median(got))

    @property
    def key(self) -> str:
        return config_key(self.params)


@dataclass
class Table:
    """A loaded table: rows, parameter choices and the true best."""

    name: str
    rows: list[Row]
    choices: dict[str, list[Any]]  # parameter -> values, in order of first appearance
    _index: dict[tuple, int] = field(default_factory=dict, repr=False)
    levels: tuple[int, ...] = ()  # a plan table's levels, ascending; () for a table of one level

    @property
    def best(self) -> float:
        return max(r.median for r in self.rows if r.median is not None)

    def best_at(self, level: int) -> float:
        return max(m for r in self.rows if (m := r.median_at(level)) is not None)

    @property
    def by_level(self) -> bool:
        return len(self.levels) > 1

    @property
    def baseline(self) -> Row | None:
        return next((r for r in self.rows if r.baseline), None)

    @property
    def has_costs(self) -> bool:
        """Every row says what its start-up costs (hours can be counted)."""
        return all(r.startup_s is not None for r in self.rows)

    def optimal(self) -> set[str]:
        """Keys of the rows whose true median is the best (up to ``OPTIMAL_TOLERANCE``)."""
        floor = (1.0 - OPTIMAL_TOLERANCE) * self.best
        return {r.key for r in self.rows if r.median is not None and r.median >= floor}

    def within(self, target: float) -> list[Row]:
        """Rows whose true median is within ``target`` (relative) of the best."""
        floor = (1.0 - target) * self.best
        return [r for r in self.rows if r.median is not None and r.median >= floor]

    def lookup(self, config: dict[str, Any]) -> Row | None:
        """The row that answers a full raw config (every parameter set), else None."""
        idx = self._index.get(tuple(config.get(p) for p in self.choices))
        return None if idx is None else self.rows[idx]

    def by_key(self) -> dict[str, Row]:
        return {r.key: r for r in self.rows}


def _typed(values: list[str]) -> list[Any]:
    present = [v for v in values if v != ""]
    def all_parse(fn) -> bool:
        try:
            for v in present:
                fn(v)
            return True
        except ValueError:
            return False
    if present and all(v.lower() in ("true", "false") for v in present):
        return [None if v == "" else v.lower() == "true" for v in values]
    if present and all_parse(int):
        return [None if v == "" else int(v) for v in values]
    if present and all_parse(float):
        return [None if v == "" else float(v) for v in values]
    return [None if v == "" else v for v in values]


def load_table(path: str | Path) -> Table:
    """Read and validate a table (see the module docstring for the format)."""
    import pandas as pd  # heavy: imported only when a table is built

    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, comment="#")
    except FileNotFoundError:
        raise TableError(f"{path}: no such table") from None
    except Exception as exc:  # noqa: BLE001 - any parse problem is one line
        raise TableError(f"{path}: not a readable CSV table: {exc}") from None
    return table_from_frame(df, name=path.name)


def table_from_frame(df, name: str = "table") -> Table:
    """Build a ``Table`` from a DataFrame in the CSV format."""
    df = df.fillna("").astype(str)
    cols = [c.strip() for c in df.columns]
    df.columns = cols
    level_cols = {c: _level_of(c, name) for c in cols if c.startswith(LEVEL_PREFIX)}
    if "samples" in cols and level_cols:
        raise TableError(f"{name}: a table has either a 'samples' column or one {LEVEL_PREFIX}N column per level, "
                         "not both")
    if "samples" not in cols and not level_cols:
        raise TableError(f"{name}: needs a 'samples' column (tok/s repeats separated by ';'), or one "
                         f"{LEVEL_PREFIX}N column per concurrency level")
    levels = tuple(sorted(level_cols.values()))
    sample_cols = {lv: c for c, lv in level_cols.items()} if level_cols else {1: "samples"}
    params = [c for c in cols if c not in RESERVED_COLUMNS and c not in level_cols]
    if not params:
        raise TableError(f"{name}: needs at least one parameter column besides {', '.join(RESERVED_COLUMNS)}")
    typed = {p: _typed([v.strip() for v in df[p].tolist()]) for p in params}
    rows: list[Row] = []
    for i in range(len(df)):
        line = i + 2
        failure = df["failure"].iloc[i].strip() if "failure" in cols else ""
        if failure and failure not in CONFIG_FAILURES:
            raise TableError(f"{name}: line {line}: failure must be empty or one of {', '.join(CONFIG_FAILURES)}, "
                             f"not {brief(failure)}")
        per_level = {lv: _samples(df[col].iloc[i].strip(), name, line, col) for lv, col in sample_cols.items()}
        for lv, got in per_level.items():
            if not failure and not got:
                what = "at least one sample" if not levels else f"samples at every level ({sample_cols[lv]} is empty)"
                raise TableError(f"{name}: line {line}: a row without a failure needs {what}")
        samples = per_level[min(per_level)]
        flag = df["baseline"].iloc[i].strip().lower() if "baseline" in cols else ""
        row_params = {p: typed[p][i] for p in params if typed[p][i] is not None}
        if not row_params:
            raise TableError(f"{name}: line {line}: every parameter cell is empty")
        startup = _seconds_cell(df, "startup_s", i, name, line)
        compile_s = _seconds_cell(df, "compile_s", i, name, line) or 0.0
        noise = _cv_cell(df, "noise", i, name, line)
        launch_noise = _cv_cell(df, "launch_noise", i, name, line) or 0.0
        log = df["log"].iloc[i].strip() if "log" in cols else ""
        rows.append(Row(row_params, samples, failure or None, flag in ("1", "true", "yes"), line,
                        levels=per_level if levels else {}, startup_s=startup, compile_s=compile_s,
                        noise=noise, launch_noise=launch_noise, log=log))
    if not rows:
        raise TableError(f"{name}: no rows")
    if sum(r.baseline for r in rows) > 1:
        raise TableError(f"{name}: at most one row may have baseline=1")
    if all(r.median is None for r in rows):
        raise TableError(f"{name}: every row fails; nothing to find")
    choices: dict[str, list[Any]] = {}
    for p in params:
        seen: list[Any] = []
        for v in typed[p]:
            if v is not None and v not in seen:
                seen.append(v)
        choices[p] = seen
    return index_table(name, rows, choices, levels=levels if len(levels) > 1 else ())


def index_table(name: str, rows: list[Row], choices: dict[str, list[Any]], *,
                levels: tuple[int, ...] = ()) -> Table:
    """A table of ``rows`` over ``choices`` (parameter -> values), each full config indexed to the
    row that answers it; TableError where two rows describe the same configuration."""
    table = Table(name, rows, choices, levels=levels)
    for idx, row in enumerate(rows):
        axes = [[row.params[p]] if p in row.params else choices[p] for p in choices]
        for combo in itertools.product(*axes):
            if combo in table._index:
                other = rows[table._index[combo]]
                raise TableError(f"{name}: lines {other.line} and {row.line} describe the same configuration "
                                 f"{dict(zip(choices, combo))}")
            table._index[combo] = idx
    return table


def _level_of(column: str, name: str) -> int:
    try:
        level = parse_level(column[len(LEVEL_PREFIX):])
    except ValueError:
        level = 0
    if streams(level) < 1:
        raise TableError(f"{name}: column {brief(column)}: a level column is {LEVEL_PREFIX}N with N >= 1 "
                         "(requests in flight), e.g. samples@10 (samples@64@8192 with a context)")
    return level


def _samples(raw: str, name: str, line: int, column: str) -> list[float]:
    try:
        samples = [float(s) for s in raw.split(";") if s.strip()]
    except ValueError:
        raise TableError(f"{name}: line {line}: {column} must be numbers separated by ';', "
                         f"not {brief(raw)}") from None
    if any(not math.isfinite(s) or s <= 0 for s in samples):
        raise TableError(f"{name}: line {line}: {column} must be positive tok/s, not {brief(raw)}")
    return samples


def _number_cell(df, column: str, i: int, name: str, line: int, ok: Callable[[float], bool],
                 what: str) -> float | None:
    """A cell that is a number ``ok`` accepts or empty (None); a TableError naming ``what`` it must be."""
    raw = df[column].iloc[i].strip() if column in df.columns else ""
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or not ok(value):
        raise TableError(f"{name}: line {line}: {column} must be {what} or empty, not {brief(raw)}")
    return value


def _seconds_cell(df, column: str, i: int, name: str, line: int) -> float | None:
    return _number_cell(df, column, i, name, line, lambda v: v >= 0, "seconds (a number >= 0)")


def _cv_cell(df, column: str, i: int, name: str, line: int) -> float | None:
    return _number_cell(df, column, i, name, line, lambda v: 0 <= v < 1,
                        "a coefficient of variation between 0 and 1 (0.01 = 1%)")


def table_from_study(study: optuna.Study):
    """A finished study as a table DataFrame (one row per measured config, samples merged).

    Reads the records user attrs: ``config``, ``outcome``, ``failure_kind``,
    ``metrics.decode_samples``, ``counted``, ``is_baseline``, ``startup_phases`` (the
    ``startup_s`` column: the median of its launches' spawn -> ready, or -> the failure).
    Cached answers, never-launched proposals and interrupted trials are left out. A study of another
    measure than throughput (``core.objectives``: per GPU, a latency) is written as each launch's
    worth at each level (one sample per launch; higher is better, as the replay maximizes), so its
    replay ranks as the study did.
    """
    import pandas as pd  # heavy: imported only when a table is built

    measure = measure_of(study.user_attrs.get(MEASURE_ATTR))
    merged: dict[str, dict[str, Any]] = {}
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        outcome = ua.get("outcome")
        if not ua.get(ATTR_COUNTED) or outcome is None or "config" not in ua:
            continue
        if outcome == "FAIL" and ua.get("failure_kind") in NOT_THE_CONFIGS_FAULT:
            continue
        key = ua.get(ATTR_KEY) or config_key(ua["config"])
        entry = merged.setdefault(key, {"config": dict(ua["config"]), "samples": [], "failure": None,
                                        "baseline": False, "note": [], "startup": []})
        phases = ua.get("startup_phases") or {}
        started = phases.get("ready_s", phases.get("ended_s"))
        if isinstance(started, (int, float)):
            entry["startup"].append(float(started))
        if outcome == "FAIL":
            entry["failure"] = entry["failure"] or ua.get("failure_kind")
        elif measure != Measure():  # each launch's worth at each level
            recorded = Measurement.from_record(ua.get("metrics") or {})
            worths = {lv: w for lv, level in (recorded.levels.items() if recorded is not None else ())
                      if (w := measure.worth(level, ua["config"])) is not None}
            for lv, w in worths.items():
                entry.setdefault("levels", {}).setdefault(lv, []).append(w)
            if worths:
                entry["samples"].append(worths[min(worths)])
        else:
            samples = (ua.get("metrics") or {}).get("decode_samples") or []
            if not samples and ua.get("value") is not None:
                samples = [ua["value"]]
            entry["samples"].extend(float(s) for s in samples)
            for lv, rec in ((ua.get("metrics") or {}).get("levels") or {}).items():
                if isinstance(rec, dict):
                    entry.setdefault("levels", {}).setdefault(parse_level(lv), []).extend(
                        float(x) for x in rec.get("samples") or [])
        entry["baseline"] |= bool(ua.get(ATTR_BASELINE))
        entry["note"].append(f"trial {t.number}" + (" stopped early" if outcome == PRUNED else ""))
    params: list[str] = []
    for e in merged.values():
        for p in e["config"]:
            if p not in params:
                params.append(p)
    levels = sorted({lv for e in merged.values() for lv in e.get("levels", {})})
    sample_cols = [f"{LEVEL_PREFIX}{lv}" for lv in levels] if len(levels) > 1 else ["samples"]
    records = []
    for e in merged.values():
        rec = {p: _cell(e["config"].get(p)) for p in params}
        if len(levels) > 1:  # a plan study: one column per level
            for lv in levels:
                got = e.get("levels", {}).get(lv) or []
                rec[f"{LEVEL_PREFIX}{lv}"] = "" if e["failure"] else ";".join(f"{s:.4g}" for s in got)
        else:
            rec["samples"] = "" if e["failure"] else ";".join(f"{s:.4g}" for s in e["samples"])
        rec["failure"] = e["failure"] or ""
        rec["baseline"] = "1" if e["baseline"] else ""
        rec["startup_s"] = f"{statistics.median(e['startup']):.1f}" if e["startup"] else ""
        rec["note"] = ", ".join(e["note"])
        records.append(rec)
    columns = [*params, *sample_cols, "failure", "baseline",
               *(["startup_s"] if any(r["startup_s"] for r in records) else []), "note"]
    return pd.DataFrame.from_records(records, columns=columns)


def write_table(table: Table, path: str | Path) -> None:
    """Write ``table`` (one level) in the CSV format ``load_table`` reads back, whole or not at all."""
    params = list(table.choices)
    header = [*params, "samples", "failure", "baseline", "startup_s", "compile_s", "noise", "launch_noise", "log"]

    def quoted(text: str) -> str:
        return '"' + text.replace('"', '""') + '"' if any(ch in text for ch in ',"\n') else text

    lines = [",".join(header)]
    for r in table.rows:
        cells = [_cell(r.params.get(p)) for p in params]
        cells += [";".join(repr(v) for v in r.samples), r.failure or "", "1" if r.baseline else "",
                  "" if r.startup_s is None else f"{r.startup_s:g}", f"{r.compile_s:g}" if r.compile_s else "",
                  "" if r.noise is None else f"{r.noise:g}", f"{r.launch_noise:g}" if r.launch_noise else "", r.log]
        lines.append(",".join(quoted(c) for c in cells))
    files.write_whole(path, "\n".join(lines) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
