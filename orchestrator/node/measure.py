"""What a trial measures once its server is healthy: each level, over the prompt set, in rounds,
every sample kept; the one producer of a ``core.measurement.Measurement``.

A ``BenchPlan`` (``node.spec``) names the levels (the objective's, then those the job's outcome
constraints read), the prompts and the rounds. ``measure`` runs:

1. warm-up: ``warmup`` single requests (through the prompts, untimed), then one at each context of
   a context axis (``BenchPlan.long_prompts``);
2. rounds: in each, every level in ascending order (the cheapest first; a level with a context,
   ``core.level``, over the prompts made that long). Level 1 streams every
   prompt once (a decode tok/s sample per request). Level N sustains N streams, each sending
   ``plan.waves`` requests back to back through the prompts, and takes one total tok/s sample
   per round from the steady-state window (``core.measurement.steady_window``: the tokens that
   arrived while all N streams were in flight, so the ramp and the tail are not in it), and from
   the same requests the whole run's figure ``vllm bench serve`` reports (every output token over
   the last end minus the first start: ``LevelResult.whole_run_tok_s``). Every
   request's TTFT, TPOT, inter-chunk gaps and end-to-end latency go into the level's
   percentiles. ``/metrics`` is read around each level's round (what speculative decoding
   accepted; the share of the prompt tokens the server's prefix cache answered there);
3. after the first round, the one early-stop rule (``core.outcome.early_stop``) over the
   objective's levels: stop when every one is below its threshold; the constraint levels are
   measured only when the trial goes on;
4. ``repeats`` rounds; then, while a level's median interval is wider than ``target_rel_ci``,
   more rounds of that level alone, up to ``max_repeats`` (every level is measured to the same
   precision, not level 1 alone);
5. the measuring client watched meanwhile: every level's requests run with a ticker on their
   event loop (``node.looplag``), and the level records how late the loop ran (``ClientLag``:
   over its wake-ups, and at each request's first token against its last). A level whose figures
   are client-bound (``core.client_bound.judge``: a starved client stamps the first tokens late
   and overstates decode) is measured once more from scratch (``Session.recheck``); still client-bound, the
   second measurement is kept and the benchmark warns with the rule's notice (``client notice:
   ...``), which the trial carries. Never a failure: the limit grows by the rounds measured again.

Prompts the server has not seen: a server with a prefix cache (vLLM's is on by default) answers a
prompt it has seen before without most of its prefill, and the rounds send the same prompts again
and again, level after level: a TTFT measured so is a cache hit's (a config whose prefill was 3x
slower held an 800 ms TTFT target at 64 streams on hits alone). So every request, warm-up
included, begins with a line of its own (``Prefixes``: a launch's random tag and the request's
number), which no earlier request began with: a prefix cache keys its blocks from the first token
on, so nothing of the request is found there, whatever the engine. With ``bench.prefix_reuse``
the line is one per pass through the prompts instead: requests share what their prompts share
(a system prompt, as in production), never a request's own earlier sending. The share of prompt
tokens the cache did answer is recorded per level where the server counts it
(``core.prometheus.prefix_cache``). The correctness gate's prompts are sent as they are
(``node.trial``).

Time: a benchmark is judged by its progress, not by one wall-clock figure. A stream silent for
``plan.stall_s`` has stalled (``hang``); the whole benchmark's limit is the larger of
``plan.timeout_s`` (``timeouts.bench``) and ``PACE_FACTOR`` x what the rounds should take at the
pace this server has shown (its warm-up, then each level's measured rounds), re-estimated as it
goes: a machine that is busy with other work slows the warm-up too, and the limit grows with it.
Adaptive rounds stop at the limit with a warning; the required rounds fail as a timeout.

A failed request fails the benchmark (``ok=False``; ``timed_out``, ``stalled``), but what the
finished levels measured is kept (``Benchmark.measurement``): a config that fails only at 10
streams still says what it did at 1.
"""

from __future__ import annotations

