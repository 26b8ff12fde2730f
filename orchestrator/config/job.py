"""Jobs: load a job YAML strictly into a frozen ``Job``; every problem is one ``BadInput``.

``load_job(path)`` reads the file, checks every key (unknown keys get "did you mean",
wrong types name the rule, the bad value and what is allowed), instantiates the backend
(which checks ``backend.settings``), loads the search space with the job's context,
validates NCCL values (space, baseline, env, reference config), refuses unsafe NCCL
values unless ``allow_unsafe_nccl``, checks TP against ``gpus_per_node`` and runs the
backend's ``check_config`` on every config of the space (or, for spaces of more than
2000 configs, on every parameter value applied to the baseline). It writes nothing.

The schema (every key but ``study``, ``backend`` and ``space`` is optional; defaults
shown, an example for those three, whose meaning ends "(required)").
``orchestrator.config.schema`` renders it into docs/guide.md, and a test holds it to what
``load_job`` accepts, so keep one key per line with its meaning::

    study: demo                       # the study's name: a folder name ([A-Za-z0-9_.-]+, not . or .., <=255) (required)
    description: null                 # free text, shown in the report
    output_dir: null                  # the folder the study's folder goes in; null: reports/ next to the job file
    report_dir: null                  # the study's folder itself (storage, logs, report); null: <output_dir>/<study>
                                      # (not /, nor a folder that holds other files when the study starts)
    storage: null                     # null: journal:<report_dir>/study.journal; or journal:PATH, a PATH
                                      # ending .journal/.log, or an RDB URL such as sqlite:///study.db
    backend:
      kind: refserver                 # refserver, vllm, sglang, llamacpp or command (required)
      settings: {}                    # the backend's own settings (see the backends below)
    gpus_per_node: 0                  # GPUs one trial takes on its node; 0: a CPU job
    cpus_per_trial: 2                 # Ray CPUs a trial actor takes on a CPU job
    space: ../search_spaces/x.yaml    # the search space file (required)
    baseline: null                    # the first trial and the ratios' denominator: params merged onto
                                      # the backend's defaults; null: the backend's defaults
    budget:
      trials: 8                       # trials launched in total (COMPLETE, FAIL, PRUNED); null: no limit
      timeout: null                   # wall clock of one `run` (8h, 30m); no trial starts after it (the search
                                      # stops early enough to leave the race its expected time, when the race
                                      # fits in it at all; else the race runs in the next `run`s)
      confirm: 8                      # launches of the finalists' race at the end: the incumbent and every config
                                      # within launch noise of it relaunched in interleaved rounds; 0: no race
      relaunch: 0.2                   # share of the search's launch time spent relaunching the baseline and the
                                      # incumbent (the launch noise every verdict carries); 0: none
    bench:
      prompts: null                   # decode prompts: a JSONL file ({"prompt": ...} per line) or a text file
                                      # (one per line), relative to the job; null: the bundled set of 8
      prompt: ...                     # one decode prompt instead of a set (not with prompts)
      traffic: null                   # the user's own requests instead of prompts: JSON Lines, each line
                                      # {"prompt": ..., "output_tokens": N} or a ShareGPT conversation
                                      # (orchestrator.config.traffic); each request its own output length; with
                                      # "timestamp": SECONDS on every line a trace, replayed at its own pace by
                                      # goodput's rate search
      traffic_sample: 64              # requests drawn from the traffic file, the same for every run of a study
                                      # (one from each 1/traffic_sample of the lengths, the longest always)
      context: null                   # long context: every prompt made about this many tokens long with text
                                      # before it (the set's own, then the bundled texts); null: as they are
      output_tokens: 64               # tokens per timed request (greedy, fixed length)
      warmup: 1                       # untimed requests first
      repeats: 3                      # timed rounds (each prompt once per round); the median is the trial's tok/s
      max_repeats: 3                  # upper bound when target_rel_ci asks for more
      target_rel_ci: null             # more rounds of a level (any level) while its median's CI half-width /
                                      # median is above this
      waves: 3                        # at a level N > 1, each of the N streams sends this many requests back to
                                      # back; the sample is the steady state between the first and the last wave
      prefix_reuse: false             # false: every request begins with a line of its own, so no server answers
                                      # it from its prefix cache (TTFT is a whole prefill); true: one line per pass
                                      # through the prompts, so requests share what the prompts share (a system
                                      # prompt), as in production, but never a request's own earlier sending
      concurrency: [1, 2, 10, 64]     # levels `compare` (and constraints) measure total tok/s at
    objective:                        # or one word, a preset: latency, throughput or balanced (the guide
                                      # says what each expands to)
      concurrency: [1]                # levels the study tunes for: 1 is single-request decode tok/s, N > 1
                                      # total output tok/s with N concurrent streams; several: a plan
      weights: null                   # a traffic mix, e.g. {1: 0.6, 10: 0.3, 64: 0.1}: one objective, the
                                      # weighted geometric mean of the levels' ratios to the baseline
      goodput: null                   # {max_concurrency: 64} instead of concurrency: per config the capacity
                                      # within the slo, the concurrency (up to 64) with the most total tok/s at
                                      # which every target holds, found in one launch by a sweep over the load
                                      # (where the engine changes regime too) and refinement, at most 12 loads;
                                      # the study maximizes that tok/s; or by request rate, an open loop:
                                      # {max_rate: 40} (req/s; min_rate: max_rate/8, burstiness: 1 (gamma
                                      # arrivals, 1: Poisson), requests: 100 a probe, max_probes: 8, seed: 0),
                                      # or {max_speed: 4} to replay bench.traffic's timestamps up to 4x their
                                      # pace (min_speed): the highest rate at which the slo held, found by a
                                      # coarse sweep (doubling) and bisection; the study maximizes the tok/s there
      minimize: null                  # a latency percentile to minimize instead of a throughput, e.g. tpot_p99
                                      # (ttft, tpot, itl, e2e at p50, p90, p99): the config with the lowest
                                      # recorded figure at the objective's level(s) wins; not with goodput
      per_gpu: false                  # true: a throughput objective's tok/s divided by the GPUs a config
                                      # occupies (TP x PP): a TP=4 config is worth the two replicas an 8-GPU
                                      # box could run; not with minimize nor goodput
      context: []                     # long context as a level's second axis, e.g. [0, 8192]: every concurrency
                                      # measured with prompts made about each many tokens long (0: as they are),
                                      # the level 64@8192 (export --concurrency 64@8192); not with bench.context
                                      # nor goodput; []: no axis
    slo: null                         # latency targets, e.g. {tpot_p99: 20ms, ttft_p99: 1s} (ttft, tpot, itl,
                                      # e2e at p50, p90, p99) at every level, or a level's own: {32: {tpot_p99:
                                      # 50ms}}; a config that breaks one at a level is infeasible at that level;
                                      # with goodput by rate, per-request targets judged as attainment: {ttft:
                                      # 200ms, tpot: 10ms, attainment: 0.99} (ttft, tpot, e2e of each request;
                                      # the share of requests that must meet every one)
    cost: null                        # {gpu_hour: 2.50} or {node_hour: 20} (dollars): a goodput study's capacity
                                      # point priced in $ per million output tokens, and its tok/s per GPU; a
                                      # config pays for the GPUs it occupies (a node's hour shared by its GPUs)
    timeouts:
      startup: 120s                   # spawn to healthy, at least (4x the study's longest measured start where
                                      # longer); longer is FAIL start-timeout
      stall: 10m                      # tree alive, no log output and not healthy (or a stream silent) this
                                      # long: FAIL hang (a start only when below startup: validate says so)
      bench: 60s                      # the whole benchmark of one trial, at least (4x what its rounds take at
                                      # its warm-up's pace where longer); longer is FAIL bench-timeout
      teardown: 10s                   # SIGTERM grace before SIGKILL of the server's process group
      takeover: 45s                   # a shared study's trial without a heartbeat this long belongs to a driver
                                      # that died: another driver takes it over (heartbeats every takeover/4, at
                                      # most 10 s; at least 4s; give every driver of the study the same)
    ray:
      address: null                   # an existing cluster (HOST:PORT, ray://...); null: a fresh local Ray
      parallel: null                  # trials at once; null: one per matching node
      node_selector:
        gpu_model: null               # only nodes with this GPU model (e.g. H200)
        resources: {}                 # only nodes with these Ray custom resources, e.g. {pcie_box: 1}
    sampler:
      name: model                     # model (the per-value model leads), tpe, gp, random, grid, bruteforce, nsga2
      seed: 0                         # null: not reproducible
      n_startup_trials: null          # null: sized to the budget
      options: {}                     # sampler options (see orchestrator.study.search.samplers)
    correctness:
      enabled: true                   # compare every trial's output with a golden reference
      reference: baseline             # baseline, a config mapping ({tp_size: 1}), or a reference JSON file
      prompts: [3 prompts]            # fixed prompts answered greedily
      check_tokens: 32                # greedy tokens compared per prompt
      logprobs: true                  # also compare log-probabilities of the reference text
      logprob_tolerance: 0.05         # floor of the tolerance (mean nats/token), calibrated above it
      allow_repetitive_reference: false   # keep a reference whose outputs repeat one short unit
    env: {NCCL_NVLS_ENABLE: "0"}      # fixed environment of every server (values as strings)
    allow_unsafe_nccl: false          # allow LL128/NVLS/CollNet values that can corrupt data on PCIe, and
                                      # knobs NCCL ignores on PCIe (NCCL_SYM_*, allreduce.backend nccl_symm_mem)
    nccl_version: null                # the NCCL the servers load (e.g. "2.28.9"), for the rules that depend on it;
                                      # null: the NCCL of torch in the server's Python, if any
    remeasure: false                  # launch configs already measured again instead of answering them
    max_consecutive_failures: 5       # stop the study after this many failed trials in a row
    notify: null                      # a command run once when a `run` ends, fails or is stopped, the summary as
                                      # JSON on stdin and NCCLSWEEP_* variables: a command line (split like a
                                      # shell's words, run without one) or a list of words; `run --notify` wins
    pruning:
      enabled: true                   # stop a trial after one repeat when it is clearly worse
      min_ratio: 0.8                  # "clearly worse": below min_ratio x the best so far
    constraints: []                   # outcome rules, e.g. [{concurrency: 10, min_ratio: 0.9}]: a config
                                      # below 0.9 x the baseline's total tok/s at concurrency 10 is infeasible
    hardware:
      memory_bandwidth: null          # for the ceiling, e.g. 4.8TB/s; null: measured on the node where the
                                      # backend knows the model's bytes per token (the ceiling needs both)
      allreduce_latency_us: null      # for the ceiling; null: measured
    prescreen:
      enabled: false                  # time NCCL all-reduces per setting and drop slow ones before launches
      keep_within: 4                  # drop settings slower than this factor of the fastest at the same TP
                                      # (2x and slower are kept and tried late)
      rounds: 2                       # probe launches per setting, in alternating order (a size's verdict
                                      # must hold in every launch)

Durations (``timeout``, ``timeouts.*``) are parsed by ``orchestrator.core.durations``.
Every path in a job is relative to the job file, so a job means the same study from any
working directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.backends import BACKEND_KINDS, get_backend_class
from orchestrator.config import prompts as decode_prompts
from orchestrator.config import traffic as traffic_file
from orchestrator.config.job_checks import (
    check_baseline,
    check_config,
    check_nccl_release,
    check_space_configs,
    check_space_tp,
    check_space_unsafe,
    config_mapping,
    nccl_value,
    refuse_unsafe,
)
from orchestrator.config.sampler_options import DEFAULT_SAMPLER, SAMPLER_NAMES
from orchestrator.config.sampler_options import OPTIONS as SAMPLER_OPTIONS
from orchestrator.config.space import SearchSpace, env_str, env_value, space_from_dict
from orchestrator.config.yaml_input import Section, did_you_mean, display_path, read_yaml_mapping, shown, type_name
from orchestrator.core import arrivals, rate_search
from orchestrator.core.ceiling import parse_bandwidth
from orchestrator.core.durations import format_duration, parse_duration
from orchestrator.core.errors import BadInput, RuntimeFailure, brief
from orchestrator.core.level import parse as parse_level
from orchestrator.core.objectives import Draft, Latency, Measure, Objective, PerGpu, Refused
from orchestrator.core.outcome import DEFAULT_PRUNE_RATIO
from orchestrator.core.price import Cost, Pricing
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.slo import ATTAINMENT, REQUEST_NAMES, RequestSlo, Slo, Targets
from orchestrator.core.slo import NAMES as SLO_NAMES
from orchestrator.core.study_dir import StudyDir
from orchestrator.core.versions import parse_version

JOB_KEYS = ("study", "description", "output_dir", "storage", "report_dir", "backend", "gpus_per_node", "cpus_per_trial",
            "space", "baseline", "budget", "bench", "timeouts", "ray", "sampler", "correctness", "env",
            "allow_unsafe_nccl", "nccl_version", "remeasure", "max_consecutive_failures", "pruning", "constraints",
            "hardware", "prescreen", "objective", "notify", "slo", "cost")
STUDY_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # and not "." or "..": the name is a folder name
NAME_MAX = 255  # the longest file or folder name Linux file systems allow (bytes)
PATH_MAX = 4096  # the longest path; the study's files add up to this much below its folder:
FOLDER_ROOM = 64  # compare-logs/.trial-0001.log.XXXXXXXX.tmp and the like
STUDY_RULE = (f"match [A-Za-z0-9_.-]+, be at most {NAME_MAX} characters and not be '.' or '..' (it names a "
              "folder: letters, digits, _ . -, no /)")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_CHECK_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Translate to German: The weather is nice today and we are going for a walk.",
)
DEFAULT_ENV = {"NCCL_NVLS_ENABLE": "0"}
DEFAULT_CONCURRENCY = (1, 2, 10, 64)


# ---- the frozen objects --------------------------------------------------------------------

@dataclass(frozen=True)
class BackendSpec:
    kind: str  # in orchestrator.backends.BACKEND_KINDS
    settings: dict[str, Any]  # handed to the backend class, which validates it


# The finalists' race (``study.race``): eight launches, two finalists four more each. At an H200's
# launch noise at one stream (1-3%) that separates configs 5% apart, at a loaded CPU box's (~8%)
# configs 20% apart; a launch of a 1B model on vLLM costs about a minute, of GLM-5 on the PCIe box
# 7-8 (an hour of an 8-hour night). docs/benchmarks.md, "Racing the finalists".
DEFAULT_CONFIRM = 8
# Relaunches of the baseline and the incumbent during the search (``study.relaunch``): a fifth of
# the search's launch time, ~8 relaunches on a night of 40 launches, so the launch noise rests on
# ~8 degrees of freedom before the race adds its own (a t quantile of 2.3, not 12.7 at one).
DEFAULT_RELAUNCH = 0.2


@dataclass(frozen=True)
class Budget:
    trials: int | None  # trials launched in total (COMPLETE + FAIL + PRUNED); None: no limit
    timeout_s: float | None  # wall clock of one `run`; None: no limit
    confirm: int = DEFAULT_CONFIRM  # launches of the finalists' race (``study.race``); 0: none
    relaunch: float = DEFAULT_RELAUNCH  # share of the search's launch time for relaunches (``study.relaunch``)


@dataclass(frozen=True)
class BenchSettings:
    prompts: tuple[str, ...]  # the decode prompt set (``orchestrator.config.prompts``)
    prompts_from: str  # where they came from: "the bundled set", "bench.prompt", or the file
    output_tokens: int
    warmup: int
    repeats: int
    max_repeats: int
    target_rel_ci: float | None
    concurrency: tuple[int, ...]
    waves: int = 3  # requests each stream sends back to back at a level N > 1 (``node.measure``)
    traffic: str | None = None  # the traffic file (``config.traffic``), as the job names it
    traffic_sample: int = traffic_file.DEFAULT_SAMPLE
    output_lengths: tuple[int, ...] | None = None  # with a traffic file: each prompt's own output length
    context: int | None = None  # every prompt made about this many tokens long (``config.prompts.with_context``)
    # the server's prefix cache may answer what the prompts share (``node.measure``: one line per pass); False:
    # every request begins with a line of its own, and TTFT is a whole prefill
    prefix_reuse: bool = False
    traffic_lines: tuple[str, ...] | None = None  # with a traffic file: where each sampled request is ("line 12")
    arrival_times: tuple[float, ...] | None = None  # a trace's timestamps (seconds), one per prompt, in order


# The job's timeouts when it names none: declared once, read by the job's reader, the frozen type and
# the node's plans (``node.spec``), so a default changed here is the default everywhere
DEFAULT_STARTUP_S = 120.0  # spawn to healthy (4x the study's longest measured start where longer)
DEFAULT_BENCH_S = 60.0  # the benchmark's least limit (its own pace decides above it)
DEFAULT_TEARDOWN_S = 10.0  # TERM to KILL
DEFAULT_STALL_S = 600.0  # no output and not ready, or a stream silent, this long: a hang
DEFAULT_TAKEOVER_S = 45.0  # a shared study's trial without a heartbeat this long: its driver died (study.shared)
MIN_TAKEOVER_S = 4.0  # four heartbeats of a second each within it


@dataclass(frozen=True)
class Timeouts:
    startup_s: float = DEFAULT_STARTUP_S
    bench_s: float = DEFAULT_BENCH_S
    teardown_s: float = DEFAULT_TEARDOWN_S
    stall_s: float = DEFAULT_STALL_S  # no output and not ready, or a stream silent, this long: FAIL hang
    takeover_s: float = DEFAULT_TAKEOVER_S  # a shared study's trial without a heartbeat this long is taken over


@dataclass(frozen=True)
class RaySettings:
    address: str | None  # None: start a local Ray
    parallel: int | None  # trials in flight at once; None: one per matching node
    node_selector: dict[str, Any]  # {"gpu_model": str | None, "resources": {name: amount}}


@dataclass(frozen=True)
class SamplerSettings:
    name: str  # in SAMPLER_NAMES
    seed: int | None
    n_startup_trials: int | None  # None: sized to the budget by the sampler module
    options: dict[str, Any]


@dataclass(frozen=True)
class CorrectnessSettings:
    enabled: bool
    reference: str | dict[str, Any]  # "baseline", a config (dict), or an absolute JSON file path
    prompts: tuple[str, ...]
    check_tokens: int
    logprobs: bool
    logprob_tolerance: float = 0.05  # floor of the gate's mean |delta logprob| per token (nats)
    allow_repetitive_reference: bool = False  # a reference repeating one short unit is kept (random weights)

    @property
    def reference_kind(self) -> str:
        """``baseline``, ``config`` or ``file``."""
        if isinstance(self.reference, dict):
            return "config"
        return "baseline" if self.reference == "baseline" else "file"


@dataclass(frozen=True)
class PruningSettings:
    enabled: bool
    min_ratio: float  # stop a trial after its first repeat when below min_ratio x best so far


# The pre-screen's default drop rule: only a setting 4x slower than the fastest all-reduce at its
# TP is dropped unlaunched. The microbenchmark misjudges decode by far more than 1.2x: on two
# H200s at TP=2 (docs/benchmarks.md, "Two GPUs"), Simple's all-reduce took 2x LL's latency and
# cost 17-20% of decode, and Ring/Tree were not told apart. Settings from 2x (``LATE_RATIO``) to
# 4x are launched, late: a prior, not a verdict.
DEFAULT_KEEP_WITHIN = 4.0
DEFAULT_PRESCREEN_ROUNDS = 2


@dataclass(frozen=True)
class PrescreenSettings:
    enabled: bool = False  # measure all-reduce latency per NCCL setting before the study
    keep_within: float = DEFAULT_KEEP_WITHIN  # drop settings slower than keep_within x the fastest at the same TP
    rounds: int = DEFAULT_PRESCREEN_ROUNDS  # probe launches per setting (driver.prescreen.merge_rounds)


@dataclass(frozen=True)
class OutcomeConstraint:
    """The best config must reach ``min_ratio`` x the baseline at ``concurrency``."""

    concurrency: int
    min_ratio: float


@dataclass(frozen=True)
class Job:
    path: Path  # the job file, as given
    study: str
    storage: str  # "journal:<absolute path>" or an RDB URL
    report_dir: Path  # absolute
    backend: BackendSpec
    gpus_per_node: int  # 0 for CPU jobs
    cpus_per_trial: int
    space: SearchSpace
    baseline: dict[str, Any]  # backend.default_config() + the job's baseline, inactive params dropped
    budget: Budget
    bench: BenchSettings
    timeouts: Timeouts
    ray: RaySettings
    sampler: SamplerSettings
    correctness: CorrectnessSettings
    env: dict[str, str]
    allow_unsafe_nccl: bool = False
    nccl_version: str | None = None  # declared; None: torch's NCCL in the server's Python (job_checks.nccl_release)
    remeasure: bool = False
    max_consecutive_failures: int = 5
    pruning: PruningSettings = PruningSettings(True, DEFAULT_PRUNE_RATIO)
    constraints: tuple[OutcomeConstraint, ...] = ()
    hardware: dict[str, float] = field(default_factory=dict)  # memory_bandwidth_bytes_s, allreduce_latency_s
    prescreen: PrescreenSettings = PrescreenSettings()
    objective: Objective = Objective()
    notify: tuple[str, ...] | None = None  # the command `run` tells how it ended (driver.notify)
    space_path: Path | None = None  # absolute path of the space file
    baseline_given: bool = False  # the job had a `baseline:` (else: backend defaults)
    description: str | None = None
    # what is valid but likely not what the user meant, said by validate and before run launches
    # anything (``advice``): a prompt set that would misrank configs, a stall limit no start can reach
    advice: tuple[str, ...] = ()
    cost: Cost | None = None  # the job's ``cost:`` (``core.price``): a goodput study's capacity point priced
    _backend: Any = field(default=None, compare=False, repr=False)

    def baseline_config(self) -> dict[str, Any]:
        """The baseline exactly as every run launches it (and ``validate --commands`` prints
        it): the job's ``baseline:`` on the backend's defaults, normalized. A parameter it
        leaves unset is the backend's default, or absent (an NCCL variable stays unset:
        NCCL's own default); nothing is sampled, so every seed and every resume has it."""
        backend = self.backend_obj()
        return backend.normalize(self.space.active({**backend.default_config(), **self.baseline}))

    @property
    def slo(self) -> Targets | None:
        """The job's latency targets (``slo:``, or its preset's), kept with the objective."""
        return self.objective.slo

    def gpus_of(self, config: Mapping[str, Any]) -> int:
        """The GPUs a server of ``config`` occupies (``Backend.gpus_occupied``: TP x PP (x DP), or
        the job's ``gpus_per_node`` where the backend cannot count them)."""
        backend = self.backend_obj()
        return backend.gpus_occupied(backend.normalize(dict(config)), self.gpus_per_node)

    def pricing(self) -> Pricing | None:
        """How the study prices its configs (``core.price``); None without ``cost:``."""
        return Pricing(self.cost, self.gpus_per_node, self.gpus_of) if self.cost is not None else None

    def backend_obj(self):
        """The backend instance for ``backend.kind``/``settings`` (built once, cached)."""
        if self._backend is None:
            object.__setattr__(self, "_backend", _make_backend(self.backend.kind, self.backend.settings,
                                                               str(self.path)))
        return self._backend

    def context(self) -> dict[str, Any]:
        """Names a space's constraints may use besides its params.

        ``gpus_per_node``: the job's GPUs per node, or on a CPU job (``gpus_per_node: 0``)
        its ``cpus_per_trial`` (one CPU per tensor-parallel rank); ``gpus``: the job's own
        ``gpus_per_node`` (0 on CPU jobs); ``cpus_per_trial``; ``cpu_job`` (bool); plus the
        backend's ``model_facts()`` (heads, kv_heads, layers, ...)."""
        return job_context(self.gpus_per_node, self.cpus_per_trial, self.backend_obj())

    @property
    def dir(self) -> StudyDir:
        """The study folder's files (``orchestrator.core.study_dir``)."""
        return StudyDir(self.report_dir)

    @property
    def journal_path(self) -> Path | None:
        """The journal file when the storage is one."""
        return Path(self.storage[len("journal:"):]) if self.storage.startswith("journal:") else None

    def __getstate__(self):  # the backend instance is rebuilt on the other side (Ray, pickling)
        state = dict(self.__dict__)
        state["_backend"] = None
        return state

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)


