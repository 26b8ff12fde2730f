"""One launch's measurement as one typed record: what the benchmark found at each level.

``node.measure`` is the only producer of a live ``Measurement``; storage keeps it as the
``metrics`` user attribute (``Measurement.to_record``) and every reader gets it back with
``Measurement.from_record`` (records written before this type existed included). The study,
the plan, compare, the report and export read attributes of ``LevelResult``, never string
keys, so a new metric is one field here.

A level is a number of requests in flight:

- level 1: single-request decode tok/s, one sample per request: (n - 1) / (t_last - t_first)
  (1 / TPOT of ``vllm bench serve``);
- level N > 1: total output tok/s in the steady state, one sample per round: N streams each send
  ``waves`` requests back to back, and the tokens counted are those that arrive while every
  stream is in flight (after the last stream's first token, before the first stream's last
  request ends: ``steady_window``), so neither the ramp nor the tail is in the figure. Beside it,
  from the same requests, the whole run's figure as ``vllm bench serve`` counts its output
  throughput (``whole_run_tok_s``: every output token over the last request's end minus the first
  one's start, ramp and drain included): lower wherever the ramp and the drain are slow.

A level may also carry a prompt length (``core.level``: ``64@8192``, 64 streams whose prompts are
about 8192 tokens long); its record is stored under that spelling, a context-0 level under its
bare number as always.

Beside the throughput, each level keeps latency percentiles over its requests (p50, p90, p99, and
their mean): TTFT, TPOT, inter-token latency (gaps between streamed chunks, as ``vllm bench serve``'s
ITL) and end-to-end latency, in seconds; the prompt and output tokens of its requests as the
server's ``usage`` counted them (``input_length``, ``output_length``); and, where the server
counts them, the share of its prompt tokens that the server's prefix cache answered
(``prefix_cache_hit_rate``): a TTFT is a prefill's only where that share is low, so it is shown
beside every TTFT (``cache_text``); and how late the measuring client's event loop ran while the
level was measured (``ClientLag``; None in a record from before it was watched: unknown), which
``core.client_bound`` judges.
``median_ci``/``relative_ci`` are the one definition of a median's precision (a distribution-free
interval from order statistics).

Two parts only some measurements have: ``GoodputResult`` (the goodput objective's search over
concurrency, ``core.capacity``: which concurrencies were probed, each a level of ``levels``, whether
every SLO held at each, where the engine changes regime (``RegimeMark``), and the capacity point,
the concurrency with the most total tok/s where every SLO held; the measurement's value is the
total tok/s there) and ``Lengths`` (with a traffic file: the prompt and output lengths the requests had, as
the server counted them, and how many returned another length than they asked for). A search by
request rate (``RateResult``, ``core.rate_search``: each probe an open-loop load, ``RateProbe``: its
rate, attainment, tok/s and percentiles) has no levels: its value is the output tok/s at the highest
rate that held. Either search's record is the measurement's ``capacity`` (``Capacity``: its figure,
where it holds and breaks, what it says), which readers ask instead of checking which one was run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from orchestrator.core.level import parse as parse_level
from orchestrator.core.level import streams

QUANTILES = (50, 90, 99)  # the latency percentiles every level records
LATENCY_KINDS = ("ttft", "tpot", "itl", "e2e")  # what each is: module docstring
BUSY_SHARE = 0.5  # other work on at least this share of the host's CPUs: a busy host (``HostLoad.busy``)
# keys of a stored ``metrics`` record that belong to the measurement (the rest are the outcome's:
# constraint violations, the ignored value of a wrong config, the pruning thresholds, ...)
RECORD_KEYS = ("levels", "repeats", "prompts", "output_tokens", "warmup_s", "bench_s", "host", "decode_tok_s",
               "decode_samples", "ttft_s", "ttft_samples", "e2e_tok_s", "cv", "rel_ci", "acceptance_rate",
               "mean_accepted_length", "concurrency", "goodput", "lengths", "rate")


# ---- statistics --------------------------------------------------------------------------------
def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the median from order statistics.

    [x_(k), x_(n-k+1)] covers the median with probability 1 - 2 P(Bin(n, 1/2) <= k-1); the
    narrowest such interval with coverage >= ``confidence`` is returned, or [min, max] when even
    that falls short (n < 6 for 95%). None for fewer than 2 samples.
    """
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n < 2:
        return None
    best = 1
    tail = 0.0  # P(Bin(n, 1/2) <= k-1)
    for k in range(1, n // 2 + 1):
        tail += math.comb(n, k - 1) / 2.0**n
        if 1.0 - 2.0 * tail >= confidence:
            best = k
        else:
            break
    return xs[best - 1], xs[n - best]


def relative_ci(samples: Sequence[float], confidence: float = 0.95) -> float | None:
    """Half-width of ``median_ci`` divided by the median (None when undefined)."""
    ci = median_ci(samples, confidence)
    if ci is None:
        return None
    med = statistics.median(samples)
    if med == 0:
        return None
    return (ci[1] - ci[0]) / 2.0 / abs(med)


def coefficient_of_variation(samples: Sequence[float]) -> float | None:
    """stdev / median (0.0 for one sample, None for none)."""
    if len(samples) < 2:
        return 0.0 if samples else None
    med = statistics.median(samples)
    return statistics.stdev(samples) / med if med else None


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of sorted values, linear between closest ranks (numpy's default,
    which ``vllm bench serve`` reports)."""
    if not sorted_xs:
        raise ValueError("no values")
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _finite(values: Iterable[Any]) -> tuple[float, ...]:
    return tuple(x for x in (_num(v) for v in values or ()) if x is not None)


# ---- the steady-state window -------------------------------------------------------------------
@dataclass(frozen=True)
class StreamedRequest:
    """What the window needs of one request of a sustained level: which stream sent it, when it
    started and ended, when each chunk arrived, and how many tokens it returned in all."""

    stream: int
    t_start: float
    t_end: float
    chunk_times: tuple[float, ...]
    n_tokens: int


def steady_window(requests: Sequence[StreamedRequest]) -> tuple[float, float] | None:
    """(tokens, seconds) that arrived while every stream was in flight: from the moment the last
    stream got its first token to the moment the first stream's last request ended. A chunk
    counts ``n_tokens / chunks`` of its request (a chunk may carry several tokens). None when
    there is no such window (one wave, or a stream that returned nothing)."""
    by_stream: dict[int, list[StreamedRequest]] = {}
    for req in requests:
        by_stream.setdefault(req.stream, []).append(req)
    if not by_stream or any(not any(r.chunk_times for r in reqs) for reqs in by_stream.values()):
        return None
    start = max(min(t for r in reqs for t in r.chunk_times[:1]) for reqs in by_stream.values())
    end = min(max(r.t_end for r in reqs) for reqs in by_stream.values())
    if end <= start:
        return None
    tokens = 0.0
    for req in requests:
        if not req.chunk_times or req.n_tokens <= 0:
            continue
        inside = sum(1 for t in req.chunk_times if start < t <= end)
        tokens += req.n_tokens * inside / len(req.chunk_times)
    return tokens, end - start


# ---- the record ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Latency:
    """Percentiles (seconds) of one latency over a level's requests (``n`` values), and their mean
    (None: recorded before the mean was)."""

    p50: float
    p90: float
    p99: float
    n: int
    mean: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Latency | None:
        xs = sorted(_finite(values))
        if not xs:
            return None
        return cls(p50=percentile(xs, 50), p90=percentile(xs, 90), p99=percentile(xs, 99), n=len(xs),
                   mean=statistics.fmean(xs))

    def at(self, quantile: int) -> float:
        """The ``quantile`` (50, 90 or 99) percentile."""
        return {50: self.p50, 90: self.p90, 99: self.p99}[quantile]

    def to_record(self) -> dict[str, float]:
        out = {"p50": self.p50, "p90": self.p90, "p99": self.p99, "n": self.n}
        return out if self.mean is None else {**out, "mean": self.mean}

    @classmethod
    def from_record(cls, rec: Any) -> Latency | None:
        if not isinstance(rec, Mapping):
            return None
        p50, p90, p99, n = (_num(rec.get(k)) for k in ("p50", "p90", "p99", "n"))
        if p50 is None or p90 is None or p99 is None:
            return None
        return cls(p50=p50, p90=p90, p99=p99, n=int(n) if n is not None else 0, mean=_num(rec.get("mean")))


@dataclass(frozen=True)
class LevelResult:
    """One level of one launch (module docstring): every throughput sample, its latency
    percentiles, and what speculative decoding accepted there."""

    level: int
    samples: tuple[float, ...] = ()  # level 1: decode tok/s per request; N: total tok/s per window
    ttft: Latency | None = None
    tpot: Latency | None = None
    itl: Latency | None = None
    e2e: Latency | None = None
    e2e_tok_s: float | None = None  # level 1: median end-to-end tok/s of a request (n / latency)
    stream_decode_tok_s: float | None = None  # level N: a stream's median decode tok/s (1 / TPOT)
    requests: int = 0  # requests measured at this level (every round)
    window_s: float | None = None  # level N: median seconds of a round's steady-state window
    acceptance_rate: float | None = None  # speculative decoding: drafted tokens accepted
    mean_accepted_length: float | None = None  # tokens per step
    input_tokens: float | None = None  # a context axis: the median prompt length the server counted here
    # the share of this level's prompt tokens the server's prefix cache answered (its counters; None: not counted)
    prefix_cache_hit_rate: float | None = None
    # level N: median over rounds of the whole run's output tok/s (module docstring; None: not recorded)
    whole_run_tok_s: float | None = None
    # the prompt and output tokens of this level's requests, as the server counted them (None: not recorded)
    input_length: Distribution | None = None
    output_length: Distribution | None = None
    # how late the measuring client's loop ran here (None: recorded before it was watched, unknown)
    client_lag: ClientLag | None = None

    @property
    def unit(self) -> str:
        return "decode tok/s" if streams(self.level) == 1 else "total tok/s"

    @property
    def value(self) -> float | None:
        """The median sample: the level's figure."""
        return statistics.median(self.samples) if self.samples else None

    @property
    def rel_ci(self) -> float | None:
        """Half-width of the median's 95% interval / the median."""
        return relative_ci(self.samples)

    @property
    def cv(self) -> float | None:
        return coefficient_of_variation(self.samples)

    @property
    def spread(self) -> float | None:
        """rel_ci where defined, else cv: how precise the figure is."""
        rel = self.rel_ci
        return rel if rel is not None else self.cv

    def latency(self, kind: str) -> Latency | None:
        """One of ``LATENCY_KINDS``."""
        if kind not in LATENCY_KINDS:
            raise ValueError(f"unknown latency {kind!r}; one of {', '.join(LATENCY_KINDS)}")
        return getattr(self, kind)

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "samples": list(self.samples), "rel_ci": self.rel_ci,
                               "cv": self.cv, "unit": self.unit, "requests": self.requests}
        for kind in LATENCY_KINDS:
            got = self.latency(kind)
            if got is not None:
                out[kind] = got.to_record()
        for name in ("e2e_tok_s", "window_s", "acceptance_rate", "mean_accepted_length", "input_tokens",
                     "prefix_cache_hit_rate", "whole_run_tok_s"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.stream_decode_tok_s is not None:
            out["stream_decode_tok_s"] = self.stream_decode_tok_s
        for name in ("input_length", "output_length", "client_lag"):
            got = getattr(self, name)
            if got is not None:
                out[name] = got.to_record()
        return out

    @classmethod
    def from_record(cls, level: int, rec: Any) -> LevelResult:
        """A stored level (any version: a bare number, an older record without percentiles)."""
        if not isinstance(rec, Mapping):
            value = _num(rec)
            return cls(level, samples=(value,) if value is not None else ())
        samples = _finite(rec.get("samples") or ())
        if not samples and _num(rec.get("value")) is not None:
            samples = (_num(rec.get("value")),)  # type: ignore[assignment]
        requests = _num(rec.get("requests"))
        return cls(level, samples=samples,
                   **{kind: Latency.from_record(rec.get(kind)) for kind in LATENCY_KINDS},
                   e2e_tok_s=_num(rec.get("e2e_tok_s")), stream_decode_tok_s=_num(rec.get("stream_decode_tok_s")),
                   requests=int(requests) if requests is not None else 0, window_s=_num(rec.get("window_s")),
                   acceptance_rate=_num(rec.get("acceptance_rate")),
                   mean_accepted_length=_num(rec.get("mean_accepted_length")),
                   input_tokens=_num(rec.get("input_tokens")),
                   prefix_cache_hit_rate=_num(rec.get("prefix_cache_hit_rate")),
                   whole_run_tok_s=_num(rec.get("whole_run_tok_s")),
                   input_length=Distribution.from_record(rec.get("input_length")),
                   output_length=Distribution.from_record(rec.get("output_length")),
                   client_lag=ClientLag.from_record(rec.get("client_lag")))


@dataclass(frozen=True)
class Distribution:
    """How a count (tokens per request) was spread over ``n`` requests."""

    n: int
    low: float
    p50: float
    p90: float
    p99: float
    high: float
    mean: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution | None:
        xs = sorted(_finite(values))
        if not xs:
            return None
        return cls(n=len(xs), low=xs[0], p50=percentile(xs, 50), p90=percentile(xs, 90), p99=percentile(xs, 99),
                   high=xs[-1], mean=statistics.fmean(xs))

    def describe(self) -> str:
        """'min 12, p50 180, p90 410, p99 980, max 1024, mean 231 (n 150)'."""
        return (f"min {self.low:.0f}, p50 {self.p50:.0f}, p90 {self.p90:.0f}, p99 {self.p99:.0f}, max {self.high:.0f}"
                f", mean {self.mean:.0f} (n {self.n})")

    def to_record(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in ("n", "low", "p50", "p90", "p99", "high", "mean")}

    @classmethod
    def from_record(cls, rec: Any) -> Distribution | None:
        if not isinstance(rec, Mapping):
            return None
        got = {name: _num(rec.get(name)) for name in ("n", "low", "p50", "p90", "p99", "high", "mean")}
        if any(v is None for v in got.values()):
            return None
        return cls(n=int(got.pop("n")), **got)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ClientLag:
    """How late the measuring client's event loop ran while a level was measured (``node.looplag``:
    a ticker on the loop that streams the level's requests), in milliseconds: over its ``n``
    wake-ups (p50, p99, max) and, what ``core.client_bound`` judges, ``span_short_ms``: the median
    over the level's requests of the loop's lateness at the first token less its lateness at the
    last, how much shorter than the server's each decode span was stamped (negative: longer, a
    client that fell further behind as the request went on); and how many times the level was
    measured (2: the first measurement was client-bound and measured again; this record is the
    second's)."""

    p50_ms: float
    p99_ms: float
    max_ms: float
    n: int
    span_short_ms: float | None = None
    attempts: int = 1

    @classmethod
    def of(cls, seconds: Iterable[float], span_short: Iterable[float] = (), attempts: int = 1) -> ClientLag | None:
        """From the wake-ups' lateness and each request's lateness at its first token less at its
        last (seconds)."""
        xs = sorted(_finite(seconds))
        if not xs:
            return None
        short = _finite(span_short)
        return cls(p50_ms=1000 * percentile(xs, 50), p99_ms=1000 * percentile(xs, 99), max_ms=1000 * xs[-1],
                   n=len(xs), span_short_ms=1000 * statistics.median(short) if short else None, attempts=attempts)

    def describe(self) -> str:
        """'client loop late p50 0.1, p99 1.8, max 4.0 ms, spans stamped 0.3 short (n 2400)'."""
        first = f", spans stamped {self.span_short_ms:.1f} short" if self.span_short_ms is not None else ""
        again = ", measured twice" if self.attempts > 1 else ""
        return (f"client loop late p50 {self.p50_ms:.1f}, p99 {self.p99_ms:.1f}, max {self.max_ms:.1f} ms{first} "
                f"(n {self.n}{again})")

    def to_record(self) -> dict[str, float | None]:
        return {name: getattr(self, name) for name in ("p50_ms", "p99_ms", "max_ms", "n", "span_short_ms",
                                                        "attempts")}

    @classmethod
    def from_record(cls, rec: Any) -> ClientLag | None:
        """A stored record; None where absent (recorded before the client watched its loop: unknown)."""
        if not isinstance(rec, Mapping):
            return None
        got = {name: _num(rec.get(name)) for name in ("p50_ms", "p99_ms", "max_ms", "n")}
        if any(v is None for v in got.values()):
            return None
        attempts = _num(rec.get("attempts"))
        return cls(p50_ms=got["p50_ms"], p99_ms=got["p99_ms"], max_ms=got["max_ms"],  # type: ignore[arg-type]
                   n=int(got["n"]), span_short_ms=_num(rec.get("span_short_ms")),  # type: ignore[arg-type]
                   attempts=int(attempts) if attempts else 1)


@dataclass(frozen=True)
class Lengths:
    """The lengths a launch's requests had (a traffic file's: each request its own prompt and
    output length): prompt and completion tokens as the server's usage counted them, and how
    many requests returned another number of tokens than they asked for (``mismatched``)."""

    input: Distribution | None = None
    output: Distribution | None = None
    mismatched: int = 0

    def describe(self) -> str:
        """'input tokens: min ..., output tokens: min ...' (what the report and export print)."""
        parts = [f"{name} tokens {got.describe()}" for name, got in (("input", self.input), ("output", self.output))
                 if got is not None]
        if self.mismatched:
            parts.append(f"{self.mismatched} request(s) returned another length than asked")
        return "; ".join(parts)

    def to_record(self) -> dict[str, Any]:
        return {"input": self.input.to_record() if self.input else None,
                "output": self.output.to_record() if self.output else None, "mismatched": self.mismatched}

    @classmethod
    def from_record(cls, rec: Any) -> Lengths | None:
        if not isinstance(rec, Mapping):
            return None
        return cls(input=Distribution.from_record(rec.get("input")), output=Distribution.from_record(rec.get("output")),
                   mismatched=int(_num(rec.get("mismatched")) or 0))


# What a regime mark is (``RegimeMark.kind``): where a batch of more streams runs another way
GRAPHS = "graphs"  # the largest batch with a captured CUDA graph: above it the batch runs eagerly
BATCH = "batch"  # the most sequences the engine runs at once (max-num-seqs): above it requests wait
KV_CACHE = "kv_cache"  # about the most requests the KV cache holds at once: above it sequences are preempted
MARK_KINDS = (GRAPHS, BATCH, KV_CACHE)
_MARK_WORDS = {GRAPHS: ("CUDA graphs captured up to {n}", "its graphs end"),
               BATCH: ("at most {n} requests run at once", "requests wait for a slot"),
               KV_CACHE: ("the KV cache holds about {n} requests", "its KV cache is full")}


@dataclass(frozen=True)
class RegimeMark:
    """A concurrency where the engine changes regime (``kind``: ``MARK_KINDS``): the goodput search
    probes it and the one above it, and the answer names it. ``source``: where it was read (a
    param, a flag, the engine's log)."""

    streams: int
    kind: str
    source: str = ""

    def describe(self) -> str:
        """'CUDA graphs captured up to 64 (capture_sizes)'."""
        what = _MARK_WORDS.get(self.kind, ("{n}: " + self.kind, ""))[0].format(n=self.streams)
        return what + (f" ({self.source})" if self.source else "")

    @property
    def above(self) -> str:
        """What happens above it, as the answer says: 'its graphs end'."""
        return _MARK_WORDS.get(self.kind, ("", f"{self.kind} ends"))[1]

    def to_record(self) -> dict[str, Any]:
        return {"streams": self.streams, "kind": self.kind, "source": self.source, "text": self.describe()}

    @classmethod
    def from_record(cls, rec: Any) -> RegimeMark | None:
        if not isinstance(rec, Mapping) or _num(rec.get("streams")) is None or not isinstance(rec.get("kind"), str):
            return None
        return cls(int(_num(rec.get("streams"))), rec["kind"], str(rec.get("source") or ""))  # type: ignore[arg-type]


@dataclass(frozen=True)
class GoodputResult:
    """The goodput objective's search within one launch (``node.measure``, ``core.capacity``): the
    concurrencies probed, in order (each measured as a level of the same ``Measurement``), whether
    every SLO held at each (``held``, parallel to ``probes``), the capacity point (``holds``: the
    concurrency with the most total tok/s where every SLO held; None: none held, not even the
    lowest), the lowest probe above it that broke one (``breaks``; None: none did), where the engine
    changes regime (``marks``) and the targets judged (``targets``, their names).

    A record of the bisection before it (``held`` None: ``bisection``) read back as it was: its
    ``holds`` is the most streams at which every SLO held, which it took for the capacity point
    (it assumed throughput rises with load)."""

    max_concurrency: int
    probes: tuple[int, ...] = ()
    record_key: ClassVar[str] = "goodput"  # its key in the stored ``metrics``
    holds: int | None = None
    breaks: int | None = None
    held: tuple[bool, ...] | None = None
    marks: tuple[RegimeMark, ...] = ()
    targets: tuple[str, ...] = ()

    @property
    def bisection(self) -> bool:
        """Recorded by the bisection before the capacity search (no per-probe verdicts)."""
        return self.held is None

    @property
    def highest_held(self) -> int | None:
        """The most streams at which every SLO held (the bisection's ``holds``)."""
        if self.held is None:
            return self.holds
        return max((p for p, ok in zip(self.probes, self.held) if ok), default=None)

    def describe(self, value: float | None = None) -> str:
        """'serves the most within the SLO at 64 stream(s) (holds it up to 128)' (with ``value``:
        '...at 64 stream(s): 19037.0 total tok/s (...)'); a bisection's 'holds the SLO up to 48
        stream(s) (breaks at 52)'."""
        if self.holds is None:
            return f"breaks the SLO at {self.breaks or 1} stream(s) already"
        if self.bisection:
            above = (f" (breaks at {self.breaks})" if self.breaks is not None
                     else f" (the most asked, objective.goodput.max_concurrency {self.max_concurrency})")
            return f"holds the SLO up to {self.holds} stream(s){above}" + (
                f" at {value:.1f} total tok/s" if value is not None else "")
        most = self.highest_held or self.holds
        notes = ([f"holds it up to {most}"] if most > self.holds else []) + (
            [f"breaks at {self.breaks}"] if self.breaks is not None else [])
        if self.holds == self.max_concurrency:
            notes.append(f"the most asked, objective.goodput.max_concurrency {self.max_concurrency}")
        figure = f": {value:.1f} total tok/s" if value is not None else ""
        return f"serves the most within the SLO at {self.holds} stream(s){figure}" + (
            f" ({'; '.join(notes)})" if notes else "")

    def level(self, levels: Mapping[int, LevelResult]) -> LevelResult | None:
        """The level its figure is read at: the capacity point (None: none held, or not measured)."""
        return levels.get(self.holds) if self.holds is not None else None

    def figure(self, levels: Mapping[int, LevelResult]) -> float | None:
        """Total tok/s at the capacity point: 0.0 where none held, None where its level is missing."""
        if self.holds is None:
            return 0.0
        got = levels.get(self.holds)
        return got.value if got is not None else None

    def answer(self, value: float | None) -> str:
        """The search's one line as ``bench`` prints it, with the probes in the order measured."""
        probed = f"(probed {', '.join(map(str, self.probes))})"
        if self.bisection:
            return f"{self.describe()}, {value or 0:.1f} total tok/s there {probed}"
        return f"{self.describe(value if self.holds is not None else None)} {probed}"

    def notes(self) -> list[str]:
        """Where the engine changes regime (a bisection recorded none)."""
        return [] if self.bisection else [f"regime: {m.describe()}" for m in self.marks]

    def unheld(self, found: Mapping[int, Sequence[Any]]) -> tuple[float, str]:
        """Where none held: the lowest probe's worst excess over its targets (``found``: the breaches at
        each measured level, its probes among them) and why."""
        lowest = found.get(min(self.probes)) if self.probes else None
        excess = max((b.excess for b in lowest or ()), default=0.0)
        return excess, self.describe() + (f": {lowest[0].describe()}" if lowest else "")

    @property
    def rate_probes(self) -> tuple[RateProbe, ...]:
        """None: its probes are the measurement's levels."""
        return ()

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"max_concurrency": self.max_concurrency, "probes": list(self.probes),
                               "holds": self.holds, "breaks": self.breaks}
        if self.held is not None:
            out.update(held=list(self.held), marks=[m.to_record() for m in self.marks], targets=list(self.targets))
        return out

    @classmethod
    def from_record(cls, rec: Any) -> GoodputResult | None:
        if not isinstance(rec, Mapping) or _num(rec.get("max_concurrency")) is None:
            return None
        holds, breaks = _num(rec.get("holds")), _num(rec.get("breaks"))
        probes = tuple(int(p) for p in _finite(rec.get("probes") or ()))
        held = rec.get("held")
        verdicts = (tuple(bool(h) for h in held) if isinstance(held, list) and len(held) == len(probes)
                    and all(isinstance(h, bool) for h in held) else None)
        recorded = rec.get("marks")
        marks = tuple(m for m in (RegimeMark.from_record(r) for r in recorded) if m is not None) \
            if isinstance(recorded, list) else ()
        targets = rec.get("targets")
        return cls(max_concurrency=int(_num(rec.get("max_concurrency"))),  # type: ignore[arg-type]
                   probes=probes, holds=int(holds) if holds is not None else None,
                   breaks=int(breaks) if breaks is not None else None, held=verdicts, marks=marks,
                   targets=tuple(str(t) for t in targets) if isinstance(targets, list) else ())


