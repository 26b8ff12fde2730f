"""Latency targets (SLOs) and the one rule that says which a level breaks, and by how much.

A job's ``slo:`` names targets on the latency percentiles every level records
(``core.measurement.LevelResult``: TTFT, TPOT, inter-token latency and end-to-end latency at
p50, p90 and p99), for every level or for one level::

    slo: {tpot_p99: 20ms, ttft_p99: 1s}            # at every level
    slo: {tpot_p99: 50ms, 1: {ttft_p99: 200ms}}    # and a target of level 1's own
    slo: {tpot_p99: 50ms, 1@8192: {ttft_p99: 2s}}  # of one level of a context axis (``core.level``)

and, for an open-loop load at a request rate (``objective.goodput.max_rate``), targets of each
request judged as attainment, as DistServe, GuideLLM and AIPerf define goodput::

    slo: {ttft: 200ms, tpot: 10ms, attainment: 0.99}   # 99% of requests within every target

A request is good when it succeeded and meets every per-request target (``RequestSlo``: its own
TTFT, TPOT and end-to-end latency); the attainment is the good requests over all sent
(``core.attainment``). Percentile targets may stand beside them: a rate holds where both do.

A target of a level replaces the one of the same name for every level there. A level breaks
a target when the measured percentile is above it (``breaches``); a level without that
latency recorded (a record written before percentiles were kept) breaks nothing: unknown is
not a breach. ``Breach.excess`` is how far over (0.56: 56% over the target), the amount the
study tells Optuna (``outcome.infeasibility``) and the plan prints.

What a breach means for the study is decided elsewhere, each in one place: a config
infeasible at that level only (``study.plan`` ranks it nowhere there), for the whole objective
where every level it is tuned for breaks (``core.outcome.judge_slo``), and the goodput
search's verdict at each load it tries (``core.capacity``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.level import key as level_key
from orchestrator.core.level import parse as parse_level
from orchestrator.core.measurement import LATENCY_KINDS, QUANTILES, LevelResult

NAMES = tuple(f"{kind}_p{q}" for kind in LATENCY_KINDS for q in QUANTILES)  # tpot_p99, ...
REQUEST_NAMES = ("ttft", "tpot", "e2e")  # a request's own latencies a per-request target bounds
ATTAINMENT = "attainment"  # the share of requests that must meet every per-request target
_NAME = re.compile(r"(ttft|tpot|itl|e2e)_p(50|90|99)")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E latency"}


def ms(seconds: float) -> str:
    """'20 ms', '1.5 ms', '2.1 s': a latency as the user wrote it."""
    if seconds >= 1.0:
        return f"{seconds:.3g} s"
    value = 1000 * seconds
    return f"{value:.3g} ms" if value < 100 else f"{value:.0f} ms"


@dataclass(frozen=True)
class Slo:
    """One target: the ``quantile`` percentile of ``kind`` at most ``limit_s`` seconds."""

    kind: str  # one of LATENCY_KINDS
    quantile: int  # 50, 90 or 99
    limit_s: float

    @property
    def name(self) -> str:
        """How the job names it: ``tpot_p99``."""
        return f"{self.kind}_p{self.quantile}"

    @property
    def label(self) -> str:
        """'TPOT p99'."""
        return f"{LABELS[self.kind]} p{self.quantile}"

    def describe(self) -> str:
        """'TPOT p99 <= 20 ms'."""
        return f"{self.label} <= {ms(self.limit_s)}"

    @classmethod
    def named(cls, name: str, limit_s: float) -> Slo:
        """The target ``name`` (one of ``NAMES``); ValueError for another name."""
        m = _NAME.fullmatch(name)
        if m is None:
            raise ValueError(f"unknown SLO {name!r}; one of {', '.join(NAMES)}")
        return cls(m.group(1), int(m.group(2)), float(limit_s))


@dataclass(frozen=True)
class RequestSlo:
    """A per-request target: each request's own ``kind`` (ttft, tpot, e2e) at most ``limit_s``."""

    kind: str
    limit_s: float

    @property
    def name(self) -> str:
        return self.kind

    @property
    def label(self) -> str:
        """'TPOT'."""
        return LABELS[self.kind].replace(" latency", "")

    def describe(self) -> str:
        """'TPOT <= 10 ms'."""
        return f"{self.label} <= {ms(self.limit_s)}"

    @classmethod
    def named(cls, name: str, limit_s: float) -> RequestSlo:
        if name not in REQUEST_NAMES:
            raise ValueError(f"unknown per-request target {name!r}; one of {', '.join(REQUEST_NAMES)}")
        return cls(name, float(limit_s))


