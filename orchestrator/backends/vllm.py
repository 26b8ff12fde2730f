"""Backend for vLLM's OpenAI server: ``vllm serve MODEL --tensor-parallel-size N ...``.

Neutral params -> flags (current release 0.33.0; ``known_flags.VLLM`` holds every flag
of its parser):

==================  ==========================================================
``tp_size``         ``--tensor-parallel-size N`` (always; vLLM's default is 1)
``pp_size``         ``--pipeline-parallel-size N``
``graph_capture``   false: ``--enforce-eager``; true (or absent): ``--compilation-config
                    '{"cudagraph_mode": MODE}'`` with MODE from ``backend.cudagraph_mode``
                    (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE; default
                    the release's own: FULL_AND_PIECEWISE from 0.11.0, PIECEWISE before)
``capture_sizes``   ``--cudagraph-capture-sizes 1 2 4 8``
``custom_all_reduce`` false: ``--disable-custom-all-reduce``. vLLM turns custom
                    all-reduce off by itself on PCIe-only boxes for TP > 2 (it needs
                    NVLink or at most two GPUs), so there it cannot change anything.
``backend.<flag>``  ``--flag`` (see ``orchestrator.backends.common``)
``env.*``           the server's environment (NCCL_* included)
==================  ==========================================================

Spellings by release (each read in that release's ``vllm/engine/arg_utils.py`` and
``vllm/config``; wheels of 0.8.5, 0.9.0, 0.9.2, 0.10.0, 0.10.1.1, 0.10.2, 0.11.0,
0.11.1, 0.11.2, 0.12.0, 0.13.0, 0.14.0, 0.17.0, 0.20.0, 0.25.0, 0.30.0, 0.32.0, 0.33.0):

- capture sizes: ``--cudagraph-capture-sizes`` from 0.11.1; before, the
  ``cudagraph_capture_sizes`` key of ``--compilation-config`` (present since 0.8).
- largest captured batch (``backend.max_cudagraph_capture_size``):
  ``--max-cudagraph-capture-size N`` from 0.11.1; ``--cuda-graph-sizes N`` in 0.9.0 to
  0.11.0 (one value means [1, 2, 4] + every 8th up to N, the same list). ``--cuda-graph-sizes``
  is deprecated from 0.11.1 and gone in 0.13.0: a ``backend.cuda_graph_sizes`` param is
  refused there.
- ``--max-seq-len-to-capture`` (longest sequence covered by graphs) exists up to 0.10.2
  and was removed in 0.11.0 with no replacement; refused from 0.11.0.
- ``cudagraph_mode`` (in ``--compilation-config``) from 0.10.1; in 0.9.0 to 0.10.0 only
  PIECEWISE (the default) and FULL (``{"full_cuda_graph": true}``) can be expressed.
- ``--enforce-eager``, ``--tensor-parallel-size``, ``--pipeline-parallel-size``,
  ``--disable-custom-all-reduce``, ``--compilation-config``, ``--host``, ``--port``,
  ``--served-model-name``: unchanged from 0.9.0 to 0.33.0.

The release is ``settings.version`` when given, else the installed one (``vllm --version``
through ``orchestrator.versions``); unknown -> the current release is assumed.

Settings: ``model`` (required), ``served_model_name``, ``extra_args`` (passed through,
checked against the release's flags), ``version``, ``python`` (run ``python -m
vllm.entrypoints.cli.main serve``), ``executable`` (the ``vllm`` command, default
``vllm``), ``model_facts``.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator import versions
from orchestrator.backends import common
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.backends.common import Spelling
from orchestrator.backends.known_flags import VLLM
from orchestrator.errors import ConfigRejected

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
CUDAGRAPH_MODE_SINCE = (0, 10, 1)
FULL_AND_PIECEWISE_DEFAULT_SINCE = (0, 11, 0)
CAPTURE_SIZES_FLAG_SINCE = (0, 11, 1)

_SETTINGS = {
    "model": "model path or Hugging Face id (the positional MODEL of vllm serve)",
    **common.SERVER_SETTINGS,
    "version": "vLLM release to build flags for (default: the installed one)",
    "python": "python of vLLM's environment: runs python -m vllm.entrypoints.cli.main serve",
    "executable": "the vllm command (default: vllm)",
}

# Flags the backend sets from neutral params (never from extra_args or backend.<flag>).
_MANAGED = {
    "--tensor-parallel-size": "tp_size", "--pipeline-parallel-size": "pp_size", "--host": "the trial",
    "--port": "the trial", "--enforce-eager": "graph_capture", "--no-enforce-eager": "graph_capture",
    "--compilation-config": "graph_capture and backend.cudagraph_mode",
    "--cudagraph-capture-sizes": "capture_sizes", "--disable-custom-all-reduce": "custom_all_reduce",
    "--enable-custom-all-reduce": "custom_all_reduce", "--served-model-name": "settings.served_model_name",
    "--model": "settings.model", "-tp": "tp_size", "-pp": "pp_size", "-cc": "graph_capture and backend.cudagraph_mode",
}

_MAX_CAPTURE = [
    Spelling(None, (0, 9, 0), None, "no flag for the largest captured batch before vLLM 0.9.0"),
    Spelling((0, 9, 0), CAPTURE_SIZES_FLAG_SINCE, ("--cuda-graph-sizes",)),
    Spelling(CAPTURE_SIZES_FLAG_SINCE, None, ("--max-cudagraph-capture-size",)),
]
SPELLINGS = {
    "max_cudagraph_capture_size": _MAX_CAPTURE,
    "cuda_graph_sizes": [
        Spelling(None, (0, 9, 0), None, "--cuda-graph-sizes appeared in vLLM 0.9.0"),
        Spelling((0, 9, 0), CAPTURE_SIZES_FLAG_SINCE, ("--cuda-graph-sizes",)),
        Spelling(CAPTURE_SIZES_FLAG_SINCE, None, None,
                 "--cuda-graph-sizes is deprecated from vLLM 0.11.1 and removed in 0.13.0; use the capture_sizes "
                 "param or backend.max_cudagraph_capture_size"),
    ],
    "max_seq_len_to_capture": [
        Spelling(None, (0, 11, 0), ("--max-seq-len-to-capture",)),
        Spelling((0, 11, 0), None, None,
                 "--max-seq-len-to-capture was removed in vLLM 0.11.0 (graphs are bounded by batch size now: "
                 "backend.max_cudagraph_capture_size)"),
    ],
    "cudagraph_capture_sizes": [
        Spelling(None, None, None, "use the neutral capture_sizes param"),
    ],
}


class VllmBackend(Backend):
    """``vllm serve``; see the module docstring for the mapping and the releases."""

    kind = "vllm"
    # Seen in real vLLM 0.26 logs: a worker or the engine core died while the API server
    # stayed up and never turned healthy (tests/fixtures/vllm/).
    FATAL_LOG_PATTERNS = (r"WorkerProc hit an exception", r"WorkerProc failed to start",
                          r"EngineCore failed to start", r"Engine core initialization failed", r"EngineDeadError")
    # the model-inspection subprocess vLLM runs on a cache miss (it exits when done)
    TRANSIENT_PROCESSES = (r"vllm\.model_executor\.models\.registry",)

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        super().__init__(settings, job_file)
        common.read_server_settings(self, _SETTINGS, "0.33.0")
        self.executable = common.str_setting(self, "executable", "vllm")
        common.check_extra_args(self)

    # ---- release ---------------------------------------------------------------------------
    def version(self) -> str | None:
        if self.version_override:
            return self.version_override
        return versions.vllm_version(self.python, None if self.executable == "vllm" else self.executable)

    def release(self) -> tuple[int, int, int] | None:
        return versions.parse_version(self.version())

    def flags(self) -> common.FlagChecker:
        return common.FlagChecker(VLLM, self.release(), _MANAGED, SPELLINGS, "vLLM")

    def _effective(self) -> tuple[int, int, int]:
        return self.release() or versions.parse_version(VLLM.version)

    def default_mode(self) -> str:
        return "FULL_AND_PIECEWISE" if self._effective() >= FULL_AND_PIECEWISE_DEFAULT_SINCE else "PIECEWISE"

    # ---- the contract ----------------------------------------------------------------------
    def default_config(self) -> Config:
        return dict(common.SERVING_DEFAULTS)

    def gpus_per_trial(self, config: Config) -> int:
        return super().gpus_per_trial(config) * common.data_parallel(config, "backend.data_parallel_size")

    def _mode(self, config: Config) -> str:
        mode = config.get("backend.cudagraph_mode")
        return self.default_mode() if mode is None else str(mode).upper()

    def check_config(self, config: Config) -> None:
        file = self.job_file
        common.check_neutral(config, file)
        graphs = config.get("graph_capture", True)
        if "backend.cudagraph_mode" in config and graphs:
            mode = self._mode(config)
            if mode not in CUDAGRAPH_MODES:
                raise ConfigRejected(f"cudagraph_mode must be one of {', '.join(CUDAGRAPH_MODES)}, not "
                                     f"{config['backend.cudagraph_mode']!r}", file=file, key="backend.cudagraph_mode")
            release = self._effective()
            if release < CUDAGRAPH_MODE_SINCE and mode not in ("PIECEWISE", "FULL"):
                raise ConfigRejected(f"vLLM {common.vstr(release)} has no cudagraph_mode (it arrived in 0.10.1); "
                                     f"only PIECEWISE and FULL can be expressed", file=file,
                                     key="backend.cudagraph_mode")
            if release < (0, 9, 0) and mode == "FULL":
                raise ConfigRejected(f"vLLM {common.vstr(release)} has no full CUDA graphs (full_cuda_graph "
                                     f"arrived in 0.9.0)", file=file, key="backend.cudagraph_mode")
        top = config.get("backend.max_cudagraph_capture_size")
        if graphs and top is not None and config.get("capture_sizes"):
            largest = common.capture_sizes_of(config["capture_sizes"])[-1]
            if self._effective() < CAPTURE_SIZES_FLAG_SINCE:
                raise ConfigRejected(f"vLLM {common.vstr(self._effective())} spells the largest captured batch as "
                                     f"--cuda-graph-sizes, which conflicts with explicit capture_sizes: give one "
                                     f"of the two", file=file, key="backend.max_cudagraph_capture_size")
            if top != largest:
                raise ConfigRejected(f"vLLM refuses max_cudagraph_capture_size={top!r} with capture_sizes whose largest "
                                     f"is {largest}: give one of the two, or make them agree", file=file,
                                     key="backend.max_cudagraph_capture_size")
        checker = self.flags()
        for name, value in sorted(self.backend_flags_of(config).items()):
            if name == "cudagraph_mode":
                continue
            checker.param_words(name, value, file)
        self._env_check(config)

    def _env_check(self, config: Config) -> None:
        self.check_nccl_env(config)

    def normalize(self, config: Config) -> Config:
        """Defaults filled in, settings that cannot matter dropped: capture settings without
        graphs (or with mode NONE), custom all-reduce at tp_size 1."""
        out = super().normalize(config)
        out.setdefault("tp_size", 1)
        out.setdefault("pp_size", 1)
        out.setdefault("graph_capture", True)
        out.setdefault("custom_all_reduce", True)
        if out["graph_capture"]:
            out["backend.cudagraph_mode"] = self._mode(out)
            if out["backend.cudagraph_mode"] == "NONE":
                for name in ("capture_sizes", "backend.max_cudagraph_capture_size", "backend.cuda_graph_sizes"):
                    out.pop(name, None)
        else:
            for name in ("capture_sizes", "backend.cudagraph_mode", "backend.max_cudagraph_capture_size",
                         "backend.cuda_graph_sizes", "backend.max_seq_len_to_capture"):
                out.pop(name, None)
        if "capture_sizes" in out:
            try:
                out["capture_sizes"] = ",".join(map(str, common.capture_sizes_of(out["capture_sizes"])))
            except ValueError:
                pass
        if out["tp_size"] == 1:
            out.pop("custom_all_reduce", None)  # no all-reduce without tensor parallelism
        return out

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        if self.python:
            argv = [self.python, "-m", "vllm.entrypoints.cli.main", "serve", self.model]
        else:
            argv = [self.executable, "serve", self.model]
        argv += ["--tensor-parallel-size", str(int(config.get("tp_size", 1)))]
        if "pp_size" in config:
            argv += ["--pipeline-parallel-size", str(int(config["pp_size"]))]
        argv += ["--host", host, "--port", str(port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        argv += self._graph_args(config)
        if config.get("custom_all_reduce") is False:
            argv.append("--disable-custom-all-reduce")
        checker = self.flags()
        for name, value in sorted(self.backend_flags_of(config).items()):
            if name != "cudagraph_mode":
                argv += checker.param_words(name, value, self.job_file)
        argv += self.extra_args
        return LaunchSpec(argv=argv, env=common.server_env(self, config), host=host, port=port, health_path="/health",
                          model_name=self.served_model_name or self.model)

    def _graph_args(self, config: Config) -> list[str]:
        if config.get("graph_capture", True) is False:
            return ["--enforce-eager"]
        if "graph_capture" not in config and "backend.cudagraph_mode" not in config and "capture_sizes" not in config:
            return []  # nothing tuned: vLLM's own defaults
        release = self._effective()
        mode = self._mode(config)
        compilation: dict[str, Any] = {}
        if release >= CUDAGRAPH_MODE_SINCE:
            compilation["cudagraph_mode"] = mode
        elif mode == "FULL":
            compilation["full_cuda_graph"] = True
        words = []
        sizes = common.capture_sizes_of(config["capture_sizes"]) if config.get("capture_sizes") else None
        if sizes and mode != "NONE":
            if release >= CAPTURE_SIZES_FLAG_SINCE:
                words = ["--cudagraph-capture-sizes", *map(str, sizes)]
            else:
                compilation["cudagraph_capture_sizes"] = sizes
        if compilation:
            words = ["--compilation-config", json.dumps(compilation, sort_keys=True)] + words
        return words

    def model_facts(self) -> dict[str, Any]:
        """``settings.model_facts`` over what the checkpoint's config.json says (local
        Hugging Face directories only; a GGUF file says nothing here)."""
        return {**common.facts_from_checkpoint(self.model), **self.facts}
