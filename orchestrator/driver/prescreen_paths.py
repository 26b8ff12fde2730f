"""Which all-reduce path is fastest at each message size, per TP, and where that changes.

A path is an NCCL setting of the space or the custom path. Each setting runs in its own probe
launch, and launches differ by more than their own intervals say on a busy host, so a path is
*clearly* fastest at a size only beyond the noise (``beats``); sizes where paths are within the
noise of each other say nothing. ``crossovers`` names the sizes where the clear winner changes:
the PCIe crossovers others report sit at 48-120 KB, and the NCCL tuner export and the table read
them from here.
"""

from __future__ import annotations

import math

from orchestrator.core.prescreened import Crossover, Prescreen

# A path is clearly faster at a size when its median's interval lies below the other's and it
# is this much faster: each setting runs in its own probe launch, and launches differ by more than
# their in-launch intervals say on a busy host (two gloo launches of one path on the 2-core test
# box: 10-40% apart at some sizes, disjoint intervals)
CLEAR_MARGIN = 1.10

Interval = tuple[float, float, float]  # (median, low, high) microseconds


def beats(a: Interval, b: Interval) -> bool:
    """Whether the point (median, low, high) ``a`` is clearly faster than ``b``: intervals apart
    and ``CLEAR_MARGIN`` faster."""
    return a[2] < b[1] and a[0] * CLEAR_MARGIN <= b[0]


def winners(data: Prescreen, tp: int, *, nccl_only: bool = False) -> list[tuple[int, str, float, bool]]:
    """(bytes, the fastest path's label, its latency, clear) at every size measured at ``tp``;
    ``clear``: it beats every other path there (``beats``; else they are within the noise of
    each other at that size)."""
    paths = [(label, points) for label, points in data.paths(tp) if not (nccl_only and label == "custom")]
    out = []
    for size in sorted({b for _, points in paths for b in points}):
        here = sorted((points[size], label) for label, points in paths if size in points)
        (latency, _, _), label = here[0]
        out.append((size, label, latency, all(beats(here[0][0], other) for other, _ in here[1:])))
    return out


def crossovers(data: Prescreen) -> tuple[Crossover, ...]:
    """Where the fastest path changes beyond the noise, per TP: between two sizes where
    different paths are clearly fastest (sizes where they are within the noise of each other
    say nothing), ``below`` wins up to ``bytes`` (interpolated where the two latencies meet, on a
    log scale of size), ``above`` past it; and separately the custom path against NCCL's fastest
    at each size (``custom``)."""
    out: list[Crossover] = []
    for tp in data.ok_tps():
        measured = dict(data.paths(tp))
        paths = {label: {b: p[0] for b, p in points.items()} for label, points in measured.items()}
        series = [("all", [(b, label) for b, label, _, clear in winners(data, tp) if clear])]
        if "custom" in measured:
            custom = measured["custom"]
            won = []
            for b, _, _, _ in winners(data, tp, nccl_only=True):
                best = min((points[b] for label, points in measured.items() if label != "custom" and b in points),
                           default=None)
                if best is None or b not in custom:
                    continue
                if beats(custom[b], best):
                    won.append((b, "custom"))
                elif beats(best, custom[b]):
                    won.append((b, "NCCL"))
            series.append(("custom", won))
        for kind, clear in series:
            for (b1, l1), (b2, l2) in zip(clear, clear[1:]):
                if l1 != l2:
                    out.append(Crossover(tp, l1, l2, _meet(paths, kind, l1, l2, b1, b2, data, tp), (b1, b2),
                                         custom=kind == "custom"))
    return tuple(out)


def _meet(paths: dict[str, dict[int, float]], kind: str, a: str, b: str, b1: int, b2: int, data: Prescreen,
          tp: int) -> int:
    """The size between ``b1`` and ``b2`` where path ``a``'s latency meets ``b``'s (linear in
    log size); the geometric middle where the latencies do not say."""
    if kind == "custom":
        best = {s: lat for s, _, lat, _ in winners(data, tp, nccl_only=True)}
        la = {s: paths["custom"][s] for s in (b1, b2)} if a == "custom" else {s: best[s] for s in (b1, b2)}
        lb = {s: paths["custom"][s] for s in (b1, b2)} if b == "custom" else {s: best[s] for s in (b1, b2)}
    else:
        la, lb = paths.get(a, {}), paths.get(b, {})
    try:
        d1, d2 = la[b1] - lb[b1], la[b2] - lb[b2]
    except KeyError:
        d1 = d2 = 0.0
    x1, x2 = math.log(b1), math.log(b2)
    if d1 != d2 and d1 <= 0 <= d2:
        return int(round(math.exp(x1 + (x2 - x1) * (-d1) / (d2 - d1))))
    return int(round(math.sqrt(b1 * b2)))


def standing(data: Prescreen, tp: int, size: int, label: str) -> str:
    """``1``: path ``label`` is clearly fastest at ``size``; ``tie``: within the noise of the
    fastest there (its interval reaches the fastest's); ``0``: slower beyond the noise."""
    measured = {name: points[size] for name, points in data.paths(tp) if size in points}
    if label not in measured:
        return "0"
    best = min(measured.values())
    mine = measured[label]
    if mine == best:
        return "1" if all(beats(best, p) for name, p in measured.items() if name != label) else "tie"
    return "0" if beats(best, mine) else "tie"
