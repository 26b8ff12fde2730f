"""Where a server's start-up time went, read from its own log: the ``startup_phases`` record.

A launch costs minutes on a large model (GLM-5 on 8 PCIe GPUs starts in 7-8 minutes, about
208 s of it CUDA-graph capture), and an engine says in its log what took the time. ``parse``
turns a trial's server log, and the two times the trial measured itself (spawn -> first log
line, spawn -> healthy or -> the failure), into one record (``TrialResult.startup_phases``):

- ``first_line_s``, ``ready_s`` (or ``ended_s`` for a start that failed): measured by the node
  for any backend, so every trial has spawn -> first log line -> healthy;
- what the engine reports itself (its ``core.engines.Engine``, declared with its backend and
  read from the registry, so a backend another distribution registers brings its own): vLLM's
  ``Loading weights took``, ``Model loading took``, ``torch.compile took`` with the compile
  cache's hit or miss (``Directly load the compiled graph`` / ``Compiling a graph``) and its
  directory, ``Graph capturing finished in``, ``init engine (profile, create kv cache, warmup
  model) took``; SGLang's ``Init torch distributed ends. elapsed=``, ``Load weight end.
  elapsed=``, ``Capture ... cuda graph end. Time elapsed:`` (or ``elapsed=``); the reference
  server's ``weights built in`` and ``captured ... in``. A value printed by several ranks is the
  slowest rank's; one printed twice by one process (a draft model's weights and compile) is their
  sum;
- ``segments``: consecutive parts of the start-up that add up to ``ready_s`` (the report's
  stacked bar): process start (spawn -> first line), the engine's phases, and ``other``
  (the rest: imports, engine and API processes, whatever the log does not name). The node
  sees the first line when it reads it, the engine times its phases on its own clock: on a
  loaded box the two overlap, and a phase is cut where the total ends, never past it;
- ``last_phase``: the last phase whose first line the log shows (markers in order per engine;
  ``process start`` before any output, ``start-up`` after it when no marker matched): where a
  start that stalls or fails was.

Beside the start-up, ``engine_marks``: where the engine says it changes regime as its batch grows
(the largest batch it captured a CUDA graph for, the most sequences it runs at once, the requests
its KV cache holds), for the goodput search (``core.capacity``).

Nothing here names an engine: each one's lines are its backend's (``backends/vllm_engine.py``,
``sglang_engine.py``, ``refserver_engine.py``). Real vLLM 0.26.0 logs in tests/fixtures/vllm/ are
parsed in tests/node/test_startup.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import orchestrator.backends  # noqa: F401 - fills core.engines' registry with every backend's engine
from orchestrator.core.engines import Engine, pattern, registered
from orchestrator.core.measurement import KV_CACHE, RegimeMark

HEADER = "# ncclsweep:"  # the launch line the node writes first: not the server's output
PROCESS_START = "process start"  # spawn -> first log line
STARTING = "start-up"  # output seen, no phase marker yet
OTHER = "other"  # the part of a start-up the log does not name
# the compile cache of a trial, from its log: every compiled graph loaded, every one compiled, or both
CACHE_HIT, CACHE_MISS, CACHE_PARTIAL = "hit", "miss", "partial"


# What any engine says when it turned something off on its own, whatever asked for it: "<X> is
# disabled because <reason>" (vLLM's custom all-reduce on more than two PCIe-only GPUs and its weight
# prefetch; SGLang's overlap scheduler, CUDA graphs and custom all-reduce, the texts of its
# server_args.py and all-reduce utils): a notice of every log, the engine known or not.
DISABLED = pattern(r"\b(?:is|are|was|were|has been|have been|will be) (?:automatically |now )?disabled because\b")


def output_lines(text: str) -> list[str]:
    """The server's own lines (the node's launch line left out)."""
    return [ln for ln in text.splitlines() if not ln.startswith(HEADER)]


def engine_of(lines: Iterable[str], engines: Sequence[Engine] | None = None) -> Engine | None:
    """The engine whose lines these are, the first of ``engines`` (default: every registered one,
    ``core.engines``) that wrote one of them; None: none of them."""
    lines = list(lines)
    for engine in registered() if engines is None else engines:
        if any(engine.detect.search(ln) for ln in lines):
            return engine
    return None


class PhaseTracker:
    """The last phase whose first line the log shows (module docstring), fed the log's lines
    as they are written: a trial reports it live, ``last_phase`` reads a whole log with it."""

    def __init__(self, engines: Sequence[Engine] | None = None) -> None:
        self._engines = tuple(registered() if engines is None else engines)  # default: every registered one
        self._output = False
        self._detected: set[str] = set()
        self._reached = {engine.name: -1 for engine in self._engines}  # per engine: its last marker seen

    def feed(self, lines: Iterable[str]) -> None:
        for ln in lines:
            if ln.startswith(HEADER):
                continue
            self._output = self._output or bool(ln.strip())
            for engine in self._engines:
                if engine.name not in self._detected and engine.detect.search(ln):
                    self._detected.add(engine.name)
                reached = self._reached[engine.name]
                for i, (_, marker) in enumerate(engine.markers):
                    if i > reached and marker.search(ln):
                        reached = i
                self._reached[engine.name] = reached

    @property
    def phase(self) -> str:
        if not self._output:
            return PROCESS_START
        engine = next((e for e in self._engines if e.name in self._detected), None)  # ``engine_of``'s order
        reached = self._reached[engine.name] if engine is not None else -1
        return engine.markers[reached][0] if engine is not None and reached >= 0 else STARTING


def last_phase(text: str, engines: Sequence[Engine] | None = None) -> str:
    """The last phase whose first line the log shows (module docstring), of ``engines`` (default:
    every registered one)."""
    tracker = PhaseTracker(engines)
    tracker.feed(text.splitlines())
    return tracker.phase


def _reported(engine: Engine, lines: list[str]) -> dict[str, float]:
    """The engine's own durations: per process the sum of what it printed, then the slowest process."""
    per: dict[str, dict[str, float]] = {}
    for ln in lines:
        proc = engine.process.search(ln) if engine.process is not None else None
        who = proc.group(1) if proc else ""
        for rep in engine.reported:
            m = rep.pattern.search(ln)
            if m:
                mine = per.setdefault(rep.key, {})
                mine[who] = mine.get(who, 0.0) + float(m.group(1))
    return {key: max(values.values()) for key, values in per.items()}


