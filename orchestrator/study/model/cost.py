"""What a launch costs, learned from the study's own trials: the expected seconds of a config.

On the motivating box a launch is the night's unit of cost (GLM-5 on 8 PCIe GPUs starts in
7-8 minutes, ~208 s of it CUDA-graph capture; eager starts skip capture and compile), so the
search spends launches where they pay: among candidates its own choices rank equal (the
start-up order and the fill), ``SearchPolicy`` launches the one with the most expected decode
(``study.promise``) per expected second of launch (this), and the run's time-to-go is the
measured cost of what is left (``driver.progress``).

The model (``LaunchCost.fit``), simple on purpose:

- a trial's cost is its wall time, ``durations.total_s`` (start-up, benchmark, teardown; the
  start-up dominates), else its start-up alone (``startup_phases.ready_s`` / ``ended_s``);
  interruptions and the node's own failures say nothing and never count. What a failure at
  start cost (a crash or a refusal is cheap, a launch that hung cost its stall) is real time
  for the run's time-to-go, but not what its values cost when they work: in the policy's
  choices (``started_only``) only launches that got past start-up teach the model, else the
  values that make a server fail early look cheapest and "cheaper first" spends launches on
  failures (measured: docs/benchmarks.md, "Hours to the best");
- additive in the parameters (``study.additive``): cost = the study's median + one effect per
  parameter value, backfitted with medians, so two parameters that move together (graphs off
  and no capture sizes) share one saving instead of counting it twice, one slow outlier moves
  a median less than a mean, and one trial is half believed;
- the compile cache: every trial of a node keeps the engines' caches (``core.launch``), so the
  first launch of a *compile key* (a config's parameters without its NCCL variables, which
  never change what an engine compiles: vLLM loaded a config's compiled graphs for an
  NCCL-only change, ready 165 s -> 54 s on one H200) pays the compile and later ones load it.
  Whether a launch was the first of its compile key is one more parameter of the model
  (``FIRST_COMPILE``), learned like the others once a key has launched twice; a config
  whose key a launch of the study already had is predicted warm;
- a value no trial had yet: interpolated between the measured values of an ordered
  parameter (capturing more sizes costs more; TP sizes), never extrapolated past them;
- no measured trial: no prediction (``predict`` returns None and nothing is reordered).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.records import AFTER_START_KINDS, FAIL, NOT_THE_CONFIGS_FAULT, Config, TrialRow
from orchestrator.study.model import additive

FIRST_COMPILE = "(first launch of its compile key)"  # the model's cache parameter: True / False


def got_past_start(row: TrialRow) -> bool:
    """The launch's server got ready (its record says so, or it failed after start-up)."""
    if row.state != FAIL:
        return True
    return (row.startup_phases or {}).get("ready_s") is not None or row.failure_kind in AFTER_START_KINDS


def trial_cost(row: TrialRow, *, started_only: bool = False) -> float | None:
    """The seconds one launched trial cost (module docstring), None when it says nothing
    (``started_only``: nor when it never got past start-up)."""
    if row.skipped or row.cached_from is not None or row.failure_kind in NOT_THE_CONFIGS_FAULT:
        return None
    if started_only and not got_past_start(row):
        return None
    total = (row.durations or {}).get("total_s")
    if total is None:
        phases = row.startup_phases or {}
        total = phases.get("ready_s", phases.get("ended_s"))
    try:
        value = float(total) if total is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value > 0 else None


def compile_key(config: Mapping[str, Any]) -> str:
    """What an engine's compile cache is keyed by, as far as the config says: every parameter
    but the NCCL variables (module docstring)."""
    return repr(sorted((k, repr(v)) for k, v in config.items() if not k.startswith("env.NCCL_")))


@dataclass(frozen=True)
class LaunchCost:
    """The fitted model (module docstring): ``median`` seconds and, per parameter, each
    measured value's effect in seconds."""

    median: float | None = None
    effects: dict[str, dict[Any, float]] = field(default_factory=dict)
    trials: int = 0
    compiled: frozenset[str] = frozenset()  # compile keys the study's launches had

    @classmethod
    def fit(cls, rows: Iterable[TrialRow], *, started_only: bool = False) -> "LaunchCost":
        """The model of ``rows`` (``started_only``: of the launches that got past start-up)."""
        data = []
        compiled: set[str] = set()
        for r in sorted(rows, key=lambda r: r.number):
            if r.skipped or r.cached_from is not None or r.failure_kind in NOT_THE_CONFIGS_FAULT:
                continue
            key = compile_key(r.params or {})
            cost = trial_cost(r, started_only=started_only)
            if cost is not None:
                data.append(({**(r.params or {}), FIRST_COMPILE: key not in compiled}, cost))
            if got_past_start(r):  # its engine compiled what the key needs (a start refused earlier did not)
                compiled.add(key)
        if not data:
            return cls(compiled=frozenset(compiled))
        median, effects = additive.fit(data)
        return cls(median, effects, len(data), frozenset(compiled))

    def effect(self, name: str, value: Any) -> float:
        """Seconds a parameter value adds to (or saves from) the median launch."""
        return additive.effect(self.effects, name, value)

    def predict(self, config: Mapping[str, Any]) -> float | None:
        """Expected seconds of one launch of a (normalized) config; None before any trial."""
        if self.median is None:
            return None
        config = {**config, FIRST_COMPILE: compile_key(config) not in self.compiled}
        return max(0.0, additive.predict(self.median, self.effects, config))

    def expected_left(self, configs: Iterable[Config] | None, launches: int) -> float | None:
        """Seconds the next ``launches`` launches should take: their number x the mean
        expected cost of the configs still to launch (the median trial when not known)."""
        if self.median is None or launches <= 0:
            return None if self.median is None else 0.0
        costs = [c for cfg in configs or () if (c := self.predict(cfg)) is not None]
        per = statistics.fmean(costs) if costs else self.median
        return per * launches
