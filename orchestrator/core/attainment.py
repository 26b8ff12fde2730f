"""SLO attainment: the share of requests that met every per-request target.

A percentile target (``tpot_p99: 20ms``) says how the slowest requests of a level fared; a user
of an open-loop load asks instead how many requests were served well. As DistServe, GuideLLM and
AIPerf define goodput, a request counts (``met``) when it succeeded and each of its own latencies
is within its target (``core.slo.RequestSlo``: TTFT, TPOT, end-to-end), all at once; the
attainment is the good requests over every request sent, failed and unfinished ones included (a
request the server never answered was not served within anything). A latency a request does not
have (TPOT of a one-token answer) is not held against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.slo import RequestSlo


@dataclass(frozen=True)
class Timing:
    """One request's own latencies (seconds; None: it has none) and whether it succeeded."""

    ok: bool
    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None


def misses(timing: Timing, targets: Iterable[RequestSlo]) -> list[str]:
    """The targets ``timing`` misses, by name ('failed' for a request that did not succeed)."""
    if not timing.ok:
        return ["failed"]
    out = []
    for slo in targets:
        got = getattr(timing, slo.kind)
        if got is not None and got > slo.limit_s:
            out.append(slo.kind)
    return out


def met(timing: Timing, targets: Iterable[RequestSlo]) -> bool:
    """The request succeeded and met every target."""
    return not misses(timing, targets)


@dataclass(frozen=True)
class Attainment:
    """How many of ``total`` requests were ``good``, and how many missed each target (``missed``:
    target name or 'failed' -> requests)."""

    good: int
    total: int
    missed: dict[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float | None:
        """good / total (None: no request)."""
        return self.good / self.total if self.total else None

    def holds(self, required: float | None) -> bool:
        """At least ``required`` of the requests were good (None: every one)."""
        share = self.share
        return share is not None and share >= (1.0 if required is None else required) - 1e-12

    def to_record(self) -> dict[str, Any]:
        return {"good": self.good, "total": self.total, "missed": dict(self.missed)}


def attainment(timings: Iterable[Timing], targets: Iterable[RequestSlo]) -> Attainment:
    """The attainment of ``timings`` under ``targets`` (module docstring)."""
    slos = tuple(targets)
    good = total = 0
    missed: dict[str, int] = {}
    for timing in timings:
        total += 1
        found = misses(timing, slos)
        if not found:
            good += 1
        for name in found:
            missed[name] = missed.get(name, 0) + 1
    return Attainment(good, total, missed)