def job_context(gpus_per_node: int, cpus_per_trial: int, backend) -> dict[str, Any]:
    ctx: dict[str, Any] = {}
    try:
        facts = backend.model_facts() if backend is not None else {}
    except BadInput:  # the user's settings are wrong: say so, not "unknown name" in a constraint later
        raise
    except Exception:  # noqa: BLE001 - facts are optional; a backend that cannot say gives none
        facts = {}
    for k, v in (facts or {}).items():
        if isinstance(k, str) and (v is None or isinstance(v, (bool, int, float, str))):
            ctx[k] = v
    ctx.update({"gpus_per_node": gpus_per_node if gpus_per_node > 0 else cpus_per_trial,
                "gpus": gpus_per_node, "cpus_per_trial": cpus_per_trial, "cpu_job": gpus_per_node == 0})
    return ctx


def _make_backend(kind: str, settings: Mapping[str, Any], job_file: str | None):
    try:
        cls = get_backend_class(kind)
    except (ImportError, AttributeError) as exc:
        raise RuntimeFailure(f"backend {brief(kind)} cannot be loaded: {type(exc).__name__}: {exc}") from None
    return cls(dict(settings), job_file)


_MISSING = object()  # a key the job does not have


# ---- loading -------------------------------------------------------------------------------

def load_job(path: str | os.PathLike) -> Job:
    """Load, validate and freeze a job file (see the module docstring). Writes nothing."""
    job_path = Path(path)
    file = str(path)
    if not job_path.exists():
        raise BadInput(f"job file not found (looked at {job_path.resolve()}); pass the path of a job YAML "
                       f"such as jobs/demo.yaml", file=file)
    data = read_yaml_mapping(job_path, file=file, what="job", allowed=JOB_KEYS)
    top = Section(data, file, None, JOB_KEYS)
    for required in ("study", "backend", "space"):
        if required not in top.data:
            raise top.bad(required, f"missing required key {brief(required)}; a job needs study, backend and space")

    # -- plain settings first: cheap, independent of backend and space
    study = _study_name(top)
    description = top.text("description", None, none_ok=True, nonempty=False)
    gpus = top.integer("gpus_per_node", 0, low=0)
    cpus = top.integer("cpus_per_trial", 2, low=1)
    report_dir = _report_dir(top, study, job_path)
    storage = _where_stored(top, report_dir, job_path)
    _check_folder_is_the_studys(top, report_dir, storage)
    budget = _budget(top)
    bench = _bench(top, job_path, study)
    objective = _objective(top, bench)
    timeouts = _timeouts(top)
    _check_traffic_length(top, bench)
    advice = _advice(top, bench, timeouts) + _model_length_advice(top, bench, objective)
    ray = _ray(top)
    sampler = _sampler(top)
    allow_unsafe = top.flag("allow_unsafe_nccl", False)
    nccl_version = top.text("nccl_version", None, none_ok=True)
    if nccl_version is not None and parse_version(nccl_version) is None:
        raise top.bad("nccl_version", f"must be an NCCL release like '2.28.9', not {shown(nccl_version)}")
    remeasure = top.flag("remeasure", False)
    max_failures = top.integer("max_consecutive_failures", 5, low=1)
    notify = notify_command(top.raw("notify", None), file=file, key="notify")
    pruning = _pruning(top)
    hardware = _hardware(top)
    prescreen_sec = top.section("prescreen", ("enabled", "keep_within", "rounds"))
    keep_within = prescreen_sec.number("keep_within", DEFAULT_KEEP_WITHIN, above=1.0 - 1e-9)
    prescreen = PrescreenSettings(enabled=prescreen_sec.flag("enabled", False), keep_within=keep_within,
                                  rounds=prescreen_sec.integer("rounds", DEFAULT_PRESCREEN_ROUNDS, low=1))
    outcome_constraints = _outcome_constraints(top, bench)
    cost = _cost(top, gpus, objective)
    if outcome_constraints and objective.by_capacity:
        raise top.bad("constraints", "goodput measures the concurrencies its search picks, not fixed levels: "
                                     "bound a config by the latency targets (slo:) instead of constraints")
    env = _env(top, allow_unsafe)

    # -- the backend (validates its own settings)
    backend_sec = top.section("backend", ("kind", "settings"))
    if top.data.get("backend") is None:
        raise top.bad("backend", "must be a mapping like {kind: refserver, settings: {model: tiny}}")

    kind = backend_sec.raw("kind", _MISSING)
    if kind is _MISSING:
        raise backend_sec.bad("kind", f"missing; allowed: {', '.join(BACKEND_KINDS)}")
    if not isinstance(kind, str) or kind not in BACKEND_KINDS:
        hint = did_you_mean(kind, BACKEND_KINDS) if isinstance(kind, str) else ""
        raise backend_sec.bad("kind", f"unknown backend {brief(kind)}{hint}; allowed: {', '.join(BACKEND_KINDS)}")
    settings = backend_sec.raw("settings", None)
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise backend_sec.bad("settings", f"must be a mapping of backend settings, not {shown(settings)}")
    settings = dict(settings)
    backend = _make_backend(kind, settings, file)
    context = job_context(gpus, cpus, backend)

    # -- the space
    space_value = top.data["space"]
    if not isinstance(space_value, str) or not space_value.strip():
        raise top.bad("space", f"must be the path of a search space YAML (relative to the job file), "
                               f"not {shown(space_value)}")
    space_path = (job_path.parent / space_value).resolve()
    if not space_path.is_file():
        what = "is a directory" if space_path.is_dir() else "not found"
        raise top.bad("space", f"search space file {what}: {brief(space_value)} (resolved relative to the job file "
                               f"to {space_path})")
    space_file = display_path(space_path)
    space_data = read_yaml_mapping(space_path, file=space_file, what="search space",
                                   allowed=("params", "constraints", "description"))
    space = space_from_dict(space_data, context, file=space_file)
    check_space_tp(space, gpus, file)
    space.check()
    check_space_unsafe(space, allow_unsafe, file)
    for name in space.names:
        if name.startswith("env.") and name[4:] in env:
            raise top.bad(f"env.{name[4:]}", f"{name[4:]} is fixed here and also tuned by {space_file} "
                                             f"params.{name}; remove one of the two")

    # -- the baseline: backend defaults + the job's own, checked like any config
    given = top.data.get("baseline")
    baseline_given = given is not None
    own = config_mapping(given, file, "baseline", allow_unsafe, space=space) if baseline_given else {}
    defaults = dict(backend.default_config())
    baseline = space.active({**defaults, **own})
    check_baseline(baseline, own, gpus, backend, file)

    # -- correctness (a reference config is checked like the baseline)
    correctness = _correctness(top, job_path, allow_unsafe, backend, defaults)

    # -- every config of the space, or every value against the baseline
    check_space_configs(space, baseline, backend, file, gpus)
    check_nccl_release(nccl_version, space, env, own, backend, allow_unsafe, file)

    return Job(path=job_path, study=study, storage=storage, report_dir=report_dir,
               backend=BackendSpec(kind=kind, settings=settings), gpus_per_node=gpus, cpus_per_trial=cpus,
               space=space, baseline=baseline, budget=budget, bench=bench, timeouts=timeouts, ray=ray,
               sampler=sampler, correctness=correctness, env=env, allow_unsafe_nccl=allow_unsafe,
               nccl_version=nccl_version,
               remeasure=remeasure, max_consecutive_failures=max_failures, pruning=pruning,
               constraints=outcome_constraints, hardware=hardware, prescreen=prescreen, objective=objective,
               notify=notify, space_path=space_path,
               baseline_given=baseline_given, description=description, advice=advice, cost=cost,
               _backend=backend)


