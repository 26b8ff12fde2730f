"""What the study tells Optuna about a trial, for the job's ``objective:`` (one rule, one place).

A job's ``objective`` (``config.job.Objective``) names the concurrency levels the study tunes
for. Every trial measures every level (``node.measure``: level 1 single-request decode tok/s,
level N total output tok/s with N streams); what Optuna is told depends on the objective:

- one level (the default ``[1]``): that level's median, one direction: exactly the study of
  before objectives existed (``TrialResult.value``);
- several levels, no weights (a *plan*): one value per level, one ``maximize`` direction
  each (``directions``): Optuna's multi-objective samplers (TPE, NSGA-II, random) through its
  public API;
- several levels with ``weights`` (a traffic mix): one value, the weighted geometric mean
  of the levels' medians (``mix_value``). Dividing by the baseline's own weighted mean would
  make it the weighted geometric mean of the ratios to the baseline, but that divisor is one
  constant for the whole study, so both order every pair of configs the same way; the value
  told needs no baseline, and a trial that ends before the baseline (or after a baseline that
  failed) is told on the same scale as every other. The plan (``study.plan``) shows the
  ratio to the baseline.

- goodput (``objective.goodput``): one value, the total tok/s at the most streams at which
  every SLO held (``core.measurement.GoodputResult``; 0.0 where none held).

Latency targets (``objective.slo``, ``core.slo``; ``judged`` applies them for this objective):
in a plan, a level where a config breaks one is told ``0.0`` there (it is worth nothing at that
level, and the Pareto front of the other levels keeps it): Optuna's constraints are per trial,
so a config infeasible at one level only cannot be said with them without hiding it from the
levels where it is best. A config that counts nowhere (every level of a plan, one level of a
single objective or a mix, no concurrency of goodput) gets the infeasible constraint, by how far
over (``core.outcome.infeasibility``).

A config-caused failure is ``0.0`` at every level (with the infeasible constraint set by the
policy); an early-stopped trial is Optuna PRUNED, with an intermediate value only where
Optuna allows one (single objective: ``Trial.report`` is not supported for several).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core import slo
from orchestrator.core.level import streams
from orchestrator.core.measurement import Measurement
from orchestrator.core.records import TrialResult

DEFAULT = Objective()


def of(objective: Objective | None) -> Objective:
    """The objective, the default (single-request decode) for None."""
    return objective if objective is not None else DEFAULT


def levels(objective: Objective | None) -> tuple[int, ...]:
    """The levels in ascending order (the order every trial measures them in; with a context
    axis, ``core.level``'s: by context, then concurrency)."""
    return tuple(sorted(of(objective).levels))


def directions(objective: Objective | None) -> list[str]:
    """Optuna's study directions: one per level for a plan without weights, else one."""
    obj = of(objective)
    return ["maximize"] * (len(obj.levels) if obj.multi_objective else 1)


def identity(objective: Objective | None) -> dict[str, Any] | None:
    """What of the objective makes a study another study (None for the default: a study
    recorded before objectives existed keeps its identity). Latency targets are part of it:
    what a trial was told depends on them, and goodput measures by them."""
    obj = of(objective)
    if tuple(obj.concurrency) == DEFAULT.concurrency and obj.weights is None and obj.goodput is None \
            and not obj.slo and not obj.context:
        return None
    out: dict[str, Any] = {"concurrency": sorted(obj.concurrency),
                           "weights": {str(k): round(v, 12) for k, v in sorted(obj.weights.items())}
                           if obj.weights else None}
    if obj.goodput is not None:
        out["goodput"] = {"max_concurrency": obj.goodput}
    if obj.context:
        out["context"] = sorted(obj.context)
    if obj.slo:
        out["slo"] = obj.slo.to_record()
    return out


def describe(objective: Objective | None) -> str:
    """'concurrency 1, 10, 64 (a plan)' / '... weighted 0.6/0.3/0.1' / 'concurrency 1' /
    'goodput up to 64 streams'; with latency targets, 'under TPOT p99 <= 20 ms'."""
    obj = of(objective)
    if obj.goodput is not None:
        text = f"goodput up to {obj.goodput} streams"
    else:
        text = "concurrency " + ", ".join(map(str, levels(obj)))
        if obj.context:  # the pairs, spelled as everything else spells them (``core.level``)
            text = (f"concurrency {', '.join(map(str, obj.concurrency))} x context "
                    f"{', '.join(map(str, obj.context))} tokens: levels {', '.join(map(str, levels(obj)))}")
        if obj.weights:
            text += " weighted " + "/".join(f"{obj.weights[lv]:g}" for lv in levels(obj))
        elif obj.is_plan:
            text += " (a plan)"
    if obj.slo:
        text += f" under {obj.slo.describe()}"
    return text


def expansion(objective: Objective | None) -> str | None:
    """What a one-word objective expanded to ("objective: balanced = goodput up to 64 streams
    under ..."), None when the job spelled its objective out."""
    obj = of(objective)
    return f"objective: {obj.preset} = {describe(obj)}" if obj.preset else None


def judged(objective: Objective | None, measurement: Measurement | None) -> slo.Judged:
    """The objective's latency targets against one launch (``core.slo.judge``): a plan counts a
    config at each level apart, one level or a mix needs every level, goodput some concurrency."""
    obj = of(objective)
    return slo.judge(measurement, obj.slo, levels(obj), each_level=obj.multi_objective,
                     goodput=obj.goodput is not None)


def unit(level: int) -> str:
    """What a level's number is (``node.measure``'s definition)."""
    return "decode tok/s" if streams(level) == 1 else "total tok/s"


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) or math.isinf(out) else out


