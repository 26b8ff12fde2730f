"""Server backends: how to start each kind of server for a configuration.

``get_backend(kind)`` returns the class registered for a job's ``backend.kind``.
"""

from __future__ import annotations

from orchestrator.backends.base import Backend, LaunchSpec

_REGISTRY: dict[str, str] = {
    "refserver": "orchestrator.backends.refserver:RefServerBackend",
    "vllm": "orchestrator.backends.vllm:VllmBackend",
    "sglang": "orchestrator.backends.sglang:SglangBackend",
    "command": "orchestrator.backends.command:CommandBackend",
}

BACKEND_KINDS = tuple(_REGISTRY)


def get_backend_class(kind: str) -> type[Backend]:
    import importlib

    module_name, class_name = _REGISTRY[kind].split(":")
    return getattr(importlib.import_module(module_name), class_name)


__all__ = ["Backend", "LaunchSpec", "BACKEND_KINDS", "get_backend_class"]
