"""When each request of an open-loop load is sent: seconds after the first, drawn once per seed.

Closed-loop streams (``node.client.run_streams``) send a request when the last one ended, so a slow
server is offered less load and never queues. Production traffic arrives on its own clock; an
open-loop load sends each request at its time whatever the server is doing, so above its capacity
requests queue and their TTFT grows, as users see it.

- ``schedule(rate, n, burstiness, seed)``: the gaps between requests are gamma-distributed with
  shape ``burstiness`` and mean ``1 / rate``, as ``vllm bench serve --request-rate R --burstiness B``
  draws them (burstiness 1: exponential gaps, Poisson arrivals; below 1 burstier, above 1 more
  regular; the gaps' coefficient of variation is ``1 / sqrt(burstiness)``). The first request is
  sent at 0.
- The gaps are rescaled to average exactly ``1 / rate`` over the probe: its requests arrive at the
  rate asked over their span, not at what so many draws happen to average (100 exponential draws of
  one seed averaged 1.2x their mean: a probe "at 15 req/s" would have offered 12.5); their shape,
  the bursts and the coefficient of variation, is the draw's.
- The draws depend on the seed alone, not on the rate: the schedule at rate R is the unit-rate
  schedule divided by R, the same pattern faster or slower. The capacity search compares rates
  under one arrival pattern (common random numbers), so what differs between two probes is the
  rate, not a reshuffled burst, and a launch's schedule is the same in every launch of every config.
- ``replay(times, speed)``: a traffic file's own timestamps (``config.traffic``), as offsets from its
  first request, the gaps divided by ``speed`` (2.0: twice as fast). ``own_rate`` is the rate a
  trace's timestamps make, so a trace can be replayed at any rate (``speed = rate / own_rate``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import accumulate

POISSON = 1.0  # the burstiness of Poisson arrivals


def unit_gaps(n: int, burstiness: float, seed: int | str) -> list[float]:
    """``n - 1`` gaps averaging exactly 1 (gamma draws, shape ``burstiness``, rescaled: module
    docstring), the same for the same seed."""
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, not {burstiness}")
    rng = random.Random(f"ncclsweep arrivals {seed}")
    gaps = [rng.gammavariate(burstiness, 1.0 / burstiness) for _ in range(max(0, n - 1))]
    total = sum(gaps)
    return [g * len(gaps) / total for g in gaps] if total > 0 else gaps


def schedule(rate: float, n: int, burstiness: float = POISSON, seed: int | str = 0) -> list[float]:
    """Send times (seconds after the first request) of ``n`` requests at ``rate`` requests/s (module
    docstring); [] for none."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, not {rate}")
    if n <= 0:
        return []
    return [0.0, *(t / rate for t in accumulate(unit_gaps(n, burstiness, seed)))]


def replay(times: Sequence[float], speed: float = 1.0) -> list[float]:
    """A trace's timestamps as send times after its first request, the gaps divided by ``speed``."""
    if speed <= 0:
        raise ValueError(f"speed must be > 0, not {speed}")
    if not times:
        return []
    first = min(times)
    return [(t - first) / speed for t in times]


def own_rate(times: Sequence[float]) -> float | None:
    """Requests per second a trace's timestamps make: its requests after the first over its span
    (None: fewer than two, or all at one instant)."""
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def at_rate(rate: float, n: int, burstiness: float = POISSON, seed: int | str = 0,
            trace: Sequence[float] | None = None) -> list[float]:
    """The send times of a probe at ``rate``: a trace's own pattern made that fast (``replay`` at
    ``rate / own_rate``), else ``n`` drawn arrivals (``schedule``)."""
    if trace:
        own = own_rate(trace)
        if own is None:
            raise ValueError("a trace whose requests all share one timestamp has no pace to scale")
        return replay(trace, rate / own)
    return schedule(rate, n, burstiness, seed)