def notify_command(value: Any, *, file: str | None, key: str) -> tuple[str, ...] | None:
    """A notify command as an argv (``driver.notify``): a command line split the way a shell
    splits words (quotes kept together), or a list of words; None for none. BadInput, naming
    ``key``, for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise BadInput(f"cannot split {brief(value)} into words ({exc}); quote it like a shell command",
                           file=file, key=key) from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        argv = list(value)
    else:
        raise BadInput(f"must be a command line or a list of its words, not {shown(value)}", file=file, key=key)
    if not argv or not argv[0].strip():
        raise BadInput("names no command; give one, e.g. notify: [notify-send, ncclsweep]", file=file, key=key)
    return tuple(argv)


@dataclass(frozen=True)
class StudyLocation:
    """Where a job's study lives: enough to find and end its servers (``cleanup``)."""

    path: Path
    study: str
    report_dir: Path
    ray_address: str | None

    @property
    def dir(self) -> StudyDir:
        """The study folder's files."""
        return StudyDir(self.report_dir)


def load_study_location(path: str | os.PathLike) -> StudyLocation:
    """The study name, report folder and Ray address of a job, reading nothing else: cleanup
    must work when the job's space file or backend is gone, from the study's records alone."""
    job_path = Path(path)
    file = str(path)
    if not job_path.exists():
        raise BadInput(f"job file not found (looked at {job_path.resolve()})", file=file)
    data = read_yaml_mapping(job_path, file=file, what="job", allowed=JOB_KEYS)
    top = Section(data, file, None, JOB_KEYS)
    if "study" not in top.data:
        raise top.bad("study", "missing required key 'study'")
    study = _study_name(top)
    ray = top.section("ray", ("address", "parallel", "node_selector"))
    return StudyLocation(job_path, study, _report_dir(top, study, job_path), ray.text("address", None, none_ok=True))