@dataclass(frozen=True)
class Breach:
    """A level's measured percentile above its target."""

    slo: Slo
    level: int
    measured_s: float

    @property
    def excess(self) -> float:
        """How far over the target, relative to it (0.56: 56% over)."""
        return self.measured_s / self.slo.limit_s - 1.0

    def describe(self) -> str:
        """'TPOT p99 31.2 ms at 32, over the 20 ms target by 56%'."""
        return (f"{self.slo.label} {ms(self.measured_s)} at {self.level}, over the {ms(self.slo.limit_s)} target "
                f"by {100 * self.excess:.0f}%")

    def to_record(self) -> dict[str, Any]:
        return {"slo": self.slo.name, "level": level_key(self.level), "measured_s": self.measured_s,
                "limit_s": self.slo.limit_s, "excess": self.excess, "text": self.describe()}


@dataclass(frozen=True)
class Targets:
    """The job's targets: ``every`` level's, and each named level's own (module docstring)."""

    every: tuple[Slo, ...] = ()
    per_level: Mapping[int, tuple[Slo, ...]] = field(default_factory=dict)
    per_request: tuple[RequestSlo, ...] = ()  # each request's own latencies (a rate objective's)
    attainment: float | None = None  # the share of requests that must meet every per-request target

    def __bool__(self) -> bool:
        return bool(self.every) or any(self.per_level.values()) or bool(self.per_request)

    def at(self, level: int) -> tuple[Slo, ...]:
        """The targets that hold at ``level``: its own, and every level's it does not replace."""
        own = self.per_level.get(level, ())
        names = {s.name for s in own}
        return tuple(s for s in self.every if s.name not in names) + tuple(own)

    def describe(self) -> str:
        """'TPOT p99 <= 20 ms, TTFT p99 <= 1 s; at 1: TTFT p99 <= 200 ms'; per request 'TTFT <= 200 ms
        and TPOT <= 10 ms for 99% of requests'."""
        parts = [self.per_request_text()] if self.per_request else []
        parts += [", ".join(s.describe() for s in self.every)] if self.every else []
        parts += [f"at {lv}: " + ", ".join(s.describe() for s in slos)
                  for lv, slos in sorted(self.per_level.items()) if slos]
        return "; ".join(parts) or "none"

    def per_request_text(self) -> str:
        """'TTFT <= 200 ms and TPOT <= 10 ms for 99% of requests'."""
        share = f"{100 * self.attainment:g}%" if self.attainment is not None else "every one"
        return " and ".join(s.describe() for s in self.per_request) + f" for {share} of requests"

    def to_record(self) -> dict[str, Any]:
        """The job's form ({name: seconds, level: {name: seconds}}, and {ttft: seconds, attainment:
        share} per request): the study's identity, the export."""
        out: dict[str, Any] = {s.name: s.limit_s for s in self.per_request}
        if self.attainment is not None:
            out[ATTAINMENT] = self.attainment
        out.update({s.name: s.limit_s for s in self.every})
        for level, slos in sorted(self.per_level.items()):
            if slos:
                out[str(level)] = {s.name: s.limit_s for s in slos}
        return out

    @classmethod
    def from_record(cls, rec: Any) -> Targets | None:
        """``to_record``'s form read back (a file that ``compare`` wrote); None for none."""
        if not isinstance(rec, Mapping) or not rec:
            return None
        every, per_level, per_request, share = [], {}, [], None
        for key, value in rec.items():
            if isinstance(value, Mapping):
                per_level[parse_level(key)] = tuple(Slo.named(n, float(v)) for n, v in value.items())
            elif key == ATTAINMENT:
                share = float(value)
            elif key in REQUEST_NAMES:
                per_request.append(RequestSlo.named(str(key), float(value)))
            else:
                every.append(Slo.named(str(key), float(value)))
        return cls(every=tuple(every), per_level=per_level, per_request=tuple(per_request), attainment=share)


