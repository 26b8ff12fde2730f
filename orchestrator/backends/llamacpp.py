"""Backend for llama.cpp's ``llama-server`` (GGUF models): ``llama-server -m MODEL.gguf``.

Neutral params -> llama-server:

==================  ==========================================================
``tp_size`` N > 1   the weights split over N GPUs by ``--split-mode`` row (default) or
                    tensor (``backend.split_mode``)
``pp_size`` N > 1   the layers split over N GPUs: ``--split-mode layer`` (tp_size and
                    pp_size > 1 together are refused: one split mode per server)
both 1              ``--split-mode none`` (one GPU). GPUs per trial = TP x PP; llama-server
                    uses every GPU it sees, and the trial shows it exactly that many.
``graph_capture``   false: ``GGML_CUDA_DISABLE_GRAPHS=1`` in the environment (the CUDA
                    backend captures graphs by default); ``capture_sizes`` has no
                    llama.cpp equivalent and is refused
``custom_all_reduce`` refused; tune ``env.GGML_CUDA_ALLREDUCE`` (nccl, internal, none)
``speculative.*``   refused (llama-server's ``--model-draft``/``--draft-max`` go in
                    ``extra_args``)
``backend.<flag>``  ``--flag value``: ``n_gpu_layers`` (``-ngl``: a count, auto or all),
                    ``flash_attn`` (on, off, auto; true/false), ``threads``,
                    ``batch_size``, ``ubatch_size``, ``parallel`` (slots), ``ctx_size``,
                    and any other flag of the installed ``llama-server --help``
``env.*``           the server's environment
==================  ==========================================================

NCCL: llama.cpp's CUDA backend all-reduces through NCCL only with ``--split-mode tensor``
over two or more GPUs (``ggml-cuda``'s ``comm_init``, when built with ``GGML_CUDA_NCCL``,
the Linux default; ``GGML_CUDA_ALLREDUCE`` picks nccl, internal or none). Everywhere else
(split modes none, layer and row, CPU) no NCCL call is made, so ``env.NCCL_*`` values are
checked as for every backend but dropped by ``normalize``: two configs that differ only in
them are the same server and are measured once.

Readiness: ``GET /health`` answers 503 while the model loads and 200 when ready; requests
go to the OpenAI ``/v1/completions``.

Settings: ``model`` (required: the GGUF file), ``executable`` (default ``llama-server``),
``device`` (``cuda``, default; ``cpu`` adds ``--device none`` and allows neither GPU
splits nor ``n_gpu_layers``), ``served_model_name`` (``--alias``), ``extra_args``
(checked against the installed binary's ``--help``), ``version`` (for the records;
default what ``llama-server --version`` prints), ``model_facts`` (over what the GGUF
header says, when the ``gguf`` package is installed).
"""

from __future__ import annotations

import functools
import re
import shutil
from typing import Any

from orchestrator.backends import allreduce, common, speculative
from orchestrator.backends.base import Backend, Config, LaunchSpec
from orchestrator.backends.flags import FlagChecker
from orchestrator.backends.known_flags import FlagTable
from orchestrator.core import versions
from orchestrator.core.errors import ConfigRejected, brief

_SETTINGS = {
    "model": "the GGUF file (-m)",
    "executable": "the llama-server command (default: llama-server)",
    "device": "cuda (default) or cpu (--device none)",
    "served_model_name": "name in the OpenAI API (--alias; default: model)",
    "extra_args": "list of extra command-line arguments, passed through",
    "version": "the server's version, for the records (default: llama-server --version)",
    "model_facts": "layers, heads, kv_heads, hidden_size, dtype_bytes, bytes_per_token, allreduces_per_step",
}
SPLIT_BY_TP = ("row", "tensor")
FLASH_ATTN = ("on", "off", "auto")
_COUNTS = ("threads", "batch_size", "ubatch_size", "parallel", "ctx_size")
_MANAGED = {
    "-m": "settings.model", "--model": "settings.model", "--host": "the trial", "--port": "the trial",
    "-sm": "tp_size and pp_size", "--split-mode": "tp_size and pp_size", "-dev": "settings.device",
    "--device": "settings.device", "-a": "settings.served_model_name", "--alias": "settings.served_model_name",
}
# "-t,    --threads N      description": spellings, one space, the argument, 2+ spaces, help
_HELP_LINE = re.compile(r"^((?:-[\w-]+)(?:,\s*-[\w-]+)*)(?: (\S+))?(?:\s{2,}(.*))?$")


