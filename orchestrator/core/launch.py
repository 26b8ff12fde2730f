"""How to start one server and how to watch it: the values a backend hands the node.

A backend (``orchestrator.backends``) is pure: it turns a config into a ``LaunchSpec``
(argv, environment delta, where to ask whether it is ready) and says what it knows of its
engine's process tree and log as ``WatchRules``. The node (``orchestrator.node.server``,
``orchestrator.node.treewatch``) acts on both. They live here, on the ground floor, so that
neither side imports the other.
"""

from __future__ import annotations

import re
import shlex
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.core import nccl

# Where engines keep what they compile (vLLM's torch.compile cache under VLLM_CACHE_ROOT, by default
# $XDG_CACHE_HOME/vllm or ~/.cache/vllm; Triton's kernels; torch inductor's; SGLang's and FlashInfer's
# JIT caches under ~/.cache; NVIDIA's PTX cache). A compile cache is keyed by the compile-relevant
# settings, so a second launch that differs only in NCCL variables loads the compiled graphs instead
# of compiling again (one H200: ready 165 s -> 54 s, docs/benchmarks.md). The rule: every trial of a
# node runs with the node's own values of these, or the job's fixed ``env:`` ones, the same for every
# trial; ncclsweep never sets them per trial (no fresh home or temporary cache per trial), and a
# search space may not vary them (``config.space.check_param_name``).
CACHE_VARIABLES = ("HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                   "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH", "FLASHINFER_WORKSPACE_BASE")


# What ends a line somewhere: a shell and an env file split at \n, other readers (Python's
# ``str.splitlines``, editors) at \r and the Unicode separators too; NUL cannot be in a process's
# environment at all. A value holding one is not one line, and not an environment value.
LINE_BREAKS = re.compile("[\x00\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def env_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be an environment value (None when it can): an env file holds one
    ``KEY=VALUE`` per line, and a value spanning lines would put its second line where a reader
    takes it for a variable of its own (or, in a shell, for a command)."""
    if LINE_BREAKS.search(value):
        return "an environment value must be one line, and this one holds a line break (or a NUL)"
    return None


def cache_locations(environ: Mapping[str, str]) -> dict[str, str]:
    """The cache variables a server's environment sets (what its record shows)."""
    return {name: str(environ[name]) for name in CACHE_VARIABLES if environ.get(name)}


def server_environment(job_env: Mapping[str, str], launch_env: Mapping[str, str], *,
                       instrumented: bool) -> dict[str, str]:
    """The environment a server for a config runs with, on top of the node's: the job's fixed
    ``env:``, then the config's own variables (``LaunchSpec.env``). A trial's server
    (``instrumented``) also logs NCCL's start-up (``nccl.debug_env``: what the trial verifies
    NCCL applied), under both; what ``export`` and ``validate --commands`` print for a user
    to run leaves that instrumentation out. The engines' cache locations (``CACHE_VARIABLES``)
    are never a config's: the node's or the job's, the same for every trial."""
    base = nccl.debug_env() if instrumented else {}
    own = {str(k): str(v) for k, v in launch_env.items() if str(k) not in CACHE_VARIABLES}
    return {**base, **{str(k): str(v) for k, v in job_env.items()}, **own}


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one server: argv, env delta, where to ask if it is ready."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0
    health_path: str = "/health"
    ready_status: int = 200
    model_name: str = ""  # what to put in the OpenAI "model" field
    # Prometheus metrics (speculative decoding's acceptance); None: the server has none
    metrics_path: str | None = "/metrics"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return f"{self.base_url}{self.metrics_path}" if self.metrics_path else None

    def shell_line(self) -> str:
        """One shell-quoted line: env assignments then argv."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        cmd = shlex.join(self.argv)
        return f"{env} {cmd}" if env else cmd


# Processes that may come and go in any server's tree without meaning harm.
TRANSIENT_PROCESSES = (
    r"torch/_inductor/compile_worker",  # torch.compile's worker pool
    r"multiprocessing\.resource_tracker",
)


@dataclass(frozen=True)
class WatchRules:
    """What a backend knows about its engine's tree and log."""

    fatal_log_patterns: tuple[str, ...] = ()
    transient_processes: tuple[str, ...] = TRANSIENT_PROCESSES
    essential_processes: tuple[str, ...] = ()  # patterns on name or command line; () = the generic rule
    min_age_s: float = 1.0

    def fatal_regex(self) -> re.Pattern | None:
        return re.compile("|".join(f"(?:{p})" for p in self.fatal_log_patterns)) if self.fatal_log_patterns else None

    def transient_regex(self) -> re.Pattern | None:
        return re.compile("|".join(f"(?:{p})" for p in self.transient_processes)) if self.transient_processes else None

    def essential_regex(self) -> re.Pattern | None:
        return re.compile("|".join(f"(?:{p})" for p in self.essential_processes)) if self.essential_processes else None


def exit_text(returncode: int | None) -> str:
    """How a process ended: ``exit code N`` or ``killed by SIGKILL``."""
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
