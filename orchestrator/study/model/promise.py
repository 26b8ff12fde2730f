"""What a config should measure, learned from the study's own launches: the search's promise.

The launch-cost model (``study.cost``) says what a launch takes; this says what it should
bring back, so the policy's own choices can weigh one against the other (``SearchPolicy``:
among equally good candidates by its rule, the most decode per second of launch). Alone,
"cheaper first" delays the configs that matter: on the motivating case the best configs
(TP=8, full graphs) are the dearest to start (docs/benchmarks.md, "Hours to the best").

The model (``ValueModel.fit``), simple on purpose and additive like the cost model
(``study.additive``), in the logarithm of the value, so an effect is a ratio (graphs on: x2):

- a launched trial's value: its median at the one level the study optimizes (a PRUNED
  trial's first repeat, what the early stop saw), or for a plan the geometric mean of its
  levels (the job's traffic mix where it gives weights);
- a config-caused failure (crash, refused NCCL variable, wrong output, hang) is worth
  ``FAILURE_RATIO`` x the median of what worked: the values it carried are pulled down as a
  slow config's would be, never to minus infinity (one failure is evidence, not a proof);
  failures that were not the config's fault, cached answers and skipped proposals say nothing;
- centred on the median of what worked: a value not tried yet is predicted like a typical
  working config, not like the study's typical launch (where most launches fail, that would
  condemn every value still untried);
- nothing measured yet: no prediction (``predict`` returns None and nothing is reordered).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, FAIL, NOT_THE_CONFIGS_FAULT, PRUNED, TrialRow
from orchestrator.study.evidence.plan import level_value, mix_of
from orchestrator.study.model import additive
from orchestrator.study.storage import objective as objectives

# A config-caused failure counts as this fraction of the median working value. Replayed on the
# motivating table (200 seeds, median hours to within 2% of the best): 0.1 and 0.03 gave
# 1.09 h, 0.3 1.18 h (ties broken at random: 1.24 h): a failure must count as clearly worse
# than any working config; how much worse matters little.
FAILURE_RATIO = 0.1


def row_value(row: TrialRow, objective: Objective | None = None) -> float | None:
    """What one measured trial brought back (module docstring), None when nothing."""
    obj = objectives.of(objective)
    if obj.by_capacity:
        value = row.worth
    elif len(obj.levels) > 1:
        weights = dict(obj.weights or {}) or {lv: 1.0 / len(obj.levels) for lv in obj.levels}
        value = mix_of(row, weights)
    else:  # the one level the study optimizes, as Optuna is told it (its worth: ``core.objectives``)
        value = level_value(row, obj.levels[0])
        value = row.worth if value is None else value
        first = (row.metrics or {}).get("intermediate")
        if value is None and row.state == PRUNED and isinstance(first, (int, float)):  # stopped early: the first
            value = row.measure.of_value(float(first), row.params)  # repeat, what the early stop saw
    try:
        value = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


@dataclass(frozen=True)
class ValueModel:
    """The fitted model (module docstring): ``median`` and per-value effects, in log value."""

    median: float | None = None
    effects: additive.Effects = field(default_factory=dict)
    trials: int = 0

    @classmethod
    def fit(cls, rows: Iterable[TrialRow], objective: Objective | None = None, *,
            failures: bool = True) -> "ValueModel":
        """The model of the study's launched trials ``rows`` (``history.trial_rows``);
        ``failures=False``: of what the working launches measured alone (a search that weighs
        the risk of failing apart: ``strategies.value_led``)."""
        worked: list[tuple[Mapping[str, Any], float]] = []
        failed: list[Mapping[str, Any]] = []
        for r in rows:
            if r.skipped or r.cached_from is not None or not r.counted:
                continue
            if r.state in (COMPLETE, PRUNED):
                value = row_value(r, objective)
                if value is not None:
                    worked.append((r.params or {}, math.log(value)))
            elif failures and r.state == FAIL and r.failure_kind not in NOT_THE_CONFIGS_FAULT:
                failed.append(r.params or {})
        if not worked:
            return cls()
        typical = statistics.median(v for _, v in worked)
        floor = typical + math.log(FAILURE_RATIO)
        median, effects = additive.fit([*worked, *((p, floor) for p in failed)], center=typical)
        return cls(median, effects, len(worked) + len(failed))

    def predict(self, config: Mapping[str, Any]) -> float | None:
        """Expected value of one launch of a (normalized) config; None before any measured."""
        if self.median is None:
            return None
        return math.exp(additive.predict(self.median, self.effects, config))
