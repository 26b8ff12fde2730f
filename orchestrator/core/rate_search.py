"""Capacity by request rate: the highest open-loop rate at which the SLO holds, within a probe budget.

``objective: {goodput: {max_rate: 40}}`` asks what request rate a config serves within the SLO
(``slo: {ttft: 200ms, attainment: 0.99}``: the share of requests that met every per-request target,
``core.attainment``; percentile targets may stand beside them). Each probe sends ``requests`` at a
rate on the seeded arrival schedule (``core.arrivals``) whatever the server does, so past its
capacity requests queue and their latency grows (``node.open_loop``). The search (``next_rate``):

1. a coarse sweep, ascending: ``min_rate`` (default ``max_rate / 8``), doubling, up to ``max_rate``;
   it stops early once ``BREAKS_TO_STOP`` rates in a row broke (each rate above them only queues
   more, and an overloaded probe is the slowest to drain);
2. where no rate of the sweep held, halving below its lowest (at most ``BELOW`` times) until one does:
   a ``max_rate`` guessed far too high still finds the capacity;
3. then refinement: the gap between the highest rate that held and the lowest above it that broke is
   bisected until it is at most ``STEP`` of the held rate wide.

At most ``RateAxis.max_probes`` probes. Nothing assumes attainment falls with the rate: every probe is
recorded (``core.measurement.RateResult``: rate, attainment, tok/s, percentiles), the capacity is the
highest rate that held, and a lower rate that broke is said beside it. ``probe_line`` says one probe with
the percentiles its targets read (``targeted``), as ``bench`` prints it and the report tabulates it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.attainment import Attainment
from orchestrator.core.measurement import QUANTILES, Latency, RateProbe, RateResult
from orchestrator.core.slo import Targets, ms

STEP = 0.1  # refinement stops when the gap above the capacity is at most this share of it
BREAKS_TO_STOP = 2  # the coarse sweep goes no higher after this many broken rates in a row
LOWEST_SHARE = 8  # the coarse sweep starts at max_rate / this unless min_rate says otherwise
DEFAULT_REQUESTS = 100  # requests a probe sends
DEFAULT_PROBES = 8  # probes a launch measures at most
BELOW = 3  # where no rate of the sweep held: halvings below its lowest rate, at most


@dataclass(frozen=True)
class RateAxis:
    """The job's ``objective.goodput`` by request rate: the range searched (req/s), how arrivals are
    drawn (``burstiness``: gamma shape, 1 is Poisson; ``seed``), requests per probe and the probe
    budget. With a traffic file's timestamps the trace's own pattern is replayed at each rate."""

    max_rate: float
    min_rate: float | None = None
    burstiness: float = 1.0
    requests: int = DEFAULT_REQUESTS
    max_probes: int = DEFAULT_PROBES
    seed: int = 0

    @property
    def lowest(self) -> float:
        """The coarse sweep's first rate."""
        return self.min_rate if self.min_rate is not None else self.max_rate / LOWEST_SHARE

    def describe(self) -> str:
        """'goodput up to 40 req/s (Poisson arrivals, 100 requests a probe)'."""
        arrivals = "Poisson arrivals" if self.burstiness == 1.0 else f"gamma arrivals, burstiness {self.burstiness:g}"
        return f"goodput up to {self.max_rate:g} req/s ({arrivals}, {self.requests} requests a probe)"

    def identity(self) -> dict[str, Any]:
        """What of the axis makes a study another study (every field: each changes what a probe sends)."""
        return {"max_rate": self.max_rate, "min_rate": self.lowest, "burstiness": self.burstiness,
                "requests": self.requests, "max_probes": self.max_probes, "seed": self.seed}


def coarse(axis: RateAxis) -> list[float]:
    """The coarse sweep, ascending: ``lowest``, doubling while below ``max_rate``, then ``max_rate``."""
    out, rate = [], axis.lowest
    while rate < axis.max_rate * (1 - 1e-9):
        out.append(rate)
        rate *= 2
    return out + [axis.max_rate]


def capacity(held: Mapping[float, bool]) -> float | None:
    """The highest rate that held (None: none did)."""
    return max((r for r, ok in held.items() if ok), default=None)


def broke_above(held: Mapping[float, bool], rate: float | None) -> float | None:
    """The lowest rate above ``rate`` that broke (with ``rate`` None: the lowest that broke)."""
    return min((r for r, ok in held.items() if not ok and (rate is None or r > rate)), default=None)


