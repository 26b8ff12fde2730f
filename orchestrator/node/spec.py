"""What one trial is, as the node receives it: a frozen ``TrialSpec`` built from the job.

An actor on a GPU node runs a trial from this value alone (no job object crosses to it,
only plain, picklable data). ``TrialSpec.from_job`` is the one place that turns a job's
settings into a trial's: the driver, ``bench`` and ``compare`` all build specs with it, and
nothing changes a spec afterwards (``dataclasses.replace`` makes a variant).

The settings are grouped by what uses them: ``ServerPlan`` (how to start and stop the
server), ``BenchPlan`` (what the benchmark measures), ``CheckPlan`` (what the correctness
gate needs captured).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.job import DEFAULT_BENCH_S, DEFAULT_STARTUP_S, DEFAULT_TEARDOWN_S
from orchestrator.config.prompts import with_context
from orchestrator.core.level import context_of
from orchestrator.core.measurement import RegimeMark
from orchestrator.core.objectives import Measure, Objective
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.records import Config
from orchestrator.core.slo import Targets
from orchestrator.core.study_dir import trial_log_name

if TYPE_CHECKING:
    from orchestrator.config.job import Job


# A limit is this many times what the same work took where it was measured (the benchmark's
# rounds at the pace its warm-up showed, a start at the longest start the study has measured):
# generous enough that noise and a busier machine never decide it, tight enough that a server
# slowed by an order of magnitude is a timeout, not an hour.
PACE_FACTOR = 4.0
CONFIGURED_STARTUP = "timeouts.startup"


def startup_limit(configured_s: float, measured_starts: Iterable[float | None]) -> tuple[float, str]:
    """A start's limit and what set it: the larger of ``timeouts.startup`` and ``PACE_FACTOR`` x
    the longest start this study has measured (a host that got busier slows every start alike;
    the fixed figure alone would measure the neighbours, not the config)."""
    longest = max((s for s in measured_starts if s), default=None)
    if longest is None or PACE_FACTOR * longest <= configured_s:
        return configured_s, CONFIGURED_STARTUP
    return PACE_FACTOR * longest, (f"{PACE_FACTOR:g}x the longest start this study measured, {longest:.0f}s, "
                                   f"above {CONFIGURED_STARTUP} {configured_s:.0f}s")


@dataclass(frozen=True)
class ServerPlan:
    """How to start one server for the trial's config, and how long to give it."""

    backend_kind: str
    backend_settings: Mapping[str, Any]
    job_file: str | None
    env: Mapping[str, str]  # the job's fixed environment (the config's own env.* come from the backend)
    startup_timeout_s: float = DEFAULT_STARTUP_S
    startup_basis: str = CONFIGURED_STARTUP  # what set the limit (``startup_limit``), said when it ends a start
    teardown_grace_s: float = DEFAULT_TEARDOWN_S
    stall_s: float | None = None  # tree alive, no log output and not ready this long: FAIL hang (timeouts.stall)
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class BenchPlan:
    """What the benchmark measures (``node.measure``): greedy fixed-length streamed requests over
    ``prompts`` (each ``output_tokens`` long, or its own ``output_lengths``) at ``levels`` of
    concurrency (1: single-request decode tok/s, one round = every prompt once; N: N streams of
    ``waves`` requests each, one steady-state sample a round), then the ``constraint_levels``;
    ``repeats`` rounds, more of a level up to ``max_repeats`` while its median's interval is wider
    than ``target_rel_ci``; ``timeout_s`` the benchmark's least limit. With ``goodput``, the
    concurrencies the capacity search picks (``core.capacity``, probing ``marks``), judged against
    ``slo``, instead of ``levels``; with ``rate``, the request rates the rate search picks
    (``core.rate_search``), each an open-loop load judged by its attainment."""

    prompts: tuple[str, ...]
    output_tokens: int = 64
    warmup: int = 1
    repeats: int = 3
    max_repeats: int | None = None
    target_rel_ci: float | None = None
    timeout_s: float = DEFAULT_BENCH_S
    levels: tuple[int, ...] = (1,)
    constraint_levels: tuple[int, ...] = ()  # total tok/s the job's outcome constraints read
    stall_s: float | None = None  # a stream silent this long has stalled (timeouts.stall)
    waves: int = 3
    output_lengths: tuple[int, ...] | None = None  # a traffic file's: each prompt's own output length
    context: int | None = None  # the prompts were built to about this many tokens (``bench.context``)
    # a context axis (``objective.context``): per prompt length, the prompts made that long; a level at that
    # context (``core.level``) is measured over them, a context-0 level over ``prompts``
    long_prompts: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    goodput: int | None = None  # the goodput objective: the capacity search up to this instead of ``levels``
    # goodput by request rate: the open-loop rate search (``node.open_loop``) instead of ``levels``
    rate: RateAxis | None = None
    arrival_times: tuple[float, ...] | None = None  # a trace's timestamps, one per prompt: its own pattern replayed
    slo: Targets | None = None  # what each concurrency the goodput search tries must hold
    # where the server changes regime (``core.capacity``): the trial adds them once the server is up
    marks: tuple[RegimeMark, ...] = ()
    # every request begins with a line of its own (False), or one per pass through the prompts (True: the
    # server's prefix cache may answer what the prompts share): ``node.measure``, ``bench.prefix_reuse``
    prefix_reuse: bool = False
    # what a level is worth under the objective (``core.objectives``), of the config launched (its GPUs): the
    # early stop compares the first round's worth with the thresholds, which are worths
    measure: Measure = field(default_factory=Measure)
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> Objective:
        """The objective kind the plan's fields make (``Objective(...)``), asked how a launch measures:
        the levels, the capacity search over the load, or by request rate."""
        return Objective(concurrency=self.levels, goodput=self.goodput, slo=self.slo, measure=self.measure,
                         rate=self.rate)

    def prompts_at(self, level: int) -> tuple[str, ...]:
        """The prompts ``level`` is measured over: those of its context (``long_prompts``), or the
        set as it is at context 0."""
        context = context_of(level)
        return self.long_prompts[context] if context else self.prompts

    def tokens_for(self, index: int) -> int:
        """The output tokens the ``index``-th prompt asks for."""
        if self.output_lengths is not None:
            return self.output_lengths[index % len(self.output_lengths)]
        return self.output_tokens