def rate_text(rate: float) -> str:
    """'18.8 req/s', '0.45 req/s': a request rate as the answer prints it."""
    return f"{rate:.3g} req/s"


@dataclass(frozen=True)
class RateProbe:
    """One request rate of an open-loop load (``node.open_loop``): ``requests`` sent at ``rate``
    requests/s on the arrival schedule, how many were ``good`` (met every per-request target;
    ``core.attainment``), ``failed`` (an error) or ``unfinished`` (cut at the probe's limit), the
    output tok/s of the whole probe (every output token over the first send to the last end), the
    rate the client kept (``sent_rate``: the requests over the span of their sends), each request's
    TTFT, TPOT, ITL and end-to-end latency as percentiles, which targets requests missed and whether
    the rate ``held`` (attainment and every percentile target)."""

    rate: float
    requests: int
    good: int
    held: bool
    tok_s: float | None = None
    sent_rate: float | None = None
    failed: int = 0
    unfinished: int = 0
    ttft: Latency | None = None
    tpot: Latency | None = None
    itl: Latency | None = None
    e2e: Latency | None = None
    missed: Mapping[str, int] = field(default_factory=dict)

    @property
    def attainment(self) -> float | None:
        """good / requests (None: none sent)."""
        return self.good / self.requests if self.requests else None

    def latency(self, kind: str) -> Latency | None:
        """One of ``LATENCY_KINDS``."""
        if kind not in LATENCY_KINDS:
            raise ValueError(f"unknown latency {kind!r}; one of {', '.join(LATENCY_KINDS)}")
        return getattr(self, kind)

    def describe(self) -> str:
        """'20 req/s: attainment 91.7% (55 of 60), 812.3 tok/s'."""
        share = f"attainment {100 * self.attainment:.1f}% ({self.good} of {self.requests})" \
            if self.attainment is not None else "no request"
        tok = f", {self.tok_s:.1f} tok/s" if self.tok_s is not None else ""
        return f"{rate_text(self.rate)}: {share}{tok}"

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rate": self.rate, "requests": self.requests, "good": self.good,
                               "attainment": self.attainment, "held": self.held, "tok_s": self.tok_s,
                               "sent_rate": self.sent_rate, "failed": self.failed, "unfinished": self.unfinished,
                               "missed": dict(self.missed)}
        for kind in LATENCY_KINDS:
            got = self.latency(kind)
            if got is not None:
                out[kind] = got.to_record()
        return out

    @classmethod
    def from_record(cls, rec: Any) -> RateProbe | None:
        if not isinstance(rec, Mapping) or _num(rec.get("rate")) is None or _num(rec.get("requests")) is None:
            return None
        missed = rec.get("missed")
        return cls(rate=float(rec["rate"]), requests=int(rec["requests"]), good=int(_num(rec.get("good")) or 0),
                   held=bool(rec.get("held")), tok_s=_num(rec.get("tok_s")), sent_rate=_num(rec.get("sent_rate")),
                   failed=int(_num(rec.get("failed")) or 0), unfinished=int(_num(rec.get("unfinished")) or 0),
                   **{kind: Latency.from_record(rec.get(kind)) for kind in LATENCY_KINDS},
                   missed={str(k): int(v) for k, v in missed.items() if _num(v) is not None}
                   if isinstance(missed, Mapping) else {})