def resolved(lo: float, hi: float) -> bool:
    """Nothing left to refine between a rate that held and one above it that broke."""
    return hi - lo <= STEP * lo


def next_rate(held: Mapping[float, bool], axis: RateAxis) -> float | None:
    """The next rate to probe (module docstring), or None when the search is over. ``held``: each
    probed rate and whether the SLO held there."""
    if len(held) >= axis.max_probes:
        return None
    streak = 0
    for rate in coarse(axis):
        if rate not in held:
            return rate
        streak = 0 if held[rate] else streak + 1
        if streak >= BREAKS_TO_STOP:
            break
    best = capacity(held)
    if best is None:  # nothing held: below the sweep, halving
        low = min(held)
        return low / 2 if low / 2 >= axis.lowest / 2 ** BELOW * (1 - 1e-9) else None
    above = broke_above(held, best)
    if above is None or resolved(best, above):
        return None
    return (best + above) / 2


def holds(got: Attainment, percentiles: Mapping[str, Latency | None], targets: Targets | None) -> bool:
    """A probe held: its attainment reached the required share (where there are per-request targets)
    and every percentile target held over its requests (``percentiles``: kind -> Latency)."""
    if targets is None:
        return got.holds(0.0)
    if targets.per_request and not got.holds(targets.attainment):
        return False
    if got.total == 0 or got.missed.get("failed", 0) == got.total:
        return False
    for slo in targets.every:
        lat = percentiles.get(slo.kind)
        if lat is not None and lat.at(slo.quantile) > slo.limit_s:
            return False
    return True


def result(axis: RateAxis, probes: Sequence[RateProbe], targets: Targets | None = None,
           trace_rate: float | None = None) -> RateResult:
    """The launch's record of the search so far: every probe in the order measured, the capacity and
    the lowest rate above it that broke."""
    held = {p.rate: p.held for p in probes}
    best = capacity(held)
    names = tuple(s.name for s in targets.per_request) + tuple(s.name for s in targets.every) if targets else ()
    return RateResult(max_rate=axis.max_rate, min_rate=axis.lowest, probes=tuple(probes), holds=best,
                      breaks=broke_above(held, best), attainment=targets.attainment if targets else None,
                      targets=names, burstiness=axis.burstiness, seed=axis.seed, trace_rate=trace_rate)


def quantile_for(share: float | None) -> int:
    """The recorded percentile a per-request target's attainment reads as: the lowest of ``QUANTILES``
    at or above the share (0.99: p99, 0.9: p90), p99 above them all or with no share."""
    if share is None:
        return QUANTILES[-1]
    return next((q for q in QUANTILES if q >= 100 * share - 1e-9), QUANTILES[-1])


@dataclass(frozen=True)
class Targeted:
    """One targeted percentile of a probe: 'TTFT p99' measured against its limit (seconds)."""

    label: str
    measured_s: float
    limit_s: float

    def describe(self) -> str:
        """'TTFT p99 120 ms (target 300 ms)'."""
        return f"{self.label} {ms(self.measured_s)} (target {ms(self.limit_s)})"


def targeted(probe: RateProbe, targets: Targets | None) -> list[Targeted]:
    """The percentiles the SLO targets at one probe, each once: a per-request target's kind at the
    attainment's percentile (``quantile_for``), then every percentile target's own."""
    if targets is None:
        return []
    q = quantile_for(targets.attainment)
    wanted = [(f"{s.label} p{q}", s.kind, q, s.limit_s) for s in targets.per_request]
    wanted += [(s.label, s.kind, s.quantile, s.limit_s) for s in targets.every]
    out: list[Targeted] = []
    for label, kind, quantile, limit in wanted:
        lat = probe.latency(kind)
        if lat is not None and all(t.label != label for t in out):
            out.append(Targeted(label, lat.at(quantile), limit))
    return out


def probe_line(probe: RateProbe, targets: Targets | None) -> str:
    """'15 req/s: attainment 100.0% (100 of 100), 146.6 tok/s, TTFT p99 120 ms (target 300 ms): holds'."""
    said = [probe.describe()] + [t.describe() for t in targeted(probe, targets)]
    return ", ".join(said) + (": holds" if probe.held else ": breaks")
