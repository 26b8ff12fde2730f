"""The run's wall clock: its deadline (``budget.timeout`` or ``--timeout``) and the time left.

The loop stops starting launches past the deadline; the search yields to the race when the
time left is what the race needs (``race_runner``); the race asks whether its next launch
would end past it.
"""

from __future__ import annotations

import time


class TimeBudget:
    """``timeout_s`` from ``started`` (``time.monotonic``); no timeout: no deadline, never past."""

    def __init__(self, timeout_s: float | None, started: float):
        self.timeout_s = timeout_s
        self.deadline = started + timeout_s if timeout_s else None

    def past(self) -> bool:
        """The deadline has come: nothing more starts."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def left(self) -> float | None:
        """Seconds to the deadline (negative past it); None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def ends_past(self, seconds: float | None) -> bool:
        """A launch expected to take ``seconds`` (None: unknown, never past) would end past the deadline."""
        return self.deadline is not None and seconds is not None and time.monotonic() + seconds > self.deadline

