"""What a trial is doing now, for a person watching: its phase, and the sink it reports to.

A trial is silent for minutes between its start and its result (a real engine loads,
compiles, captures graphs, warms up, then every level is measured). ``run_trial`` reports
each step to a sink as a ``TrialPhase``; the executor relays the latest one to the driver,
which draws the status line (``driver.progress``). A phase carries its trail, every phase
the trial entered and when, so a driver that polls (and a poll that comes late) still says
each one, and the trial's result keeps the trail (``TrialResult.phases``). The phases:

- ``launching``: before the server wrote its first line; then the start-up phases
  ``node.startup`` reads from the server's own log as it is written (``starting: weights``,
  ``starting: torch.compile``, ``starting: graph capture``, ...; ``starting`` where the log
  names none);
- ``warming up``, ``measuring`` (a level, with its requests done of the total; by request rate, the
  rate probed, with its requests done of those it sends),
  ``correctness check``, ``stopping``.

A report is a courtesy: ``PhaseReporter`` swallows whatever the sink raises (a relay that
is gone, a full queue), so a lost update never fails a trial.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from orchestrator.core.measurement import rate_text
from orchestrator.node import startup

log = logging.getLogger(__name__)

LAUNCHING = "launching"
STARTING = "starting"
WARMING_UP = "warming up"
MEASURING = "measuring"
CHECKING = "correctness check"
STOPPING = "stopping"


READY = "ready"  # the engines' last start-up marker (``node.startup``): the trial says what follows


def startup_phase(last_phase: str) -> str | None:
    """The trial's phase for a start-up phase of ``node.startup`` (``last_phase``); None for
    the engine's ready line (nothing new until the trial warms up)."""
    if last_phase == startup.PROCESS_START:
        return LAUNCHING
    if last_phase == READY:
        return None
    if last_phase == startup.STARTING:
        return STARTING
    return f"{STARTING}: {last_phase}"


@dataclass(frozen=True)
class TrialPhase:
    """One trial's phase (module docstring); times are ``time.time()`` (they cross processes)."""

    number: int  # the trial's number (its log file's)
    name: str
    trial_started: float  # when the trial began
    since: float  # when this phase began
    level: int | None = None  # measuring: the concurrency level
    done: int | None = None  # measuring: requests done at this level over its rounds ...
    total: int | None = None  # ... of this many planned (its rounds x a round's requests)
    level_s: float = 0.0  # measuring: seconds this level was measured before ``since`` (earlier rounds)
    rate: float | None = None  # measuring by request rate: the rate probed (req/s), instead of a level
    trail: tuple[tuple[str, float], ...] = ()  # every phase entered, this one last: (its text then, when)

    @property
    def key(self) -> tuple[str, int | None, float | None]:
        """What changes the phase (a new request done does not)."""
        return self.name, self.level, self.rate

    def text(self) -> str:
        """'measuring level 2: 12/24 requests', 'measuring 15 req/s: 37/100 requests', 'starting: weights'."""
        if self.name != MEASURING:
            return self.name
        what = f"{MEASURING} {rate_text(self.rate)}" if self.rate is not None else f"{MEASURING} level {self.level}"
        return what + (f": {self.done}/{self.total} requests" if self.total else "")


PhaseSink = Callable[[TrialPhase], None]