def _study_name(top: Section) -> str:
    study = top.text("study", None)
    if not STUDY_NAME.fullmatch(study) or study in (".", "..") or len(study) > NAME_MAX:
        shown_name = brief(study) if len(study) <= NAME_MAX else f"{brief(study)} ({len(study)} characters)"
        raise top.bad("study", f"must {STUDY_RULE}, not {shown_name}")
    return study


# ---- sections ------------------------------------------------------------------------------

def _near_job(job_path: Path, value: str) -> Path:
    """A path of the job resolved as the user reads it: relative to the job file."""
    return (job_path.resolve().parent / os.path.expanduser(value)).resolve()


def _report_dir(top: Section, study: str, job_path: Path) -> Path:
    """The study's folder: ``report_dir``, else ``<output_dir>/<study>``, else
    ``reports/<study>`` next to the job file (never the current directory); never the root of
    the file system, and a path the file system can hold with the study's files in it."""
    report_dir = top.text("report_dir", None, none_ok=True)
    output_dir = top.text("output_dir", None, none_ok=True)
    if report_dir is not None and output_dir is not None:
        raise top.bad("report_dir", "give output_dir (the folder the study's folder goes in) or report_dir "
                                    "(the study's folder itself), not both")
    key = "report_dir" if report_dir is not None else "output_dir"
    if report_dir is not None:
        folder = _near_job(job_path, report_dir)
    else:
        parent = _near_job(job_path, output_dir if output_dir is not None else "reports")
        if parent == Path(parent.anchor):
            raise top.bad(key, f"{brief(output_dir)} is the root of the file system, not a folder to fill: name a "
                               "folder of your own (the study's folder goes in it), e.g. output_dir: reports")
        folder = parent / study
    if folder == Path(folder.anchor):
        raise top.bad(key, f"{brief(report_dir)} is the root of the file system, not a folder to fill: give the "
                           "study a folder of its own, e.g. report_dir: reports/<study>")
    too_long = [part for part in folder.parts if len(os.fsencode(part)) > NAME_MAX]
    if too_long or len(os.fsencode(str(folder))) > PATH_MAX - FOLDER_ROOM:
        what = (f"its folder name {brief(too_long[0])} is longer than the {NAME_MAX} bytes a file system allows"
                if too_long else f"the study's folder {brief(str(folder))} is too long a path for its files "
                                 f"(at most {PATH_MAX - FOLDER_ROOM} bytes)")
        raise top.bad(key if report_dir is not None or output_dir is not None else "study", what)
    return folder


