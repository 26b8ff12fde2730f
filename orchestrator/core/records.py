"""The data one trial produces, as plain JSON-able records.

Actors return a ``TrialResult``; the driver stores it in Optuna user attributes
(``to_attrs``) and everything downstream (status, report, export, simulate) reads it
back with ``from_attrs``. Failures are data here, never exceptions. ``TrialRow`` is one
trial as the user sees it, read back by ``history.trial_rows`` for status, report, export,
compare and importance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

# Outcomes as the user sees them (storage may record a FAIL as an infeasible COMPLETE).
COMPLETE = "COMPLETE"
FAIL = "FAIL"
PRUNED = "PRUNED"
RUNNING = "RUNNING"
WAITING = "WAITING"

# The closed list of failure kinds.
FAILURE_KINDS = (
    "start-crash",
    "start-timeout",
    "bench-timeout",
    "bench-error",
    "wrong-output",
    "nccl-invalid",
    "interrupted",
    "node-lost",
    "env-error",
)
# Kinds that say nothing about the config itself: never cached as its answer, never banned,
# re-queued once (``orchestrator.core.outcome`` decides; ``env-error``: the node, not the config:
# server command or Python missing, port taken, GPUs busy or missing).
NOT_THE_CONFIGS_FAULT = ("interrupted", "node-lost", "env-error")

Config = dict[str, Any]

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
    value: float | None = None  # median single-request decode tok/s
    failure_kind: str | None = None
    failure_reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # samples, ttft, e2e, cv, ...
    timing: dict[str, float] = field(default_factory=dict)  # launch_s, ready_s, warmup_s, bench_s, teardown_s
    started_at: float | None = None  # unix time
    ended_at: float | None = None
    node: dict[str, Any] = field(default_factory=dict)  # node_id, hostname, gpus, gpu_model
    nccl: dict[str, Any] = field(default_factory=dict)  # parsed NCCL start-up info
    warnings: list[str] = field(default_factory=list)
    correctness: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # greedy texts / logprobs for the gate
    server: dict[str, Any] = field(default_factory=dict)  # ServerRecord as dict, argv, env delta
    log_tail: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in (COMPLETE, FAIL, PRUNED):
            raise ValueError(f"outcome must be COMPLETE, FAIL or PRUNED, not {self.outcome!r}")
        if self.outcome == FAIL and self.failure_kind not in FAILURE_KINDS:
            raise ValueError(f"failure_kind must be one of {FAILURE_KINDS}, not {self.failure_kind!r}")

    @classmethod
    def failed(cls, config: Config, kind: str, reason: str, **kw: Any) -> "TrialResult":
        return cls(outcome=FAIL, config=config, failure_kind=kind, failure_reason=reason, **kw)

    def to_attrs(self) -> dict[str, Any]:
        """Flat dict for ``trial.set_user_attr`` (JSON values only)."""
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))

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
    metrics: dict[str, Any] = field(default_factory=dict)
    correctness: dict[str, Any] = field(default_factory=dict)
    node_info: dict[str, Any] = field(default_factory=dict)
    optuna_state: str = ""  # the storage's state (COMPLETE for a config-caused FAIL)
    skipped: str | None = None  # a proposal recorded, never launched: "infeasible", "banned-value", ...
    enqueued_by: str | None = None
    log_tail: str = ""
    # the server it ran: command (as resolved on its node), version, argv, env, port, log
    server: dict[str, Any] = field(default_factory=dict)
    # measurements of this row's config that ``history.best_rows`` ranked it by (not a trial field)
    n_measurements: int = 1

    def to_json(self) -> dict[str, Any]:
        """The row as ``status --json`` prints it: every field but ``n_measurements``, in order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "n_measurements"}