class PhaseReporter:
    """A trial's reports to a sink (None: nobody listens); never raises (module docstring).
    Thread-safe: the server's log watcher reports start-up phases from its own thread."""

    def __init__(self, number: int, sink: PhaseSink | None, rounds: int = 1):
        self.number = number
        self.sink = sink
        self.rounds = max(1, rounds)  # the rounds each level is measured (``BenchPlan.repeats``)
        self.started = time.time()
        self._current: TrialPhase | None = None
        self._starting = False  # start-up phases are read from the log only while the server starts
        self._tracker = startup.PhaseTracker()
        self._rounds: dict[int, int] = {}  # level -> rounds begun
        self._level_s: dict[int, float] = {}  # level -> seconds measured in its earlier stints
        self._trail: list[tuple[str, float]] = []  # every phase entered: (its text then, when)
        self._lock = threading.Lock()

    @property
    def current(self) -> TrialPhase | None:
        return self._current

    def trail(self) -> list[list]:
        """Every phase the trial entered, in order: [its text then, seconds into the trial]
        (``TrialResult.phases``)."""
        with self._lock:
            return [[text, round(max(0.0, at - self.started), 3)] for text, at in self._trail]

    def _report(self, phase: TrialPhase, entered: bool) -> None:
        """``phase`` is the trial's phase now (``entered``: a new one, onto the trail)."""
        if entered:
            self._trail.append((phase.text(), phase.since))
        self._current = dataclasses.replace(phase, trail=tuple(self._trail))
        self._send(self._current)

    def phase(self, name: str, *, level: int | None = None, done: int | None = None,
              total: int | None = None) -> None:
        """The trial entered ``name`` (or its count moved on)."""
        with self._lock:
            self._enter(name, level, done, total)

    def _enter(self, name: str, level: int | None, done: int | None, total: int | None,
               rate: float | None = None) -> None:
        self._starting = name == LAUNCHING or name.startswith(STARTING)
        now = time.time()
        old = self._current
        same = old is not None and old.key == (name, level, rate)
        if old is not None and not same and old.name == MEASURING and old.level is not None:
            self._level_s[old.level] = old.level_s + now - old.since  # leaving a level: its time kept
        level_s = self._level_s.get(level, 0.0) if name == MEASURING and level is not None else 0.0
        since = old.since if same and old is not None else now
        self._report(TrialPhase(self.number, name, self.started, since, level, done, total, level_s, rate),
                     entered=not same)

    def server_output(self, lines: Iterable[str]) -> None:
        """New lines of the server's log: each start-up phase they name is reported, in the
        order the log names them (only while the server starts; the benchmark's lines are no
        phase). Read line by line: a batch a slow reader took in at once still says every
        phase in it, not only its last (they are entered at the batch's time: the log's own
        times are not read)."""
        with self._lock:
            for line in lines:
                if not self._starting:
                    return
                self._tracker.feed((line,))
                name = startup_phase(self._tracker.phase)
                if name is None or (self._current is not None and self._current.name == name):
                    continue
                self._report(TrialPhase(self.number, name, self.started, time.time()), entered=True)

    def measuring(self, level: int, done: int, total: int) -> None:
        """``node.measure``'s progress: ``done`` of a round's ``total`` requests at ``level`` (0
        as a round begins); said over the level's rounds (its requests done of all it plans)."""
        with self._lock:
            if done == 0:
                self._rounds[level] = self._rounds.get(level, 0) + 1
            begun = max(1, self._rounds.get(level, 1))
            self._enter(MEASURING, level, (begun - 1) * total + done, max(self.rounds, begun) * total)

    def measuring_rate(self, rate: float, done: int, total: int) -> None:
        """``node.open_loop``'s progress: ``done`` of the ``total`` requests a probe at ``rate`` sends."""
        with self._lock:
            self._enter(MEASURING, None, done, total, rate)

    def _send(self, phase: TrialPhase) -> None:
        if self.sink is None:
            return
        try:
            self.sink(phase)
        except Exception:  # a lost update never fails a trial
            log.debug("a phase report of trial %s was lost", self.number, exc_info=True)


class LatestPhases:
    """The latest phase per key, written by trials' threads and read by the driver's: the
    in-process relay (``InProcessExecutor``, ``bench``)."""

    def __init__(self) -> None:
        self._phases: dict[int, TrialPhase] = {}
        self._lock = threading.Lock()

    def sink(self, key: int) -> PhaseSink:
        def put(phase: TrialPhase) -> None:
            with self._lock:
                self._phases[key] = phase
        return put

    def drop(self, key: int) -> None:
        with self._lock:
            self._phases.pop(key, None)

    def snapshot(self) -> dict[int, TrialPhase]:
        with self._lock:
            return dict(self._phases)