def _check_folder_is_the_studys(top: Section, report_dir: Path, storage: str) -> None:
    """A new study gets a folder of its own: refuse one that already holds files of something
    else (``StudyDir.foreign_entries``: a home folder, a source tree, ``/tmp``), before anything
    is written into it."""
    stored = storage.split(":", 1)[1] if storage.startswith("journal:") else (
        storage[len("sqlite:///"):] if storage.startswith("sqlite:///") else None)
    foreign = StudyDir(report_dir).foreign_entries(Path(stored) if stored else None)
    if foreign:
        key = "report_dir" if "report_dir" in top.data else ("output_dir" if "output_dir" in top.data else "study")
        shown_names = ", ".join(brief(name) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise top.bad(key, f"the study's folder {report_dir} already holds {len(foreign)} entries that are not a "
                           f"study's ({shown_names}); give the study a folder of its own (a new or empty one, or "
                           "output_dir: FOLDER, which puts it in FOLDER/<study>)")


def _where_stored(top: Section, report_dir: Path, job_path: Path) -> str:
    value = top.text("storage", None, none_ok=True)
    rule = ("allowed: null (a journal file in the report directory), journal:PATH, a path ending .journal "
            "or .log, or an RDB URL such as sqlite:///path/study.db")
    if value is None:
        return f"journal:{StudyDir(report_dir).journal}"
    value = value.strip()
    if "://" in value:
        if value.startswith("sqlite:///") and len(value) == len("sqlite:///"):
            raise top.bad("storage", f"a sqlite URL needs a file: sqlite:///path/study.db, not {brief(value)}")
        if value.startswith("sqlite:///") and not value.startswith("sqlite:////"):  # relative file
            return f"sqlite:///{_near_job(job_path, value[len('sqlite:///'):])}"
        return value
    if value.startswith("journal:"):
        target = value[len("journal:"):].strip()
        if not target:
            raise top.bad("storage", f"journal: needs a path (journal:reports/x/study.journal); {rule}")
        return f"journal:{_near_job(job_path, target)}"
    if value.endswith((".journal", ".log")):
        return f"journal:{_near_job(job_path, value)}"
    raise top.bad("storage", f"not a storage: {brief(value)}; {rule}")


def _budget(top: Section) -> Budget:
    if "budget" not in top.data:
        return Budget(trials=8, timeout_s=None)
    sec = top.section("budget", ("trials", "timeout", "confirm", "relaunch"))
    confirm = sec.integer("confirm", DEFAULT_CONFIRM, low=0)
    relaunch = sec.number("relaunch", DEFAULT_RELAUNCH, at_most=1)
    if relaunch < 0:
        raise sec.bad("relaunch", f"must be a number >= 0 and <= 1 (a share of the search's launch time), "
                                  f"not {brief(relaunch)}")
    limits = {k: v for k, v in sec.data.items() if k in ("trials", "timeout")}
    if not limits and set(sec.data) - {"trials", "timeout"}:
        return Budget(trials=8, timeout_s=None, confirm=confirm, relaunch=relaunch)  # the limits' defaults
    if not limits or all(v is None for v in limits.values()):
        raise top.bad("budget", "needs at least one of trials (an integer >= 1) and timeout (a duration "
                                "such as 8h), e.g. {trials: 8}")
    trials = sec.integer("trials", None, low=1, none_ok=True)
    timeout = sec.duration("timeout", None, none_ok=True)
    return Budget(trials=trials, timeout_s=timeout, confirm=confirm, relaunch=relaunch)


def _bench(top: Section, job_path: Path, study: str) -> BenchSettings:
    sec = top.section("bench", ("prompts", "prompt", "traffic", "traffic_sample", "context", "output_tokens",
                                "warmup", "repeats", "max_repeats", "target_rel_ci", "waves", "prefix_reuse",
                                "concurrency"))
    given = [k for k in ("prompts", "prompt", "traffic") if sec.data.get(k) is not None]
    if len(given) > 1:
        raise sec.bad(given[1], f"give one of prompts (a file of decode prompts), prompt (one prompt) and traffic "
                                f"(requests with their own output lengths), not {' and '.join(given)}")
    output_tokens = sec.integer("output_tokens", 64, low=2)
    sample = sec.integer("traffic_sample", traffic_file.DEFAULT_SAMPLE, low=1)
    if sample > traffic_file.MAX_SAMPLE:
        raise sec.bad("traffic_sample", f"at most {traffic_file.MAX_SAMPLE} (each request is timed in every round "
                                        f"of level 1), not {sample}")
    file = sec.text("prompts", None, none_ok=True)
    traffic = sec.text("traffic", None, none_ok=True)
    lengths: tuple[int, ...] | None = None
    where: tuple[str, ...] | None = None
    times: tuple[float, ...] | None = None
    if traffic is not None:
        path = _near_job(job_path, traffic)
        got = traffic_file.load(path, file=top.file, study=study, sample=sample, default_output=output_tokens,
                                source=display_path(path))
        prompts, lengths, source, where, times = got.prompts, got.output_tokens, got.describe(), got.lines, got.times
    elif file is not None:
        path = _near_job(job_path, file)
        prompts, source = decode_prompts.load(path, file=top.file, key="bench.prompts"), display_path(path)
    elif sec.data.get("prompt") is not None:
        prompts, source = (sec.text("prompt", None),), "bench.prompt"
    else:
        prompts, source = decode_prompts.bundled(), "the bundled set"
    context = sec.integer("context", None, low=1, none_ok=True)
    if context is not None:
        if context > decode_prompts.MAX_CONTEXT:
            raise sec.bad("context", f"at most {decode_prompts.MAX_CONTEXT} tokens (each prompt is shipped with every "
                                     f"trial), not {context}")
        prompts = decode_prompts.with_context(tuple(prompts), context)
        source += f", each made about {context} tokens long"
    warmup = sec.integer("warmup", 1, low=0)
    repeats = sec.integer("repeats", 3, low=1)
    max_repeats = sec.integer("max_repeats", max(3, repeats), low=1)
    if max_repeats < repeats:
        raise sec.bad("max_repeats", f"must be >= repeats ({repeats}), not {max_repeats}")
    target = sec.number("target_rel_ci", None, above=0, at_most=1, none_ok=True)
    waves = sec.integer("waves", 3, low=1)
    prefix_reuse = sec.flag("prefix_reuse", False)
    conc = sec.raw("concurrency", list(DEFAULT_CONCURRENCY))
    conc = _level_list(sec, [] if conc is None else conc, "must be a list of integers >= 1 such as [1, 2, 10, 64]")
    return BenchSettings(prompts=prompts, prompts_from=source, output_tokens=output_tokens, warmup=warmup,
                         repeats=repeats, max_repeats=max_repeats, target_rel_ci=target, concurrency=tuple(conc),
                         waves=waves, traffic=traffic, traffic_sample=sample, output_lengths=lengths, context=context,
                         prefix_reuse=prefix_reuse, traffic_lines=where, arrival_times=times)


# One-word objectives (``objective: balanced``): a starting point for a user without targets of
# their own, each a plain objective and SLOs (the job's own ``slo:`` replaces the preset's). The
# guide renders this table (``config.schema``); a run and ``validate`` say what it expanded to.
# - latency: what one user waiting sees: single-request decode, the first token within 1 s;
# - throughput: total tok/s of 64 streams that still move (5 tok/s each) and start within 10 s;
# - balanced: goodput: the most total tok/s (up to 64 streams) with each stream faster than people
#   read (20 tok/s, TPOT p99 50 ms) and starting within 2 s.
PRESETS: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "latency": ({"concurrency": [1]}, {"ttft_p99": "1s"}),
    "throughput": ({"concurrency": [64]}, {"tpot_p99": "200ms", "ttft_p99": "10s"}),
    "balanced": ({"goodput": {"max_concurrency": 64}}, {"tpot_p99": "50ms", "ttft_p99": "2s"}),
}
RATE_KEYS = ("max_rate", "min_rate", "max_speed", "min_speed", "burstiness", "requests", "max_probes", "seed")
GOODPUT_KEYS = ("max_concurrency", *RATE_KEYS)
MAX_RATE_REQUESTS = 100_000  # requests one probe of the rate search sends at most
MAX_RATE_PROBES = 32  # probes one launch of the rate search measures at most


def _objective(top: Section, bench: BenchSettings) -> Objective:
    """The objective and its SLOs (``slo:``): a mapping, or a preset's word expanded."""
    raw = top.raw("objective", None)
    preset = None
    keys = ("concurrency", "weights", "goodput", "context", "minimize", "per_gpu")
    if isinstance(raw, str):
        if raw not in PRESETS:
            raise top.bad("objective", f"unknown preset {brief(raw)}{did_you_mean(raw, list(PRESETS))}; allowed: "
                                       f"{', '.join(PRESETS)}, or a mapping such as {{concurrency: [1, 64]}}")
        preset = raw
        sec = Section(PRESETS[raw][0], top.file, f"objective ({raw})", keys)
    else:
        sec = top.section("objective", keys)
    context = _context_axis(sec, bench)
    concurrency = _concurrency(sec)
    draft = Draft(concurrency=concurrency, context=context,
                  weights=_weights(sec, Draft(concurrency=concurrency, context=context).levels),
                  goodput=_goodput(sec), rate=_rate_axis(sec, bench), given=frozenset(sec.data), preset=preset)
    try:  # the kind the fields make says what it refuses, which levels the targets may name, and builds it
        kind = draft.kind
        slo_raw = top.raw("slo", None)
        if slo_raw is None and preset is not None:
            slo_raw = PRESETS[preset][1]
        slo = _slo(top, slo_raw, kind.slo_levels(draft, tuple(bench.concurrency)), kind.by_capacity,
                   kind.per_request_slo)
        return draft.build(slo, _measure(sec))
    except Refused as exc:
        raise sec.bad(exc.key, exc.why) from None


