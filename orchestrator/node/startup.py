"""Where a server's start-up time went, read from its own log: the ``startup_phases`` record.

A launch costs minutes on a large model (GLM-5 on 8 PCIe GPUs starts in 7-8 minutes, about
208 s of it CUDA-graph capture), and an engine says in its log what took the time. ``parse``
turns a trial's server log, and the two times the trial measured itself (spawn -> first log
line, spawn -> healthy or -> the failure), into one record (``TrialResult.startup_phases``):

- ``first_line_s``, ``ready_s`` (or ``ended_s`` for a start that failed): measured by the node
  for any backend, so every trial has spawn -> first log line -> healthy;
- what the engine reports itself (``ENGINES``): vLLM's ``Loading weights took``, ``Model
  loading took``, ``torch.compile took`` with the compile cache's hit or miss (``Directly
  load the compiled graph`` / ``Compiling a graph``) and its directory, ``Graph capturing
  finished in``, ``init engine (profile, create kv cache, warmup model) took``; SGLang's
  ``Init torch distributed ends. elapsed=``, ``Load weight end. elapsed=``, ``Capture ...
  cuda graph end. Time elapsed:`` (or ``elapsed=``); the reference server's ``weights built
  in`` and ``captured ... in``. A value printed by several ranks is the slowest rank's; one
  printed twice by one process (a draft model's weights and compile) is their sum;
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

Real vLLM 0.26.0 logs in tests/fixtures/vllm/ are parsed in tests/node/test_startup.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.core.measurement import BATCH, GRAPHS, KV_CACHE, RegimeMark

HEADER = "# ncclsweep:"  # the launch line the node writes first: not the server's output
PROCESS_START = "process start"  # spawn -> first log line
STARTING = "start-up"  # output seen, no phase marker yet
OTHER = "other"  # the part of a start-up the log does not name
# the compile cache of a trial, from its log: every compiled graph loaded, every one compiled, or both
CACHE_HIT, CACHE_MISS, CACHE_PARTIAL = "hit", "miss", "partial"


@dataclass(frozen=True)
class Reported:
    """A duration the engine prints: ``pattern``'s group 1 in seconds, kept as ``key``."""

    key: str
    pattern: re.Pattern


@dataclass(frozen=True)
class Engine:
    """What one engine's log says about its start-up."""

    name: str
    detect: re.Pattern  # a line only this engine writes
    markers: tuple[tuple[str, re.Pattern], ...]  # (phase, its first line), in start-up order
    reported: tuple[Reported, ...]
    # the segments the engine's numbers give, in order: (name, keys, minus): the first of ``keys``
    # found, less the ``minus`` ones (parts of a total that have segments of their own)
    segments: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    process: re.Pattern | None = None  # a line's process (per-rank values), group 1
    # lines in which the engine says it runs otherwise than the config asked (``notices``)
    notices: tuple[re.Pattern, ...] = ()


def _re(text: str) -> re.Pattern:
    return re.compile(text, re.IGNORECASE)


