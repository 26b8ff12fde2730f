"""What a trial measures once its server is healthy: each level of the objective, over the
prompt set, in rounds, with every sample kept.

A ``BenchPlan`` (``node.spec``) names the levels (1: single-request decode tok/s; N > 1:
total output tok/s with N concurrent streams), the prompts and the rounds. ``measure`` runs:

1. warm-up: ``warmup`` single requests (through the prompts, untimed);
2. rounds: in each, every level in ascending order (the cheapest first): level 1 streams
   every prompt once (one decode tok/s sample per request: (n - 1) / (t_last - t_first),
   tokens from ``usage.completion_tokens``); level N runs one batch of N concurrent
   streams through the prompts (one total tok/s sample per round). The server's ``/metrics``
   is read around each level (``core.prometheus``): what speculative decoding accepted there;
3. after the first round, the one early-stop rule (``core.outcome.early_stop``): stop when
   every level is below its threshold (a config that could still be best at one level is
   measured in full);
4. ``repeats`` rounds, more up to ``max_repeats`` while level 1's median interval is wider
   than ``target_rel_ci``, never past the deadline.

``progress`` (optional) is told ``(level, requests done, requests planned)`` as a level
starts and after each request (level 1) or batch (level N): the trial's live status line.

A failed request fails the measurement (``ok=False``, ``timed_out`` when it was a timeout,
``stalled`` when its stream went silent for ``plan.stall_s``): the trial says
``bench-error``/``bench-timeout``/``hang``. The median of a level is over its samples
(prompts and rounds), every sample kept in the record.
"""

from __future__ import annotations

import functools
import statistics
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core import prometheus
from orchestrator.core.outcome import early_stop
from orchestrator.node import client
from orchestrator.node.client import RequestResult, relative_ci
from orchestrator.node.spec import BenchPlan

METRICS_TIMEOUT_S = 5.0
STALLED_MARK = "streams stalled"  # in a concurrent round's error: some of its streams went silent


@dataclass
class Level:
    """One level's samples: decode tok/s per request at level 1, total tok/s per round above."""

    level: int
    samples: list[float] = field(default_factory=list)
    ttft_samples: list[float] = field(default_factory=list)
    e2e_samples: list[float] = field(default_factory=list)  # level 1: end-to-end tok/s per request
    token_counts: list[int] = field(default_factory=list)  # level 1: tokens per request
    stream_decode: list[float] = field(default_factory=list)  # level N: median decode tok/s of a stream, per round
    spec_before: dict[str, float] | None = None
    spec_after: dict[str, float] | None = None
    acceptance: dict[str, Any] | None = None

    @property
    def value(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def rel_ci(self) -> float | None:
        return relative_ci(self.samples)

    @property
    def cv(self) -> float | None:
        if len(self.samples) < 2:
            return 0.0 if self.samples else None
        med = statistics.median(self.samples)
        return statistics.stdev(self.samples) / med if med else None

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "samples": list(self.samples), "rel_ci": self.rel_ci,
                               "cv": self.cv, "unit": "decode tok/s" if self.level == 1 else "total tok/s"}
        if self.stream_decode:
            out["stream_decode_tok_s"] = statistics.median(self.stream_decode)
        if self.acceptance:
            out["acceptance_rate"] = self.acceptance.get("acceptance_rate")
            out["mean_accepted_length"] = self.acceptance.get("mean_accepted_length")
        return out