@dataclass(frozen=True)
class RateResult:
    """The capacity search by request rate within one launch (``core.rate_search``): every rate
    probed, in the order measured (the curve, kept whole), the capacity (``holds``: the highest rate
    that held; None: none did), the lowest rate above it that broke (``breaks``), the attainment
    required, the targets judged (names), how arrivals were drawn (``burstiness``, ``seed``; a
    trace's own rate where a traffic file's timestamps were replayed, ``trace_rate``) and the range
    searched."""

    max_rate: float
    min_rate: float
    probes: tuple[RateProbe, ...] = ()
    record_key: ClassVar[str] = "rate"  # its key in the stored ``metrics``
    holds: float | None = None
    breaks: float | None = None
    attainment: float | None = None
    targets: tuple[str, ...] = ()
    burstiness: float = 1.0
    seed: int = 0
    trace_rate: float | None = None

    def at(self, rate: float | None) -> RateProbe | None:
        """The probe at ``rate`` (the last one measured there)."""
        return next((p for p in reversed(self.probes) if p.rate == rate), None) if rate is not None else None

    @property
    def capacity(self) -> RateProbe | None:
        return self.at(self.holds)

    @property
    def value(self) -> float:
        """Output tok/s at the capacity (0.0 where no rate held)."""
        got = self.capacity
        return got.tok_s or 0.0 if got is not None else 0.0

    def level(self, levels: Mapping[int, LevelResult]) -> LevelResult | None:
        """None: a search by rate has no levels."""
        return None

    def figure(self, levels: Mapping[int, LevelResult]) -> float | None:
        """Output tok/s at the capacity (0.0 where no rate held)."""
        return self.value

    def answer(self, value: float | None) -> str:
        """The search's one line as ``bench`` prints it."""
        return self.describe(value if self.holds is not None else None)

    def notes(self) -> list[str]:
        return []

    @property
    def rate_probes(self) -> tuple[RateProbe, ...]:
        """Every open-loop probe, in the order measured."""
        return self.probes

    def curve(self) -> list[RateProbe]:
        """Every probe, by rate (the last measurement of a rate probed twice)."""
        return sorted({p.rate: p for p in self.probes}.values(), key=lambda p: p.rate)

    def shortfall(self) -> float:
        """How far the lowest rate was from holding: the attainment it lacked (0.0: unknown)."""
        low = min(self.probes, key=lambda p: p.rate, default=None)
        if low is None or low.attainment is None:
            return 0.0
        return max(0.0, (1.0 if self.attainment is None else self.attainment) - low.attainment)

    def unheld(self, found: Mapping[int, Sequence[Any]]) -> tuple[float, str]:
        """Where none held: the attainment the lowest rate lacked and why (its probes carry what broke,
        not ``found``: it has no levels)."""
        return self.shortfall(), self.describe()

    def speed_text(self, rate: float) -> str:
        """' (2.5x the trace's pace)' where a trace was replayed ('' otherwise)."""
        return f" ({rate / self.trace_rate:.3g}x the trace's pace)" if self.trace_rate else ""

    def describe(self, value: float | None = None) -> str:
        """'serves the most within the SLO at 18.8 req/s: 950.1 tok/s (attainment 100.0%; breaks at 20
        req/s: attainment 91.7%)'; 'breaks the SLO at 5 req/s already (attainment 40.0%)'."""
        if self.holds is None:
            low = min(self.probes, key=lambda p: p.rate, default=None)
            if low is None:
                return "measured no request rate"
            share = f" (attainment {100 * low.attainment:.1f}%)" if low.attainment is not None else ""
            return f"breaks the SLO at {rate_text(low.rate)}{self.speed_text(low.rate)} already{share}"
        got = self.capacity
        tok = value if value is not None else (got.tok_s if got is not None else None)
        figure = f": {tok:.1f} tok/s" if tok is not None else ""
        notes = [f"attainment {100 * got.attainment:.1f}%"] if got is not None and got.attainment is not None else []
        above = self.at(self.breaks)
        if above is not None:
            notes.append(f"breaks at {rate_text(above.rate)}" + (
                f": attainment {100 * above.attainment:.1f}%" if above.attainment is not None else ""))
        elif self.holds >= self.max_rate:
            notes.append(f"the most asked, objective.goodput.max_rate {self.max_rate:g}")
        lower = sorted(p.rate for p in self.probes if not p.held and p.rate < self.holds)
        if lower:  # not monotone: a lower rate broke where a higher one held
            notes.append(f"though it broke at {rate_text(lower[-1])} below it")
        return (f"serves the most within the SLO at {rate_text(self.holds)}{self.speed_text(self.holds)}{figure}"
                + (f" ({'; '.join(notes)})" if notes else ""))

    def to_record(self) -> dict[str, Any]:
        return {"max_rate": self.max_rate, "min_rate": self.min_rate, "probes": [p.to_record() for p in self.probes],
                "holds": self.holds, "breaks": self.breaks, "attainment": self.attainment,
                "targets": list(self.targets), "burstiness": self.burstiness, "seed": self.seed,
                "trace_rate": self.trace_rate}

    @classmethod
    def from_record(cls, rec: Any) -> RateResult | None:
        if not isinstance(rec, Mapping) or _num(rec.get("max_rate")) is None:
            return None
        probes = rec.get("probes")
        targets = rec.get("targets")
        return cls(max_rate=float(rec["max_rate"]), min_rate=_num(rec.get("min_rate")) or float(rec["max_rate"]),
                   probes=tuple(p for p in (RateProbe.from_record(r) for r in probes) if p is not None)
                   if isinstance(probes, list) else (),
                   holds=_num(rec.get("holds")), breaks=_num(rec.get("breaks")),
                   attainment=_num(rec.get("attainment")),
                   targets=tuple(str(t) for t in targets) if isinstance(targets, list) else (),
                   burstiness=_num(rec.get("burstiness")) or 1.0, seed=int(_num(rec.get("seed")) or 0),
                   trace_rate=_num(rec.get("trace_rate")))


