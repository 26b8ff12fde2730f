"""Stopping a run from outside: Ctrl-C, SIGTERM or a dropped terminal (SIGHUP).

The first signal finishes the running trials, then the run stops; a second kills them now.
Either way the run exits 130 and no trial stays RUNNING (the driver records them
``interrupted``, re-queued once).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """A context that counts stop signals (``count``) and says what each one does."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.count = 0
        self.say = say
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (tests): no handlers
                pass
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1:
            self.say(f"{name}: stopping after the running trial finishes (Ctrl-C or another signal kills it now)")
        else:
            self.say(f"{name}: killing the running trial now")

    @property
    def kill_now(self) -> bool:
        """A second signal came: running trials are killed, their failures are interruptions."""
        return self.count > 1

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
