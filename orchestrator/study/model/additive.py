"""One additive model of per-parameter-value effects, shared by what the search predicts of a
config: what its launch costs (``study.cost``) and what it should measure (``study.promise``).

A prediction is the median of the data plus one effect per parameter value (a parameter a
config does not have, e.g. capture sizes with graphs off, is its own value ``UNSET``), fitted
by backfitting with medians (``SWEEPS`` passes: each parameter's effect is the median of what
the others leave), so two parameters that move together share one effect instead of counting
it twice, and one outlier moves a median less than a mean. An effect seen in n data points is
shrunk by n / (n + ``SHRINK``): one point is half believed. A value no data point had is
interpolated between the measured values of an ordered parameter (numbers, booleans, comma
lists such as capture sizes by their length), never extrapolated past them, else no effect.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

UNSET = "(unset)"  # the value of a parameter a config does not have
SWEEPS = 3  # backfitting passes over the parameters
SHRINK = 1.0  # an effect seen in n data points is shrunk by n / (n + SHRINK)

Effects = dict[str, dict[Any, float]]


def value_of(config: Mapping[str, Any], name: str) -> Any:
    """A config's value of one parameter as the model keys it (``UNSET`` when absent)."""
    v = config.get(name, UNSET)
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


def ordinal(value: Any) -> float | None:
    """Where a parameter value lies on its own scale (None: an unordered value)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        parts = [p for p in text.split(",") if p.strip()]
        if len(parts) > 1 and all(p.strip().lstrip("-").replace(".", "", 1).isdigit() for p in parts):
            return float(len(parts))
    return None


def fit(data: Iterable[tuple[Mapping[str, Any], float]], *,
        center: float | None = None) -> tuple[float | None, Effects]:
    """(median, effects) of ``(config, y)`` points (module docstring); (None, {}) without any.
    Only parameters whose value varies across the points get effects. ``center``: what an
    unseen config is predicted at, instead of the points' median."""
    points = list(data)
    if not points:
        return None, {}
    median = float(statistics.median(y for _, y in points)) if center is None else float(center)
    names = sorted({n for cfg, _ in points for n in cfg})
    varied = [n for n in names if len({repr(value_of(cfg, n)) for cfg, _ in points}) > 1]
    effects: Effects = {n: {} for n in varied}
    for _ in range(SWEEPS):
        for name in varied:
            groups: dict[Any, list[float]] = {}
            for cfg, y in points:
                others = sum(effects[o].get(value_of(cfg, o), 0.0) for o in varied if o != name)
                groups.setdefault(value_of(cfg, name), []).append(y - median - others)
            effects[name] = {v: statistics.median(g) * len(g) / (len(g) + SHRINK) for v, g in groups.items()}
    return median, effects


def effect(effects: Effects, name: str, value: Any) -> float:
    """What one parameter value adds to the median (interpolated for an unseen ordered value)."""
    known = effects.get(name)
    if not known:
        return 0.0
    if value in known:
        return known[value]
    x = ordinal(value)
    points = sorted((o, e) for v, e in known.items() if (o := ordinal(v)) is not None)
    if x is None or not points:
        return 0.0
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, e0), (x1, e1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return e0 if x1 == x0 else e0 + (e1 - e0) * (x - x0) / (x1 - x0)
    return 0.0


def predict(median: float, effects: Effects, config: Mapping[str, Any]) -> float:
    """The median plus the effect of each of the config's values."""
    return median + sum(effect(effects, n, value_of(config, n)) for n in effects)