VLLM = Engine(
    name="vllm",
    detect=_re(r"^\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\w*) pid=\d+\)|vLLM API server version"),
    markers=(
        ("engine init", _re(r"Initializing a V1 LLM engine|Initializing an LLM engine")),
        ("NCCL init", _re(r"NCCL INFO|distributed_init_method|world_size=\d+ rank=\d+")),
        ("weights", _re(r"Loading model from scratch|Starting to load model|Loading safetensors|Loading weights")),
        ("torch.compile", _re(r"Using cache directory: .*torch\.compile|Dynamo bytecode transform|Compiling a graph|"
                              r"Directly load the compiled")),
        ("profile and KV cache", _re(r"Initial profiling/warmup run|Available KV cache memory|GPU KV cache size")),
        ("graph capture", _re(r"Capturing CUDA graphs")),
        ("warm-up", _re(r"Graph capturing finished")),
        ("API server start", _re(r"init engine \(profile")),
        ("ready", _re(r"Application startup complete")),
    ),
    reported=(
        Reported("weights_s", _re(r"Loading weights took ([\d.]+) s")),
        Reported("model_load_s", _re(r"Model loading took [\d.]+ \w+(?: memory)? and ([\d.]+) s")),
        Reported("compile_s", _re(r"torch\.compile took ([\d.]+) s in total")),
        Reported("graph_capture_s", _re(r"Graph capturing finished in ([\d.]+) s")),
        Reported("init_engine_s", _re(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")),
    ),
    segments=(
        ("weights", ("model_load_s", "weights_s"), ()),  # the whole load (weights_s is a part of it)
        ("torch.compile", ("compile_s",), ()),
        ("graph capture", ("graph_capture_s",), ()),
        # init engine contains the compile and the capture
        ("profile, KV cache, warm-up", ("init_engine_s",), ("compile_s", "graph_capture_s")),
    ),
    process=re.compile(r"^\((\w+ pid=\d+)\)"),
    notices=(  # real vLLM 0.26.0 with n-gram or draft-model speculation (tests/fixtures/vllm/), besides DISABLED
        _re(r"Model Runner V\d+ does not (?:yet )?support .*; using the V\d+ model runner instead"),
        _re(r"Async scheduling not supported with .* and will be disabled"),
    ),
)

SGLANG = Engine(
    name="sglang",
    detect=_re(r"sglang|The server is fired up and ready to roll|Load weight begin"),
    markers=(
        ("NCCL init", _re(r"Init torch distributed begin")),
        ("weights", _re(r"Load weight begin")),
        ("KV cache", _re(r"Load weight end|KV Cache is allocated|Memory pool end")),
        ("graph capture", _re(r"Capture .*cuda graph begin")),
        ("warm-up", _re(r"Capture .*cuda graph end")),
        ("ready", _re(r"The server is fired up and ready to roll")),
    ),
    reported=(
        Reported("nccl_init_s", _re(r"Init torch distributed ends\. elapsed=([\d.]+) s")),
        Reported("weights_s", _re(r"Load weight end\. elapsed=([\d.]+) s")),
        Reported("graph_capture_s", _re(r"Capture .*cuda graph end\.? (?:Time elapsed: |elapsed=)([\d.]+) s")),
    ),
    segments=(
        ("NCCL init", ("nccl_init_s",), ()),
        ("weights", ("weights_s",), ()),
        ("graph capture", ("graph_capture_s",), ()),
    ),
    process=re.compile(r"^\[[\d-]+ [\d:]+ ((?:DP\d+ )?(?:PP\d+ )?TP\d+(?: EP\d+)?)\]"),
)

REFSERVER = Engine(
    name="refserver",
    detect=_re(r"^\[refserver rank\d+\]"),
    markers=(
        ("NCCL init and weights", _re(r"\] starting ")),
        ("graph capture and warm-up", _re(r"\] weights built in ")),
        ("ready", _re(r"\] ready on ")),
    ),
    reported=(
        Reported("weights_s", _re(r"weights built in ([\d.]+)s")),
        Reported("graph_capture_s", _re(r"captured \d+ CUDA graphs .* in ([\d.]+)s")),
    ),
    segments=(("weights", ("weights_s",), ()), ("graph capture", ("graph_capture_s",), ())),
    process=re.compile(r"^\[refserver (rank\d+)\]"),
)

ENGINES = (VLLM, SGLANG, REFSERVER)
# What any engine says when it turned something off on its own, whatever asked for it: "<X> is
# disabled because <reason>" (vLLM's custom all-reduce on more than two PCIe-only GPUs and its weight
# prefetch; SGLang's overlap scheduler, CUDA graphs and custom all-reduce, the texts of its
# server_args.py and all-reduce utils): a notice of every log, the engine known or not.
DISABLED = _re(r"\b(?:is|are|was|were|has been|have been|will be) (?:automatically |now )?disabled because\b")

_COMPILE_HIT = _re(r"Directly load the compiled graph|Directly load AOT compilation")
_COMPILE_MISS = _re(r"Compiling a graph for")
_CACHE_DIR = _re(r"Using cache directory: (\S*?torch_compile_cache/[0-9a-f]+)")


def output_lines(text: str) -> list[str]:
    """The server's own lines (the node's launch line left out)."""
    return [ln for ln in text.splitlines() if not ln.startswith(HEADER)]


def engine_of(lines: Iterable[str]) -> Engine | None:
    """The engine whose lines these are (None: none this module knows)."""
    lines = list(lines)
    for engine in ENGINES:
        if any(engine.detect.search(ln) for ln in lines):
            return engine
    return None


class PhaseTracker:
    """The last phase whose first line the log shows (module docstring), fed the log's lines
    as they are written: a trial reports it live, ``last_phase`` reads a whole log with it."""

    def __init__(self) -> None:
        self._output = False
        self._detected: set[str] = set()
        self._reached = {engine.name: -1 for engine in ENGINES}  # per engine: its last marker seen

    def feed(self, lines: Iterable[str]) -> None:
        for ln in lines:
            if ln.startswith(HEADER):
                continue
            self._output = self._output or bool(ln.strip())
            for engine in ENGINES:
                if engine.name not in self._detected and engine.detect.search(ln):
                    self._detected.add(engine.name)
                reached = self._reached[engine.name]
                for i, (_, pattern) in enumerate(engine.markers):
                    if i > reached and pattern.search(ln):
                        reached = i
                self._reached[engine.name] = reached

    @property
    def phase(self) -> str:
        if not self._output:
            return PROCESS_START
        engine = next((e for e in ENGINES if e.name in self._detected), None)  # ``engine_of``'s order
        reached = self._reached[engine.name] if engine is not None else -1
        return engine.markers[reached][0] if engine is not None and reached >= 0 else STARTING


def last_phase(text: str) -> str:
    """The last phase whose first line the log shows (module docstring)."""
    tracker = PhaseTracker()
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


def compile_cache(lines: list[str]) -> dict[str, str]:
    """vLLM's torch.compile cache as the log shows it: ``compile_cache`` hit / miss / partial
    (some graphs loaded, others compiled) and ``compile_cache_dir`` (the directory keyed by the
    config's compile-relevant settings). Empty when nothing was compiled (eager)."""
    hit = any(_COMPILE_HIT.search(ln) for ln in lines)
    miss = any(_COMPILE_MISS.search(ln) for ln in lines)
    out: dict[str, str] = {}
    if hit or miss:
        out["compile_cache"] = CACHE_PARTIAL if hit and miss else CACHE_HIT if hit else CACHE_MISS
    where = next((m.group(1) for ln in lines if (m := _CACHE_DIR.search(ln))), None)
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
    engine = engine_of(lines)
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
    record.update(compile_cache(lines))
    record["segments"] = _segments(engine, found, first_line_s, ready_s if ready_s is not None else ended_s)
    record["last_phase"] = last_phase(text)
    return record


# what a log puts before a message: vLLM's process and level/time, SGLang's ``[time TPn]``
_NOTICE_PREFIX = re.compile(r"^\(\w+ pid=\d+\)\s*|^(?:WARNING|INFO)\s+[\d-]+ [\d:]+ \[[^\]]*\]\s*"
                            r"|^\[[\d-]+ [\d:]+(?: [\w ]+)?\]\s*")
NOTICE = "engine notice: "  # how a notice begins in a trial's warnings


def notices(text: str) -> list[str]:
    """What the engine said it changed beyond the config: every "<X> is disabled because <reason>"
    of any engine (``DISABLED``: vLLM's custom all-reduce on more than two PCIe-only GPUs, SGLang's
    overlap scheduler, CUDA graphs or custom all-reduce), and an engine's own (vLLM falling back
    to its V1 model runner for n-gram speculation, turning async scheduling off): each message
    once, without the process, level and time the log put before it, as ``NOTICE`` + the message
    (a trial's warnings: a config can change more than it says)."""
    lines = output_lines(text)
    engine = engine_of(lines)
    patterns = (DISABLED, *(engine.notices if engine is not None else ()))
    out: list[str] = []
    for ln in lines:
        if any(p.search(ln) for p in patterns):
            message = ln.strip()
            while (cut := _NOTICE_PREFIX.sub("", message, count=1)) != message:
                message = cut
            if NOTICE + message not in out:
                out.append(NOTICE + message)
    return out


# where an engine logs its regimes (the values it runs with, after its defaults): vLLM's engine config
# ('max_cudagraph_capture_size': 512, 0 when eager; 'max_capture_size' before 0.11) and non-default args
# ('max_num_seqs': 64), its "GPU KV cache size: 1,339,776 tokens"; SGLang's server args
# (cuda_graph_max_bs=160, max_running_requests=128) and "max_total_num_tokens=665690"
_LOGGED = ((GRAPHS, (_re(r"'max_cudagraph_capture_size': (\d+)"), _re(r"'max_capture_size': (\d+)"),
                     _re(r"\bcuda_graph_max_bs(?:_decode)?=(\d+)"))),
           (BATCH, (_re(r"'max_num_seqs': (\d+)"), _re(r"\bmax_running_requests=(\d+)"))),
           (KV_CACHE, (_re(r"GPU KV cache size: ([\d,]+) tokens"), _re(r"\bmax_total_num_tokens=(\d+)"))))


def engine_marks(text: str, tokens_per_request: float) -> list[RegimeMark]:
    """Where the engine's log says it changes regime (module docstring), each kind's last value
    logged (the effective one: vLLM logs its own default after the user's None): the largest
    captured batch (0: it captured none), the most sequences at once, and the requests of
    ``tokens_per_request`` tokens (prompt and output) its KV cache holds."""
    lines = output_lines(text)
    out = []
    for kind, patterns in _LOGGED:
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