def level_values(result: TrialResult) -> dict[int, float | None]:
    """Each measured level's median (``TrialResult.measurement``); {} when nothing was measured."""
    return result.measurement.values() if result.measurement is not None else {}


def mix_value(values: Mapping[int, float | None], weights: Mapping[int, float]) -> float | None:
    """The weighted geometric mean of the levels' values (None when a weighted level has none)."""
    total = 0.0
    for level, w in weights.items():
        v = values.get(level)
        if v is None or v <= 0:
            return None
        total += w * math.log(v)
    return math.exp(total / sum(weights.values()))


def told_values(objective: Objective | None, result: TrialResult) -> list[float]:
    """What Optuna is told for a COMPLETE result (module docstring); ValueError when a level
    the objective needs was not measured."""
    obj = of(objective)
    if not obj.is_plan:
        value = _single(obj, result)
        if value is None:
            raise ValueError("a COMPLETE result needs a value")
        return [float(value)]
    values = level_values(result)
    missing = [lv for lv in levels(obj) if values.get(lv) is None]
    if missing:
        raise ValueError(f"a COMPLETE result needs a value at every level of the objective; "
                         f"level(s) {', '.join(map(str, missing))} missing")
    if obj.weights:
        mixed = mix_value(values, obj.weights)
        assert mixed is not None  # every weighted level has a positive value
        return [mixed]
    broken = judged(obj, result.measurement).breaches if obj.slo else {}
    return [0.0 if lv in broken else float(values[lv]) for lv in levels(obj)]  # type: ignore[arg-type]


def _single(obj: Objective, result: TrialResult) -> float | None:
    """The one level's value: its median where the trial recorded levels (a trial may measure
    more levels than the objective tells, as the replay harness's do), else the result's value;
    goodput's, the measurement's (the total tok/s where every SLO last held)."""
    if obj.goodput is not None:
        return result.measurement.value if result.measurement is not None else result.value
    value = level_values(result).get(obj.levels[0])
    return value if value is not None else result.value


def has_values(objective: Objective | None, result: TrialResult) -> bool:
    """Whether ``told_values`` can be computed for this COMPLETE result."""
    try:
        told_values(objective, result)
    except ValueError:
        return False
    return True


def failed_values(objective: Objective | None) -> list[float]:
    """A config-caused failure: 0.0 at every level (with the infeasible constraint)."""
    return [0.0] * len(directions(objective))


def intermediate(objective: Objective | None, result: TrialResult) -> float | None:
    """The value reported for an early-stopped trial before it is told PRUNED: its first
    round, on the objective's scale; None for a plan (Optuna takes no intermediate value
    for several objectives) or when nothing was measured."""
    obj = of(objective)
    if obj.multi_objective:
        return None
    if obj.goodput is not None:
        return _single(obj, result)
    if obj.weights:
        return mix_value(level_values(result), obj.weights)
    recorded = level_values(result)
    if obj.levels[0] in recorded and min(recorded) != obj.levels[0]:
        return recorded[obj.levels[0]]  # the trial measured lower levels too: the objective's own
    inter = result.metrics.get("intermediate")
    return _num(inter) if inter is not None else result.value
