"""What the vLLM and SGLang backends share: strict settings, ``backend.<flag>`` params
turned into command-line flags checked against the release's own flags, spellings that
depend on the release, and model facts read from a checkpoint's ``config.json``.

A ``backend.<flag>`` param becomes ``--flag-with-dashes``: ``True`` is the bare flag,
``False`` is the flag's negative spelling where the release has one (``--no-x``,
vLLM's ``--enable-x``/``--disable-x`` pairs) and is omitted otherwise, ``None`` is
omitted, a list-valued flag takes ``"1,2,4"`` or ``"1 2 4"`` as separate words, anything
else is ``--flag value``.

Checking against ``orchestrator.backends.known_flags``: when the installed (or the job's
``version:``) release is the one the table was read from, or the version is unknown
(then the current release is assumed), a flag the release lacks, a deprecated spelling,
a value for a switch or a boolean for a valued flag is refused. For other releases only
the backend's ``SPELLINGS`` table (spellings verified per release) is enforced and other
flags pass unchecked.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.backends.known_flags import FlagTable
from orchestrator.errors import ConfigRejected
from orchestrator.versions import parse_version

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Spelling:
    """How releases ``since`` (inclusive) to ``until`` (exclusive) spell one setting:
    ``words`` (flags, each a switch or followed by the value), or None when those releases
    cannot express it, with ``why``."""

    since: Version | None
    until: Version | None
    words: tuple[str, ...] | None
    why: str = ""

    def covers(self, version: Version) -> bool:
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


def spelling_for(rules: list[Spelling], version: Version | None, current: Version) -> Spelling:
    """The rule for ``version`` (the current release's rule when it is unknown)."""
    v = version or current
    for rule in rules:
        if rule.covers(v):
            return rule
    return rules[-1]


def vstr(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "?"


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def did_you_mean(word: str, options) -> str:
    near = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def check_setting_keys(backend, allowed: dict[str, str], hints: dict[str, str] | None = None) -> None:
    """Unknown ``backend.settings`` keys are a BadInput with "did you mean" and the list;
    ``hints`` names the setting meant by a likely mistake (``model_path`` -> ``model``)."""
    for key in backend.settings:
        if key not in allowed:
            hint = f" (did you mean {hints[key]!r}?)" if hints and key in hints else did_you_mean(str(key), allowed)
            raise backend.bad(key, f"unknown setting {key!r}{hint}; allowed: {', '.join(allowed)}")


def str_setting(backend, key: str, default: str | None = None, *, required: bool = False) -> str | None:
    value = backend.settings.get(key, default)
    if value is None:
        if required:
            raise backend.bad(key, "is required (a path or a model id)")
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value).strip() == "":
        raise backend.bad(key, f"must be a non-empty string, not {value!r}")
    return str(value)


def list_setting(backend, key: str) -> list[str]:
    value = backend.settings.get(key) or []
    if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                              for a in value):
        raise backend.bad(key, f"must be a list of strings like ['--max-model-len', '8192'], not {value!r}")
    return [str(a) for a in value]


