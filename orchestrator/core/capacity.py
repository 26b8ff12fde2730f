"""Capacity under an SLO: the concurrency with the most total tok/s at which every target holds,
found over the load axis without assuming that throughput or latency is monotone in it.

Engines change regime as a batch grows: vLLM replays a captured CUDA graph up to its largest
capture size and runs the batch eagerly above it (on one H100 a 1B model gave 19,037 tok/s at 64
streams and 7,923 at 68), a scheduler runs at most max-num-seqs sequences and queues the rest,
and past what its KV cache holds it preempts. A bisection that assumes throughput rises with load
probed 1 and 128 streams, saw the target hold at both, and answered 128 at 13,101 tok/s. So the
search (``next_probe``) measures:

1. a coarse sweep (``coarse``): 1, the most asked (``max_concurrency``), a geometric grid between
   (every 4x, coarser where the marks leave too little room), and each place the engine changes
   regime (``core.measurement.RegimeMark``: the largest captured batch, max-num-seqs, what the KV
   cache holds) and the one above it: the last batch of a regime and the first of the next;
2. then refinement: the gap above the best feasible point first (a crossing of the SLO or a fall
   in throughput lies in it), then each crossing (neighbours where the SLO held at one and broke at
   the other), nearest to the best first, each halved until it is at most ``STEP`` of its load
   wide (1 below 20 streams): closer than that, neighbouring loads differ less than their noise.

3. confirmation (``next_step``): a measurement the answer would rest on, taken once, is taken
   ``CONFIRM_STINTS`` times more before it is believed (the level's figure is then the median over
   its rounds, its percentiles over every request): a fall (a load where every target held that
   reads more than ``FALL_TO_CONFIRM`` below a lower one where they held too) as soon as it is seen,
   and, once the search is over, the limit (the lowest load above the capacity point: where the
   answer says the SLO broke or the throughput fell). Falls above one that held up are its regime's,
   and are not measured again. A regime change falls again; a box that
   stalled for a moment under other work does not (a 2-core box kept busy read 24 streams below 16
   on one round of a server whose throughput rises with every stream). At most ``MAX_CONFIRMS`` a
   launch.

At most ``MAX_PROBES`` loads per launch. A peak inside a gap below the best would need a regime
change there; the known ones are probed. The capacity point (``capacity_point``) is the most
throughput among the loads where every target held; ``result`` is the launch's record
(``GoodputResult``) and ``curve`` every measured point of it: the load, the steady-state and
whole-run tok/s, the targeted percentiles and whether the SLO held.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.measurement import GoodputResult, Measurement, RegimeMark
from orchestrator.core.slo import Slo, Targets, holds

MAX_PROBES = 12  # loads measured in one launch at most
COARSE_MAX = 8  # the coarse sweep's share of them: at least 4 are left to refine
GRID_RATIO = 4  # the coarse grid's step (coarser while the sweep would be longer than COARSE_MAX)
STEP = 0.1  # refinement stops when a gap is at most this share of its load wide (1 below 20 streams)
FALL_TO_CONFIRM = 0.05  # a held load this far below a lower held one is measured again (module docstring)
CONFIRM_STINTS = 2  # a confirmed load's measurements: its first and this many more (the median of three)
MAX_CONFIRMS = 3  # loads confirmed in one launch at most


def step(load: int) -> int:
    """The widest gap at ``load`` that refinement leaves (``STEP``; 1 below 20 streams)."""
    return max(1, int(load * STEP))


def resolved(lo: int, hi: int) -> bool:
    """Nothing unseen between two measured neighbours: the search would not split their gap (the
    report draws a line only between such points)."""
    return hi - lo <= step(lo)


def regime_loads(marks: Iterable[RegimeMark], top: int) -> list[int]:
    """Each mark's load and the one above it, within 1..``top``."""
    return sorted({x for m in marks for x in (m.streams, m.streams + 1) if 1 <= x <= top})


def coarse(top: int, marks: Iterable[RegimeMark] = ()) -> list[int]:
    """The coarse sweep, ascending (module docstring): 1, ``top``, a grid every ``GRID_RATIO``x
    between (every 8x, 16x, ... while the sweep would hold more than ``COARSE_MAX`` loads), and the
    regime marks' loads."""
    regime = regime_loads(marks, top)
    ratio = GRID_RATIO
    while True:
        grid = {1, top}
        x = ratio
        while x < top:
            grid.add(x)
            x *= ratio
        loads = sorted(grid | set(regime))
        if len(loads) <= COARSE_MAX or ratio >= top:
            return loads[:COARSE_MAX - 1] + [top] if len(loads) > COARSE_MAX else loads
        ratio *= 2


@dataclass(frozen=True)
class Probe:
    """One measured load: its total tok/s (None: none) and whether every target held there."""

    load: int
    tok_s: float | None
    held: bool


def capacity_point(probes: Mapping[int, Probe]) -> int | None:
    """The load with the most total tok/s where every target held (the fewer streams on a tie);
    None: no load held."""
    feasible = [p for p in probes.values() if p.held and p.tok_s is not None]
    if not feasible:
        return None
    return max(feasible, key=lambda p: (p.tok_s, -p.load)).load


