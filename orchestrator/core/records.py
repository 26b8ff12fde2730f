"""The data one trial produces, as plain JSON-able records.

Actors return a ``TrialResult``; the driver stores it in Optuna user attributes
(``to_attrs``) and everything downstream (status, report, export, simulate) reads it
back with ``from_attrs``. Failures are data here, never exceptions. ``TrialRow`` is one
trial as the user sees it, read back by ``history.trial_rows`` for status, report, export,
compare and importance.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.errors import StorageWriteError
from orchestrator.core.measurement import LevelResult, Measurement, outcome_metrics
from orchestrator.core.objectives.protocol import Measure

# Outcomes as the user sees them (storage may record a FAIL as an infeasible COMPLETE).
COMPLETE = "COMPLETE"
FAIL = "FAIL"
PRUNED = "PRUNED"
RUNNING = "RUNNING"
WAITING = "WAITING"



class FailureKind(str, enum.Enum):
    """The closed list of failure kinds: why a trial is FAIL. A member is its string (stored
    as such, compared equal to it), so records written before the enum read back unchanged."""

    START_CRASH = "start-crash"  # the server died or said it is dead before it was ready
    START_TIMEOUT = "start-timeout"  # not ready within timeouts.startup
    HANG = "hang"  # tree alive but silent (no log output, not ready; or a stream stopped) for timeouts.stall
    BENCH_TIMEOUT = "bench-timeout"  # the benchmark ran past timeouts.bench
    BENCH_ERROR = "bench-error"  # the server failed requests or died while measured
    WRONG_OUTPUT = "wrong-output"  # its output differs from the golden reference
    NCCL_INVALID = "nccl-invalid"  # NCCL refused one of its settings
    INTERRUPTED = "interrupted"  # stopped by the user or a dying driver
    NODE_LOST = "node-lost"  # the worker or node that ran it vanished
    ENV_ERROR = "env-error"  # the node, not the config: command missing, port taken, GPUs busy

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


FAILURE_KINDS = tuple(kind.value for kind in FailureKind)
# What each kind means for the study, decided here once (``orchestrator.core.outcome`` applies it):
# - not the config's fault: never cached as its answer, never banned, re-queued once;
NOT_THE_CONFIGS_FAULT = (FailureKind.INTERRUPTED, FailureKind.NODE_LOST, FailureKind.ENV_ERROR)
# - a timeout can be the machine's (load, a slow disk) as much as the config's: the first one
#   re-queues the config, a second one (the timeout reproduced) is its answer; a stall (``hang``:
#   silent for ``timeouts.stall``) is a timeout of its own and follows the same rule;
TIMEOUT_KINDS = (FailureKind.START_TIMEOUT, FailureKind.BENCH_TIMEOUT, FailureKind.HANG)
# - the config computes wrong results: never ranked, even if another measurement of it completed;
WRONG_RESULT_KINDS = (FailureKind.WRONG_OUTPUT, FailureKind.NCCL_INVALID)
# - it never got past start-up (what value bans learn crashes from);
START_KINDS = (FailureKind.START_CRASH, FailureKind.NCCL_INVALID)
# - it got past start-up, so none of its values keeps a server from starting.
AFTER_START_KINDS = (FailureKind.BENCH_TIMEOUT, FailureKind.BENCH_ERROR, FailureKind.WRONG_OUTPUT)

Config = dict[str, Any]
SIGNAL_KEYS = ("server_exit_code", "gpus_usable", "write_failed")  # where ``Signals`` are stored in ``metrics``


@dataclass(frozen=True)
class Signals:
    """What a trial tells the driver beside its outcome: how its server ended where the node saw it
    (``server_exit_code``: ``outcome.ended_by_the_stop`` names it), whether the GPUs were usable
    after the teardown (``gpus_usable``), and a write into the study's folder that failed
    (``write_failed``): each stops the run or explains a failure, none is a metric. Stored in
    ``metrics`` under their names (every version kept them there) and read back from it."""

    server_exit_code: int | None = None
    gpus_usable: bool | None = None
    write_failed: Mapping[str, Any] | None = None  # ``StorageWriteError.to_dict``: data crosses to the driver

    @property
    def write_error(self) -> StorageWriteError | None:
        """The failed write, to stop the run with (None: every write went through)."""
        return StorageWriteError.from_dict(dict(self.write_failed)) if self.write_failed is not None else None

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.server_exit_code is not None:
            out["server_exit_code"] = self.server_exit_code
        if self.gpus_usable is not None:
            out["gpus_usable"] = self.gpus_usable
        if self.write_failed is not None:
            out["write_failed"] = dict(self.write_failed)
        return out

    @classmethod
    def from_record(cls, metrics: Mapping[str, Any] | None) -> Signals:
        metrics = metrics or {}
        code, usable, failed = (metrics.get(k) for k in SIGNAL_KEYS)
        return cls(server_exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                   gpus_usable=usable if isinstance(usable, bool) else None,
                   write_failed=dict(failed) if isinstance(failed, Mapping) else None)

def config_key(config: Config) -> str:
    """Stable identity of a normalized config (same effective settings -> same key)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass
