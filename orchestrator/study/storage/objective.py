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

from collections.abc import Mapping

from orchestrator.core import slo
from orchestrator.core.measurement import Measurement
from orchestrator.core.objectives import DEFAULT, Objective
from orchestrator.core.records import TrialResult

__all__ = ["DEFAULT", "describe", "directions", "expansion", "failed_values", "has_values", "identity",
           "intermediate", "judged", "level_values", "levels", "mix_value", "of", "told_values", "unit"]


def of(objective: Objective | None) -> Objective:
    """The objective, the default (single-request decode) for None."""
    return objective if objective is not None else DEFAULT


def levels(objective: Objective | None) -> tuple[int, ...]:
    """The levels in ascending order (the order every trial measures them in; with a context
    axis, ``core.level``'s: by context, then concurrency)."""
    return of(objective).ascending


def directions(objective: Objective | None) -> list[str]:
    """Optuna's study directions: one per value told (``Objective.directions``)."""
    return of(objective).directions()


def identity(objective: Objective | None) -> dict | None:
    """What of the objective makes a study another study (``Objective.identity``)."""
    return of(objective).identity()


def describe(objective: Objective | None) -> str:
    """'concurrency 1, 10, 64 (a plan)' / '... weighted 0.6/0.3/0.1' / 'concurrency 1' /
    'goodput up to 64 streams'; with latency targets, 'under TPOT p99 <= 20 ms'."""
    return of(objective).describe()


def expansion(objective: Objective | None) -> str | None:
    """What a one-word objective expanded to ("objective: balanced = goodput up to 64 streams
    under ..."), None when the job spelled its objective out."""
    obj = of(objective)
    return f"objective: {obj.preset} = {describe(obj)}" if obj.preset else None


def judged(objective: Objective | None, measurement: Measurement | None) -> slo.Judged:
    """The objective's latency targets against one launch (``Objective.judged``)."""
    return of(objective).judged(measurement)


def unit(level: int, objective: Objective | None = None) -> str:
    """What a level's number is (the objective's measure; ``node.measure``'s definition)."""
    return of(objective).unit(level)


def level_values(result: TrialResult) -> dict[int, float | None]:
    """Each measured level's median (``TrialResult.measurement``); {} when nothing was measured."""
    return result.measurement.values() if result.measurement is not None else {}


def mix_value(values: Mapping[int, float | None], weights: Mapping[int, float]) -> float | None:
    """The weighted geometric mean of the levels' values (None when a weighted level has none)."""
    return Objective(concurrency=tuple(weights), weights=dict(weights)).mix_worth(values)


def told_values(objective: Objective | None, result: TrialResult) -> list[float]:
    """What Optuna is told for a COMPLETE result (module docstring); ValueError when a level
    the objective needs was not measured."""
    return of(objective).told(result)


def has_values(objective: Objective | None, result: TrialResult) -> bool:
    """Whether ``told_values`` can be computed for this COMPLETE result."""
    try:
        told_values(objective, result)
    except ValueError:
        return False
    return True


def failed_values(objective: Objective | None) -> list[float]:
    """A config-caused failure: the worst value at every value told (0.0 for a throughput)."""
    return of(objective).failed()


def intermediate(objective: Objective | None, result: TrialResult) -> float | None:
    """The value reported for an early-stopped trial before it is told PRUNED: its first
    round, on the objective's scale; None for a plan (Optuna takes no intermediate value
    for several objectives) or when nothing was measured."""
    return of(objective).intermediate(result)