class Capacity(Protocol):
    """A capacity search's record, over concurrency (``GoodputResult``) or by request rate
    (``RateResult``): what readers ask of it, whichever axis was searched."""

    record_key: ClassVar[str]

    @property
    def holds(self) -> float | None:
        """The capacity point (streams, or req/s); None: none held."""

    @property
    def breaks(self) -> float | None:
        """The lowest point above it that broke a target; None: none did."""

    def level(self, levels: Mapping[int, LevelResult]) -> LevelResult | None:
        """The level its figure is read at (None: none, or a search without levels)."""

    def figure(self, levels: Mapping[int, LevelResult]) -> float | None:
        """The launch's figure: the tok/s at the capacity point (0.0 where none held)."""

    def describe(self, value: float | None = None) -> str:
        """What it found, as the run's line and the answer say it (with ``value``, the figure there)."""

    def unheld(self, found: Mapping[int, Sequence[Any]]) -> tuple[float, str]:
        """Where none held: how far from holding (what Optuna's constraint is told) and why, one line
        (``found``: the targets each measured level breaks, ``core.slo.breaches_at``)."""

    def answer(self, value: float | None) -> str:
        """Its one line as ``bench`` prints it."""

    def notes(self) -> list[str]:
        """The lines ``bench`` prints after it."""

    @property
    def rate_probes(self) -> tuple[RateProbe, ...]:
        """The open-loop probes ``bench`` prints before it."""

    def to_record(self) -> dict[str, Any]:
        """The stored form, under ``record_key``."""