class ServerRecord:
    """Everything needed to find and end a server later without hitting a reused pid."""

    node_id: str
    hostname: str
    pid: int
    pgid: int
    start_time: float  # process start time in clock ticks since boot (/proc/<pid>/stat field 22)
    port: int
    argv: list[str] = field(default_factory=list)


@dataclass
class TrialResult:
    """What one trial produced. ``outcome`` is COMPLETE, FAIL or PRUNED."""

    outcome: str
    config: Config
    value: float | None = None  # the headline level's median (level 1: decode tok/s)
    failure_kind: str | None = None
    failure_reason: str | None = None
    # what the outcome added (constraint violations, a wrong config's ignored value, pruning
    # thresholds, ...): the measurement itself is ``measurement``, stored merged into ``metrics``
    metrics: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)  # launch_s, ready_s, warmup_s, bench_s, teardown_s
    started_at: float | None = None  # unix time
    ended_at: float | None = None
    node: dict[str, Any] = field(default_factory=dict)  # node_id, hostname, gpus, gpu_model
    nccl: dict[str, Any] = field(default_factory=dict)  # parsed NCCL start-up info
    warnings: list[str] = field(default_factory=list)
    correctness: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # greedy texts / logprobs for the gate
    # ServerRecord as dict, argv, env delta; ``fallbacks``: values the engine turned off, what it ran instead
    server: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""
    # where the start-up's time went: spawn -> first log line -> ready, and the engine's own
    # phases its log names (weights, compile with cache hit or miss, graph capture, ...)
    startup_phases: dict[str, Any] = field(default_factory=dict)
    # every phase the trial went through, in order: [its text then, seconds into the trial]
    # (``node.phases``: launching, starting: weights, warming up, measuring level 1, ...)
    phases: list[Any] = field(default_factory=list)
    # the decode prompts it was measured on (``config.prompts.fingerprint``: hash, count, lengths)
    prompt_set: dict[str, Any] = field(default_factory=dict)
    measurement: Measurement | None = None  # what the benchmark found (``core.measurement``)
    signals: Signals = field(default_factory=Signals)  # what the driver acts on beside the outcome

    def __post_init__(self) -> None:
        if self.measurement is None:  # a record read back, or written by hand: its measurement typed
            self.measurement = Measurement.from_record(self.metrics)
        if self.signals == Signals():  # a record read back: its signals typed
            self.signals = Signals.from_record(self.metrics)
        self.metrics = {k: v for k, v in outcome_metrics(self.metrics).items() if k not in SIGNAL_KEYS}
        if self.outcome not in (COMPLETE, FAIL, PRUNED):
            raise ValueError(f"outcome must be COMPLETE, FAIL or PRUNED, not {self.outcome!r}")
        if self.outcome == FAIL and self.failure_kind not in FAILURE_KINDS:
            raise ValueError(f"failure_kind must be one of {FAILURE_KINDS}, not {self.failure_kind!r}")

    @classmethod
    def failed(cls, config: Config, kind: str, reason: str, **kw: Any) -> "TrialResult":
        return cls(outcome=FAIL, config=config, failure_kind=kind, failure_reason=reason, **kw)

    def to_attrs(self) -> dict[str, Any]:
        """Flat dict for ``trial.set_user_attr`` (JSON values only); the measurement and the signals
        are stored merged into ``metrics`` (``Measurement.to_record``, ``Signals.to_record``), where
        every version kept them."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("measurement", "signals")}
        data["metrics"] = {**(self.measurement.to_record() if self.measurement else {}), **self.metrics,
                           **self.signals.to_record()}
        return json.loads(json.dumps(data, default=str))

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> "TrialResult":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in attrs.items() if k in names})


@dataclass(frozen=True)
class TrialRow:
    """One trial as the user sees it (``history.trial_rows``): what ``status`` lists (its
    ``--json`` prints ``to_json()``), what the report, export, compare and importance read.

    ``state`` is the user-facing outcome (COMPLETE, FAIL, PRUNED, RUNNING, WAITING), never
    the storage encoding; ``params`` the normalized config; ``value`` the median decode tok/s
    of a COMPLETE trial. Every field but ``number`` and ``state`` has a default, so a row is
    easy to write by hand (tests, tools).
    """

    number: int
    state: str
    params: Config = field(default_factory=dict)
    value: float | None = None
    spread: float | None = None  # rel_ci when known, else cv
    cv: float | None = None
    rel_ci: float | None = None
    failure_kind: str | None = None  # FAIL only
    failure_reason: str | None = None  # FAIL and PRUNED
    node: str | None = None  # hostname (with the Ray node id where a host ran several nodes at once)
    node_id: str | None = None
    started_at: str | None = None  # ISO 8601, UTC
    ended_at: str | None = None
    durations: dict[str, float] = field(default_factory=dict)  # TrialResult.timing
    cached_from: int | None = None  # answered from this trial's measurement, not launched
    counted: bool = False  # counts toward the budget
    is_baseline: bool = False
    config_key: str = ""
    warnings: list[str] = field(default_factory=list)
    nccl: dict[str, Any] = field(default_factory=dict)  # parsed NCCL start-up info
    nccl_summary: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)  # the outcome's keys (``TrialResult.metrics``)
    correctness: dict[str, Any] = field(default_factory=dict)
    node_info: dict[str, Any] = field(default_factory=dict)
    optuna_state: str = ""  # the storage's state (COMPLETE for a config-caused FAIL)
    skipped: str | None = None  # a proposal recorded, never launched: "infeasible", "banned-value", ...
    enqueued_by: str | None = None
    run: str | None = None  # the `run` that recorded it (its start time); None: recorded before runs were
    log_tail: str = ""
    # the server it ran: command (as resolved on its node), version, argv, env, port, log, and
    # ``fallbacks`` (``Backend.engine_fallbacks``: values the engine turned off, what it ran instead)
    server: dict[str, Any] = field(default_factory=dict)
    # each measured level, typed (``core.measurement.LevelResult``); a row written by hand may give
    # stored records ({"1": {"value", "samples", ...}}): they are read like stored ones
    levels: Mapping[int, LevelResult] = field(default_factory=dict)
    # speculative decoding at the headline level (from the server's /metrics; None: none reported)
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    # where the start-up's time went (``TrialResult.startup_phases``)
    startup_phases: dict[str, Any] = field(default_factory=dict)
    # a launch outside the search: "relaunch" (the baseline or the incumbent again during the search:
    # launch noise), "race" (the finalists' race at the end), "compare" (a launch `compare` made),
    # "repeat" (the baseline on another node); None: a trial of the search
    launch_role: str | None = None
    race: dict[str, Any] = field(default_factory=dict)  # a race launch: its race, round and finalists
    # the decode prompts it was measured on (``TrialResult.prompt_set``; empty: recorded before)
    prompt_set: dict[str, Any] = field(default_factory=dict)
    # launches of this row's config that ``history.best_rows`` ranked it by (not a trial field)
    n_measurements: int = 1
    measurement: Measurement | None = None  # the whole record (levels, rounds, the host's load)
    # what a level of it is worth under the study's objective (``core.objectives``: throughput, per GPU,
    # a latency's reciprocal); every ranking, interval and early stop reads ``worth``/``worth_at``
    measure: Measure = field(default_factory=Measure, compare=False)

    def __post_init__(self) -> None:
        got = self.measurement
        if got is None:
            given = {str(k): (v.to_record() if isinstance(v, LevelResult) else v)
                     for k, v in (self.levels or {}).items()}
            got = Measurement.from_record({**self.metrics, "levels": given} if given else self.metrics,
                                          self.value if self.state == COMPLETE else None)
        object.__setattr__(self, "measurement", got)
        object.__setattr__(self, "levels", dict(got.levels) if got is not None else {})
        object.__setattr__(self, "metrics", outcome_metrics(self.metrics))

    @property
    def headline(self) -> LevelResult | None:
        """Level 1 where measured, else the lowest level measured."""
        return self.measurement.headline if self.measurement is not None else None

    def at(self, level: int) -> LevelResult | None:
        """This row's record of ``level`` (None: not measured)."""
        return self.levels.get(level)

    def worth_at(self, level: int) -> float | None:
        """What ``level`` of this launch is worth under the study's objective (higher is better; a
        throughput's is its median)."""
        return self.measure.worth(self.levels.get(level), self.params)

    @property
    def worth(self) -> float | None:
        """What this row is worth under the study's objective (its ``value`` for a throughput)."""
        return self.measure.headline(self.value, self.headline, self.params) if self.value is not None else None

    @property
    def measured(self) -> float | None:
        """The headline level's median whatever the state: a pruned trial's first round, what a
        wrong config measured (``value`` is a COMPLETE trial's only)."""
        head = self.headline
        return head.value if head is not None else None

    def to_json(self) -> dict[str, Any]:
        """The row as ``status --json`` prints it: every field but ``n_measurements``, in order;
        ``levels`` as stored ({"1": {"value", "samples", "ttft": {"p50", ...}, "tpot", "itl", "e2e"}});
        then the rounds, the host's load, goodput's crossing and a traffic file's lengths."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("n_measurements", "measurement", "measure")}
        out["levels"] = {str(k): v.to_record() for k, v in self.levels.items()}
        got = self.measurement
        out["rounds"] = got.rounds if got is not None else 0
        out["host"] = got.host.to_record() if got is not None and got.host is not None else None
        # goodput's crossing and a traffic file's lengths (None where the study has neither)
        out["goodput"] = got.to_record().get("goodput") if got is not None else None
        out["lengths"] = got.lengths.to_record() if got is not None and got.lengths is not None else None
        return out