def _measure(sec: Section) -> Measure:
    """What one level of one launch is worth: its throughput (per GPU with ``per_gpu``), or with
    ``minimize`` the lowest latency percentile (``core.objectives``); the kind refuses one it does
    not answer in (``Objective.refuse_measure``)."""
    per_gpu = sec.flag("per_gpu", False)
    metric = sec.raw("minimize", None)
    if metric is None:
        return PerGpu() if per_gpu else Measure()
    if not isinstance(metric, str) or metric not in SLO_NAMES:
        hint = did_you_mean(metric, SLO_NAMES) if isinstance(metric, str) else ""
        raise sec.bad("minimize", f"unknown latency {brief(metric)}{hint}; allowed: {', '.join(SLO_NAMES)} (a "
                                  "recorded percentile of TTFT, TPOT, ITL or E2E, lowest wins)")
    if per_gpu:
        raise sec.bad("per_gpu", "divides a throughput by the GPUs a config occupies; a latency (minimize) is "
                                 "not divided: give per_gpu or minimize, not both")
    return Latency(metric)


def _context_axis(sec: Section, bench: BenchSettings) -> tuple[int, ...]:
    """``objective.context``: the prompt lengths every concurrency is measured at (``core.level``)."""
    raw = sec.raw("context", None)
    if raw is None:
        return ()
    if bench.context is not None:
        raise sec.bad("context", f"bench.context ({bench.context}) already makes every prompt one length: give "
                                 "bench.context (one length per study) or objective.context (a level per length), "
                                 "not both")
    if not isinstance(raw, list) or not raw:
        raise sec.bad("context", f"must be a non-empty list of prompt lengths in tokens such as [0, 8192] (0: the "
                                 f"prompts as they are), not {shown(raw)}")
    for i, tokens in enumerate(raw):
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= decode_prompts.MAX_CONTEXT:
            raise sec.bad(f"context[{i}]", f"must be an integer from 0 to {decode_prompts.MAX_CONTEXT} (tokens of "
                                           f"each prompt; 0: as they are), not {shown(tokens)}")
        if tokens in raw[:i]:
            raise sec.bad(f"context[{i}]", f"duplicate context {tokens}; contexts must be unique")
    return tuple(raw)


def _goodput(sec: Section) -> int | None:
    """``objective.goodput`` over concurrency: its ``max_concurrency`` (None: not given, or by rate)."""
    raw = sec.raw("goodput", None)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise sec.bad("goodput", f"must be {{max_concurrency: N}} (the most streams to try) or {{max_rate: R}} (the "
                                 f"highest request rate to try, req/s), not {shown(raw)}")
    inner = sec.section("goodput", GOODPUT_KEYS)
    given = [k for k in ("max_concurrency", "max_rate", "max_speed") if k in inner.data]
    if len(given) != 1:
        raise sec.bad("goodput", "needs max_concurrency (the most streams the search tries, e.g. {max_concurrency: "
                                 "64}), or max_rate (the highest request rate, req/s, e.g. {max_rate: 40}), or "
                                 "max_speed (a trace's pace, e.g. {max_speed: 4}): one of them, "
                                 f"not {' and '.join(given) if given else 'none'}")
    if given[0] != "max_concurrency":
        return None
    extra = [k for k in RATE_KEYS if k in inner.data]
    if extra:
        raise inner.bad(extra[0], "is a key of goodput by request rate (max_rate); allowed with "
                                  "max_concurrency: none")
    return inner.integer("max_concurrency", None, low=1)


def _rate_axis(sec: Section, bench: BenchSettings) -> RateAxis | None:
    """``objective.goodput`` by request rate (``core.rate_search``): ``max_rate`` (req/s), or
    ``max_speed`` over a traffic file's timestamps (the trace's own rate times it)."""
    raw = sec.raw("goodput", None)
    if not isinstance(raw, Mapping) or "max_concurrency" in raw:
        return None
    inner = sec.section("goodput", GOODPUT_KEYS)
    trace = bench.arrival_times
    own = arrivals.own_rate(trace) if trace else None
    if "max_speed" in inner.data or "min_speed" in inner.data:
        word = "max_speed" if "max_speed" in inner.data else "min_speed"
        if own is None:
            why = ("its requests share one timestamp" if trace else "it has no timestamps" if bench.traffic
                   else "the job has no bench.traffic")
            raise inner.bad(word, f"replays a trace's timestamps faster or slower, but {why}: give bench.traffic with "
                                  "\"timestamp\": SECONDS on every line, or max_rate (req/s)")
        if "min_rate" in inner.data:
            raise inner.bad("min_rate", "give min_speed with max_speed (a share of the trace's pace), not min_rate")
        top = _finite_positive(inner, "max_speed") * own
        low = _finite_positive(inner, "min_speed") * own if "min_speed" in inner.data else None
    else:
        top = _finite_positive(inner, "max_rate")
        low = _finite_positive(inner, "min_rate") if "min_rate" in inner.data else None
    if low is not None and low > top:
        raise inner.bad("min_rate" if "min_rate" in inner.data else "min_speed",
                        f"must be at most the highest rate searched ({top:g} req/s), not {low:g}")
    for key in ("burstiness", "requests"):
        if trace and key in inner.data:
            raise inner.bad(key, f"draws arrivals; bench.traffic's timestamps are replayed instead (its first "
                                 f"{len(trace)} requests in time order, bench.traffic_sample): drop {key}")
    burstiness = _finite_positive(inner, "burstiness") if "burstiness" in inner.data else 1.0
    requests = inner.integer("requests", rate_search.DEFAULT_REQUESTS, low=1)
    if requests > MAX_RATE_REQUESTS:
        raise inner.bad("requests", f"must be at most {MAX_RATE_REQUESTS} (requests one probe sends), not {requests}")
    probes = inner.integer("max_probes", rate_search.DEFAULT_PROBES, low=2)
    if probes > MAX_RATE_PROBES:
        raise inner.bad("max_probes", f"must be at most {MAX_RATE_PROBES} (probes one launch measures), not {probes}")
    return RateAxis(max_rate=top, min_rate=low, burstiness=burstiness, requests=len(trace) if trace else requests,
                    max_probes=probes, seed=inner.integer("seed", 0, low=0))


def _finite_positive(sec: Section, key: str) -> float:
    value = sec.number(key, None, above=0)
    if value == float("inf"):
        raise sec.bad(key, "must be a finite number > 0, not .inf")
    return value


def _slo(top: Section, raw: Any, levels: tuple[int, ...], goodput: bool, by_rate: bool = False) -> Targets | None:
    """``slo:``: targets at every level ({tpot_p99: 20ms}) and a level's own ({32: {tpot_p99: 50ms}});
    with goodput by request rate, per-request targets and their attainment ({ttft: 200ms, attainment: 0.99})."""
    if raw is None:
        return None
    rule = (f"a mapping of targets to durations such as {{tpot_p99: 20ms, ttft_p99: 1s}} (targets: "
            f"{', '.join(SLO_NAMES)}), or a level to such a mapping ({{32: {{tpot_p99: 50ms}}}})")
    if not isinstance(raw, Mapping) or not raw:
        raise top.bad("slo", f"must be {rule}, not {shown(raw)}")
    every: list[Slo] = []
    per_level: dict[int, tuple[Slo, ...]] = {}
    per_request, share = _per_request(top, raw, by_rate)
    for key, value in raw.items():
        if key in REQUEST_NAMES or key == ATTAINMENT:
            continue
        level = _level_key(key)
        if isinstance(level, int) and not isinstance(level, bool):
            where = f"slo.{level}"
            if goodput:
                raise top.bad(where, "goodput checks every concurrency it tries against the same targets: give "
                                     "them for every level (slo: {tpot_p99: 50ms}), not for one")
            if level not in levels:
                raise top.bad(where, f"{level} is not a measured level; allowed: "
                                     f"{', '.join(map(str, sorted(set(levels))))} (the objective's levels and "
                                     "bench.concurrency)")
            if not isinstance(value, Mapping) or not value:
                raise top.bad(where, f"must map targets to durations, e.g. {{tpot_p99: 50ms}}, not {shown(value)}")
            per_level[level] = tuple(_one_slo(top, f"{where}.{name}", name, limit) for name, limit in value.items())
        else:
            every.append(_one_slo(top, f"slo.{key if isinstance(key, str) else brief(key)}", key, value, by_rate))
    return Targets(every=tuple(every), per_level=per_level, per_request=per_request, attainment=share)


def _per_request(top: Section, raw: Mapping[Any, Any], by_rate: bool) -> tuple[tuple[RequestSlo, ...], float | None]:
    """``slo``'s per-request targets ({ttft: 200ms, tpot: 10ms}) and ``attainment``, the share of
    requests that must meet every one (``core.attainment``): judged over an open-loop load only."""
    names = [k for k in raw if k in REQUEST_NAMES]
    known = (*SLO_NAMES, *REQUEST_NAMES, ATTAINMENT)
    unknown = [k for k in raw if k not in known and not isinstance(_level_key(k), int)]
    if (not names and ATTAINMENT not in raw) or unknown:  # (an unknown name: said by ``_one_slo``, first)
        return (), None
    first = names[0] if names else ATTAINMENT
    if not by_rate:
        raise top.bad(f"slo.{first}", "per-request targets and their attainment judge an open-loop load at a "
                                      "request rate: give objective: {goodput: {max_rate: R}}, or a percentile "
                                      f"target ({', '.join(SLO_NAMES)})")
    if not names:
        raise top.bad(f"slo.{ATTAINMENT}", "is the share of requests that meet every per-request target: give one "
                                           f"or more of {', '.join(REQUEST_NAMES)} beside it, e.g. {{ttft: 200ms, "
                                           "attainment: 0.99}")
    if ATTAINMENT not in raw:
        raise top.bad("slo", f"per-request targets ({', '.join(names)}) need attainment: the share of requests that "
                             "must meet every one, a number > 0 and <= 1, e.g. attainment: 0.99")
    share = raw[ATTAINMENT]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise top.bad(f"slo.{ATTAINMENT}", f"must be a number > 0 and <= 1 (the share of requests that meet every "
                                           f"per-request target), not {shown(share)}")
    out = []
    for name in names:
        try:
            out.append(RequestSlo.named(name, parse_duration(raw[name])))
        except BadInput as exc:
            raise top.bad(f"slo.{name}", str(exc)) from None
    return tuple(out), float(share)