@dataclass(frozen=True)
class HostLoad:
    """How busy the machine was while a launch was measured (on a CPU box the launches compete
    with whatever else runs there): the 1-minute load average at the start and the end of the
    benchmark, the host's CPUs, and over the benchmark's ``wall_s`` the CPU seconds of the whole
    host, of the server's process tree and of the measuring client. What the host spent on
    neither is other work's (``others_cpus``)."""

    load_start: float | None = None
    load_end: float | None = None
    cpus: int | None = None
    wall_s: float | None = None
    host_cpu_s: float | None = None
    server_cpu_s: float | None = None
    client_cpu_s: float | None = None

    @property
    def server_cpus(self) -> float | None:
        """CPUs' worth the server got while measured."""
        if self.server_cpu_s is None or not self.wall_s:
            return None
        return self.server_cpu_s / self.wall_s

    @property
    def others_cpus(self) -> float | None:
        """CPUs' worth that other work took while the launch was measured."""
        if self.host_cpu_s is None or not self.wall_s:
            return None
        ours = (self.server_cpu_s or 0.0) + (self.client_cpu_s or 0.0)
        return max(0.0, self.host_cpu_s - ours) / self.wall_s

    @property
    def busy(self) -> bool:
        """Other work took at least half the host's CPUs (``BUSY_SHARE``): this launch's figures,
        and a timeout, say as much about the neighbours as about the config."""
        others = self.others_cpus
        return others is not None and bool(self.cpus) and others >= BUSY_SHARE * self.cpus  # type: ignore[operator]

    def describe(self) -> str:
        """'other work took 1.8 of 2 CPUs (load 4.1)' (or '' when not measured)."""
        others = self.others_cpus
        if others is None or not self.cpus:
            return ""
        loads = [x for x in (self.load_start, self.load_end) if x is not None]
        load = f" (load {max(loads):.1f})" if loads else ""
        return f"other work took {others:.1f} of {self.cpus} CPUs{load}"

    def to_record(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ("load_start", "load_end", "cpus", "wall_s", "host_cpu_s",
                                                        "server_cpu_s", "client_cpu_s")}

    @classmethod
    def from_record(cls, rec: Any) -> HostLoad | None:
        if not isinstance(rec, Mapping):
            return None
        cpus = _num(rec.get("cpus"))
        return cls(load_start=_num(rec.get("load_start")), load_end=_num(rec.get("load_end")),
                   cpus=int(cpus) if cpus else None, wall_s=_num(rec.get("wall_s")),
                   host_cpu_s=_num(rec.get("host_cpu_s")), server_cpu_s=_num(rec.get("server_cpu_s")),
                   client_cpu_s=_num(rec.get("client_cpu_s")))


