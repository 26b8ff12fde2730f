"""Rows as a study records launches, for the tests of study.launches, study.relaunch and study.race:
a config's trial (counted) and its launches outside the search (uncounted, with their role)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.core.measurement import HostLoad, LevelResult, Measurement
from orchestrator.core.records import COMPLETE, TrialRow


def launch(number: int, key: str, figures: dict[int, float] | float, *, role: str | None = None,
           baseline: bool = False, cost: float = 60.0, race: dict[str, Any] | None = None,
           host: HostLoad | None = None, **kw: Any) -> TrialRow:
    """One launch of config ``key`` measuring ``figures`` ({level: median}, or level 1's)."""
    figures = {1: figures} if isinstance(figures, (int, float)) else figures
    levels = {lv: LevelResult(lv, samples=(v * 0.99, v, v * 1.01)) for lv, v in figures.items()}
    m = Measurement(levels=levels, rounds=3, host=host)
    row = TrialRow(number=number, state=COMPLETE, params={"k": key}, value=m.value, config_key=key,
                   counted=role is None, is_baseline=baseline, measurement=m, durations={"total_s": cost},
                   launch_role=role, race=race or {}, **kw)
    return replace(row, n_measurements=1)


def noise_rows(first: int, figures: list[float] | None = None, key: str = "ref",
               levels: tuple[int, ...] = (1,), role: str = "compare") -> list[TrialRow]:
    """Seven launches of one more config outside the search (uncounted: never ranked; ``compare``'s
    by default, which no relaunch share counts): six degrees of freedom of launch noise
    (``verdict.MIN_NOISE_DF``), about +-1% by default."""
    figures = figures or [100.0, 101.0, 99.0, 100.5, 99.5, 100.8, 99.2]
    return [launch(first + i, key, {lv: v for lv in levels}, role=role) for i, v in enumerate(figures)]
