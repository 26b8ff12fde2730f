"""What ncclsweep knows of each engine it reads, and the registry the backends fill.

The node reads a server's log (``node.startup``: the start-up phases, the engine's notices, where it
changes regime) and its ``/metrics`` (``core.prometheus``: speculative decoding, the prefix cache),
and ``doctor`` says whether the custom all-reduce can run: each from what one engine writes, which is
that engine's backend's knowledge. A backend declares its engine as an ``Engine`` (``Backend.ENGINE``)
and the engine is registered here when the backend's class is defined; the built-in ones first, in
the order a log is matched against them (``orchestrator.backends``). The readers here and in
``node`` ask ``registered()`` and name no engine, so a backend another distribution registers
(``ncclsweep.backends`` entry points) brings its engine's knowledge with it. ``add_loader`` is how
``orchestrator.backends`` loads those backends before the registry answers (this layer imports
nothing above it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# A segment of the start-up: (name, keys, minus): the first of ``keys`` the engine reported, less
# the ``minus`` ones (parts of a total that have segments of their own)
Segment = tuple[str, tuple[str, ...], tuple[str, ...]]


def pattern(text: str) -> re.Pattern:
    """A log pattern as the engines' logs are matched: case-insensitive."""
    return re.compile(text, re.IGNORECASE)


@dataclass(frozen=True)
class Reported:
    """A duration the engine prints: ``pattern``'s group 1 in seconds, kept as ``key``."""

    key: str
    pattern: re.Pattern


@dataclass(frozen=True)
class SpecCounters:
    """Speculative decoding counted since the server started (vLLM's): acceptance rate =
    ``accepted`` / ``draft_tokens``, mean accepted length = 1 + ``accepted`` / ``drafts``;
    ``source`` says where the figures came from in the trial's record."""

    drafts: str
    draft_tokens: str
    accepted: str
    source: str


@dataclass(frozen=True)
class SpecGauges:
    """Speculative decoding as gauges of a recent window (SGLang's): the mean accepted length
    and, where the release has it, the acceptance rate; read after the benchmark."""

    accept_length: str
    accept_rate: str | None
    source: str


@dataclass(frozen=True)
class PrefixCounters:
    """The prefix cache's counters (bare names: the server exposes them with Prometheus's
    ``_total`` suffix): prompt tokens looked up, tokens found."""

    queries: str
    hits: str


@dataclass(frozen=True)
class CompileCache:
    """How the log says the engine's compile cache went: a line of a graph loaded from it, one
    of a graph compiled, and the cache's directory (group 1)."""

    hit: re.Pattern
    miss: re.Pattern
    directory: re.Pattern


@dataclass(frozen=True)
class Engine:
    """What one engine writes that ncclsweep reads (module docstring). Only ``name``, ``detect``
    and the start-up's ``markers`` (the last one its ready line) are required."""

    name: str
    detect: re.Pattern  # a line only this engine writes
    markers: tuple[tuple[str, re.Pattern], ...]  # (phase, its first line), in start-up order
    reported: tuple[Reported, ...] = ()
    # the segments the engine's numbers give, in order (``Segment``)
    segments: tuple[Segment, ...] = ()
    process: re.Pattern | None = None  # a line's process (per-rank values), group 1
    # lines in which the engine says it runs otherwise than the config asked (``notices``), read
    # in this engine's logs
    notices: tuple[re.Pattern, ...] = ()
    # what this engine puts before a message (process, level, time): cut from any log's notices
    line_prefixes: tuple[re.Pattern, ...] = ()
    compile_cache: CompileCache | None = None
    # where its log says it changes regime: (``core.measurement`` kind, pattern of the value in
    # group 1), read in any log
    regime_lines: tuple[tuple[str, re.Pattern], ...] = ()
    speculation: SpecCounters | SpecGauges | None = None  # its /metrics names
    prefix_cache: PrefixCounters | None = None
    custom_allreduce_world_sizes: tuple[int, ...] = ()  # where its custom all-reduce kernel runs


_ENGINES: dict[str, Engine] = {}
_LOADERS: list[Callable[[], None]] = []


def register(engine: Engine) -> Engine:
    """Add ``engine`` after those registered before (the order a log is matched in); the same
    engine again changes nothing.

    Raises:
        ValueError: another engine already has its name (the first one stays).
    """
    known = _ENGINES.get(engine.name)
    if known is not None and known != engine:
        raise ValueError(f"engine {engine.name!r} is already registered")
    _ENGINES.setdefault(engine.name, engine)
    return engine


def add_loader(load: Callable[[], None]) -> None:
    """Run ``load`` before every answer of ``registered`` (it may register engines)."""
    if load not in _LOADERS:
        _LOADERS.append(load)


def registered() -> tuple[Engine, ...]:
    """Every engine registered, in registration order, after the loaders ran."""
    for load in list(_LOADERS):
        load()
    return tuple(_ENGINES.values())