def breaches(got: LevelResult | None, slos: Iterable[Slo]) -> list[Breach]:
    """The targets ``got`` breaks (the one rule: the measured percentile above the target;
    a latency not recorded breaks nothing), worst first."""
    if got is None:
        return []
    out = []
    for slo in slos:
        lat = got.latency(slo.kind)
        if lat is not None and lat.at(slo.quantile) > slo.limit_s:
            out.append(Breach(slo, got.level, lat.at(slo.quantile)))
    return sorted(out, key=lambda b: -b.excess)


def breaches_at(levels: Mapping[int, LevelResult], targets: Targets | None,
                only: Iterable[int] | None = None) -> dict[int, list[Breach]]:
    """Per level (of ``only``, default every measured one) the targets it breaks; levels that
    hold are left out."""
    if not targets:
        return {}
    out = {}
    for level in sorted(only if only is not None else levels):
        got = breaches(levels.get(level), targets.at(level))
        if got:
            out[level] = got
    return out


def holds(got: LevelResult | None, targets: Targets | None) -> bool:
    """Every target of ``got``'s level holds there (no target: it holds)."""
    return got is not None and not (targets and breaches(got, targets.at(got.level)))


def worst_excess(found: Iterable[Breach]) -> float:
    """The largest excess among breaches (0.0 for none)."""
    return max((b.excess for b in found), default=0.0)


@dataclass(frozen=True)
class Judged:
    """What the targets say of one launch (``judge``): each level's breaches, and whether the
    config counts nowhere for the objective (``infeasible``) and how far it is from counting
    (``excess``, what Optuna's constraint is told)."""

    breaches: Mapping[int, list[Breach]] = field(default_factory=dict)
    infeasible: bool = False
    excess: float = 0.0
    why: str = ""  # one line: why it counts nowhere

    def to_record(self) -> list[dict[str, Any]]:
        return [b.to_record() for found in self.breaches.values() for b in found]


def judge(measurement: Any, targets: Targets | None, levels: Iterable[int], *, each_level: bool,
          goodput: bool = False) -> Judged:
    """The targets against one launch's ``measurement`` (``core.measurement.Measurement``) at the
    objective's ``levels``: ``each_level`` (a plan) makes a config infeasible only where every
    level breaks (elsewhere it counts at the levels that hold); otherwise (one level, a traffic
    mix) one breach makes it infeasible. With ``goodput`` it is infeasible when no concurrency
    held, not even the lowest (a search by request rate: no rate held)."""
    if not targets or measurement is None:
        return Judged()
    found = breaches_at(measurement.levels, targets,
                        None if goodput else [lv for lv in levels if lv in measurement.levels])
    if goodput:  # the capacity search's record, whichever axis, says how far from holding it was
        searched = measurement.capacity
        if searched is None or searched.holds is not None:
            return Judged(breaches=found)
        excess, why = searched.unheld(found)
        return Judged(breaches=found, infeasible=True, excess=excess, why=why)
    measured = [lv for lv in levels if lv in measurement.levels]
    if not found or not measured:
        return Judged(breaches=found)
    if each_level:
        if any(lv not in found for lv in measured):
            return Judged(breaches=found)
        closest = min(measured, key=lambda lv: worst_excess(found[lv]))
        return Judged(breaches=found, infeasible=True, excess=worst_excess(found[closest]),
                      why="breaks the SLO at every level: " + "; ".join(found[lv][0].describe() for lv in measured))
    worst = max(found, key=lambda lv: worst_excess(found[lv]))
    return Judged(breaches=found, infeasible=True, excess=worst_excess(found[worst]),
                  why="breaks the SLO: " + "; ".join(b[0].describe() for b in found.values()))
