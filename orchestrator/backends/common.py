"""Helpers every backend may use: strict settings, the neutral params, the server's
environment, and model facts read from a checkpoint's ``config.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, overload

from orchestrator.backends.flags import did_you_mean
from orchestrator.core import nccl
from orchestrator.core.errors import ConfigRejected, brief


def check_setting_keys(backend, allowed: dict[str, str], hints: dict[str, str] | None = None) -> None:
    """Unknown ``backend.settings`` keys are a BadInput with "did you mean" and the list;
    ``hints`` names the setting meant by a likely mistake (``model_path`` -> ``model``)."""
    for key in backend.settings:
        if key not in allowed:
            hint = (f" (did you mean {brief(hints[key])}?)" if hints and key in hints
                    else did_you_mean(str(key), allowed))
            raise backend.bad(key, f"unknown setting {brief(key)}{hint}; allowed: {', '.join(allowed)}")


@overload
def str_setting(backend: Any, key: str, default: str, *, required: bool = ...) -> str: ...
@overload
def str_setting(backend: Any, key: str, default: None = ..., *, required: Literal[True]) -> str: ...
@overload
def str_setting(backend: Any, key: str, default: str | None = ..., *, required: bool = ...) -> str | None: ...


def str_setting(backend: Any, key: str, default: str | None = None, *, required: bool = False) -> str | None:
    """A string setting (numbers are taken as their text): ``default`` when absent, or
    ``BadInput`` when ``required``; never an empty string."""
    value = backend.settings.get(key, default)
    if value is None:
        if required:
            raise backend.bad(key, "is required (a path or a model id)")
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value).strip() == "":
        raise backend.bad(key, f"must be a non-empty string, not {brief(value)}")
    return str(value)


def list_setting(backend, key: str) -> list[str]:
    value = backend.settings.get(key) or []
    if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                              for a in value):
        raise backend.bad(key, f"must be a list of strings like ['--max-model-len', '8192'], not {brief(value)}")
    return [str(a) for a in value]


def capture_sizes_of(value: Any) -> list[int]:
    """``"1,2,4,8"`` / ``"1 2 4 8"`` / ``[1, 2]`` / ``8`` -> sorted unique positive ints;
    ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"capture_sizes must be batch sizes like '1,2,4,8', not {brief(value)}")
    items: list[Any]
    if isinstance(value, int):
        items = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [t for t in re.split(r"[,\s]+", str(value).strip()) if t]
    try:
        sizes = sorted({int(v) for v in items})
    except (TypeError, ValueError):
        raise ValueError(f"capture_sizes must be batch sizes like '1,2,4,8', not {brief(value)}") from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"capture_sizes must be positive batch sizes like '1,2,4,8', not {brief(value)}")
    return sizes


def config_env(backend, config: dict) -> dict[str, str]:
    """The config's ``env.*`` params as the server's environment delta, NCCL values in
    NCCL's canonical spelling (``NCCL_P2P_LEVEL`` is compared case-sensitively by NCCL:
    ``phb`` would be ignored without a word)."""
    return {k: nccl.normalize_value(k, v) if k.startswith("NCCL_") else v for k, v in backend.env_of(config).items()}


def check_neutral(config: dict, job_file: str | None) -> None:
    """tp_size/pp_size positive ints, graph_capture/custom_all_reduce booleans, capture sizes."""
    positive_int(config, "tp_size", job_file)
    positive_int(config, "pp_size", job_file)
    for name in ("graph_capture", "custom_all_reduce"):
        if name in config and not isinstance(config[name], bool):
            raise ConfigRejected(f"{name} must be true or false, not {brief(config[name])}", file=job_file, key=name)
    if "capture_sizes" in config:
        try:
            capture_sizes_of(config["capture_sizes"])
        except ValueError as exc:
            raise ConfigRejected(str(exc), file=job_file, key="capture_sizes") from None


def positive_int(config: dict, name: str, job_file: str | None, default: int = 1) -> int:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        try:
            if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
                return int(value)
        except ValueError:
            pass
        raise ConfigRejected(f"{name} must be a positive integer, not {brief(value)}", file=job_file, key=name)
    return value


