"""Backend for SGLang's server: ``python -m sglang.launch_server --model-path M --tp-size N``.

Neutral params -> flags (current release 0.5.23; ``known_flags.SGLANG`` holds every flag
of its parser):

==================  ==========================================================
``tp_size``         ``--tp-size N`` (always)
``pp_size``         ``--pp-size N``
``graph_capture``   false: ``--disable-decode-cuda-graph --disable-prefill-cuda-graph``
                    (0.5.14+), ``--disable-cuda-graph`` before; true: nothing (on by default)
``capture_sizes``   the explicit batch sizes: ``--cuda-graph-bs-decode 1 2 4 8`` (0.5.14+),
                    ``--cuda-graph-bs 1 2 4 8`` before
``custom_all_reduce`` false: ``--disable-custom-all-reduce``
``backend.<flag>``  ``--flag``; e.g. ``backend.enable_torch_compile: true`` ->
                    ``--enable-torch-compile``, ``backend.cuda_graph_max_bs: 16`` (spelled
                    for the release, below), ``backend.torch_compile_max_bs``
``env.*``           the server's environment (NCCL_* included)
==================  ==========================================================

Readiness is ``GET /health`` answering 200 (``/v1/models`` answers before warm-up ends).

Spellings by release (each read in that release's ``sglang/srt/server_args.py`` and, from
0.5.20, ``sglang/srt/arg_groups/fields/``; wheels of 0.4.6, 0.4.10.post2, 0.5.1, 0.5.3,
0.5.6, 0.5.9, 0.5.12, 0.5.13, 0.5.14, 0.5.15, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22 and
0.5.23, the parsers of 0.4.10.post2, 0.5.1, 0.5.3, 0.5.20 to 0.5.23 built and dumped):

- up to 0.5.13: ``--disable-cuda-graph``, ``--cuda-graph-max-bs``, ``--cuda-graph-bs``.
- 0.5.14 to 0.5.19: per phase ``--cuda-graph-max-bs-decode``, ``--cuda-graph-bs-decode``,
  ``--disable-decode-cuda-graph`` / ``--disable-prefill-cuda-graph`` (and
  ``--cuda-graph-backend-{decode,prefill}``); the old ``--cuda-graph-max-bs`` and
  ``--cuda-graph-bs`` are deprecated aliases, ``--disable-cuda-graph`` deprecated.
- from 0.5.20: ``--cuda-graph-max-bs`` and ``--cuda-graph-bs`` are gone;
  ``--disable-cuda-graph`` is still accepted, deprecated.
- ``--tp-size``, ``--enable-torch-compile``, ``--torch-compile-max-bs``,
  ``--disable-custom-all-reduce``, ``--model-path``, ``--served-model-name``,
  ``--host``, ``--port``: unchanged from 0.4.6 to 0.5.23; ``--pp-size`` from 0.4.10.

A ``backend.cuda_graph_max_bs``/``backend.cuda_graph_max_bs_decode`` (and ``..._bs``)
param is spelled for the release either way, so a space written for one release runs on
the other; a deprecated spelling is never sent to a release that has the new one.

The release is ``settings.version`` when given, else the installed one (the metadata of
``settings.python``'s environment); unknown -> the current release is assumed.

Settings: ``model`` (required; ``--model-path``), ``served_model_name``, ``extra_args``,
``version``, ``python`` (default: this interpreter, as ncclsweep is installed beside the
server), ``model_facts``.
"""

from __future__ import annotations

import sys
from typing import Any

from orchestrator import versions
from orchestrator.backends import common
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.backends.common import Spelling
from orchestrator.backends.known_flags import SGLANG

PER_PHASE_SINCE = (0, 5, 14)  # --cuda-graph-max-bs-decode & co.
OLD_GRAPH_FLAGS_REMOVED = (0, 5, 20)  # --cuda-graph-max-bs / --cuda-graph-bs gone

_SETTINGS = {
    "model": "model path or Hugging Face id (--model-path)",
    **common.SERVER_SETTINGS,
    "version": "SGLang release to build flags for (default: the installed one)",
    "python": "python of SGLang's environment (default: the one running ncclsweep)",
}

_MANAGED = {
    "--model-path": "settings.model", "--model": "settings.model", "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size", "--pp-size": "pp_size", "--pipeline-parallel-size": "pp_size",
    "--host": "the trial", "--port": "the trial", "--disable-cuda-graph": "graph_capture",
    "--disable-decode-cuda-graph": "graph_capture", "--disable-prefill-cuda-graph": "graph_capture",
    "--cuda-graph-bs": "capture_sizes", "--cuda-graph-bs-decode": "capture_sizes",
    "--disable-custom-all-reduce": "custom_all_reduce", "--served-model-name": "settings.served_model_name",
}

