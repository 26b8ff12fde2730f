"""The tensor-parallel all-reduce as neutral parameters: which implementation runs it, and the
size below which an engine's own path is used. How a release spells each value is the
backend's (vLLM: flags, ``VLLM_*`` variables and ``--compilation-config`` keys; SGLang: flags),
read from the release's flag table (its own parser, else the bundled table), as the
speculative methods are.

On a PCIe node the decode all-reduce is small (hidden size x tokens in flight x bytes per
element: 12 KB for GLM-5 at one request), and below about half a megabyte a one-shot kernel
over P2P beats NCCL; where the two cross depends on the box (120 KB on 4 GPUs, 48 KB on 8
across sockets, measured by others), which is what the pre-screen's size sweep finds.

=========================  ===============================================================
``allreduce.backend``      the path the engine tries first for the tensor-parallel
                           all-reduce; one of ``VALUES`` that the release offers
                           (``Paths``, per release): ``nccl`` (NCCL alone: every engine-side
                           path off), ``custom`` (the engine's own P2P kernel, NCCL above its
                           size limit), ``symm_mem`` (torch symmetric memory),
                           ``nccl_symm_mem`` (NCCL's symmetric kernels), ``flashinfer``,
                           ``flashinfer_pcie_ipc`` (FlashInfer's PCIe CUDA-IPC all-reduce),
                           ``mscclpp``, ``flashinfer_fusion`` (all-reduce fused with the
                           RMSNorm by FlashInfer; ``flashinfer_fusion_<backend>`` picks the
                           fusion's own backend where the release names them)
``allreduce.max_size``     bytes (``65536``, ``64KB``, ``1MB``; K and M are 1024-based) below
                           which the chosen path is used, where the release has a setting for
                           it (``Path.max_size``); refused elsewhere
=========================  ===============================================================

Rules every backend shares (``check``): a value the release lacks, a size where the chosen path
has no limit to set, an ``env.*`` param the path sets itself, and a path together with
``custom_all_reduce: false`` (the older switch) are refused, one line each. Without tensor
parallelism there is no all-reduce: ``normalize`` drops
both at ``tp_size`` 1. A backend without these paths refuses the params (``refuse``).

After start the trial reads the server's log (``Backend.allreduce_warnings``): an engine may
turn the requested path off without failing (vLLM and SGLang disable their custom all-reduce
on more than two PCIe-only GPUs and only log it); such a warning starts with
``nccl.ENGINE_PATH_WARNING`` and the run prints it once per study. A path the engine turned off,
whatever asked for it (``allreduce.backend``, or ``custom_all_reduce: true``, the engines'
default), is also recorded as the fallback it ran (``Backend.engine_fallbacks``, ``fallback``:
the trial's ``server.fallbacks``), which the export and the report show beside the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.flags import did_you_mean
from orchestrator.core.errors import ConfigRejected, brief
from orchestrator.core.nccl import ENGINE_PATH_WARNING

BACKEND = "allreduce.backend"
MAX_SIZE = "allreduce.max_size"
PARAMS = (BACKEND, MAX_SIZE)
# the neutral values, in the order they are listed (a release offers a subset, plus fusion backends)
VALUES = ("nccl", "custom", "symm_mem", "nccl_symm_mem", "flashinfer", "flashinfer_pcie_ipc", "mscclpp",
          "flashinfer_fusion")
FUSION = "flashinfer_fusion"
_SIZE = re.compile(r"(\d+)\s*(|B|K|KB|KIB|M|MB|MIB)", re.I)
_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20}


@dataclass(frozen=True)
class Path:
    """How one release spells one value: ``flags`` (argv words), ``env`` (variables the server
    gets), ``compilation`` (vLLM ``--compilation-config`` keys, dotted: ``pass_config.x``),
    ``max_size`` (how ``allreduce.max_size`` is spelled for it: a dotted compilation key whose
    value is in MiB, or None: it has no setting), ``nccl_symmetric`` (it runs NCCL's symmetric
    kernels, which NCCL 2.29+ ignores on PCIe), ``log_name`` (what the engine calls it in its log,
    for the verification)."""

    value: str
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    compilation: tuple[tuple[str, Any], ...] = ()
    max_size: str | None = None
    nccl_symmetric: bool = False
    log_name: str | None = None


@dataclass(frozen=True)
class Paths:
    """What one release offers: its values (``paths``, in listing order), the release in
    messages ("vLLM 0.26.0"), where the offer was read (``source``: doctor prints it), and
    ``assumed`` when the release's own list is unknown (only the flags every release has)."""

    paths: dict[str, Path]
    release: str
    source: str
    assumed: bool = False
    no_size: str = ""  # why no path of this release takes allreduce.max_size (for the refusal)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.paths)


