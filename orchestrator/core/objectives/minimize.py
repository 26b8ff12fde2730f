"""``objective: {minimize: tpot_p99, concurrency: 32}``: the lowest recorded latency percentile at a
level (TTFT, TPOT, ITL or E2E at p50, p90 or p99: ``core.slo.NAMES``), direction minimize.

Its worth is the reciprocal of the latency (higher is better, as every comparison reads it); the
figure a user reads is the latency in ms, Optuna is told it under ``minimize``, a failure is told
``inf``, and a verdict says "lower" or "higher"."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from orchestrator.core.measurement import LevelResult
from orchestrator.core.objectives.protocol import MINIMIZE, Measure, measure
from orchestrator.core.slo import LABELS, NAMES
from orchestrator.core.verdict import RatioInterval, describe


@dataclass(frozen=True)
class Latency(Measure):
    """The level's ``metric`` percentile (``tpot_p99``), lowest wins."""

    metric: str = "tpot_p99"

    direction: ClassVar[str] = MINIMIZE
    better: ClassVar[str] = "lower"
    worse: ClassVar[str] = "higher"
    throughput: ClassVar[bool] = False
    worse_sign: ClassVar[str] = ">"

    def __post_init__(self) -> None:
        if self.metric not in NAMES:
            raise ValueError(f"unknown latency {self.metric!r}; one of {', '.join(NAMES)}")

    @property
    def kind(self) -> str:
        return self.metric.split("_")[0]

    @property
    def quantile(self) -> int:
        return int(self.metric.split("_p")[1])

    @property
    def label(self) -> str:
        """'TPOT p99'."""
        return f"{LABELS[self.kind]} p{self.quantile}"

    def latency_s(self, got: LevelResult | None) -> float | None:
        """The recorded percentile (seconds); None where not recorded."""
        lat = getattr(got, self.kind, None) if got is not None else None
        if lat is None:
            return None
        value = lat.at(self.quantile)
        return value if math.isfinite(value) and value > 0 else None

    def worth(self, got: LevelResult | None, config: Mapping[str, Any] | None = None) -> float | None:
        seconds = self.latency_s(got)
        return 1.0 / seconds if seconds is not None else None

    def of_value(self, value: float | None, config: Mapping[str, Any] | None = None) -> float | None:
        return None  # a bare tok/s says nothing of a latency

    def headline(self, value: float | None, got: LevelResult | None,
                 config: Mapping[str, Any] | None = None) -> float | None:
        return self.worth(got, config)

    def shown(self, worth: float) -> float:
        return 1000.0 / worth  # ms

    def below(self, worth: float, limit: float, level: int) -> str:
        return f"{self.label} {self.shown(worth):.1f} ms > {self.shown(limit):.1f} ms"

    def text(self, worth: float, digits: int = 2) -> str:
        return f"{self.shown(worth):.{max(2, digits)}f} ms {self.label}"

    def oriented(self, interval: RatioInterval) -> RatioInterval:
        return replace(interval, ratio=_inverse(interval.ratio), lo=_inverse(interval.hi), hi=_inverse(interval.lo))

    def compared(self, interval: RatioInterval, *, same_config: bool = False) -> str:
        # the latencies' own ratio: above 1.0 is higher (worse), below it lower (better)
        return describe(self.oriented(interval), same_config=same_config, words=(self.worse, self.better))

    def worst(self) -> float:
        return math.inf

    def unit(self, level: int | None) -> str:
        return f"ms {self.label}"

    def export_unit(self, level: int | None, named: bool) -> str:
        return self.unit(level)

    def mix_unit(self) -> str:
        return f"weighted geometric mean of the levels' {self.label} (ms)"

    def name(self) -> str:
        return f"lowest {self.label}"

    def identity(self) -> dict[str, Any] | None:
        return {"minimize": self.metric}


def _inverse(value: float | None) -> float | None:
    return 1.0 / value if value else value


@measure("minimize")
def _stored(identity: dict[str, Any]) -> Measure:
    return Latency(str(identity["minimize"]))