import os
import statistics
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orchestrator.backends  # noqa: F401 - fills core.engines' registry with every backend's engine
from orchestrator.core import capacity, client_bound, prometheus, slo
from orchestrator.core.level import context_of, streams
from orchestrator.core.measurement import (
    ClientLag,
    Distribution,
    GoodputResult,
    Latency,
    Lengths,
    LevelResult,
    Measurement,
    RateResult,
    StreamedRequest,
    relative_ci,
    steady_window,
)
from orchestrator.core.outcome import early_stop
from orchestrator.node import client
from orchestrator.node.client import RequestResult
from orchestrator.node.looplag import LoopLag
from orchestrator.node.spec import PACE_FACTOR, BenchPlan

METRICS_TIMEOUT_S = 5.0
STALLED_MARK = "streams stalled"  # in a concurrent round's error: some of its streams went silent
GOODPUT_PACE_PROBES = 3  # the limit's guess of the capacity search's refinement: the top level 3 times over

# (level, requests done, requests of this level's round), told with 0 done as a round begins
Progress = Callable[[int, int, int], None]


@dataclass
class _Level:
    """One level's samples while it is measured (``freeze`` makes the record)."""

    level: int
    samples: list[float] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=lambda: {"ttft": [], "tpot": [], "itl": [], "e2e": []})
    e2e_tok_s: list[float] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    stream_decode: list[float] = field(default_factory=list)
    windows: list[float] = field(default_factory=list)
    round_s: float | None = None  # the last round of this level, in seconds
    spec_before: dict[str, float] | None = None
    spec_after: dict[str, float] | None = None
    prompt_tokens: list[int] = field(default_factory=list)  # each request's prompt, as the server counted it
    asked: list[int | None] = field(default_factory=list)  # the output tokens each request asked for
    cache: list[tuple[float, float]] = field(default_factory=list)  # per round: prompt tokens looked up, found
    whole_run: list[float] = field(default_factory=list)  # per round at N > 1: output tok/s over the whole run
    attempts: int = 1  # 2: measured again, the first measurement client-bound (``Session.recheck``)
    stints: int = 0  # times ``Session.rounds`` measured it (a capacity confirmation: its first and more)
    lag: LoopLag = field(default_factory=LoopLag)  # how late the client's loop ran while this level was measured
    # each request: the loop's lateness at its first token less at its last (how much short its span was stamped)
    span_short: list[float] = field(default_factory=list)

    def count_cache(self, before: dict[str, float] | None, after: dict[str, float] | None) -> None:
        """What the server's prefix cache answered during one round of this level (between the
        snapshots taken around it: the other levels' rounds are not in it)."""
        got = prometheus.prefix_cache(before, after)
        if got is not None:
            self.cache.append(got)

    def add(self, req: RequestResult) -> None:
        """One finished request's latencies and lengths."""
        lat = self.latency
        if req.ttft_s is not None:
            lat["ttft"].append(req.ttft_s)
        if req.tpot_s is not None:
            lat["tpot"].append(req.tpot_s)
        lat["itl"].extend(b - a for a, b in zip(req.token_times, req.token_times[1:]))
        if req.latency_s is not None:
            lat["e2e"].append(req.latency_s)
        self.token_counts.append(req.n_tokens)
        self.asked.append(req.max_tokens)
        first, last = (self.lag.at(req.token_times[0]), self.lag.at(req.token_times[-1])) if req.token_times \
            else (None, None)
        if first is not None and last is not None:
            self.span_short.append(first - last)
        if req.prompt_tokens is not None:
            self.prompt_tokens.append(req.prompt_tokens)

    @property
    def rel_ci(self) -> float | None:
        return relative_ci(self.samples)

    def freeze(self, input_tokens: bool = False) -> LevelResult:
        """The level's record; ``input_tokens``: with its prompts' median length as the server counted
        them (a context axis: what each level's context came to)."""
        acceptance = prometheus.acceptance(self.spec_before, self.spec_after) or {}
        looked_up = sum(q for q, _ in self.cache)
        return LevelResult(
            self.level, samples=tuple(self.samples), **{k: Latency.of(v) for k, v in self.latency.items()},
            e2e_tok_s=statistics.median(self.e2e_tok_s) if self.e2e_tok_s else None,
            stream_decode_tok_s=statistics.median(self.stream_decode) if self.stream_decode else None,
            requests=len(self.token_counts), window_s=statistics.median(self.windows) if self.windows else None,
            acceptance_rate=acceptance.get("acceptance_rate"),
            mean_accepted_length=acceptance.get("mean_accepted_length"),
            input_tokens=statistics.median(self.prompt_tokens) if input_tokens and self.prompt_tokens else None,
            prefix_cache_hit_rate=sum(h for _, h in self.cache) / looked_up if looked_up else None,
            whole_run_tok_s=statistics.median(self.whole_run) if self.whole_run else None,
            input_length=Distribution.of(self.prompt_tokens), output_length=Distribution.of(self.token_counts),
            client_lag=ClientLag.of(self.lag.late, self.span_short, self.attempts))