def value_of(config: Mapping[str, Any]) -> str | None:
    """The config's all-reduce path, None when it leaves the engine's default."""
    value = config.get(BACKEND)
    return None if value is None else str(value)


def given(config: Mapping[str, Any]) -> list[str]:
    return [name for name in PARAMS if name in config]


def refuse(config: Mapping[str, Any], server: str, job_file: str | None, instead: str = "") -> None:
    """ConfigRejected for a backend without selectable all-reduce paths, when a config asks for one."""
    names = given(config)
    if names:
        raise ConfigRejected(f"{server} has no all-reduce path the tuner can choose; drop {', '.join(names)}"
                             + (f" ({instead})" if instead else ""), file=job_file, key=names[0])


def size_bytes(value: Any) -> int:
    """``65536`` / ``"64KB"`` / ``"1MB"`` -> bytes (K, M 1024-based); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{MAX_SIZE} must be a size like 65536, 64KB or 1MB, not {brief(value)}")
    if isinstance(value, int):
        number = value
    else:
        m = _SIZE.fullmatch(str(value).strip())
        if not m:
            raise ValueError(f"{MAX_SIZE} must be a size like 65536, 64KB or 1MB (K, M: 1024-based), "
                             f"not {brief(value)}")
        number = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if number < 1:
        raise ValueError(f"{MAX_SIZE} must be a positive size, not {brief(value)}")
    return number


def check(config: Mapping[str, Any], paths: Paths, job_file: str | None) -> None:
    """Every shared rule (module docstring) against ``paths``, the release's offer."""
    names = given(config)
    if not names:
        return
    if config.get("custom_all_reduce") is False:  # true is the engines' default, which a path replaces
        raise ConfigRejected(f"custom_all_reduce and {names[0]} both choose the all-reduce path; keep "
                             f"{BACKEND} (custom, nccl, ...) and drop custom_all_reduce", file=job_file,
                             key="custom_all_reduce")
    value = value_of(config)
    if MAX_SIZE in config:
        try:
            size_bytes(config[MAX_SIZE])
        except ValueError as exc:
            raise ConfigRejected(str(exc), file=job_file, key=MAX_SIZE) from None
    if value is None:
        if MAX_SIZE in config:
            raise ConfigRejected(f"{MAX_SIZE} needs {BACKEND} (the path whose limit it sets)", file=job_file,
                                 key=MAX_SIZE)
        return
    if value not in paths.paths:
        hint = did_you_mean(value, paths.names) or did_you_mean(value.lower(), paths.names)
        raise ConfigRejected(f"{brief(value)} is not an all-reduce backend of {paths.release}{hint}; allowed: "
                             f"{', '.join(paths.names)}"
                             + (" (assumed: the release's own list is unknown)" if paths.assumed else ""),
                             file=job_file, key=BACKEND)
    for var, _ in paths.paths[value].env:
        if f"env.{var}" in config:
            raise ConfigRejected(f"env.{var} is set by the tuner from {BACKEND}={value}; drop env.{var}",
                                 file=job_file, key=f"env.{var}")
    if MAX_SIZE in config and paths.paths[value].max_size is None:
        sized = [p.value for p in paths.paths.values() if p.max_size]
        why = "; ".join(part for part in (
            f"only {', '.join(sized)} {'takes' if len(sized) == 1 else 'take'} one there" if sized else "",
            paths.no_size or ("" if sized else f"{paths.release} has no setting for it")) if part)
        raise ConfigRejected(f"{BACKEND}={value} has no size limit {paths.release} lets you set ({why}); "
                             f"drop {MAX_SIZE}", file=job_file, key=MAX_SIZE)


