"""How far a long command is and how long the rest should take: its ETA.

A command that repeats steps of about equal cost (``compare``'s launches, a study's trials, a
race between finalists) counts them with a ``Pace``: the time to go is the mean step so far
times the steps left, less how far the current one is. Before the first step ends there is
nothing to go by, and none is claimed.
"""

from __future__ import annotations

import time


def fmt_s(seconds: float) -> str:
    """A clock for people: '41s', '3m20s', '2h05m'."""
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Pace:
    """``total`` steps of about equal cost (module docstring), counted as they end; ``step``
    names one ("launch", "round")."""

    def __init__(self, total: int, step: str = "step"):
        self.total = max(0, int(total))
        self.step = step
        self.done = 0
        self.started = time.monotonic()
        self._step_started = self.started
        self._spent = 0.0  # seconds of the steps done

    def step_done(self) -> None:
        now = time.monotonic()
        self.done += 1
        self._spent += now - self._step_started
        self._step_started = now

    def current_s(self) -> float:
        """Seconds into the step now running."""
        return time.monotonic() - self._step_started

    def to_go(self) -> float | None:
        """Seconds until the last step ends (None before one has ended)."""
        if not self.done:
            return None
        left = self.total - self.done
        return max(0.0, self._spent / self.done * left - (self.current_s() if left else 0.0))

    def said(self) -> str:
        """'~3m20s to go' (or what it waits for, or that it is done)."""
        if self.total and self.done >= self.total:
            return f"the last {self.step}"
        to_go = self.to_go()
        return f"~{fmt_s(to_go)} to go" if to_go is not None else f"time to go known after the first {self.step}"