@dataclass
class Benchmark:
    """What ``measure`` found: the measurement (also of a failed benchmark: its finished levels)
    and how it ended."""

    ok: bool = False
    error: str | None = None
    timed_out: bool = False
    stalled: bool = False  # a stream went silent for the stall limit (``timeouts.stall``)
    failed_request: RequestResult | None = None
    failed_level: int | None = None
    pruned: bool = False
    limit_s: float | None = None  # the benchmark's limit when it ended (module docstring)
    measurement: Measurement = field(default_factory=Measurement)
    warnings: list[str] = field(default_factory=list)

    @property
    def value(self) -> float | None:
        """The headline level's median (level 1 where measured)."""
        return self.measurement.value

    def first_round(self, plan: BenchPlan) -> dict[int, float | None]:
        """Each level's worth over its first round (what the early stop reads: ``plan.measure``)."""
        out: dict[int, float | None] = {}
        for level, got in self.measurement.levels.items():
            first = got.samples[:len(plan.prompts) if streams(level) == 1 else 1]
            out[level] = plan.measure.worth(replace(got, samples=tuple(first)), plan.config) if first else None
        return out


def read_metrics(url: str | None) -> dict[str, float] | None:
    """The metrics at ``url`` now that a level records (``core.prometheus.snapshot``: speculative
    decoding, the prefix cache; None: no /metrics, or none of them there)."""
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as reply:
            return prometheus.snapshot(reply.read(4 << 20).decode("utf-8", "replace"))
    except (OSError, urllib.error.URLError, ValueError):
        return None


class Prefixes:
    """The line each request begins with (module docstring): ``[TAG-N]``, TAG random for the
    launch (a cache that outlives a server, on disk or shared, has not seen it either), N counted
    over the launch: one per request, or with ``reuse`` one per pass through the prompts."""

    def __init__(self, reuse: bool = False, tag: str | None = None):
        self.reuse = reuse
        self.tag = tag or os.urandom(4).hex()
        self.n = 0

    def _line(self) -> str:
        self.n += 1
        return f"[{self.tag}-{self.n}]\n"

    def requests(self, prompts: tuple[str, ...] | list[str], count: int) -> list[str]:
        """``count`` requests through ``prompts`` in turn (the i-th is ``prompts[i % len]``), each
        begun with its line."""
        out, line = [], ""
        for i in range(count):
            if not self.reuse or i % len(prompts) == 0:
                line = self._line()
            out.append(line + prompts[i % len(prompts)])
        return out


