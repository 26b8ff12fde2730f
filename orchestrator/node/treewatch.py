"""Watch a server's whole tree and its log while it starts and while it is measured.

A real engine can fail in a process that is not the one the study launched: vLLM's
workers died (``WorkerProc hit an exception``, ``EngineCore failed to start``) while
its API server stayed up and never turned healthy, so the trial waited out its whole
start-up timeout (a 744B model's job allows 40 minutes). ``TreeWatch`` polls, every
``poll_s``:

- the tree: a member that is gone while the first process still runs is fatal. Which
  descendants are members: where the backend names its engine's *essential* processes
  (vLLM's workers and engine core retitle themselves ``VLLM::Worker_TP0``,
  ``VLLM::EngineCore``), those; elsewhere every descendant that runs the first process's
  own executable (a Python server's workers) and has lived at least ``min_age_s``.
  Never a member: tools (a compiler, ``ptxas``, ``nvidia-smi``: another executable), nor
  a process whose command line matches a *transient* pattern (compile workers, vLLM's
  model-inspection subprocess, a P2P check), which come and go by design;
- the log: new lines are matched against the backend's *fatal* patterns (an engine's
  own words for "this server is dead").

The first fatal finding is kept (``fatal``: one line, ``evidence``: the log lines
around it) and ``on_fatal`` is called once, after a short grace so the engine can finish
printing its traceback; the server's owner ends the server there, which also ends a
benchmark waiting on it. ``seen`` keeps every member ever seen, so teardown can end the
ones that left the process group.

Each batch of new lines is also handed to ``on_output`` (the trial's live start-up phase,
``node.phases``); what it raises is ignored.

The watch also notes when the log last grew (``first_output``, ``last_output``: any bytes,
a progress bar's carriage-return updates included): a start-up that deadlocks (GPUs busy, no
progress) writes nothing, and ``ServerProcess.wait_ready`` ends it as stalled after
``timeouts.stall`` of silence instead of after the whole start-up timeout.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.core.files import read_tail
from orchestrator.core.launch import WatchRules
from orchestrator.node import proctree


def find_fatal(lines: list[str], fatal: re.Pattern | None) -> int | None:
    """Index of the first line that matches an engine's fatal patterns, or None."""
    if fatal is None:
        return None
    return next((i for i, line in enumerate(lines) if fatal.search(line)), None)


@dataclass
class _Found:
    reason: str
    evidence: list[str] = field(default_factory=list)


class TreeWatch:
    """One server's watcher thread (see the module docstring)."""

    def __init__(self, pid: int, start: float, log_path: Path | str, rules: WatchRules | None = None, *,
                 on_fatal: Callable[[], None] | None = None, poll_s: float = 0.5, grace_s: float = 1.0,
                 offset: int | None = None, on_output: Callable[[list[str]], None] | None = None):
        self.pid, self.start = pid, start
        self.log_path = Path(log_path)
        self.rules = rules or WatchRules()
        self.on_fatal = on_fatal
        self.on_output = on_output
        self.poll_s, self.grace_s = poll_s, grace_s
        self.seen: dict[tuple[int, float], proctree.Member] = {}
        self._members: dict[tuple[int, float], proctree.Member] = {}
        self._found: _Found | None = None
        self._offset = 0
        self._partial = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fatal_re = self.rules.fatal_regex()
        self._transient_re = self.rules.transient_regex()
        self._essential_re = self.rules.essential_regex()
        self._exe = ""
        self._begin_offset = offset  # where the server's own output starts (after the node's launch line)
        self.first_output: float | None = None  # time.monotonic() when the log first grew
        self.last_output: float | None = None  # ... and when it last did

    # ---- results ---------------------------------------------------------------------------
    @property
    def fatal(self) -> str | None:
        """One line: why the server is dead, once found."""
        return self._found.reason if self._found else None

    @property
    def evidence(self) -> list[str]:
        return list(self._found.evidence) if self._found else []

    # ---- thread --------------------------------------------------------------------------------
    def begin(self) -> "TreeWatch":
        self._offset = self._log_size() if self._begin_offset is None else self._begin_offset
        self._thread = threading.Thread(target=self._run, name=f"treewatch-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def end(self) -> None:
        """Stop watching (before a deliberate teardown, so it is not taken for a crash)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            if self._found is not None:
                if self._stop.wait(self.grace_s):
                    return
                self._read_log()  # the rest of the traceback, for the evidence
                if self.on_fatal is not None:
                    self.on_fatal()
                return
            self._stop.wait(self.poll_s)

    # ---- one poll ----------------------------------------------------------------------------
    def check(self) -> str | None:
        """One poll of the tree and the log; returns the fatal reason once found."""
        if self._found is None:
            self._check_log()
        if self._found is None:
            self._check_tree()
        return self.fatal

    def _check_tree(self) -> None:
        if not proctree.alive(self.pid, self.start):
            return  # the first process itself exited: its owner sees that directly
        now = time.time()
        current = {}
        for m in proctree.tree(self.pid, self.start):
            key = (m.pid, m.start)
            self.seen.setdefault(key, m)
            if m.pid == self.pid:
                self._exe = m.exe or self._exe
                continue
            if self._transient_re and self._transient_re.search(m.cmdline):
                continue
            current[key] = m
            if self._is_member(m, now):
                self._members.setdefault(key, m)
        gone = [m for key, m in self._members.items() if key not in current and not proctree.alive(m.pid, m.start)]
        if gone and proctree.alive(self.pid, self.start):
            m = gone[0]
            self._found = _Found(f"server process {m.describe()} exited while the server's first process kept "
                                 "running", self._tail(12))

    def _is_member(self, m: proctree.Member, now: float) -> bool:
        if self._essential_re is not None:
            return bool(self._essential_re.search(m.cmdline) or self._essential_re.search(m.name))
        return bool(self._exe) and m.exe == self._exe and now - m.start >= self.rules.min_age_s

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _read_log(self) -> list[str]:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(1 << 20)
        except OSError:
            return []
        self._offset += len(data)
        if data:
            now = time.monotonic()
            self.last_output = now
            if self.first_output is None:
                self.first_output = now
        text = self._partial + data.decode("utf-8", "replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        if self._found is not None:
            self._found.evidence.extend(lines[: max(0, 40 - len(self._found.evidence))])
        return lines

    def _check_log(self) -> None:
        lines = self._read_log()
        if lines and self.on_output is not None:
            try:
                self.on_output(lines)
            except Exception:  # noqa: BLE001 - a listener's failure never stops the watch
                pass
        i = find_fatal(lines, self._fatal_re)
        if i is not None:
            self._found = _Found(f"the server logged a fatal error: {lines[i].strip()[:240]}", lines[i:i + 20])

    def _tail(self, n: int) -> list[str]:
        return read_tail(self.log_path, n).splitlines()