# ---- model facts --------------------------------------------------------------------------

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8": 1}
FACT_KEYS = ("layers", "heads", "kv_heads", "hidden_size", "dtype_bytes", "bytes_per_token",
             "allreduces_per_step", "vocab_size", "moe", "experts")
# config.json keys that count a mixture-of-experts model's routed experts (DeepSeek and GLM:
# n_routed_experts; Qwen-MoE: num_experts; Mixtral: num_local_experts; ERNIE: moe_num_experts)
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")


def _checkpoint_config(model: str | None) -> dict[str, Any] | None:
    """A local Hugging Face checkpoint's ``config.json`` (its ``text_config`` merged in, for
    multimodal ones); None for a model id, a GGUF file or an unreadable config."""
    if not model:
        return None
    path = Path(model).expanduser()
    cfg_path = path / "config.json" if path.is_dir() else None
    if cfg_path is None or not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def _count(cfg: dict[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        if isinstance(cfg.get(name), int) and not isinstance(cfg.get(name), bool):
            return cfg[name]
    return None


def facts_from_checkpoint(model: str | None) -> dict[str, Any]:
    """Layers, heads, kv_heads, hidden_size, dtype_bytes and vocab_size from a local
    Hugging Face checkpoint's ``config.json`` (``text_config`` for multimodal ones), and for a
    mixture-of-experts model ``moe: true`` with its routed ``experts``; empty for a model id,
    a GGUF file or an unreadable config."""
    cfg = _checkpoint_config(model)
    if cfg is None:
        return {}
    out: dict[str, Any] = {}
    for key, names in (("layers", ("num_hidden_layers", "n_layer", "num_layers")),
                       ("heads", ("num_attention_heads", "n_head")),
                       ("kv_heads", ("num_key_value_heads",)),
                       ("hidden_size", ("hidden_size", "n_embd", "d_model")),
                       ("vocab_size", ("vocab_size",))):
        found = _count(cfg, names)
        if found is not None:
            out[key] = found
    if "heads" in out and "kv_heads" not in out:
        out["kv_heads"] = out["heads"]
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(dtype, str) and dtype in _DTYPE_BYTES:
        out["dtype_bytes"] = _DTYPE_BYTES[dtype]
    experts = _count(cfg, _EXPERT_KEYS)
    if experts and experts > 1:
        out.update(moe=True, experts=experts)
    return out


def is_moe(backend: Any, model: str | None) -> bool | None:
    """Whether the model is a mixture of experts: ``settings.model_facts.moe`` when given, else
    what a readable checkpoint's ``config.json`` says (no expert count: dense); None unknown."""
    declared = (getattr(backend, "facts", None) or {}).get("moe")
    if isinstance(declared, bool):
        return declared
    cfg = _checkpoint_config(model)
    if cfg is None:
        return None
    experts = _count(cfg, _EXPERT_KEYS)
    return bool(experts and experts > 1)


def model_facts_setting(backend) -> dict[str, Any]:
    """``settings.model_facts``: numbers the report and constraints use (checked); ``moe`` is
    a boolean."""
    facts = backend.settings.get("model_facts") or {}
    if not isinstance(facts, dict):
        raise backend.bad("model_facts", f"must be a mapping like {{layers: 78, heads: 64}}, not {brief(facts)}")
    for key, value in facts.items():
        if key not in FACT_KEYS:
            raise backend.bad(f"model_facts.{key}", f"unknown fact {brief(key)}{did_you_mean(str(key), FACT_KEYS)}; "
                                                    f"allowed: {', '.join(FACT_KEYS)}")
        if key == "moe":  # a mixture-of-experts model (true) or a dense one (false)
            if not isinstance(value, bool):
                raise backend.bad("model_facts.moe", f"must be true or false, not {brief(value)}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise backend.bad(f"model_facts.{key}", f"must be a positive number, not {brief(value)}")
    return dict(facts)