@dataclass(frozen=True)
class Measurement:
    """What one launch measured: a ``LevelResult`` per level (objective levels, and the levels
    the job's outcome constraints read), in ascending order."""

    levels: Mapping[int, LevelResult] = field(default_factory=dict)
    rounds: int = 0
    prompts: int = 0
    output_tokens: int = 0
    warmup_s: float = 0.0
    bench_s: float = 0.0
    host: HostLoad | None = None
    goodput: GoodputResult | None = None  # the goodput objective's bisection (its probes are ``levels``)
    lengths: Lengths | None = None  # with a traffic file: the requests' prompt and output lengths
    rate: RateResult | None = None  # the capacity search by request rate (its probes are its own, not levels)

    @property
    def capacity(self) -> Capacity | None:
        """The capacity search's record, whichever axis it searched (None: the levels were measured)."""
        return next((got for got in (self.goodput, self.rate) if got is not None), None)

    @property
    def by_capacity(self) -> bool:
        """A capacity search's measurement (over concurrency or request rate): its value is the capacity's."""
        return self.capacity is not None

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", dict(sorted(self.levels.items())))

    @property
    def headline(self) -> LevelResult | None:
        """Level 1 where measured, else the lowest level: the trial's one number; for goodput the
        level where every SLO last held (else the lowest probed)."""
        searched = self.capacity
        got = searched.level(self.levels) if searched is not None else None
        if got is not None:
            return got
        return self.levels.get(1) or next(iter(self.levels.values()), None)

    @property
    def value(self) -> float | None:
        """The headline's median; for goodput the total tok/s where every SLO last held (0.0 where
        none held even at the lowest concurrency); by request rate, the output tok/s at the highest rate
        that held (0.0 where none did)."""
        searched = self.capacity
        figure = searched.figure(self.levels) if searched is not None else None
        if figure is not None:
            return figure
        head = self.headline
        return head.value if head is not None else None

    def at(self, level: int) -> LevelResult | None:
        return self.levels.get(level)

    def value_at(self, level: int) -> float | None:
        got = self.levels.get(level)
        return got.value if got is not None else None

    def values(self) -> dict[int, float | None]:
        """Each level's median."""
        return {level: got.value for level, got in self.levels.items()}

    def to_record(self) -> dict[str, Any]:
        """The stored form (the ``metrics`` user attribute): every level under ``levels``, and the
        headline's figures under the names single-request decode has always had (older readers,
        ``optuna-dashboard`` and trials.csv show them)."""
        out: dict[str, Any] = {"levels": {str(k): v.to_record() for k, v in self.levels.items()},
                               "repeats": self.rounds, "prompts": self.prompts, "output_tokens": self.output_tokens,
                               "warmup_s": self.warmup_s, "bench_s": self.bench_s}
        if self.host is not None:
            out["host"] = self.host.to_record()
        searched = self.capacity
        if searched is not None:  # under its own key: ``goodput`` (over concurrency) or ``rate``
            out[searched.record_key] = searched.to_record()
        if self.lengths is not None:
            out["lengths"] = self.lengths.to_record()
        one = self.levels.get(1)
        if one is not None:
            out.update(decode_tok_s=one.value, decode_samples=list(one.samples),
                       ttft_s=one.ttft.p50 if one.ttft else None, e2e_tok_s=one.e2e_tok_s, cv=one.cv,
                       rel_ci=one.rel_ci)
        head = self.headline
        if head is not None and head.acceptance_rate is not None:
            out["acceptance_rate"] = head.acceptance_rate
            out["mean_accepted_length"] = head.mean_accepted_length
        return out

    @classmethod
    def from_record(cls, metrics: Mapping[str, Any] | None, value: float | None = None) -> Measurement | None:
        """The measurement stored in ``metrics`` (None: it holds none). Records of every version
        read: per-level records, a record from before levels (level 1's decode samples), and the
        outcome constraints' one-shot totals (``concurrency``: {level: tok/s}) of older trials."""
        metrics = metrics or {}
        levels: dict[int, LevelResult] = {}
        recorded = metrics.get("levels")
        if isinstance(recorded, Mapping):
            for key, rec in recorded.items():
                try:
                    level = parse_level(key)
                except ValueError:
                    continue
                levels[level] = LevelResult.from_record(level, rec)
        rate = RateResult.from_record(metrics.get("rate"))
        if not levels and rate is None:  # (a search by rate has no levels: its value is its capacity's)
            samples = _finite(metrics.get("decode_samples") or ())
            one = value if value is not None else _num(metrics.get("decode_tok_s"))
            if samples or one is not None:
                ttft = _num(metrics.get("ttft_s"))
                levels[1] = LevelResult(1, samples=samples or (one,),  # type: ignore[arg-type]
                                        ttft=Latency(ttft, ttft, ttft, 0) if ttft is not None else None,
                                        e2e_tok_s=_num(metrics.get("e2e_tok_s")),
                                        acceptance_rate=_num(metrics.get("acceptance_rate")),
                                        mean_accepted_length=_num(metrics.get("mean_accepted_length")))
        legacy = metrics.get("concurrency")
        if isinstance(legacy, Mapping):
            for key, total in legacy.items():
                try:
                    level = int(key)
                except (TypeError, ValueError):
                    continue
                if level not in levels and _num(total) is not None:
                    levels[level] = LevelResult(level, samples=(_num(total),))  # type: ignore[arg-type]
        if not levels and rate is None:
            return None
        rounds = _num(metrics.get("repeats"))
        return cls(levels=levels, rounds=int(rounds) if rounds is not None else 0,
                   prompts=int(_num(metrics.get("prompts")) or 0),
                   output_tokens=int(_num(metrics.get("output_tokens")) or 0),
                   warmup_s=_num(metrics.get("warmup_s")) or 0.0, bench_s=_num(metrics.get("bench_s")) or 0.0,
                   host=HostLoad.from_record(metrics.get("host")),
                   goodput=GoodputResult.from_record(metrics.get("goodput")),
                   lengths=Lengths.from_record(metrics.get("lengths")), rate=rate)


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f}" if seconds < 10 else f"{1000 * seconds:.0f}"