def _one_slo(top: Section, where: str, name: Any, limit: Any, by_rate: bool = False) -> Slo:
    if not isinstance(name, str) or name not in SLO_NAMES:
        hint = did_you_mean(name, SLO_NAMES + (REQUEST_NAMES + (ATTAINMENT,) if by_rate else ())) \
            if isinstance(name, str) else ""
        per_request = (f"; per request: {', '.join(REQUEST_NAMES)} and {ATTAINMENT}" if by_rate else "")
        raise top.bad(where, f"unknown target {brief(name)}{hint}; allowed: {', '.join(SLO_NAMES)}{per_request}, or "
                             "a level (an integer, or N@CONTEXT such as 64@8192) mapping to those")
    try:
        seconds = parse_duration(limit)
    except BadInput as exc:
        raise top.bad(where, str(exc)) from None
    return Slo.named(name, seconds)


def _level_list(sec: Section, raw: Any, shape: str, each: str = "", empty: bool = True) -> list[int]:
    """A section's ``concurrency``: a list of levels (requests in flight), each an integer >= 1, none
    twice; the one rule ``bench`` and ``objective`` read it by (``shape``/``each``: their words)."""
    if not isinstance(raw, list) or not (raw or empty):
        raise sec.bad("concurrency", f"{shape}, not {shown(raw)}")
    for i, level in enumerate(raw):
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise sec.bad(f"concurrency[{i}]", f"must be an integer >= 1{each}, not {shown(level)}")
        if level in raw[:i]:
            raise sec.bad(f"concurrency[{i}]", f"duplicate level {level}; levels must be unique")
    return raw


def _concurrency(sec: Section) -> tuple[int, ...]:
    """``objective.concurrency``: the levels (requests in flight); one level may be a bare number."""
    raw = sec.raw("concurrency", [1])
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]  # one level: ``concurrency: 32``
    return tuple(_level_list(sec, raw, "must be a non-empty list of levels such as [1, 10, 64]",
                             each=" (requests in flight)", empty=False))


