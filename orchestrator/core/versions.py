"""Installed versions of what a tuning run depends on: server packages, torch, CUDA, NCCL.
Which server a job runs, and how its release is found, is its backend's to say
(``Backend.version`` / ``installed_release``); this module only reads.

Every function answers ``None`` (never raises) when the thing is absent or does not say.
Results are cached per process: a version does not change under a running driver.

- ``package_version("vllm", python=None)``: the distribution's version, read with
  ``importlib.metadata`` in this interpreter or, when ``python`` names another
  interpreter (a server's own venv), in that one. This is what ``vllm --version`` prints
  (``vllm/entrypoints/cli/main.py`` reads ``importlib.metadata.version("vllm")``) and what
  ``sglang.__version__`` holds, without importing either (seconds, CUDA initialisation).
- ``command_output([exe, "--version"])``: what a command prints (stdout and stderr).
- ``torch_versions(python)``: torch, its CUDA and its NCCL, from ``torch.version`` and
  ``torch.cuda.nccl.version()`` (the NCCL a server built on that torch loads, unless the
  server brings its own).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import re
import subprocess
import sys

_VERSION = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.33.0"`` -> (0, 33, 0); ``"0.5.15.post1"`` -> (0, 5, 15); ``"0.11.1rc2.dev3+g12"``
    -> (0, 11, 1); None for text without a version."""
    if not text:
        return None
    m = _VERSION.search(str(text))
    if not m:
        return None
    return tuple(int(g or 0) for g in m.groups())  # type: ignore[return-value]


def _run(argv: list[str], timeout_s: float) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def package_version(package: str, python: str | None = None, timeout_s: float = 60.0) -> str | None:
    """Version of an installed distribution, in this interpreter or in ``python``."""
    if python is None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None
    code = ("import importlib.metadata as m, sys\n"
            "try: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: pass\n")
    out = _run([python, "-c", code, package], timeout_s)
    return out.strip() or None if out is not None else None


@functools.lru_cache(maxsize=None)
def command_output(argv: tuple[str, ...], timeout_s: float = 60.0) -> str | None:
    """stdout and stderr of a command that exits 0 (``llama-server --version`` prints to
    stderr), or None."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def torch_versions(python: str | None = None) -> dict[str, str | None]:
    """{"torch", "cuda", "nccl"} of the torch in ``python`` (or this interpreter)."""
    code = ("import json\n"
            "try:\n"
            "    import torch\n"
            "except Exception:\n"
            "    print('{}'); raise SystemExit\n"
            "out = {'torch': torch.__version__, 'cuda': torch.version.cuda, 'nccl': None}\n"
            "try:\n"
            "    v = torch.cuda.nccl.version()\n"
            "    out['nccl'] = '.'.join(map(str, v)) if isinstance(v, tuple) else str(v)\n"
            "except Exception:\n"
            "    pass\n"
            "print(json.dumps(out))\n")
    if python is None:
        python = sys.executable
    out = _run([python, "-c", code], 120.0)
    try:
        data = json.loads(out) if out else {}
    except json.JSONDecodeError:
        data = {}
    return {"torch": data.get("torch"), "cuda": data.get("cuda"), "nccl": data.get("nccl")}