class _Pace:
    """The benchmark's limit from the pace its warm-up showed (module docstring): set once, so a
    server that slows down after it runs out of time instead of moving its own limit."""

    def __init__(self, plan: BenchPlan, levels: list[int], floor: float, t0: float):
        self.plan, self.levels, self.floor, self.t0 = plan, levels, floor, t0
        self.per_token: float | None = None  # a single request's seconds per output token, as the warm-up took

    def observe(self, seconds: float | None, tokens: int) -> None:
        """A warm-up request (or, with no warm-up, the first timed one) that asked for ``tokens``
        output tokens took ``seconds`` (with one output length for every request, the pace is a
        request's seconds, as it always was)."""
        if seconds:
            self.per_token = max(self.per_token or 0.0, seconds / max(1, tokens))  # the slower: generous

    def estimate(self) -> float | None:
        """Seconds the required rounds should take at that pace (a wave at level N as N single
        requests: the most a batch can slow each of its streams)."""
        if self.per_token is None:
            return None
        plan = self.plan
        prompts = len(plan.prompts)
        tokens = sum(plan.tokens_for(i) for i in range(prompts)) / prompts  # a request's mean length
        per_round = sum(prompts if streams(lv) == 1 else plan.waves * streams(lv) for lv in self.levels)
        return self.per_token * tokens * per_round * plan.repeats

    def deadline(self) -> float:
        """The monotonic time the benchmark may run until."""
        guess = self.estimate()
        return max(self.floor, self.t0 + PACE_FACTOR * guess) if guess is not None else self.floor


CUT = "cut"  # ``Session.rounds``: the adaptive rounds reached the benchmark's limit (the level is kept)
DONE = "done"