def capture_sizes_of(value: Any) -> list[int]:
    """``"1,2,4,8"`` / ``"1 2 4 8"`` / ``[1, 2]`` / ``8`` -> sorted unique positive ints;
    ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"capture_sizes must be batch sizes like '1,2,4,8', not {value!r}")
    if isinstance(value, int):
        items = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [t for t in re.split(r"[,\s]+", str(value).strip()) if t]
    try:
        sizes = sorted({int(v) for v in items})
    except (TypeError, ValueError):
        raise ValueError(f"capture_sizes must be batch sizes like '1,2,4,8', not {value!r}") from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"capture_sizes must be positive batch sizes like '1,2,4,8', not {value!r}")
    return sizes


def server_env(backend, config: dict) -> dict[str, str]:
    """The config's ``env.*`` params as the server's environment delta, NCCL values in
    NCCL's canonical spelling (``NCCL_P2P_LEVEL`` is compared case-sensitively by NCCL:
    ``phb`` would be ignored without a word)."""
    from orchestrator import nccl

    return {k: nccl.normalize_value(k, v) if k.startswith("NCCL_") else v for k, v in backend.env_of(config).items()}


def read_server_settings(backend, allowed: dict[str, str], example_release: str) -> None:
    """The settings every model-serving framework backend takes (vLLM, SGLang): model,
    served_model_name, extra_args (checked against the release's flags), python, version
    override, model_facts. Sets them as attributes of ``backend``."""
    check_setting_keys(backend, allowed, {"model_path": "model", "model_name": "served_model_name"})
    backend.model = str_setting(backend, "model", required=True)
    backend.served_model_name = str_setting(backend, "served_model_name")
    backend.extra_args = list_setting(backend, "extra_args")
    backend.python = str_setting(backend, "python")
    backend.version_override = str_setting(backend, "version")
    if backend.version_override and parse_version(backend.version_override) is None:
        raise backend.bad("version", f"must be a release like '{example_release}', not {backend.version_override!r}")
    backend.facts = model_facts_setting(backend)


def check_extra_args(backend) -> None:
    problem = backend.flags().extra_problem(backend.extra_args)
    if problem:
        raise backend.bad("extra_args", problem)


# settings every OpenAI-serving backend (vLLM, SGLang) takes, with their help text
SERVER_SETTINGS = {
    "served_model_name": "name in the OpenAI API (default: model)",
    "extra_args": "list of extra command-line arguments, passed through",
    "model_facts": "layers, heads, kv_heads, hidden_size, dtype_bytes, bytes_per_token, allreduces_per_step",
}

# vLLM's and SGLang's own defaults: one GPU, CUDA graphs on, custom all-reduce on
SERVING_DEFAULTS = {"tp_size": 1, "graph_capture": True, "custom_all_reduce": True}


def data_parallel(config: dict, key: str) -> int:
    """The data-parallel replica count a config asks for under ``key`` (1 if unset or bad:
    check_config reports bad values; this only sizes the GPU request)."""
    dp = config.get(key, 1)
    return dp if isinstance(dp, int) and not isinstance(dp, bool) and dp > 0 else 1


def check_neutral(config: dict, job_file: str | None) -> None:
    """tp_size/pp_size positive ints, graph_capture/custom_all_reduce booleans, capture sizes."""
    from orchestrator.errors import ConfigRejected

    positive_int(config, "tp_size", job_file)
    positive_int(config, "pp_size", job_file)
    for name in ("graph_capture", "custom_all_reduce"):
        if name in config and not isinstance(config[name], bool):
            raise ConfigRejected(f"{name} must be true or false, not {config[name]!r}", file=job_file, key=name)
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
        raise ConfigRejected(f"{name} must be a positive integer, not {value!r}", file=job_file, key=name)
    return value


class FlagChecker:
    """Checks and renders flags of one server release against its flag table.

    ``managed``: flags the backend sets itself from neutral params (an extra argument or
    a ``backend.<flag>`` param naming one would silently override the tuned value).
    ``spellings``: ``{param flag name: [Spelling, ...]}`` for flags whose spelling
    depends on the release (aliases included: every name of one setting maps to the
    same rules).
    """

    def __init__(self, table: FlagTable, version: Version | None, managed: dict[str, str],
                 spellings: dict[str, list[Spelling]], server: str):
        self.table = table
        self.version = version
        self.current = parse_version(table.version)
        self.strict = version is None or version == self.current
        self.managed = managed
        self.spellings = spellings
        self.server = server

    @property
    def release(self) -> str:
        return f"{self.server} {vstr(self.version or self.current)}" + ("" if self.version else " (assumed)")

    def problem(self, flag: str, value: Any = True, *, for_extra: bool = False) -> str | None:
        """Why ``flag`` (with ``value``) cannot be given to this release, or None."""
        if flag in self.managed:
            return f"{flag} is set by the tuner from {self.managed[flag]}; tune or fix that instead"
        if not self.strict:
            return None
        if not self.table.knows(flag):
            return (f"{flag} is not a flag of {self.release}{did_you_mean(flag, self.table.flags)}")
        info = self.table.flags.get(flag)
        positive = self.table.flags.get(self.table.negatives.get(flag, ""))
        if info is None and positive is not None and positive.deprecated:
            return f"{flag} is deprecated in {self.release}"
        if info is not None and info.deprecated:
            instead = f"; use {info.replacement}" if info.replacement else ""
            return f"{flag} is deprecated in {self.release}{instead}"
        if for_extra or info is None:
            return None
        if info.kind == "switch" and not isinstance(value, bool) and value is not None:
            return f"{flag} is a switch in {self.release}: give true or false, not {value!r}"
        if info.kind != "switch" and isinstance(value, bool):
            return f"{flag} takes a value in {self.release}, not {value!r}"
        return None

    def render(self, flag: str, value: Any) -> list[str]:
        """argv words for one flag and value (see the module docstring)."""
        if value is None:
            return []
        info = self.table.flags.get(flag) if self.strict else None
        if isinstance(value, bool):
            if value:
                return [flag]
            if info is not None and info.negative:
                return [info.negative]
            return []
        if info is not None and info.kind == "list":
            items = value if isinstance(value, (list, tuple)) else [t for t in re.split(r"[,\s]+", str(value)) if t]
            return [flag, *map(str, items)]
        return [flag, str(value)]

    def param_words(self, name: str, value: Any, job_file: str | None) -> list[str]:
        """Check and render one ``backend.<name>`` param; ConfigRejected when this release
        cannot take it."""
        key = f"backend.{name}"
        rules = self.spellings.get(name)
        if rules is not None:
            rule = spelling_for(rules, self.version, self.current)
            if rule.words is None:
                raise ConfigRejected(f"{self.release} cannot express {key}: {rule.why}", file=job_file, key=key)
            words: list[str] = []
            for word in rule.words:
                words += self.render(word, value)
            return words
        flag = flag_of(name)
        problem = self.problem(flag, value)
        if problem:
            raise ConfigRejected(problem, file=job_file, key=key)
        return self.render(flag, value)

    def extra_problem(self, args: list[str]) -> str | None:
        """Why pass-through arguments cannot go to this release, or None."""
        for arg in args:
            if not arg.startswith("-") or arg[1:2].isdigit():
                continue
            if not arg.startswith("--"):  # short aliases (-tp 8) are checked only against managed flags
                if arg.split("=", 1)[0] in self.managed:
                    return f"{arg!r}: {self.problem(arg.split('=', 1)[0])}"
                continue
            flag = arg.split("=", 1)[0].split(".", 1)[0]  # vLLM's --compilation-config.mode=3 is --compilation-config
            problem = self.problem(flag, for_extra=True)
            if problem:
                return f"{arg!r}: {problem}"
        return None


# ---- model facts --------------------------------------------------------------------------

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "float8": 1}
FACT_KEYS = ("layers", "heads", "kv_heads", "hidden_size", "dtype_bytes", "bytes_per_token",
             "allreduces_per_step", "vocab_size")


def facts_from_checkpoint(model: str | None) -> dict[str, Any]:
    """Layers, heads, kv_heads, hidden_size, dtype_bytes and vocab_size from a local
    Hugging Face checkpoint's ``config.json`` (``text_config`` for multimodal ones);
    empty for a model id, a GGUF file or an unreadable config."""
    if not model:
        return {}
    path = Path(model).expanduser()
    cfg_path = path / "config.json" if path.is_dir() else None
    if cfg_path is None or not cfg_path.is_file():
        return {}
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return {}
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    out: dict[str, Any] = {}
    for key, names in (("layers", ("num_hidden_layers", "n_layer", "num_layers")),
                       ("heads", ("num_attention_heads", "n_head")),
                       ("kv_heads", ("num_key_value_heads",)),
                       ("hidden_size", ("hidden_size", "n_embd", "d_model")),
                       ("vocab_size", ("vocab_size",))):
        for name in names:
            if isinstance(cfg.get(name), int) and not isinstance(cfg.get(name), bool):
                out[key] = cfg[name]
                break
    if "heads" in out and "kv_heads" not in out:
        out["kv_heads"] = out["heads"]
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(dtype, str) and dtype in _DTYPE_BYTES:
        out["dtype_bytes"] = _DTYPE_BYTES[dtype]
    return out


def model_facts_setting(backend) -> dict[str, Any]:
    """``settings.model_facts``: numbers the report and constraints use (checked)."""
    facts = backend.settings.get("model_facts") or {}
    if not isinstance(facts, dict):
        raise backend.bad("model_facts", f"must be a mapping like {{layers: 78, heads: 64}}, not {facts!r}")
    for key, value in facts.items():
        if key not in FACT_KEYS:
            raise backend.bad(f"model_facts.{key}", f"unknown fact {key!r}{did_you_mean(str(key), FACT_KEYS)}; "
                                                    f"allowed: {', '.join(FACT_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise backend.bad(f"model_facts.{key}", f"must be a positive number, not {value!r}")
    return dict(facts)
