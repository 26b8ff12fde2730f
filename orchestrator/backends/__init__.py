"""Server backends: how to start each kind of server for a configuration.

``get_backend_class(kind)`` returns the class registered for a job's ``backend.kind``;
``backend_kinds()`` lists every kind. The built-in backends are named here; any other
installed distribution adds one without editing ncclsweep, by an entry point::

    [project.entry-points."ncclsweep.backends"]
    tgi = "my_package.tgi_backend:TgiBackend"     # a Backend subclass whose kind is "tgi"

A built-in kind cannot be replaced that way: the built-in wins and ``doctor`` warns.

Each backend declares the engine it runs (``Backend.ENGINE``: what its log and ``/metrics`` say,
``core.engines``), registered when its class is defined. Importing this package registers the
built-in engines, in the order a log is matched against them (``BUILTIN_ENGINES``), and has the
registry load every other registered backend before it answers, so that an installed backend's
engine is known wherever a log or ``/metrics`` is read (the ``command`` backend runs any engine).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

from orchestrator.backends import refserver_engine, sglang_engine, vllm_engine
from orchestrator.backends.base import Backend, LaunchSpec
from orchestrator.core import engines

ENTRY_POINT_GROUP = "ncclsweep.backends"

BUILTIN: dict[str, str] = {
    "refserver": "orchestrator.backends.refserver:RefServerBackend",
    "vllm": "orchestrator.backends.vllm:VllmBackend",
    "sglang": "orchestrator.backends.sglang:SglangBackend",
    "command": "orchestrator.backends.command:CommandBackend",
    "llamacpp": "orchestrator.backends.llamacpp:LlamaCppBackend",
}


# the built-in engines, in the order a log is matched against them (the first whose line it has)
BUILTIN_ENGINES = (vllm_engine.ENGINE, sglang_engine.ENGINE, refserver_engine.ENGINE)


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


_LOADED_FOR: list[tuple[str, ...]] = []  # the sys.path the installed backends were last loaded for


def load_registered_backends() -> None:
    """Load every backend other distributions register, so that its class registers its engine
    (``Backend.ENGINE``); one that cannot be loaded is left out (``doctor`` names it). Read again
    only when ``sys.path`` changed (where distributions are found): reading the entry points
    costs tens of milliseconds, and a log is read against the engines on every poll."""
    where = tuple(sys.path)
    if _LOADED_FOR == [where]:
        return
    _LOADED_FOR[:] = [where]
    for kind in registry():
        if kind not in BUILTIN:
            try:
                get_backend_class(kind)
            except ImportError:
                continue


for _engine in BUILTIN_ENGINES:
    engines.register(_engine)
engines.add_loader(load_registered_backends)


def __getattr__(name: str):
    if name == "BACKEND_KINDS":  # the kinds as the job loader reads them
        return backend_kinds()
    raise AttributeError(name)


__all__ = ["Backend", "LaunchSpec", "BACKEND_KINDS", "backend_kinds", "get_backend_class", "registry"]