class LlamaCppBackend(Backend):
    """``llama-server``; see the module docstring."""

    kind = "llamacpp"

    def __init__(self, settings: dict[str, Any] | None, job_file: str | None = None):
        super().__init__(settings, job_file)
        common.check_setting_keys(self, _SETTINGS, {"model_path": "model", "binary": "executable"})
        self.model = common.str_setting(self, "model", required=True)
        self.executable = common.str_setting(self, "executable", "llama-server")
        self.device_name = common.str_setting(self, "device", "cuda")
        if self.device_name not in ("cuda", "cpu"):
            raise self.bad("device", f"must be cuda or cpu, not {brief(self.device_name)}")
        self.served_model_name = common.str_setting(self, "served_model_name")
        self.extra_args = common.list_setting(self, "extra_args")
        self.version_given = common.str_setting(self, "version")
        self.facts = common.model_facts_setting(self)
        problem = self.flags().extra_problem(self.extra_args)
        if problem:
            raise self.bad("extra_args", problem)

    @classmethod
    def example_settings(cls) -> dict[str, Any]:
        return {"model": "/models/example.gguf"}

    # ---- release and flags ----------------------------------------------------------------------
    def version(self) -> str | None:
        return self.version_given or _binary_version(shutil.which(self.executable))

    @classmethod
    def installed_release(cls) -> str | None:
        return _binary_version(shutil.which("llama-server"))

    def flags(self) -> FlagChecker:
        """The installed binary's own flags (``--help``); unchecked without a binary."""
        exe = shutil.which(self.executable)
        return _Flags(_help_table(exe) if exe else None, None, (0, 0, 0), _MANAGED, {}, exe or self.executable)

    def diagnose(self) -> tuple[list[str], list[str]]:
        exe = shutil.which(self.executable)
        if exe is None:
            return [], [f"{self.executable} is not on PATH here: flags go unchecked and no server can start"]
        return [f"backend llamacpp flags: {exe} --help"], []

    # ---- the contract ---------------------------------------------------------------------------
    def device(self) -> str:
        return self.device_name

    def default_config(self) -> Config:
        return {"tp_size": 1}

    def _split(self, config: Config) -> str:
        if int(config.get("pp_size", 1)) > 1:
            return "layer"
        if int(config.get("tp_size", 1)) > 1:
            return str(config.get("backend.split_mode", "row")).lower()
        return "none"

    def check_config(self, config: Config) -> None:
        file = self.job_file
        tp = common.positive_int(config, "tp_size", file)
        pp = common.positive_int(config, "pp_size", file)
        if tp > 1 and pp > 1:
            raise ConfigRejected(f"llama-server has one split mode: tp_size={tp} (split by rows or tensors) and "
                                 f"pp_size={pp} (split by layers) cannot both exceed 1", file=file, key="pp_size")
        if self.device_name == "cpu" and tp * pp > 1:
            raise ConfigRejected("device cpu computes on the CPU: tp_size and pp_size must be 1", file=file,
                                 key="tp_size" if tp > 1 else "pp_size")
        mode = config.get("backend.split_mode")
        if mode is not None and str(mode).lower() not in SPLIT_BY_TP:
            raise ConfigRejected(f"split_mode must be one of {', '.join(SPLIT_BY_TP)} (the split of tp_size > 1; "
                                 f"layer split is pp_size, none is tp_size 1), not {brief(mode)}", file=file,
                                 key="backend.split_mode")
        for name in ("graph_capture", "custom_all_reduce", "capture_sizes"):
            if name not in config:
                continue
            if name == "capture_sizes":
                raise ConfigRejected("llama-server captures its own CUDA graphs; it takes no capture sizes",
                                     file=file, key=name)
            if name == "custom_all_reduce":
                raise ConfigRejected("llama-server has no custom all-reduce switch; tune env.GGML_CUDA_ALLREDUCE "
                                     "(nccl, internal, none) with backend.split_mode tensor", file=file, key=name)
            if not isinstance(config[name], bool):
                raise ConfigRejected(f"graph_capture must be true or false, not {brief(config[name])}", file=file,
                                     key=name)
            if config[name] and self.device_name == "cpu":
                raise ConfigRejected("graph_capture=true needs device cuda", file=file, key=name)
        speculative.refuse(config, "the llamacpp backend", file,
                           "llama-server's own --model-draft and --draft-max go in backend.settings.extra_args")
        allreduce.refuse(config, "the llamacpp backend", file,
                         "llama-server's all-reduce is env.GGML_CUDA_ALLREDUCE with backend.split_mode tensor")
        self._check_values(config)
        self._flag_words(config)
        self.check_nccl_env(config)

    def _flag_words(self, config: Config) -> list[str]:
        """The ``backend.<flag>`` params as checked argv words (flash_attn true/false as on/off)."""
        checker = self.flags()
        words: list[str] = []
        for name, value in sorted(self.backend_flags_of(config).items()):
            if name == "split_mode":
                continue  # spelled from tp_size
            if name == "flash_attn" and isinstance(value, bool):
                value = "on" if value else "off"
            words += checker.param_words(name, value, self.job_file)
        return words

    def _check_values(self, config: Config) -> None:
        for name in _COUNTS:
            value = config.get(f"backend.{name}")
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigRejected(f"{name} must be a positive integer, not {brief(value)}", file=self.job_file,
                                     key=f"backend.{name}")
        layers = config.get("backend.n_gpu_layers")
        if layers is not None:
            if self.device_name == "cpu":
                raise ConfigRejected("device cpu offloads nothing: drop n_gpu_layers", file=self.job_file,
                                     key="backend.n_gpu_layers")
            if not (layers in ("auto", "all") or isinstance(layers, int) and not isinstance(layers, bool)
                    and layers >= 0):
                raise ConfigRejected(f"n_gpu_layers must be a layer count, auto or all, not {brief(layers)}",
                                     file=self.job_file, key="backend.n_gpu_layers")
        fa = config.get("backend.flash_attn")
        if fa is not None and not isinstance(fa, bool) and str(fa).lower() not in FLASH_ATTN:
            raise ConfigRejected(f"flash_attn must be one of {', '.join(FLASH_ATTN)} (or true/false), not {brief(fa)}",
                                 file=self.job_file, key="backend.flash_attn")

    def normalize(self, config: Config) -> Config:
        """Defaults filled in; the split mode only where tp_size > 1; graphs only on CUDA;
        NCCL settings only where NCCL runs (tensor split over 2+ GPUs)."""
        out = super().normalize(config)
        out.setdefault("pp_size", 1)
        if self.device_name == "cuda":
            out.setdefault("graph_capture", True)
        else:
            out.pop("graph_capture", None)
        if int(out["tp_size"]) > 1:
            out["backend.split_mode"] = self._split(out)
        else:
            out.pop("backend.split_mode", None)
        if isinstance(out.get("backend.flash_attn"), bool):
            out["backend.flash_attn"] = "on" if out["backend.flash_attn"] else "off"
        if self._split(out) != "tensor" or self.device_name != "cuda":
            for name in [n for n in out if n.startswith("env.NCCL_")]:
                del out[name]  # llama.cpp makes no NCCL call here
        return out

    def launch_spec(self, config: Config, host: str, port: int) -> LaunchSpec:
        argv = [self.executable, "-m", self.model, "--host", host, "--port", str(port)]
        if self.device_name == "cpu":
            argv += ["--device", "none"]
        else:
            argv += ["--split-mode", self._split(config)]
        if self.served_model_name:
            argv += ["--alias", self.served_model_name]
        argv += self._flag_words(config) + self.extra_args
        env = common.config_env(self, config)
        if config.get("graph_capture") is False and self.device_name == "cuda":
            env["GGML_CUDA_DISABLE_GRAPHS"] = "1"
        return LaunchSpec(argv=argv, env=env, host=host, port=port, health_path="/health",
                          model_name=self.served_model_name or self.model)

    def model_facts(self) -> dict[str, Any]:
        return {**_gguf_facts(self.model), **self.facts}