def normalize(out: dict[str, Any]) -> None:
    """Drop, in place, what cannot matter: both params without tensor parallelism (no
    all-reduce), the size without a path, ``custom_all_reduce`` beside a path (which decides);
    the size in bytes."""
    if int(out.get("tp_size", 1) or 1) <= 1 or value_of(out) is None:
        for name in PARAMS:
            out.pop(name, None)
        return
    if out.get("custom_all_reduce") is True:
        del out["custom_all_reduce"]
    if MAX_SIZE in out:
        try:
            out[MAX_SIZE] = size_bytes(out[MAX_SIZE])
        except ValueError:
            pass  # check_config refuses it


def path_of(config: Mapping[str, Any], paths: Paths | None) -> Path | None:
    """The spelling of a normalized, checked config's path (None: the engine's default)."""
    value = value_of(config)
    return paths.paths.get(value) if value is not None and paths is not None else None


def compilation_of(config: Mapping[str, Any], path: Path | None) -> dict[str, Any]:
    """The nested ``--compilation-config`` keys a path (and its size) sets."""
    out: dict[str, Any] = {}
    if path is None:
        return out
    items = list(path.compilation)
    if path.max_size and MAX_SIZE in config:
        items.append((path.max_size, round(size_bytes(config[MAX_SIZE]) / (1 << 20), 6)))
    for dotted, value in items:
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def warning(value: str, server: str, what: str) -> str:
    """A verification warning in the one form the run prints once per study."""
    return f"{ENGINE_PATH_WARNING}{BACKEND}={value} was requested but {server} {what}"


def is_path_warning(text: str) -> bool:
    return text.startswith(ENGINE_PATH_WARNING)


def asked_path(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """(param, path) the config asks the engine for: ``allreduce.backend``, else the older switch
    ``custom_all_reduce: true`` (the custom kernel; normalized configs carry the engines' default
    true at tensor parallelism, so the default path is asked for too); None: neither."""
    value = value_of(config)
    if value is not None:
        return BACKEND, value
    if config.get("custom_all_reduce") is True:
        return "custom_all_reduce", "custom"
    return None


def fallback(config: Mapping[str, Any], param: str, ran: str | None, said: str) -> dict[str, Any]:
    """The record of a path the engine disabled (``Backend.engine_fallbacks``): ``param`` and the
    value the config gave it (``asked``), the path the engine ran instead (``ran``; None: its log
    does not say), ``ran_value`` (the value of ``param`` that means what ran: the path itself, or
    false for ``custom_all_reduce``), the engine's line (``said``) and ``text``, how every reader
    shows it: ``allreduce.backend=custom (the engine ran nccl: Custom allreduce is disabled because
    ...)``."""
    asked = config.get(param)
    shown = str(asked).lower() if isinstance(asked, bool) else str(asked)
    instead = f"the engine ran {ran}" if ran else "the engine turned it off"
    ran_value: Any = (ran == "custom" if ran else None) if param == "custom_all_reduce" else ran
    return {"param": param, "asked": asked, "ran": ran, "ran_value": ran_value, "said": said,
            "text": f"{param}={shown} ({instead}: {said})"}


def fallbacks_of(server: Any) -> list[dict[str, Any]]:
    """The ``fallback`` records of a trial's ``server`` record (its ``fallbacks``), the readers' one
    way to them: what a record edited by hand holds besides is left out."""
    found = server.get("fallbacks") if isinstance(server, Mapping) else None
    return [dict(f) for f in found if isinstance(f, Mapping) and f.get("param") and f.get("text")] \
        if isinstance(found, list) else []
