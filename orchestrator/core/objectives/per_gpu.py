"""``per_gpu: true`` on a throughput objective of levels (one, a plan, a mix): tok/s divided by the
GPUs the config occupies (TP x PP), so a config that occupies 4 of 8 GPUs is compared as the two
replicas the box could run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.core.measurement import LevelResult
from orchestrator.core.objectives.protocol import Measure, measure


@dataclass(frozen=True)
class PerGpu(Measure):
    """Throughput per GPU the config occupies."""

    def worth(self, got: LevelResult | None, config: Mapping[str, Any] | None = None) -> float | None:
        return self.of_value(super().worth(got, config), config)

    def of_value(self, value: float | None, config: Mapping[str, Any] | None = None) -> float | None:
        return value / self.gpus(config) if value is not None else None

    @staticmethod
    def gpus(config: Mapping[str, Any] | None) -> int:
        """The GPUs a config occupies: TP x PP (1 each where not set)."""
        config = config or {}
        return max(1, _int(config.get("tp_size"))) * max(1, _int(config.get("pp_size")))

    def unit(self, level: int | None) -> str:
        return super().unit(level) + " per GPU"

    def name(self) -> str:
        return "per GPU"

    def export_unit(self, level: int | None, named: bool) -> str:
        unit = super().export_unit(level, named)
        return unit if unit.endswith(" per GPU") else unit + " per GPU"

    def mix_unit(self) -> str:
        return super().mix_unit() + " per GPU"

    def identity(self) -> dict[str, Any] | None:
        return {"per_gpu": True}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


@measure("per_gpu")
def _stored(identity: dict[str, Any]) -> Measure:
    return PerGpu()
