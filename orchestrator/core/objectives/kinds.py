"""The objective kinds, one class per question: one level, a plan over levels, a weighted traffic
mix, goodput (the capacity under the SLO, over concurrency or by open-loop request rate).
``Objective(...)`` builds the one its fields make; each
says what Optuna is told, what an early-stopped launch reports and how it describes itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from orchestrator.core.measurement import Measurement
from orchestrator.core.objectives.protocol import HEADLINE, Measure, Objective, Refused, kind
from orchestrator.core.slo import NAMES as SLO_NAMES
from orchestrator.core.slo import Targets


def _several(fields: Any) -> bool:
    """The fields name more than one level (concurrencies x contexts)."""
    return len(fields.concurrency) * max(1, len(fields.context)) > 1


@kind(0, lambda f: True)
class Single(Objective):
    """One level (the default ``[1]``: single-request decode tok/s): that level's figure, one value."""

    kind_name: ClassVar[str] = "single"


def _needed(obj: Objective, worths: Mapping[int, float | None]) -> dict[int, float]:
    missing = [lv for lv in obj.ascending if worths.get(lv) is None]
    if missing:
        raise ValueError(f"a COMPLETE result needs a value at every level of the objective; "
                         f"level(s) {', '.join(map(str, missing))} missing")
    return {lv: float(worths[lv]) for lv in obj.ascending}  # type: ignore[arg-type]


@kind(10, lambda f: f.goodput is None and f.weights is None and _several(f))
class Plan(Objective):
    """Several levels, no weights: one value per level (Optuna's multi-objective samplers); the answer
    is the best config per level and the Pareto set (``study.plan``). A level where a config breaks a
    latency target is told the worst value there (worth nothing at that level; the Pareto front of the
    other levels keeps it)."""

    kind_name: ClassVar[str] = "plan"
    by_level: ClassVar[bool] = True
    value_per_level: ClassVar[bool] = True

    def told(self, result: Any) -> list[float]:
        got = _needed(self, self.worths(result.measurement, result.config))
        broken = self.judged(result.measurement).breaches if self.slo else {}
        return [self.measure.worst() if lv in broken else self.measure.told(got[lv]) for lv in self.ascending]

    def intermediate(self, result: Any) -> float | None:
        return None  # Optuna takes no intermediate value for several objectives

    def _levels_text(self) -> str:
        return super()._levels_text() + " (a plan)"


@kind(20, lambda f: f.goodput is None and f.weights is not None and _several(f))
class Mix(Objective):
    """Several levels with ``weights`` (a traffic mix): one value, the weighted geometric mean of the
    levels' figures. Dividing by the baseline's own weighted mean would make it the weighted geometric
    mean of the ratios to the baseline, but that divisor is one constant for the whole study, so both
    order every pair of configs the same way; the plan (``study.plan``) shows the ratio to the baseline."""

    kind_name: ClassVar[str] = "mix"
    by_level: ClassVar[bool] = True

    def told(self, result: Any) -> list[float]:
        mixed = self.mix_worth(_needed(self, self.worths(result.measurement, result.config)))
        assert mixed is not None  # every weighted level has a positive value
        return [self.measure.told(mixed)]

    def intermediate(self, result: Any) -> float | None:
        mixed = self.mix_worth(self.worths(result.measurement, result.config))
        return self.measure.told(mixed) if mixed is not None else None


@kind(30, lambda f: f.goodput is not None or f.rate is not None)
class Goodput(Objective):
    """Goodput (``objective.goodput``): one value, the total tok/s at the most streams at which every
    SLO held (``core.measurement.GoodputResult``; 0.0 where none held)."""

    kind_name: ClassVar[str] = "goodput"
    by_capacity: ClassVar[bool] = True
    searches_load: ClassVar[bool] = True
    axis_limit: ClassVar[str] = "max_concurrency"  # the job's key for the most it tries

    @classmethod
    def refuse(cls, draft: Any) -> None:
        if {"concurrency", "weights"} & set(draft.given):
            raise Refused("goodput", f"goodput finds its own {cls.axis} (up to {cls.axis_limit}): give goodput, or "
                                     "concurrency (with weights), not both")
        if draft.context:
            raise Refused("context", f"goodput searches the {cls.axis} at one prompt length: give goodput or "
                                     "context, not both (bench.context sets the length goodput measures at)")

    @classmethod
    def slo_levels(cls, draft: Any, measured: tuple[int, ...]) -> tuple[int, ...]:
        return (draft.goodput,)  # every concurrency it tries is judged by the same targets

    @classmethod
    def refuse_slo(cls, slo: Targets | None) -> None:
        if slo is None:
            raise Refused("goodput", f"needs the latency targets that bound it: slo: {{tpot_p99: 50ms}} (any of "
                                     f"{cls._targets_text()})")

    @classmethod
    def _targets_text(cls) -> str:
        return ", ".join(SLO_NAMES)

    @classmethod
    def refuse_measure(cls, measure: Measure) -> None:
        said = measure.identity() or {}
        if said.get("per_gpu"):
            raise Refused("per_gpu", "goodput answers with each config's capacity, priced per GPU by cost: "
                                     "({gpu_hour: ...}): give per_gpu with concurrency, not with goodput")
        if said.get("minimize"):
            raise Refused("minimize", "goodput maximizes the tok/s within the SLO: give goodput or minimize, not "
                                      "both")

    @property
    def headline(self) -> int | None:
        return HEADLINE

    def headline_worth(self, measurement: Measurement | None, value: float | None,
                       config: Mapping[str, Any] | None = None) -> float | None:
        return self.measure.of_value(measurement.value if measurement is not None else value, config)

    def intermediate(self, result: Any) -> float | None:
        got = self.headline_worth(result.measurement, result.value, result.config)
        return self.measure.told(got) if got is not None else None

    def _levels_text(self) -> str:
        return f"goodput up to {self.goodput} streams"


@kind(40, lambda f: f.rate is not None)
class RateGoodput(Goodput):
    """Goodput by request rate (``objective.goodput.max_rate``): one value, the output tok/s at the
    highest open-loop rate at which the SLO held (``core.rate_search``; 0.0 where none held). The rate
    is the answer users read (``study.goodput``); its tok/s is what Optuna maximizes, as the
    concurrency search's, so every reader of a goodput study's figure reads it unchanged."""

    kind_name: ClassVar[str] = "goodput by rate"
    searches_load: ClassVar[bool] = False  # its probes are open-loop rates (``node.open_loop``)
    per_request_slo: ClassVar[bool] = True
    open_loop: ClassVar[bool] = True
    axis: ClassVar[str] = "request rate"
    axis_limit: ClassVar[str] = "max_rate"

    @classmethod
    def slo_levels(cls, draft: Any, measured: tuple[int, ...]) -> tuple[int, ...]:
        return ()  # its probes are rates: no level to name a target at

    @classmethod
    def _targets_text(cls) -> str:
        return super()._targets_text() + ", or per request ttft, tpot, e2e with attainment: {ttft: 200ms, " \
            "attainment: 0.99}"

    def export_unit(self, level: int | None, named: bool) -> str:
        """A capacity by rate is the output tok/s at the highest rate that held, not a total at N streams."""
        return "output tok/s within the SLO" if level is HEADLINE else super().export_unit(level, named)

    def _levels_text(self) -> str:
        assert self.rate is not None
        return self.rate.describe()