class Session:
    """One benchmark while it runs (``measure``, ``goodput``): the levels measured so far, the
    pace and its limit, the warm-up and the rounds, and how it ends."""

    def __init__(self, base_url: str, model: str, plan: BenchPlan, deadline: float, metrics_url: str | None,
                 progress: Progress | None, pace_levels: list[int]):
        self.base_url, self.model, self.plan = base_url, model, plan
        self.metrics_url, self.progress = metrics_url, progress
        self.out = Benchmark()
        self.acc: dict[int, _Level] = {}
        self.adaptive = plan.max_repeats is not None and plan.target_rel_ci is not None
        self.cap = max(plan.repeats, int(plan.max_repeats or plan.repeats)) if self.adaptive else plan.repeats
        self.t0 = time.monotonic()
        self.t1: float | None = None  # the rounds' start
        self.pace = _Pace(plan, pace_levels, deadline, self.t0)
        self.warmup_s = self.bench_s = 0.0
        self.rounds_done = 0
        self.goodput: GoodputResult | None = None
        self.rate: RateResult | None = None  # goodput by request rate (``node.open_loop``)
        self.open_loop = _Level(0)  # the open-loop probes' requests (their lengths), outside every level
        self.prefixes = Prefixes(plan.prefix_reuse)

    def left(self) -> float:
        return self.pace.deadline() - time.monotonic()

    def frozen(self) -> Measurement:
        plan = self.plan
        lengths = None
        if plan.output_lengths is not None or plan.context or plan.long_prompts:  # traffic, long prompts: lengths
            levels = [*self.acc.values(), self.open_loop]
            asked = [(a, n) for lv in levels for a, n in zip(lv.asked, lv.token_counts)]
            lengths = Lengths(input=Distribution.of(t for lv in levels for t in lv.prompt_tokens),
                              output=Distribution.of(n for lv in levels for n in lv.token_counts),
                              mismatched=sum(1 for a, n in asked if a is not None and a != n))
        return Measurement(levels={lv: a.freeze(bool(plan.long_prompts)) for lv, a in self.acc.items() if a.samples},
                           rounds=self.rounds_done,
                           prompts=len(plan.prompts), output_tokens=plan.output_tokens, warmup_s=self.warmup_s,
                           bench_s=self.bench_s, goodput=self.goodput, lengths=lengths, rate=self.rate)

    def fail(self, err: str, timed_out: bool, req: RequestResult | None = None, stalled: bool = False,
             level: int | None = None) -> Benchmark:
        out = self.out
        out.ok, out.error, out.timed_out, out.failed_request, out.failed_level = False, err, timed_out, req, level
        out.stalled = stalled or (req is not None and req.stalled)
        out.limit_s = self.pace.deadline() - self.t0
        out.measurement = self.frozen()
        return out

    def warm_up(self) -> Benchmark | None:
        """The untimed requests; the failed benchmark when one fails. With a context axis, one more
        at each context after them (``long_prompts``): the server meets each prompt length once
        untimed, and the pace is the slowest's, so the limit leaves room for the long prefills."""
        plan = self.plan
        first = self.prefixes.requests(plan.prompts, plan.warmup)
        todo = [*first, *(self.prefixes.requests(prompts, 1)[0] for _, prompts in sorted(plan.long_prompts.items()))
                ] if plan.warmup else first
        for i, prompt in enumerate(todo):
            if self.left() <= 0:
                return self.fail(f"benchmark limit reached during warm-up ({i} of {len(todo)})", True)
            k = i % len(plan.prompts) if i < len(first) else 0
            req = client.stream_completion(self.base_url, self.model, prompt, plan.tokens_for(k), self.left(),
                                           stall_s=plan.stall_s)
            if not req.ok:
                return self.fail(f"warm-up request {i + 1} failed: {req.error}", req.timed_out, req)
            self.pace.observe(req.latency_s, plan.tokens_for(k))
        self.warmup_s = time.monotonic() - self.t0
        self.t1 = time.monotonic()
        return None

    def rounds(self, objective: list[int], extra_levels: list[int],
               prune_below: Mapping[int, float] | None) -> str | Benchmark:
        """Rounds over ``objective`` then ``extra_levels`` (module docstring): ``DONE`` (or pruned:
        ``out.pruned``), ``CUT`` (the adaptive rounds reached the limit), or the failed benchmark."""
        plan, acc, out = self.plan, self.acc, self.out
        for level in objective + extra_levels:
            acc.setdefault(level, _Level(level)).stints += 1
        for rnd in range(self.cap):
            if rnd < plan.repeats:
                todo = objective + extra_levels
            else:  # adaptive rounds: only the levels whose interval is still too wide
                todo = [lv for lv in objective + extra_levels
                        if acc[lv].rel_ci is not None and acc[lv].rel_ci > plan.target_rel_ci]  # type: ignore[operator]
                if not todo:
                    break
                longest = sum(acc[lv].round_s or 0.0 for lv in todo)
                if self.pace.deadline() - time.monotonic() < 1.5 * longest:
                    out.warnings.append(f"stopped adaptive rounds at {rnd}: the benchmark's limit (rel_ci "
                                        + ", ".join(f"{acc[lv].rel_ci:.3f} at {lv}" for lv in todo) + ")")
                    break
            for level in todo:
                if rnd == 0 and level in extra_levels and early_stop(_first(acc, objective, plan), prune_below):
                    break  # the constraint levels wait for a trial that goes on
                got = acc[level]
                before = read_metrics(self.metrics_url)
                if got.spec_before is None:
                    got.spec_before = before
                started = time.monotonic()
                error = (_decode_round(self.base_url, self.model, plan, got, self.left, self.progress, self.pace,
                                       self.prefixes)
                         if streams(level) == 1 else
                         _sustained_round(self.base_url, self.model, plan, got, self.left, self.progress, self.pace,
                                          self.prefixes))
                if error is not None:
                    self.bench_s = time.monotonic() - (self.t1 or self.t0)
                    if rnd >= plan.repeats and error[1] and self.pace.deadline() - time.monotonic() <= 0:
                        out.warnings.append(f"adaptive round {rnd + 1} at {level} cut by the benchmark's limit")
                        return CUT
                    return self.fail(f"concurrency {level}: {error[0]}" if streams(level) > 1 or context_of(level)
                                     else error[0], error[1],
                                     error[2], stalled=STALLED_MARK in error[0], level=level)
                got.round_s = time.monotonic() - started
                got.spec_after = read_metrics(self.metrics_url)
                got.count_cache(before, got.spec_after)
            self.rounds_done = max(self.rounds_done, rnd + 1)
            if rnd == 0 and early_stop(_first(acc, objective, plan), prune_below):
                out.pruned = True
                break
        self.bench_s = time.monotonic() - (self.t1 or self.t0)
        return DONE

    def recheck(self, levels: list[int]) -> str | Benchmark:
        """Each of ``levels`` whose figures are client-bound (``core.client_bound.judge``) measured again
        as many times as ``rounds`` measured it (a capacity confirmation's three, not one in their
        place), its first measurement dropped (a transient hiccup of the client goes away): as
        ``rounds`` returns. The benchmark's limit grows by those rounds: the client's delay is never
        the config's timeout."""
        bound = [lv for lv in levels if lv in self.acc and self.acc[lv].attempts == 1 and self.acc[lv].samples
                 and client_bound.judge(self.acc[lv].freeze()) is not None]
        if not bound:
            return DONE
        times = {lv: self.acc[lv].stints for lv in bound}
        for lv in bound:
            self.acc[lv] = _Level(lv, attempts=2)
        self.pace.levels = [*self.pace.levels, *(lv for lv in bound for _ in range(times[lv]))]
        got: str | Benchmark = DONE
        for i in range(max(times.values())):
            got = self.rounds([lv for lv in bound if times[lv] > i], [], None)
            if isinstance(got, Benchmark) or got == CUT:
                break
        return got

    def finish(self) -> Benchmark:
        """The benchmark that went to its end, with what it should warn about (a level still
        client-bound after its second measurement: the notice, ``core.client_bound``)."""
        out, plan, acc = self.out, self.plan, self.acc
        if plan.output_lengths is None:
            short = sorted({c for c in (acc[1].token_counts if 1 in acc else []) if c != plan.output_tokens})
            if short:
                out.warnings.append(f"requests returned {short} tokens, not {plan.output_tokens} (does the server "
                                    "honour ignore_eos?)")
        else:
            asked = [(a, n) for lv in [*acc.values(), self.open_loop] for a, n in zip(lv.asked, lv.token_counts)
                     if a is not None]
            wrong = [(a, n) for a, n in asked if a != n]
            if wrong:
                out.warnings.append(f"{len(wrong)} of {len(asked)} requests returned another length than asked "
                                    f"(e.g. {wrong[0][1]} of {wrong[0][0]} tokens; does the server honour ignore_eos?)")
        if self.adaptive:
            for level, got in acc.items():
                if got.rel_ci is not None and got.rel_ci > plan.target_rel_ci:  # type: ignore[operator]
                    rounds = len(got.samples) if streams(level) > 1 else len(got.samples) // max(1, len(plan.prompts))
                    out.warnings.append(f"rel_ci {got.rel_ci:.3f} at {level} above the target {plan.target_rel_ci} "
                                        f"after {rounds} rounds")
        out.ok = True
        out.measurement = self.frozen()
        for measured in out.measurement.levels.values():
            bound = client_bound.judge(measured)
            if bound is not None and bound.notice() not in out.warnings:
                out.warnings.append(bound.notice())
        return out


