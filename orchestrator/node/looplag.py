"""How late the measuring client's event loop runs: a ticker on the loop that sleeps ``INTERVAL_S``
and records when it woke and how much later than asked.

Why: a token's receive stamp is taken when the client's loop gets to its bytes, not when they
arrived. A loop that is late when a request's first tokens arrive and has caught up by its last
(a starved process: other threads holding the GIL, other work on a loaded box, hundreds of
streams on one loop) shortens the span ``(n - 1) / (t_last - t_first)`` divides by, and
overstates decode speed (230 tok/s measured as 362 with three studies in one process on a busy
2-core box). The ticker is late exactly when a token would be stamped late: it waits on the same
loop, behind the same callbacks, in the same thread, so its lateness around a token's stamp
(``at``) is how late that stamp was, to about one interval. ``core.client_bound`` weighs it
against the spans it could distort.

``LoopLag`` keeps every wake-up of every loop it watched (one level is many loops at level 1:
each request runs on a loop of its own; the clock is ``time.monotonic``, the one the client
stamps tokens with); ``watching`` runs the ticker beside a coroutine.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Awaitable
from typing import TypeVar

INTERVAL_S = 0.005  # the ticker's sleep: 200 wake-ups a second, a few microseconds of the loop's time each

_T = TypeVar("_T")


class LoopLag:
    """The ticker's wake-ups (``time.monotonic`` seconds) and how late each was (seconds), in time
    order, over every loop it watched, and the spans it watched them."""

    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.woke: list[float] = []
        self.late: list[float] = []
        self.watched: list[tuple[float, float, float]] = []  # (start, end, how late the pending wake-up was at end)

    async def _tick(self, due: list[float]) -> None:
        """Wake every interval; ``due[0]``: when the pending wake-up was asked for (the first one
        an interval after the watch began: a loop held before the ticker first ran is seen late)."""
        while True:
            await asyncio.sleep(max(0.0, due[0] - time.monotonic()))
            now = time.monotonic()
            self.woke.append(now)
            self.late.append(max(0.0, now - due[0]))
            due[0] = now + self.interval_s

    async def watching(self, work: Awaitable[_T]) -> _T:
        """``await work`` with the ticker running on the same loop until it ends (raised or
        cancelled included)."""
        start = time.monotonic()
        due = [start + self.interval_s]
        ticker = asyncio.ensure_future(self._tick(due))
        try:
            return await work
        finally:
            end = time.monotonic()  # the loop is ours again: a wake-up still pending is as late as this
            self.watched.append((start, end, max(0.0, end - due[0])))
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)  # a cancel of the caller still propagates

    def at(self, t: float) -> float | None:
        """How late the loop was around monotonic time ``t`` (a token's stamp): the latest of the
        wake-ups within one interval of it and of the first wake-up after it (a stamp taken just
        before or after a stall is taken within the turn that the stall delayed the ticker's
        wake-up to; a stall longer than the interval leaves a gap between wake-ups that a stamp
        inside it is still judged by); None: ``t`` outside every span watched (unknown)."""
        span = next(((s, e, pending) for s, e, pending in self.watched
                     if s - self.interval_s <= t <= e + self.interval_s), None)
        if span is None:
            return None
        start, end, pending = span
        lo = bisect.bisect_left(self.woke, max(start, t - self.interval_s))
        after = bisect.bisect_left(self.woke, t)
        hi = max(bisect.bisect_right(self.woke, min(end, t + self.interval_s)), after + 1)
        near = [late for woke, late in zip(self.woke[lo:hi], self.late[lo:hi]) if woke <= end]
        if after >= len(self.woke) or self.woke[after] > end:  # no wake-up after it in this span: the end tells
            near.append(pending)
        return max(near) if near else 0.0