def cache_text(got: LevelResult) -> str:
    """'prefix-cache hits 0%': the share of the level's prompt tokens its server's prefix cache
    answered, shown beside its TTFT ('' where the server does not count them)."""
    rate = got.prefix_cache_hit_rate
    return "" if rate is None else f"prefix-cache hits {100 * rate:.0f}%"


def latency_text(got: LevelResult) -> str:
    """'p50/p90/p99 ms: TTFT 11.2/13.0/15.9 (prefix-cache hits 0%), TPOT 4.1/4.3/4.9, ...' (what was
    measured)."""
    parts = []
    for kind, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E")):
        lat = got.latency(kind)
        if lat is not None:
            cached = f" ({cache_text(got)})" if kind == "ttft" and cache_text(got) else ""
            parts.append(f"{name} {'/'.join(_ms(lat.at(q)) for q in QUANTILES)}{cached}")
    return ("p50/p90/p99 ms: " + ", ".join(parts)) if parts else ""


def level_text(got: LevelResult) -> str:
    """One level in one line: its figure, how precise, over what, and its latencies."""
    value = got.value
    if value is None:
        return f"{got.level}: not measured"
    spread = got.spread
    prec = f" +-{100 * spread:.1f}%" if spread is not None else ""
    n = len(got.samples)
    over = (f"{n} requests" if streams(got.level) == 1 else f"{n} window(s) of {got.window_s:.1f}s" if got.window_s
            else f"{n} rounds")
    whole = f"; {whole_run_text(got)}" if whole_run_text(got) else ""
    lat = latency_text(got)
    return f"{got.level}: {value:.1f} {got.unit}{prec} (median of {over}{whole})" + (f"; {lat}" if lat else "")


def whole_run_text(got: LevelResult) -> str:
    """'whole run 17800.2 tok/s': the level's output tok/s over the whole run, as ``vllm bench serve``
    counts it, shown beside the steady-state figure ('' at level 1 or where not recorded)."""
    rate = got.whole_run_tok_s
    return "" if rate is None or streams(got.level) == 1 else f"whole run {rate:.1f} tok/s"


def outcome_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keys of a stored ``metrics`` record that are not the measurement's (``RECORD_KEYS``)."""
    return {k: v for k, v in (metrics or {}).items() if k not in RECORD_KEYS}