def measure(base_url: str, model: str, plan: BenchPlan, *, deadline: float, metrics_url: str | None = None,
            prune_below: Mapping[int, float] | None = None, progress: Progress | None = None) -> Benchmark:
    """Measure every level of ``plan`` (module docstring); never raises for what the server does.
    ``deadline``: the benchmark's limit at least (``timeouts.bench`` from its start); the pace
    measured may extend it. A plan whose kind searches the load axis does so instead (``goodput``)."""
    if plan.kind.searches_load:
        return goodput(base_url, model, plan, deadline=deadline, metrics_url=metrics_url, progress=progress)
    objective = sorted(plan.levels)
    extra_levels = sorted(set(plan.constraint_levels) - set(objective))
    run = Session(base_url, model, plan, deadline, metrics_url, progress, objective + extra_levels)
    failed = run.warm_up()
    if failed is not None:
        return failed
    got = run.rounds(objective, extra_levels, prune_below)
    if isinstance(got, Benchmark):
        return got
    again = run.recheck(objective + extra_levels)
    return again if isinstance(again, Benchmark) else run.finish()


def goodput(base_url: str, model: str, plan: BenchPlan, *, deadline: float, metrics_url: str | None = None,
            progress: Progress | None = None) -> Benchmark:
    """The goodput objective's measurement: each concurrency the capacity search picks
    (``core.capacity.next_probe``: the coarse sweep with the server's regime marks, ``plan.marks``,
    then refinement, a fall and the limit confirmed by more rounds: ``core.capacity.next_step``) measured
    as a level, in full, judged against ``plan.slo`` (``core.slo.holds``),
    up to ``plan.goodput`` streams; the capacity point and every probe's verdict in
    ``Measurement.goodput``."""
    top = int(plan.goodput or 1)
    marks = tuple(plan.marks)
    run = Session(base_url, model, plan, deadline, metrics_url, progress,
                   capacity.coarse(top, marks) + [top] * (GOODPUT_PACE_PROBES + capacity.CONFIRM_STINTS))
    failed = run.warm_up()
    if failed is not None:
        return failed
    seen: dict[int, capacity.Probe] = {}
    order: list[int] = []
    confirmed: list[int] = []
    step = capacity.next_step(seen, top, marks, confirmed)
    while step is not None:
        nxt, confirming = step
        for _ in range(capacity.CONFIRM_STINTS if confirming else 1):  # a confirmation: more rounds of it
            got = run.rounds([nxt], [], None)
            if isinstance(got, Benchmark) or got == CUT:
                break
        if isinstance(got, Benchmark):
            return got
        again = run.recheck([nxt])  # a confirmed load: its first measurement and the confirmation's, again
        if isinstance(again, Benchmark):
            return again
        got = CUT if CUT in (got, again) else DONE
        level = run.acc[nxt].freeze()
        seen[nxt] = capacity.Probe(nxt, level.value, slo.holds(level, plan.slo))
        (confirmed if confirming else order).append(nxt)
        run.goodput = capacity.result(top, order, seen, marks, plan.slo)
        if got == CUT:
            run.out.warnings.append(f"the capacity search stopped at the benchmark's limit after {len(order)} "
                                    f"load(s) ({', '.join(map(str, order))}): its answer is the best of those")
            break
        step = capacity.next_step(seen, top, marks, confirmed)
    return run.finish()