def compile_cache(lines: list[str], engines: Sequence[Engine] | None = None) -> dict[str, str]:
    """An engine's compile cache as the log shows it (``Engine.compile_cache``: vLLM's torch.compile
    cache): ``compile_cache`` hit / miss / partial (some graphs loaded, others compiled) and
    ``compile_cache_dir`` (the directory keyed by the config's compile-relevant settings). Empty
    when nothing was compiled (eager)."""
    caches = [engine.compile_cache for engine in (registered() if engines is None else engines)
              if engine.compile_cache is not None]
    hit = any(cache.hit.search(ln) for ln in lines for cache in caches)
    miss = any(cache.miss.search(ln) for ln in lines for cache in caches)
    out: dict[str, str] = {}
    if hit or miss:
        out["compile_cache"] = CACHE_PARTIAL if hit and miss else CACHE_HIT if hit else CACHE_MISS
    where = next((m.group(1) for ln in lines for cache in caches if (m := cache.directory.search(ln))), None)
    if where:
        out["compile_cache_dir"] = where
    return out


def _segments(engine: Engine | None, found: dict[str, float], first_line_s: float | None,
              total_s: float | None) -> list[list[Any]]:
    """Consecutive parts of the start-up (module docstring); they add up to ``total_s`` when known."""
    out: list[list[Any]] = []
    if first_line_s is not None:
        first = first_line_s if total_s is None else min(first_line_s, total_s)  # never past the total
        out.append([PROCESS_START, round(first, 3)])
    for name, keys, minus in engine.segments if engine is not None else ():
        key = next((k for k in keys if k in found), None)
        if key is None:
            continue
        seconds = found[key] - sum(found.get(k, 0.0) for k in minus)
        if total_s is not None:  # the engine's clock and the node's overlap: never past the total
            seconds = min(seconds, total_s - sum(s for _, s in out))
        if seconds > 0:
            out.append([name, round(seconds, 3)])
    if total_s is not None:
        rest = total_s - sum(s for _, s in out)
        name = OTHER if len(out) > 1 or first_line_s is None else STARTING
        if rest > 0:
            out.append([name, round(rest, 3)])
    return out


