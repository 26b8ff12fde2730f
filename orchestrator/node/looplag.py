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
    order, over every loop it watched."""

    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.woke: list[float] = []
        self.late: list[float] = []

    async def _tick(self) -> None:
        while True:
            due = time.monotonic() + self.interval_s
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            self.woke.append(now)
            self.late.append(max(0.0, now - due))

    async def watching(self, work: Awaitable[_T]) -> _T:
        """``await work`` with the ticker running on the same loop until it ends (raised or
        cancelled included)."""
        ticker = asyncio.ensure_future(self._tick())
        try:
            return await work
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)  # a cancel of the caller still propagates

    def at(self, t: float) -> float | None:
        """How late the loop was around monotonic time ``t`` (a token's stamp): the latest of the
        wake-ups within one interval of it (a stamp taken right after a stall is taken in the same
        turn of the loop as the ticker's wake-up that the stall delayed; a free loop wakes the
        ticker at least once in any two intervals); None: no wake-up there (not watched then)."""
        lo = bisect.bisect_left(self.woke, t - self.interval_s)
        hi = bisect.bisect_right(self.woke, t + self.interval_s)
        return max(self.late[lo:hi]) if hi > lo else None