def _first(acc: dict[int, _Level], objective: list[int], plan: BenchPlan) -> dict[int, float | None]:
    """Each objective level's worth over its first round (``plan.measure``: its median tok/s, per GPU, a
    latency percentile's reciprocal), what the early stop's thresholds are in."""
    out: dict[int, float | None] = {}
    for level in objective:
        got = acc[level]
        first = got.samples[:len(plan.prompts) if streams(level) == 1 else 1]
        lat = {k: Latency.of(v) for k, v in got.latency.items()}
        out[level] = plan.measure.worth(LevelResult(level, samples=tuple(first), ttft=lat["ttft"], tpot=lat["tpot"],
                                                    itl=lat["itl"], e2e=lat["e2e"]), plan.config) if first else None
    return out


def _decode_round(base_url: str, model: str, plan: BenchPlan, got: _Level, left, progress: Progress | None,
                  pace: _Pace, prefixes: Prefixes) -> tuple[str, bool, RequestResult | None] | None:
    """Every prompt once as a single streamed request, each begun with its line (``Prefixes``);
    (error, timed out, request) or None."""
    if progress is not None:
        _tell(progress, got.level, 0, len(plan.prompts))  # the round begins (the status line says so at once)
    prompts = plan.prompts_at(got.level)
    for i, prompt in enumerate(prefixes.requests(prompts, len(prompts))):
        budget = left()
        if budget <= 0:
            return f"benchmark limit reached after {len(got.samples)} requests", True, None
        req = client.stream_completion(base_url, model, prompt, plan.tokens_for(i), budget, stall_s=plan.stall_s,
                                       lag=got.lag)
        if not req.ok:
            return f"request {len(got.samples) + 1} failed: {req.error}", req.timed_out, req
        if req.decode_tok_s is None:
            return (f"request {len(got.samples) + 1}: decode rate not measurable ({req.n_tokens} tokens in "
                    f"{len(req.token_times)} streamed chunks)"), False, req
        got.samples.append(req.decode_tok_s)
        got.add(req)
        if pace.per_token is None:  # no warm-up: the first request sets the pace
            pace.observe(req.latency_s, plan.tokens_for(i))
        if req.e2e_tok_s is not None:
            got.e2e_tok_s.append(req.e2e_tok_s)
        if progress is not None:
            _tell(progress, got.level, i + 1, len(plan.prompts))
    return None


