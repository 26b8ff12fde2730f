"""``InProcessExecutor``: trials in threads of this process, on this host, no cluster.

The same contract as ``RayExecutor`` (``orchestrator.driver.executor``) without Ray: each
slot is one long-lived thread that runs ``run_trial`` for one spec at a time, so a server
it starts lives exactly as long as the trial (the server's supervisor watches the thread
that started it). ``cancel_all`` sets each running trial's cancel event and stops its
server; the trial comes back ``interrupted`` through ``wait``. Used by the driver's tests
that are not about Ray, and wherever one host is all there is.
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field

from orchestrator.core.records import TrialResult
from orchestrator.driver.executor import Executor
from orchestrator.node.phases import LatestPhases, TrialPhase
from orchestrator.node.server import ServerProcess
from orchestrator.node.spec import TrialSpec
from orchestrator.node.trial import run_trial

STOP_GRACE_S = 2.0  # SIGTERM grace when cancel_all stops a running server


@dataclass
class _Running:
    spec: TrialSpec
    cancel: threading.Event = field(default_factory=threading.Event)
    server: ServerProcess | None = None


class InProcessExecutor(Executor):
    """``parallel`` slots, each a thread of this process (module docstring)."""

    def __init__(self, parallel: int = 1):
        if parallel < 1:
            raise ValueError(f"parallel must be >= 1, not {parallel}")
        self._parallel = parallel
        self._tickets = itertools.count()
        self._todo: queue.Queue[tuple[int, TrialSpec] | None] = queue.Queue()
        self._done: queue.Queue[tuple[int, TrialResult]] = queue.Queue()
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}
        self._phases = LatestPhases()
        self._threads = [threading.Thread(target=self._serve, name=f"trial-slot-{i}", daemon=True)
                         for i in range(parallel)]
        for t in self._threads:
            t.start()

    def _serve(self) -> None:
        while True:
            item = self._todo.get()
            if item is None:
                return
            ticket, spec = item
            with self._lock:
                run = self._running[ticket]

            def on_server(server: ServerProcess | None, run: _Running = run) -> None:
                run.server = server

            result = run_trial(spec, run.cancel, on_server=on_server, on_phase=self._phases.sink(ticket))
            with self._lock:
                self._running.pop(ticket, None)
            self._phases.drop(ticket)
            self._done.put((ticket, result))

    @property
    def slots(self) -> int:
        return self._parallel

    def submit(self, spec: TrialSpec, node_id: str | None = None) -> int:
        ticket = next(self._tickets)
        with self._lock:
            self._running[ticket] = _Running(spec)
        self._todo.put((ticket, spec))
        return ticket

    def wait(self, timeout_s: float) -> list[tuple[int, TrialResult]]:
        out: list[tuple[int, TrialResult]] = []
        try:
            out.append(self._done.get(timeout=max(0.0, timeout_s)))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def running(self) -> dict[int, TrialSpec]:
        with self._lock:
            return {ticket: run.spec for ticket, run in self._running.items()}

    def phases(self) -> dict[int, TrialPhase]:
        return self._phases.snapshot()

    def cancel_all(self) -> None:
        with self._lock:
            runs = list(self._running.values())
        for run in runs:
            run.cancel.set()
            if run.server is not None:
                run.server.stop(STOP_GRACE_S)

    def shutdown(self) -> None:
        self.cancel_all()
        for _ in self._threads:
            self._todo.put(None)
        for t in self._threads:
            t.join(timeout=60)