@dataclass
class Measurement:
    """What ``measure`` found (module docstring)."""

    ok: bool = False
    error: str | None = None
    timed_out: bool = False
    stalled: bool = False  # a stream went silent for the stall limit (``timeouts.stall``)
    failed_request: RequestResult | None = None
    pruned: bool = False
    levels: dict[int, Level] = field(default_factory=dict)
    rounds: int = 0
    prompts: int = 0
    output_tokens: int = 0
    warmup_s: float = 0.0
    bench_s: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def value(self) -> float | None:
        """The first level's median: the trial's headline number."""
        first = next(iter(self.levels.values()), None)
        return first.value if first is not None else None

    def first_round(self) -> dict[int, float | None]:
        """Each level's median of the first round (what the early stop reads)."""
        out: dict[int, float | None] = {}
        for level, got in self.levels.items():
            n = self.prompts if level == 1 else 1
            out[level] = statistics.median(got.samples[:n]) if got.samples[:n] else None
        return out

    def to_metrics(self) -> dict[str, Any]:
        """The ``TrialResult.metrics`` keys (docs/architecture.md, "Trial records"): level 1's
        under the names decode has always had, every level under ``levels``."""
        out: dict[str, Any] = {"levels": {str(k): v.to_record() for k, v in self.levels.items()},
                               "repeats": self.rounds, "prompts": self.prompts, "output_tokens": self.output_tokens}
        one = self.levels.get(1)
        if one is not None:
            out.update(decode_tok_s=one.value, decode_samples=list(one.samples),
                       ttft_s=_median(one.ttft_samples), ttft_samples=list(one.ttft_samples),
                       e2e_tok_s=_median(one.e2e_samples), cv=one.cv, rel_ci=one.rel_ci)
        headline = one if one is not None else next(iter(self.levels.values()), None)
        if headline is not None and headline.acceptance:
            out["acceptance_rate"] = headline.acceptance.get("acceptance_rate")
            out["mean_accepted_length"] = headline.acceptance.get("mean_accepted_length")
        return out


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def read_metrics(url: str | None) -> dict[str, float] | None:
    """The speculative-decoding metrics at ``url`` now (None: no /metrics, or none there)."""
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as reply:
            return prometheus.spec_decode(reply.read(4 << 20).decode("utf-8", "replace"))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def measure(base_url: str, model: str, plan: BenchPlan, *, deadline: float, metrics_url: str | None = None,
            prune_below: Mapping[int, float] | None = None,
            progress: Callable[[int, int, int], None] | None = None) -> Measurement:
    """Measure every level of ``plan`` (module docstring); never raises for what the server does."""
    out = Measurement(prompts=len(plan.prompts), output_tokens=plan.output_tokens)
    levels = sorted(plan.levels)
    out.levels = {level: Level(level) for level in levels}
    adaptive = plan.max_repeats is not None and plan.target_rel_ci is not None
    cap = max(plan.repeats, int(plan.max_repeats or plan.repeats)) if adaptive else plan.repeats
    done = dict.fromkeys(levels, 0)  # requests done per level
    per_round = {level: len(plan.prompts) if level == 1 else 0 for level in levels}  # level N: known after a batch
    rounds_planned = plan.repeats

    def tell(level: int, n: int = 0) -> None:
        done[level] += n
        if level > 1 and n and not per_round[level]:
            per_round[level] = n
        if progress is not None:
            progress(level, done[level], per_round[level] * rounds_planned)

    def left() -> float:
        return min(plan.timeout_s, deadline - time.monotonic())

    def fail(err: str, timed_out: bool, req: RequestResult | None = None, stalled: bool = False) -> Measurement:
        out.ok, out.error, out.timed_out, out.failed_request = False, err, timed_out, req
        out.stalled = stalled or (req is not None and req.stalled)
        return out

    t0 = time.monotonic()
    for i in range(plan.warmup):
        if left() <= 0:
            return fail(f"benchmark deadline reached during warm-up ({i} of {plan.warmup})", True)
        req = client.stream_completion(base_url, model, plan.prompts[i % len(plan.prompts)], plan.output_tokens,
                                       left(), stall_s=plan.stall_s)
        if not req.ok:
            return fail(f"warm-up request {i + 1} failed: {req.error}", req.timed_out, req)
    out.warmup_s = time.monotonic() - t0

    t1 = time.monotonic()
    longest_round = 0.0
    for rnd in range(cap):
        if rnd >= plan.repeats:
            one = out.levels.get(1)
            if one is None or one.rel_ci is None or one.rel_ci <= plan.target_rel_ci:  # type: ignore[operator]
                break
            if deadline - time.monotonic() < 1.5 * longest_round:
                out.warnings.append(f"stopped adaptive rounds at {rnd}: benchmark deadline (rel_ci {one.rel_ci})")
                break
        started = time.monotonic()
        rounds_planned = max(plan.repeats, rnd + 1)
        for level in levels:
            got = out.levels[level]
            before = read_metrics(metrics_url)
            if got.spec_before is None:
                got.spec_before = before
            tell(level)
            counted = functools.partial(tell, level)
            error = (_decode_round(base_url, model, plan, got, left, counted) if level == 1
                     else _concurrent_round(base_url, model, plan, got, left, counted))
            if error is not None:
                if rnd >= plan.repeats and error[1] and deadline - time.monotonic() <= 0:
                    out.warnings.append(f"adaptive round {rnd + 1} cut by the benchmark deadline")
                    break
                return fail(f"concurrency {level}: {error[0]}" if level > 1 else error[0], error[1], error[2],
                            stalled=STALLED_MARK in error[0])
            got.spec_after = read_metrics(metrics_url)
        else:
            out.rounds = rnd + 1
            longest_round = max(longest_round, time.monotonic() - started)
            if rnd == 0 and early_stop(out.first_round(), prune_below):
                out.pruned = True
                break
            continue
        break
    out.bench_s = time.monotonic() - t1
    for got in out.levels.values():
        got.acceptance = prometheus.acceptance(got.spec_before, got.spec_after)
    short = sorted({c for c in (out.levels[1].token_counts if 1 in out.levels else []) if c != plan.output_tokens})
    if short:
        out.warnings.append(f"requests returned {short} tokens, not {plan.output_tokens} (does the server honour "
                            "ignore_eos?)")
    one = out.levels.get(1)
    if adaptive and one is not None and one.rel_ci is not None and one.rel_ci > plan.target_rel_ci:  # type: ignore[operator]
        out.warnings.append(f"rel_ci {one.rel_ci:.3f} above target {plan.target_rel_ci} after {out.rounds} rounds")
    out.ok = True
    return out