def next_probe(probes: Mapping[int, Probe], top: int, marks: Iterable[RegimeMark] = ()) -> int | None:
    """The next load to measure (module docstring), or None when the search is over: the coarse
    sweep in ascending order, then the gap above the best feasible point, then each crossing,
    nearest the best first, halved while wider than ``step``; nothing once ``MAX_PROBES`` are
    measured, or when no load of the sweep held."""
    if len(probes) >= MAX_PROBES:
        return None
    for load in coarse(top, marks):
        if load not in probes:
            return load
    best = capacity_point(probes)
    if best is None:
        return None
    loads = sorted(probes)
    pairs = list(zip(loads, loads[1:]))
    above = [(lo, hi) for lo, hi in pairs if lo == best]
    crossings = sorted(((lo, hi) for lo, hi in pairs if probes[lo].held != probes[hi].held),
                       key=lambda g: min(abs(math.log(x / best)) for x in g))
    for lo, hi in above + crossings:
        if not resolved(lo, hi):
            return (lo + hi) // 2
    return None


def to_confirm(probes: Mapping[int, Probe], confirmed: Iterable[int], search_over: bool) -> int | None:
    """The lowest load whose one measurement the answer would rest on (module docstring, 3): a fall
    among the loads where every target held (below the first fall confirmed: one that held up starts
    a regime, which the falls above it belong to); once ``search_over``, the limit above the capacity
    point. None: nothing (more) to confirm: every such load is ``confirmed`` already, or
    ``MAX_CONFIRMS`` are."""
    done = set(confirmed)
    if len(done) >= MAX_CONFIRMS:
        return None
    held = sorted((p.load, p.tok_s) for p in probes.values() if p.held and p.tok_s is not None)
    best_below = 0.0
    for load, tok_s in held:
        if tok_s < best_below * (1 - FALL_TO_CONFIRM):
            if load in done:  # a fall that held up: the regime it starts explains the falls above it
                break
            return load
        best_below = max(best_below, tok_s)
    best = capacity_point(probes)
    if not search_over or best is None:
        return None
    limit = min((x for x in probes if x > best), default=None)
    return limit if limit is not None and limit not in done else None


def next_step(probes: Mapping[int, Probe], top: int, marks: Iterable[RegimeMark] = (),
              confirmed: Iterable[int] = ()) -> tuple[int, bool] | None:
    """What to measure next (module docstring): (load, True) to confirm a measured load, (load,
    False) a new one (``next_probe``); None: the search is over."""
    fall = to_confirm(probes, confirmed, search_over=False)
    if fall is not None:
        return fall, True
    nxt = next_probe(probes, top, marks)
    if nxt is not None:
        return nxt, False
    limit = to_confirm(probes, confirmed, search_over=True)
    return (limit, True) if limit is not None else None


def result(top: int, order: Sequence[int], probes: Mapping[int, Probe], marks: Iterable[RegimeMark] = (),
           targets: Targets | None = None) -> GoodputResult:
    """The launch's record of the search so far: the probes in the order measured, each one's
    verdict, the capacity point, the lowest load above it that broke a target (where none held:
    the lowest that broke), the marks within ``top`` and the targets' names."""
    best = capacity_point(probes)
    broke = sorted(p for p in probes if not probes[p].held and (best is None or p > best))
    return GoodputResult(top, tuple(order), holds=best, breaks=broke[0] if broke else None,
                         held=tuple(probes[p].held for p in order),
                         marks=tuple(sorted((m for m in marks if 1 <= m.streams <= top), key=lambda m: m.streams)),
                         targets=tuple(s.name for s in targets.every) if targets else ())


def merge_marks(configured: Iterable[RegimeMark], logged: Iterable[RegimeMark]) -> tuple[RegimeMark, ...]:
    """One mark per kind: what the engine's log says it ran with, else what the config asked for
    (a logged 0, no graph captured, leaves none of its kind)."""
    out = {m.kind: m for m in configured}
    out.update({m.kind: m for m in logged})
    return tuple(sorted((m for m in out.values() if m.streams >= 1), key=lambda m: (m.streams, m.kind)))


def mark_between(marks: Iterable[RegimeMark], lo: int, hi: int) -> RegimeMark | None:
    """The regime mark at or above ``lo`` and below ``hi`` (the lowest), if any: why a load above
    the capacity point runs another way."""
    return min((m for m in marks if lo <= m.streams < hi), key=lambda m: m.streams, default=None)


@dataclass(frozen=True)
class CurvePoint:
    """One measured load of a goodput launch: its total tok/s in the steady state and over the whole
    run, the targeted percentiles (name, seconds) and whether every target held (None: not judged,
    a bisection's record read without targets)."""

    load: float  # streams (a request rate's curve: req/s)
    tok_s: float | None
    whole_run_tok_s: float | None
    held: bool | None
    latency: tuple[tuple[str, float], ...] = ()

    def to_record(self) -> dict[str, Any]:
        return {"load": self.load, "tok_s": self.tok_s, "whole_run_tok_s": self.whole_run_tok_s,
                "held": self.held, "latency": dict(self.latency)}


def curve(measurement: Measurement | None, targets: Targets | None = None) -> list[CurvePoint]:
    """Every measured load of a goodput launch, ascending (module docstring): the verdicts the
    launch recorded, else (a bisection's record) ``targets`` judged again; the percentiles of the
    targets the launch recorded, else of ``targets``."""
    got = measurement.goodput if measurement is not None else None
    if measurement is None or got is None:
        return []
    verdict = dict(zip(got.probes, got.held)) if got.held is not None else {}
    names = list(got.targets) or ([s.name for s in targets.every] if targets else [])
    out = []
    for load, level in measurement.levels.items():
        held = verdict.get(load, holds(level, targets) if targets else None)
        pcts = []
        for name in names:
            slo = Slo.named(name, 0.0)
            lat = level.latency(slo.kind)
            if lat is not None:
                pcts.append((name, lat.at(slo.quantile)))
        out.append(CurvePoint(load, level.value, level.whole_run_tok_s, held, tuple(pcts)))
    return out