_MAX_BS = [
    Spelling(None, PER_PHASE_SINCE, ("--cuda-graph-max-bs",)),
    Spelling(PER_PHASE_SINCE, None, ("--cuda-graph-max-bs-decode",)),
]
_BS = [
    Spelling(None, PER_PHASE_SINCE, ("--cuda-graph-bs",)),
    Spelling(PER_PHASE_SINCE, None, ("--cuda-graph-bs-decode",)),
]
_NO_GRAPHS = [
    Spelling(None, PER_PHASE_SINCE, ("--disable-cuda-graph",)),
    Spelling(PER_PHASE_SINCE, None, ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")),
]
SPELLINGS = {
    "cuda_graph_max_bs": _MAX_BS, "cuda_graph_max_bs_decode": _MAX_BS,
    "cuda_graph_bs": [Spelling(None, None, None, "use the neutral capture_sizes param")],
    "cuda_graph_bs_decode": [Spelling(None, None, None, "use the neutral capture_sizes param")],
    "disable_cuda_graph": [Spelling(None, None, None, "use the neutral graph_capture param")],
    "cuda_graph_max_bs_prefill": [
        Spelling(None, PER_PHASE_SINCE, None, "SGLang before 0.5.14 has no per-phase CUDA-graph settings"),
        Spelling(PER_PHASE_SINCE, None, ("--cuda-graph-max-bs-prefill",)),
    ],
}
_GRAPH_ONLY = ("backend.cuda_graph_max_bs", "backend.cuda_graph_max_bs_decode", "backend.cuda_graph_max_bs_prefill",
               "backend.cuda_graph_backend_decode", "backend.cuda_graph_backend_prefill", "capture_sizes")


class SglangBackend(Backend):
    """``python -m sglang.launch_server``; see the module docstring."""

    kind = "sglang"
    # SGLang's scheduler/detokenizer log this and SIGQUIT their parent when they die
    FATAL_LOG_PATTERNS = (r"Scheduler hit an exception", r"DetokenizerManager hit an exception",
                          r"Received sigquit from a child process")

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        super().__init__(settings, job_file)
        common.read_server_settings(self, _SETTINGS, "0.5.23")
        self.python = self.python or sys.executable
        common.check_extra_args(self)

    def version(self) -> str | None:
        if self.version_override:
            return self.version_override
        python = None if self.python == sys.executable else self.python
        return versions.sglang_version(python)

    def release(self) -> tuple[int, int, int] | None:
        return versions.parse_version(self.version())

    def flags(self) -> common.FlagChecker:
        return common.FlagChecker(SGLANG, self.release(), _MANAGED, SPELLINGS, "SGLang")

    def default_config(self) -> Config:
        return dict(common.SERVING_DEFAULTS)

    def gpus_per_trial(self, config: Config) -> int:
        return super().gpus_per_trial(config) * common.data_parallel(config, "backend.dp_size")

    def check_config(self, config: Config) -> None:
        file = self.job_file
        common.check_neutral(config, file)
        checker = self.flags()
        for name, value in sorted(self.backend_flags_of(config).items()):
            checker.param_words(name, value, file)
        self.check_nccl_env(config)

    def normalize(self, config: Config) -> Config:
        """Defaults filled in; CUDA-graph settings dropped without graphs, custom all-reduce
        at tp_size 1; the max-batch aliases folded into one name."""
        out = super().normalize(config)
        out.setdefault("tp_size", 1)
        out.setdefault("pp_size", 1)
        out.setdefault("graph_capture", True)
        out.setdefault("custom_all_reduce", True)
        if "backend.cuda_graph_max_bs_decode" in out:
            out["backend.cuda_graph_max_bs"] = out.pop("backend.cuda_graph_max_bs_decode")
        if not out["graph_capture"]:
            for name in _GRAPH_ONLY:
                out.pop(name, None)
        if "capture_sizes" in out:
            try:
                out["capture_sizes"] = ",".join(map(str, common.capture_sizes_of(out["capture_sizes"])))
            except ValueError:
                pass
        if out["tp_size"] == 1:
            out.pop("custom_all_reduce", None)
        return out

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        argv = [self.python, "-m", "sglang.launch_server", "--model-path", self.model,
                "--tp-size", str(int(config.get("tp_size", 1)))]
        if "pp_size" in config:
            argv += ["--pp-size", str(int(config["pp_size"]))]
        argv += ["--host", host, "--port", str(port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        release = self.release()
        current = versions.parse_version(SGLANG.version)
        graphs = config.get("graph_capture", True)
        if graphs is False:
            argv += list(common.spelling_for(_NO_GRAPHS, release, current).words or ())
        elif config.get("capture_sizes"):
            flag = common.spelling_for(_BS, release, current).words[0]
            argv += [flag, *map(str, common.capture_sizes_of(config["capture_sizes"]))]
        if config.get("custom_all_reduce") is False:
            argv.append("--disable-custom-all-reduce")
        checker = self.flags()
        for name, value in sorted(self.backend_flags_of(config).items()):
            if graphs is False and f"backend.{name}" in _GRAPH_ONLY:
                continue  # graph settings cannot matter without graphs
            argv += checker.param_words(name, value, self.job_file)
        argv += self.extra_args
        return LaunchSpec(argv=argv, env=common.server_env(self, config), host=host, port=port, health_path="/health",
                          model_name=self.served_model_name or self.model)

    def model_facts(self) -> dict[str, Any]:
        return {**common.facts_from_checkpoint(self.model), **self.facts}