def parse(text: str, *, first_line_s: float | None = None, ready_s: float | None = None,
          ended_s: float | None = None) -> dict[str, Any]:
    """The ``startup_phases`` record of one server log (module docstring).

    ``first_line_s``: spawn -> the first line of output (measured by the node); ``ready_s``:
    spawn -> healthy; ``ended_s``: spawn -> the end of a start that never got healthy (the
    segments then add up to it). Durations the engine printed after it was ready (a
    benchmark's lines) never are phases: only the log up to its ready line is read."""
    lines = output_lines(text)
    engines = registered()
    engine = engine_of(lines, engines)
    if engine is not None:
        ready = engine.markers[-1][1]
        end = next((i for i, ln in enumerate(lines) if ready.search(ln)), None)
        if end is not None:
            lines = lines[:end + 1]
    record: dict[str, Any] = {}
    if engine is not None:
        record["engine"] = engine.name
    if first_line_s is not None:
        record["first_line_s"] = round(first_line_s, 3)
    if ready_s is not None:
        record["ready_s"] = round(ready_s, 3)
    elif ended_s is not None:
        record["ended_s"] = round(ended_s, 3)
    found = _reported(engine, lines) if engine is not None else {}
    record.update({k: round(v, 3) for k, v in found.items()})
    record.update(compile_cache(lines, engines))
    record["segments"] = _segments(engine, found, first_line_s, ready_s if ready_s is not None else ended_s)
    record["last_phase"] = last_phase(text, engines)
    return record


NOTICE = "engine notice: "  # how a notice begins in a trial's warnings


def notices(text: str) -> list[str]:
    """What the engine said it changed beyond the config: every "<X> is disabled because <reason>"
    of any engine (``DISABLED``: vLLM's custom all-reduce on more than two PCIe-only GPUs, SGLang's
    overlap scheduler, CUDA graphs or custom all-reduce), and an engine's own (vLLM falling back
    to its V1 model runner for n-gram speculation, turning async scheduling off): each message
    once, without the process, level and time the log put before it, as ``NOTICE`` + the message
    (a trial's warnings: a config can change more than it says)."""
    lines = output_lines(text)
    engines = registered()
    engine = engine_of(lines, engines)
    patterns = (DISABLED, *(engine.notices if engine is not None else ()))
    # what a log puts before a message (vLLM's process and level/time, SGLang's ``[time TPn]``): every
    # engine's, cut from the front as long as one is there
    prefixes = [prefix for known in engines for prefix in known.line_prefixes]
    out: list[str] = []
    for ln in lines:
        if any(p.search(ln) for p in patterns):
            message = ln.strip()
            while (cut := _cut_prefix(message, prefixes)) != message:
                message = cut
            if NOTICE + message not in out:
                out.append(NOTICE + message)
    return out


def _cut_prefix(message: str, prefixes: Sequence[re.Pattern]) -> str:
    """``message`` without the first of ``prefixes`` that begins it (unchanged: none does)."""
    for prefix in prefixes:
        cut = prefix.sub("", message, count=1)
        if cut != message:
            return cut
    return message


def _regime_lines(engines: Sequence[Engine]) -> dict[str, list[re.Pattern]]:
    """Every engine's regime lines by kind (``Engine.regime_lines``), kinds and patterns in the
    order the engines are registered and declare them."""
    out: dict[str, list[re.Pattern]] = {}
    for engine in engines:
        for kind, line in engine.regime_lines:
            out.setdefault(kind, []).append(line)
    return out


def engine_marks(text: str, tokens_per_request: float) -> list[RegimeMark]:
    """Where the engine's log says it changes regime (module docstring; any registered engine's
    lines, ``Engine.regime_lines``), each kind's last value logged (the effective one: vLLM logs its
    own default after the user's None): the largest captured batch (0: it captured none), the most
    sequences at once, and the requests of ``tokens_per_request`` tokens (prompt and output) its KV
    cache holds."""
    lines = output_lines(text)
    out = []
    for kind, patterns in _regime_lines(registered()).items():
        found = [(m.group(1), m.group(0)) for ln in lines for p in patterns for m in p.finditer(ln)]
        if not found:
            continue
        value, said = int(found[-1][0].replace(",", "")), found[-1][1]
        if kind == KV_CACHE:
            if tokens_per_request <= 0:
                continue
            value = int(value // tokens_per_request)
            said = f"{said}, {tokens_per_request:.0f} a request"
        out.append(RegimeMark(value, kind, f"the engine's log: {said}"))
    return out


def summary(phases: dict[str, Any]) -> str:
    """One short line: ``ready 165s: weights 2s, torch.compile 13s (cache miss), ...``."""
    if not phases:
        return ""
    total = phases.get("ready_s")
    head = f"ready {total:.0f}s" if total is not None else (
        f"ended {phases['ended_s']:.0f}s in {phases.get('last_phase', '?')}" if phases.get("ended_s") is not None
        else "start-up")
    parts = []
    for name, seconds in phases.get("segments") or []:
        note = f" (cache {phases['compile_cache']})" if name == "torch.compile" and phases.get("compile_cache") else ""
        parts.append(f"{name} {seconds:.0f}s{note}")
    return head + (": " + ", ".join(parts) if parts else "")