def _decode_round(base_url: str, model: str, plan: BenchPlan, got: Level, left,
                  on_done: Callable[[int], None]) -> tuple[str, bool, RequestResult | None] | None:
    """Every prompt once as a single streamed request; (error, timed out, request) or None."""
    for prompt in plan.prompts:
        budget = left()
        if budget <= 0:
            return f"benchmark deadline reached after {len(got.samples)} requests", True, None
        req = client.stream_completion(base_url, model, prompt, plan.output_tokens, budget, stall_s=plan.stall_s)
        if not req.ok:
            return f"request {len(got.samples) + 1} failed: {req.error}", req.timed_out, req
        if req.decode_tok_s is None:
            return (f"request {len(got.samples) + 1}: decode rate not measurable ({req.n_tokens} tokens in "
                    f"{len(req.token_times)} streamed chunks)"), False, req
        got.samples.append(req.decode_tok_s)
        got.ttft_samples.append(req.ttft_s if req.ttft_s is not None else float("nan"))
        got.e2e_samples.append(req.e2e_tok_s or 0.0)
        got.token_counts.append(req.n_tokens)
        on_done(1)
    return None


def _concurrent_round(base_url: str, model: str, plan: BenchPlan, got: Level, left,
                      on_done: Callable[[int], None]) -> tuple[str, bool, RequestResult | None] | None:
    """One batch of ``got.level`` concurrent streams through the prompts."""
    budget = left()
    if budget <= 0:
        return "benchmark deadline reached", True, None
    summary = client.measure_concurrency(base_url, model, plan.prompts, plan.output_tokens, got.level,
                                         timeout_s=budget, stall_s=plan.stall_s)
    if summary.get("failures"):
        timed_out = summary.get("timeouts", 0) > 0
        stalled = f" ({summary['stalls']} {STALLED_MARK})" if summary.get("stalls") else ""
        return f"{summary['failures']} of {summary['n_requests']} requests failed{stalled}: {summary['errors'][:1]}", \
            timed_out, None
    if summary.get("total_tok_s") is None:
        return "no token arrived", False, None
    got.samples.append(float(summary["total_tok_s"]))
    if summary.get("ttft_s") is not None:
        got.ttft_samples.append(float(summary["ttft_s"]))
    if summary.get("decode_tok_s") is not None:
        got.stream_decode.append(float(summary["decode_tok_s"]))
    on_done(int(summary.get("n_requests") or 0))
    return None
