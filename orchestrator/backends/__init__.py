"""Server backends: how to start each kind of server for a configuration.

``get_backend_class(kind)`` returns the class registered for a job's ``backend.kind``;
``backend_kinds()`` lists every kind. The built-in backends are named here; any other
installed distribution adds one without editing ncclsweep, by an entry point::

    [project.entry-points."ncclsweep.backends"]
    tgi = "my_package.tgi_backend:TgiBackend"     # a Backend subclass whose kind is "tgi"

A built-in kind cannot be replaced that way: the built-in wins and ``doctor`` warns.
"""

from __future__ import annotations

import importlib
import importlib.metadata

from orchestrator.backends.base import Backend, LaunchSpec

ENTRY_POINT_GROUP = "ncclsweep.backends"

BUILTIN: dict[str, str] = {
    "refserver": "orchestrator.backends.refserver:RefServerBackend",
    "vllm": "orchestrator.backends.vllm:VllmBackend",
    "sglang": "orchestrator.backends.sglang:SglangBackend",
    "command": "orchestrator.backends.command:CommandBackend",
    "llamacpp": "orchestrator.backends.llamacpp:LlamaCppBackend",
}


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Backends other distributions register (read on every call: installs change)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def registry() -> dict[str, str]:
    """kind -> ``module:Class``, built-ins first, then registered ones by name."""
    found = {name: ep.value for name, ep in sorted(_entry_points().items()) if name not in BUILTIN}
    return {**BUILTIN, **found}


def shadowed() -> list[str]:
    """Entry points that name a built-in kind (ignored), as ``kind (value)``."""
    return [f"{name} ({ep.value})" for name, ep in sorted(_entry_points().items()) if name in BUILTIN]


def backend_kinds() -> tuple[str, ...]:
    return tuple(registry())


def get_backend_class(kind: str) -> type[Backend]:
    """The class for ``kind``: KeyError when no backend has that kind, ImportError when
    its module cannot be loaded or does not hold a Backend of that kind."""
    target = registry()[kind]
    module_name, _, class_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:  # a third party's import error, reported as one line
        raise ImportError(f"backend {kind!r} ({target}) cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Backend)) or getattr(cls, "kind", None) != kind:
        raise ImportError(f"backend {kind!r} ({target}) is not a Backend subclass whose kind is {kind!r}")
    return cls


def __getattr__(name: str):
    if name == "BACKEND_KINDS":  # the kinds as the job loader reads them
        return backend_kinds()
    raise AttributeError(name)


__all__ = ["Backend", "LaunchSpec", "BACKEND_KINDS", "backend_kinds", "get_backend_class", "registry"]
