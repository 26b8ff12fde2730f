"""Stopping a run from outside: Ctrl-C, SIGTERM or a dropped terminal (SIGHUP).

The first signal finishes the running trials, then the run stops; a second kills them now.
Either way the run exits 130 and no trial stays RUNNING (the driver records them
``interrupted``, re-queued once).

Every delivery counts: Python runs a signal's handler once for all the deliveries that came
while its main thread was away from Python code (waiting in Ray, or given no CPU on a busy
host), so Ctrl-C twice could read as once. The operating-system-level handler writes one byte
per delivery to the wakeup pipe, and the handler counts those bytes.
"""

from __future__ import annotations

import os
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
        self._pipe: tuple[int, int] | None = None  # the wakeup pipe (module docstring)
        self._old_wakeup = -1

    def __enter__(self) -> StopSignals:
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (tests): no handlers
                pass
        if self._old:
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._old_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self._pipe = (read, write)
        return self

    def _delivered(self) -> int:
        """Stop signals delivered since the handler last ran, by the wakeup pipe's bytes."""
        if self._pipe is None:
            return 0
        got = 0
        try:
            while chunk := os.read(self._pipe[0], 512):
                got += sum(1 for b in chunk if b in STOP_SIGNALS)
        except BlockingIOError:
            pass
        return got

    def _handle(self, signum, frame) -> None:
        # at least this one: a pipe that got no byte (another wakeup fd set since) never hides a signal
        before = self.count
        self.count += max(1, self._delivered())
        name = signal.Signals(signum).name
        if before == 0:
            self.say(f"{name}: stopping after the running trial finishes (Ctrl-C or another signal kills it now)")
        if before <= 1 < self.count:
            self.say(f"{name}: killing the running trial now")

    @property
    def kill_now(self) -> bool:
        """A second signal came: running trials are killed, their failures are interruptions."""
        return self.count > 1

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