def _sustained_round(base_url: str, model: str, plan: BenchPlan, got: _Level, left, progress: Progress | None,
                     pace: _Pace, prefixes: Prefixes) -> tuple[str, bool, RequestResult | None] | None:
    """``got.level`` streams, ``plan.waves`` requests each, back to back, through the prompts in turn
    (each begun with its line: ``Prefixes``): one steady-state sample."""
    budget = left()
    if budget <= 0:
        return "benchmark limit reached", True, None
    total = streams(got.level) * max(1, plan.waves)
    done = [0]
    if progress is not None:
        _tell(progress, got.level, 0, total)  # the round begins

    def one_done(_: RequestResult) -> None:
        done[0] += 1
        if progress is not None:
            _tell(progress, got.level, done[0], total)

    prompts = plan.prompts_at(got.level)
    lengths = [plan.tokens_for(i % len(prompts)) for i in range(total)]
    streamed, wall = client.run_streams(base_url, model, prefixes.requests(prompts, total), lengths,
                                        streams(got.level), total, timeout_s=budget, stall_s=plan.stall_s,
                                        on_done=one_done, lag=got.lag)
    results = [req for _, req in streamed]
    bad = [r for r in results if not r.ok]
    if bad:
        stalls = sum(1 for r in bad if r.stalled)
        errors = list(dict.fromkeys(r.error or "?" for r in bad))[:1]
        marked = f" ({stalls} {STALLED_MARK})" if stalls else ""
        return f"{len(bad)} of {total} requests failed{marked}: {errors}", any(r.timed_out for r in bad), None
    window = steady_window([StreamedRequest(stream, r.t_start, r.t_start + (r.latency_s or 0.0),
                                            tuple(r.token_times), r.n_tokens) for stream, r in streamed])
    span = max(r.t_start + (r.latency_s or 0.0) for r in results) - min(r.t_start for r in results)
    if span > 0:  # the whole run, as ``vllm bench serve`` counts output throughput
        got.whole_run.append(sum(r.n_tokens for r in results) / span)
    if window is not None and window[1] > 0 and window[0] > 0:
        got.samples.append(window[0] / window[1])
        got.windows.append(window[1])
    else:  # no steady state to cut out (one wave): the whole round's tokens over its wall time
        tokens = sum(r.n_tokens for r in results)
        if not tokens or wall <= 0:
            return "no token arrived", False, None
        got.samples.append(tokens / wall)
    for req in results:
        got.add(req)
    if pace.per_token is None:  # no warm-up: its fastest request sets the pace (generous: it ran among N)
        fastest = min((r for r in results if r.latency_s),
                      key=lambda r: (r.latency_s or 0.0) / max(1, r.max_tokens or plan.output_tokens), default=None)
        if fastest is not None:
            pace.observe(fastest.latency_s, fastest.max_tokens or plan.output_tokens)
    decode = [r.decode_tok_s for r in results if r.decode_tok_s]
    if decode:
        got.stream_decode.append(statistics.median(decode))
    return None


def _tell(progress: Progress, level: int, done: int, total: int) -> None:
    """Report progress; a failing reporter never fails the measurement."""
    try:
        progress(level, done, total)
    except Exception:  # noqa: BLE001 - progress is for the eye only
        pass


def with_host(bench: Benchmark, host: Any) -> Benchmark:
    """The same benchmark with the host's load during it recorded in its measurement."""
    bench.measurement = replace(bench.measurement, host=host)
    return bench