class _Flags(FlagChecker):
    """Messages name the binary: llama.cpp builds are numbered, not released."""

    @property
    def release(self) -> str:
        return f"llama-server ({self.server})"


# ---- what the installed binary says ------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _help_table(exe: str) -> FlagTable | None:
    """The flags ``llama-server --help`` lists: a spelling with an argument after it takes a
    value; ``--x, --no-x`` pairs are switches with their negative; DEPRECATED in the help
    marks a deprecated flag."""
    text = versions.command_output((exe, "--help"), 60.0)
    if not text:
        return None
    flags: dict[str, dict] = {}
    for line in text.splitlines():
        m = _HELP_LINE.match(line.rstrip())
        if not m:
            continue
        longs = [s for s in re.split(r",\s*", m.group(1)) if s.startswith("--")]
        negatives = [s for s in longs if s.startswith("--no-")]
        info: dict[str, Any] = {"kind": "value" if m.group(2) else "switch"}
        if negatives and not m.group(2):
            info["negative"] = negatives[0]
        if "DEPRECATED" in (m.group(3) or ""):
            info["deprecated"] = True
        for flag in longs:
            if flag not in negatives or not info.get("negative"):
                flags[flag] = dict(info)
    return FlagTable("llama-server", _binary_version(exe) or "?", f"{exe} --help", flags) if flags else None


@functools.lru_cache(maxsize=None)
def _binary_version(exe: str | None) -> str | None:
    """``version: 6123 (abc1234)`` -> ``6123 (abc1234)``."""
    text = versions.command_output((exe, "--version"), 60.0) if exe else None
    m = re.search(r"^version:\s*(.+)$", text or "", re.M)
    return m.group(1).strip() if m else None


def _gguf_facts(model: str | None) -> dict[str, Any]:
    """Layers, heads, kv_heads, hidden_size and vocab_size from a GGUF header (needs the
    ``gguf`` package; empty without it or for an unreadable file)."""
    try:
        from gguf import GGUFReader  # optional (the test extra): reads a GGUF file's header

        reader = GGUFReader(str(model), "r")
        arch = str(reader.fields["general.architecture"].contents())
        found = {key: reader.fields[f"{arch}.{name}"].contents() for key, name in (
            ("layers", "block_count"), ("heads", "attention.head_count"), ("kv_heads", "attention.head_count_kv"),
            ("hidden_size", "embedding_length")) if f"{arch}.{name}" in reader.fields}
        if "tokenizer.ggml.tokens" in reader.fields:
            found["vocab_size"] = len(reader.fields["tokenizer.ggml.tokens"].data)
    except Exception:  # noqa: BLE001 - facts are optional
        return {}
    return {k: int(v) for k, v in found.items() if isinstance(v, int) and not isinstance(v, bool)}