@dataclass(frozen=True)
class CheckPlan:
    """What the correctness gate needs from the server: greedy answers to ``prompts``, and the
    log-probabilities of ``reference_texts`` (None: this launch captures the reference itself,
    twice, to calibrate the tolerance). No prompts: nothing is captured."""

    prompts: tuple[str, ...] = ()
    tokens: int = 32
    logprobs: bool = True
    reference_texts: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TrialSpec:
    """Everything an actor needs to run one trial (module docstring)."""

    number: int
    config: Config
    server: ServerPlan
    bench: BenchPlan
    check: CheckPlan = field(default_factory=CheckPlan)
    log_dir: str = "."
    registry_dir: str = "."
    log_name: str | None = None  # the server log's file name in log_dir (default trial-NNNN.log)
    prune_below: Mapping[int, float] | None = None  # per level: stop after the first round below it
    device_check: bool = False  # the GPUs free before, usable after
    measure_bandwidth: bool = True  # once per worker process: the ceiling's denominator (``bandwidth_wanted``)

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir) / (self.log_name or trial_log_name(self.number))

    @classmethod
    def from_job(cls, job: Job, number: int, config: Config, *, check: CheckPlan | None = None,
                 prune_below: Mapping[int, float] | None = None, log_dir: Path | None = None,
                 log_name: str | None = None, extra_env: Mapping[str, str] | None = None,
                 device_check: bool | None = None, measure_bandwidth: bool | None = None,
                 measured_starts: Iterable[float | None] = ()) -> TrialSpec:
        """The spec of trial ``number`` of ``job`` for ``config``.

        Args:
            check: what the gate needs (``check_plan``); default: capture nothing.
            prune_below: per-level thresholds of the early stop (``core.outcome.early_stop``).
            log_dir, log_name: where the server's log goes (default: the study's logs/,
                ``trial-NNNN.log``).
            extra_env: variables on top of the job's ``env:`` (``bench --verify-nccl``).
            measured_starts: seconds the study's servers took to start (``startup_limit``).
            device_check: check the GPUs before and after (default: a GPU job does).
            measure_bandwidth: the worker measures its memory bandwidth (default: ``bandwidth_wanted``).
        """
        bench = job.bench
        startup_s, startup_basis = startup_limit(job.timeouts.startup_s, measured_starts)
        return cls(
            number=number, config=dict(config),
            server=ServerPlan(backend_kind=job.backend.kind, backend_settings=dict(job.backend.settings),
                              job_file=str(job.path), env={**job.env, **(extra_env or {})},
                              startup_timeout_s=startup_s, startup_basis=startup_basis,
                              teardown_grace_s=job.timeouts.teardown_s,
                              stall_s=job.timeouts.stall_s),
            bench=BenchPlan(prompts=tuple(bench.prompts), output_tokens=bench.output_tokens, warmup=bench.warmup,
                            repeats=bench.repeats, max_repeats=bench.max_repeats, target_rel_ci=bench.target_rel_ci,
                            timeout_s=job.timeouts.bench_s, levels=tuple(job.objective.levels),
                            constraint_levels=tuple(c.concurrency for c in job.constraints),
                            stall_s=job.timeouts.stall_s, waves=bench.waves, output_lengths=bench.output_lengths,
                            context=bench.context, goodput=job.objective.goodput, slo=job.objective.slo,
                            prefix_reuse=bench.prefix_reuse, measure=job.objective.measure, config=dict(config),
                            rate=job.objective.rate, arrival_times=bench.arrival_times,
                            long_prompts={ctx: with_context(tuple(bench.prompts), ctx)
                                          for ctx in job.objective.context if ctx}),
            check=check or CheckPlan(), log_dir=str(log_dir or job.dir.logs), registry_dir=str(job.dir.servers),
            log_name=log_name, prune_below=dict(prune_below) if prune_below else None,
            device_check=job.gpus_per_node > 0 if device_check is None else device_check,
            measure_bandwidth=bandwidth_wanted(job) if measure_bandwidth is None else measure_bandwidth)


def bandwidth_wanted(job: Job) -> bool:
    """Whether a trial's worker measures the node's memory bandwidth (``node.hwprobe``): only where the
    report's ceiling can use it, that is where the backend knows the model's bytes read per decoded token
    and the job declares no bandwidth of its own. Elsewhere the copy (1.5 CPU-seconds on a small host, on
    every worker) would measure a figure nothing reads."""
    if job.hardware.get("memory_bandwidth_bytes_s"):
        return False
    return bool((job.backend_obj().model_facts() or {}).get("bytes_per_token"))


def check_plan(job: Job, reference_texts: list[str] | tuple[str, ...] | None, *,
               prompts: tuple[str, ...] | None = None) -> CheckPlan:
    """The gate's capture for a trial of ``job``: the job's correctness prompts, answered and
    scored against ``reference_texts`` (None: capture the reference). Nothing when the job
    turns correctness off."""
    corr = job.correctness
    if not corr.enabled:
        return CheckPlan()
    return CheckPlan(prompts=tuple(prompts if prompts is not None else corr.prompts), tokens=corr.check_tokens,
                     logprobs=corr.logprobs,
                     reference_texts=tuple(reference_texts) if reference_texts is not None else None)
