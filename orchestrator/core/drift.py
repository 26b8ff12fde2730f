"""Whether the box drifted: a trend over time that every launch shares, whatever its config.

A box warming up, a neighbour ramping its load, a GPU throttling as it heats: every launch measures
a little slower (or faster) than the one before it. Interleaving makes a drift fall on every config
alike, but a figure that is the median over launches made at different times moves with it, and a
noise pooled over those launches swells with it. Only launches of one config say what time did, so
the trend is one slope of the log figure against time, fitted within each config launched more than
once (each about its own mean, the slope shared: an analysis of covariance), with its standard error
and the launch noise left about it.

A drift is said (``Drift.drifted``) only where its interval at ``CONFIDENCE`` excludes no trend, on
at least ``verdict.MIN_NOISE_DF`` degrees of freedom: 99.9%, since a drift said changes how every
figure is read, and a quiet box must not be told it drifted one study (or one level) in a hundred; a
box 2% slower a minute over a study of a quarter of an hour is beyond it many times over. Where it
is, a figure is read at one time (``shift``: its log less the slope times its distance from that
time, ``study.launches.at_one_time``), which is what pairing launches close in time does for
launches that were not.

    trend(groups) -> Drift       groups: one config's launches each, (unix time, figure)
    Drift.text()                 "the box drifted: launches of one config measured 2.0% slower per minute ..."
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.core.verdict import MIN_NOISE_DF, t_quantile

CONFIDENCE = 0.999  # a drift is said when its interval at this confidence excludes none
HOUR = 3600.0


@dataclass(frozen=True)
class Drift:
    """The trend of the log figures over time (module docstring): ``slope`` per hour (None: too few
    launches of one config, or all at one time), its standard error ``se``, the residual degrees of
    freedom ``df``, what it was fitted on (``configs`` launched more than once, ``launches`` of
    them, over ``span_s`` seconds from ``start``)."""

    slope: float | None = None
    se: float | None = None
    df: int = 0
    configs: int = 0
    launches: int = 0
    span_s: float = 0.0
    start: float | None = None

    @property
    def drifted(self) -> bool:
        """The trend is beyond its noise (module docstring)."""
        if self.slope is None or self.se is None or self.df < MIN_NOISE_DF:
            return False
        if self.se == 0.0:
            return self.slope != 0.0
        return abs(self.slope) / self.se > t_quantile(0.5 + CONFIDENCE / 2.0, self.df)

    def shift(self, seconds: float) -> float:
        """What the drift adds to a log figure over ``seconds`` (0 where the box did not drift)."""
        return self.slope * seconds / HOUR if self.drifted else 0.0  # type: ignore[operator]

    def shift_var(self, seconds: float) -> float:
        """The variance ``shift`` carries from the slope's own uncertainty."""
        return (self.se * seconds / HOUR) ** 2 if self.drifted else 0.0  # type: ignore[operator]

    def rate(self) -> tuple[float, str]:
        """The relative change per minute (a study under an hour) or per hour: (-0.02, 'minute')."""
        unit, hours = ("minute", 1.0 / 60.0) if self.span_s < HOUR else ("hour", 1.0)
        return math.expm1((self.slope or 0.0) * hours), unit

    def text(self) -> str:
        """'the box drifted: launches of one config measured 2.0% slower per minute (99.9% CI 1.2-2.8%;
        12 launches of 2 configs over 14 min): a figure depends on when it was measured (the last
        launch 25% below the first), so a launch at another time will not repeat it; the verdicts
        read the launches at one time', or '' where it did not drift."""
        if not self.drifted:
            return ""
        rel, unit = self.rate()
        hours = 1.0 / 60.0 if unit == "minute" else 1.0
        half = t_quantile(0.5 + CONFIDENCE / 2.0, self.df) * (self.se or 0.0)
        lo, hi = sorted(abs(math.expm1((self.slope + d) * hours)) for d in (-half, half))  # type: ignore[operator]
        word = "slower" if rel < 0 else "faster"
        whole = math.expm1((self.slope or 0.0) * self.span_s / HOUR)
        return (f"the box drifted: launches of one config measured {100 * abs(rel):.1f}% {word} per {unit} "
                f"({100 * CONFIDENCE:g}% CI {100 * lo:.1f}-{100 * hi:.1f}%; {self.launches} launches of "
                f"{self.configs} config(s) over {_minutes(self.span_s)}): a figure depends on when it was measured "
                f"(the last launch {100 * abs(whole):.0f}% {'below' if whole < 0 else 'above'} the first), so a "
                "launch at another time will not repeat it; the verdicts read the launches at one time")

    def to_dict(self) -> dict:
        rel, unit = self.rate()
        return {"drifted": self.drifted, "slope_per_hour": self.slope, "se": self.se, "df": self.df,
                "configs": self.configs, "launches": self.launches, "span_s": self.span_s,
                "relative": rel, "per": unit, "text": self.text()}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60.0:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def trend(groups: Iterable[Sequence[tuple[float, float]]]) -> Drift:
    """The drift of ``groups`` (module docstring): each one config's launches as (unix time, figure);
    a group of one launch, or a figure that is not positive, says nothing about time."""
    sxx = sxy = syy = 0.0
    configs = launches = 0
    times: list[float] = []
    for group in groups:
        points = [(float(t), math.log(v)) for t, v in group if v is not None and v > 0 and math.isfinite(v)]
        if len(points) < 2:
            continue
        tm = statistics.fmean(t for t, _ in points)
        ym = statistics.fmean(y for _, y in points)
        for t, y in points:
            dt, dy = (t - tm) / HOUR, y - ym
            sxx += dt * dt
            sxy += dt * dy
            syy += dy * dy
        configs += 1
        launches += len(points)
        times += [t for t, _ in points]
    df = launches - configs - 1
    if not configs or df < 1 or sxx <= 0.0:
        return Drift(df=max(0, df), configs=configs, launches=launches)
    slope = sxy / sxx
    residual = max(0.0, syy - slope * sxy)
    se = math.sqrt(residual / df / sxx)
    return Drift(slope, se, df, configs, launches, max(times) - min(times), min(times))