def _weights(sec: Section, levels: tuple[int, ...]) -> dict[int, float] | None:
    """``objective.weights``: each level's share of the traffic as given (None: not given); a mix weighs
    every level (``core.objectives.shares``, which normalizes them)."""
    raw = sec.raw("weights", None)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not raw:
        raise sec.bad("weights", f"must map each level to its share of the traffic, e.g. {{1: 0.6, 10: 0.4}}, "
                                 f"not {shown(raw)}")
    out: dict[int, float] = {}
    for key, value in raw.items():
        level = _level_key(key)
        if level not in levels:
            raise sec.bad(f"weights.{brief(key)}", f"is not a level of the objective ({', '.join(map(str, levels))})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise sec.bad(f"weights.{level}", f"must be a number > 0 (a share of the traffic), not {shown(value)}")
        out[level] = float(value)
    return out


def _level_key(key: Any) -> Any:
    """A level as a job's mapping names it (``32``, ``"32"``, ``"64@8192"``: ``core.level.parse``),
    else the key as it is (for the caller's error line)."""
    try:
        return parse_level(key)
    except ValueError:
        return key


COST_KEYS = ("gpu_hour", "node_hour")


def _cost(top: Section, gpus: int, objective: Objective) -> Cost | None:
    """``cost:``: dollars an hour of a GPU or of a node (``core.price``), one of the two; it prices a
    goodput study's capacity point, so it needs one."""
    raw = top.raw("cost", None)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise top.bad("cost", f"must be {{gpu_hour: DOLLARS}} or {{node_hour: DOLLARS}}, not {shown(raw)}")
    sec = top.section("cost", COST_KEYS)
    given = [k for k in COST_KEYS if k in sec.data]
    if len(given) != 1:
        raise top.bad("cost", "give one price: gpu_hour (dollars an hour of one GPU) or node_hour (of one node), "
                              f"not {'both' if given else 'neither'}")
    value = sec.number(given[0], None, above=0)
    if value == float("inf"):
        raise sec.bad(given[0], "must be a finite number of dollars an hour, not .inf")
    if not objective.by_capacity:
        raise top.bad("cost", "prices the capacity point of a goodput study: give objective: {goodput: "
                              "{max_concurrency: N}} (or the balanced preset), or drop cost")
    if given[0] == "gpu_hour" and gpus == 0:
        raise top.bad("cost.gpu_hour", "a CPU job (gpus_per_node: 0) occupies no GPU: price it by node_hour")
    return Cost(gpu_hour=float(value), node_hour=None) if given[0] == "gpu_hour" else \
        Cost(gpu_hour=None, node_hour=float(value))


def _timeouts(top: Section) -> Timeouts:
    sec = top.section("timeouts", ("startup", "bench", "teardown", "stall", "takeover"))
    startup, bench = sec.duration("startup", DEFAULT_STARTUP_S), sec.duration("bench", DEFAULT_BENCH_S)
    takeover = sec.duration("takeover", DEFAULT_TAKEOVER_S)
    if takeover < MIN_TAKEOVER_S:
        raise sec.bad("takeover", f"at least {MIN_TAKEOVER_S:.0f}s (a heartbeat every takeover/4, at least 1 s "
                                  f"apart), not {format_duration(takeover)}")
    return Timeouts(startup_s=startup, bench_s=bench, teardown_s=sec.duration("teardown", DEFAULT_TEARDOWN_S),
                    stall_s=sec.duration("stall", DEFAULT_STALL_S), takeover_s=takeover)


def _advice(top: Section, bench: BenchSettings, timeouts: Timeouts) -> tuple[str, ...]:
    """What the job allows but likely does not mean (``Job.advice``), one line each."""
    out = []
    problem = decode_prompts.degenerate(bench.prompts)
    if problem:
        out.append(f"the decode prompts ({bench.prompts_from}) would misrank configs: {problem}; measure on your own "
                   "traffic (bench.prompts: FILE) or the bundled set (leave bench.prompts out)")
    given = (top.data.get("timeouts") or {}) if isinstance(top.data.get("timeouts"), Mapping) else {}
    if "stall" in given and timeouts.stall_s > timeouts.startup_s:  # the default stall (10m) guards streams only
        out.append(f"timeouts.stall ({format_duration(timeouts.stall_s)}) is longer than timeouts.startup "
                   f"({format_duration(timeouts.startup_s)}): a start that hangs ends at the start-up limit as "
                   "start-timeout, never as hang; the stall still ends a benchmark stream silent that long (set it "
                   "below timeouts.startup for a silent start to end as hang, sooner)")
    return tuple(out)


# how the servers that take a maximum sequence length in their arguments spell it (vLLM, SGLang)
MODEL_LENGTH_FLAGS = ("--max-model-len", "--context-length")


@dataclass(frozen=True)
class _Limit:
    """The sequence limit a job's server arguments give: ``--max-model-len 4096`` at ``key``."""

    key: str  # backend.settings.extra_args, or a command's backend.settings.argv
    flag: str
    tokens: int


def _model_length_limit(top: Section) -> _Limit | None:
    """The smallest limit the job's ``backend.settings.extra_args`` (vLLM, SGLang) or a command's
    ``argv`` give (``MODEL_LENGTH_FLAGS``; a templated value is not known here), None for none."""
    backend = top.data.get("backend")
    settings = backend.get("settings") if isinstance(backend, Mapping) else None
    if not isinstance(settings, Mapping):
        return None
    found = []
    for name in ("extra_args", "argv"):
        args = settings.get(name)
        if not isinstance(args, list):
            continue
        words = [str(a) for a in args]
        for i, word in enumerate(words):
            flag, _, value = word.partition("=")
            if flag not in MODEL_LENGTH_FLAGS:
                continue
            value = value or (words[i + 1] if i + 1 < len(words) else "")
            if value.isdigit():
                found.append(_Limit(f"backend.settings.{name}", flag, int(value)))
    return min(found, key=lambda limit: limit.tokens, default=None)


def _model_length_advice(top: Section, bench: BenchSettings, objective: Objective) -> tuple[str, ...]:
    """A server whose arguments cap the sequence below the longest context plus the longest
    output would refuse (or cut) the long prompts: said at load time, not as failed trials."""
    longest = max([*objective.context, bench.context or 0])
    limit = _model_length_limit(top)
    if not longest or limit is None:
        return ()
    output = max(bench.output_lengths or (bench.output_tokens,))
    if limit.tokens >= longest + output:
        return ()
    return (f"{limit.key}: {limit.flag} {limit.tokens} is less than the longest context ({longest}) plus the output "
            f"({output}) = {longest + output} tokens: the server would refuse those prompts; raise it to at least "
            f"{longest + output}",)


def _check_traffic_length(top: Section, bench: BenchSettings) -> None:
    """A traffic file's request longer than the server's limit (its prompt's estimated tokens plus its
    output, ``config.traffic.request_tokens``) would be refused by the server in every launch, the
    baseline's first: one ``BadInput`` naming the line, its length and the limit."""
    limit = _model_length_limit(top)
    if bench.traffic is None or bench.output_lengths is None or limit is None:
        return
    requests = list(zip(bench.prompts, bench.output_lengths, bench.traffic_lines or ("?",) * len(bench.prompts)))
    over = [r for r in requests if traffic_file.request_tokens(r[0], r[1]) > limit.tokens]
    if not over:
        return
    prompt, output, at = max(over, key=lambda r: traffic_file.request_tokens(r[0], r[1]))
    need = traffic_file.request_tokens(prompt, output)
    more = f" ({len(over)} of the {len(requests)} sampled requests are over it)" if len(over) > 1 else ""
    raise top.bad("bench.traffic", f"{bench.traffic} {at}: a prompt of about {need - output} tokens ({len(prompt)} "
                                   f"characters / {decode_prompts.CHARS_PER_TOKEN}) plus {output} output tokens = "
                                   f"{need} is more than {limit.key}'s {limit.flag} {limit.tokens}{more}: the server "
                                   f"would refuse it; raise {limit.flag} to at least {need}, or cut that request from "
                                   "the traffic")


def _ray(top: Section) -> RaySettings:
    sec = top.section("ray", ("address", "parallel", "node_selector"))
    address = sec.text("address", None, none_ok=True)
    parallel = sec.integer("parallel", None, low=1, none_ok=True)
    sel = sec.section("node_selector", ("gpu_model", "resources"))
    gpu_model = sel.text("gpu_model", None, none_ok=True)
    resources = sel.raw("resources", None) or {}
    if not isinstance(resources, Mapping):
        raise sel.bad("resources", f"must be a mapping of Ray resource name to amount, e.g. {{pcie_box: 1}}, "
                                   f"not {shown(resources)}")
    for name, amount in resources.items():
        if not isinstance(name, str) or isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or amount <= 0:
            raise sel.bad(f"resources.{name}",
                          f"must be a positive number (a Ray resource amount), not {shown(amount)}")
    return RaySettings(address=address, parallel=parallel,
                       node_selector={"gpu_model": gpu_model, "resources": dict(resources)})


def _sampler(top: Section) -> SamplerSettings:
    sec = top.section("sampler", ("name", "seed", "n_startup_trials", "options"))
    name = sec.raw("name", DEFAULT_SAMPLER)
    if not isinstance(name, str) or name not in SAMPLER_NAMES:
        hint = did_you_mean(name, SAMPLER_NAMES) if isinstance(name, str) else ""
        raise sec.bad("name", f"unknown sampler {brief(name)}{hint}; allowed: {', '.join(SAMPLER_NAMES)}")
    seed = sec.integer("seed", 0, low=0, none_ok=True)
    n_startup = sec.integer("n_startup_trials", None, low=0, none_ok=True)
    options = sec.raw("options", None) or {}
    if not isinstance(options, Mapping):
        raise sec.bad("options", f"must be a mapping of sampler options, not {shown(options)}")
    allowed = SAMPLER_OPTIONS[name]
    for key, value in options.items():
        okey = f"options.{key}"
        if key not in allowed:
            names = ", ".join(allowed) or "none"
            raise sec.bad(okey, f"unknown option {brief(key)} for sampler {name}"
                                f"{did_you_mean(str(key), list(allowed))}; allowed: {names}")
        want = allowed[key]
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise sec.bad(okey, f"must be {type_name(want())}, not {shown(value)}")
    return SamplerSettings(name=name, seed=seed, n_startup_trials=n_startup, options=dict(options))


def _hardware(top: Section) -> dict[str, float]:
    """Declared memory bandwidth and all-reduce latency (else the ceiling uses measurements)."""
    sec = top.section("hardware", ("memory_bandwidth", "allreduce_latency_us"))
    out: dict[str, float] = {}
    bw = sec.raw("memory_bandwidth", None)
    if bw is not None:
        try:
            out["memory_bandwidth_bytes_s"] = parse_bandwidth(bw)
        except ValueError as exc:
            raise sec.bad("memory_bandwidth", str(exc)) from None
    lat = sec.number("allreduce_latency_us", None, above=0, none_ok=True)
    if lat is not None:
        out["allreduce_latency_s"] = float(lat) * 1e-6
    return out


def _pruning(top: Section) -> PruningSettings:
    sec = top.section("pruning", ("enabled", "min_ratio"))
    return PruningSettings(enabled=sec.flag("enabled", True),
                           min_ratio=sec.number("min_ratio", DEFAULT_PRUNE_RATIO, above=0, at_most=1))


def _outcome_constraints(top: Section, bench: BenchSettings) -> tuple[OutcomeConstraint, ...]:
    raw = top.raw("constraints", None)
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise top.bad("constraints", f"must be a list of {{concurrency: N, min_ratio: R}}, not {shown(raw)}")
    out = []
    for i, item in enumerate(raw):
        sec = Section(item, top.file, f"constraints[{i}]", ("concurrency", "min_ratio"))
        if item is None or "concurrency" not in sec.data or "min_ratio" not in sec.data:
            raise top.bad(f"constraints[{i}]", "needs concurrency (one of bench.concurrency) and min_ratio "
                                               "(e.g. {concurrency: 10, min_ratio: 0.9})")
        level = sec.integer("concurrency", None, low=1)
        if level not in bench.concurrency:
            levels = ", ".join(map(str, bench.concurrency)) or "none (bench.concurrency is empty)"
            raise sec.bad("concurrency", f"{level} is not a measured level; allowed: bench.concurrency = {levels}")
        out.append(OutcomeConstraint(concurrency=level, min_ratio=sec.number("min_ratio", None, above=0)))
    return tuple(out)


def _env(top: Section, allow_unsafe: bool) -> dict[str, str]:
    raw = top.raw("env", _MISSING)
    if raw is _MISSING:
        return dict(DEFAULT_ENV)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise top.bad("env", f"must be a mapping of environment variable to value, not {shown(raw)}")
    out: dict[str, str] = {}
    for var, value in raw.items():
        key = f"env.{var}"
        if not isinstance(var, str) or not ENV_NAME.fullmatch(var):
            raise top.bad(key, f"not an environment variable name: {brief(var)} (letters, digits, _)")
        if value is None or isinstance(value, (list, dict)) or (isinstance(value, float) and value != value):
            raise top.bad(key, f"must be a string, number or boolean, not {shown(value)}")
        try:
            text = env_value(value)
        except ValueError as exc:
            raise top.bad(key, f"{brief(env_str(value))}: {exc}") from None
        if var.startswith("NCCL_"):
            text = nccl_value(var, value, top.file, key)
            refuse_unsafe(var, text, allow_unsafe, top.file, key, top.file)
        out[var] = text
    return out


def _correctness(top: Section, job_path: Path, allow_unsafe: bool, backend, defaults: dict) -> CorrectnessSettings:
    sec = top.section("correctness", ("enabled", "reference", "prompts", "check_tokens", "logprobs",
                                      "logprob_tolerance", "allow_repetitive_reference"))
    enabled = sec.flag("enabled", True)
    ref = sec.raw("reference", "baseline")
    if ref is None:
        ref = "baseline"
    if isinstance(ref, Mapping):
        own = config_mapping(ref, top.file, sec.key("reference"), allow_unsafe, space=None)
        config = {**defaults, **own}
        check_config(backend, config, top.file, sec.key("reference"))
        reference: str | dict = config
    elif isinstance(ref, str) and ref.strip():
        if ref == "baseline":
            reference = "baseline"
        else:
            ref_path = (job_path.parent / ref).resolve()
            if not ref_path.is_file():
                raise sec.bad("reference", f"reference file not found: {brief(ref)} (resolved relative to the job file "
                                           f"to {ref_path}); allowed: baseline, a config mapping, or a JSON file")
            try:
                json.loads(ref_path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise sec.bad("reference", f"reference file {brief(ref)} is not readable JSON: {exc}") from None
            reference = str(ref_path)
    else:
        raise sec.bad("reference", f"must be 'baseline', a config mapping (e.g. {{tp_size: 1}}) or the path of "
                                   f"a JSON reference file, not {shown(ref)}")
    prompts = sec.raw("prompts", list(DEFAULT_CHECK_PROMPTS))
    if not isinstance(prompts, list) or not prompts:
        raise sec.bad("prompts", f"must be a non-empty list of prompt strings, not {shown(prompts)}")
    for i, p in enumerate(prompts):
        if not isinstance(p, str) or not p.strip():
            raise sec.bad(f"prompts[{i}]", f"must be a non-empty string, not {shown(p)}")
    return CorrectnessSettings(enabled=enabled, reference=reference, prompts=tuple(prompts),
                               check_tokens=sec.integer("check_tokens", 32, low=1), logprobs=sec.flag("logprobs", True),
                               logprob_tolerance=sec.number("logprob_tolerance", 0.05, above=0),
                               allow_repetitive_reference=sec.flag("allow_repetitive_reference", False))


__all__ = [
    "Job", "BackendSpec", "Budget", "BenchSettings", "Timeouts", "RaySettings", "SamplerSettings",
    "CorrectnessSettings", "PruningSettings", "PrescreenSettings", "OutcomeConstraint", "load_job", "job_context",
    "SAMPLER_NAMES", "DEFAULT_CHECK_PROMPTS", "Objective", "DEFAULT_CONFIRM", "DEFAULT_RELAUNCH",
]
