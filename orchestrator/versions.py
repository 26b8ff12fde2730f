"""Installed versions of what a tuning run depends on: vLLM, SGLang, torch, CUDA, NCCL, driver.

Every function answers ``None`` (never raises) when the thing is absent or does not say.
Results are cached per process: a version does not change under a running driver.

- ``package_version("vllm", python=None)``: the distribution's version, read with
  ``importlib.metadata`` in this interpreter or, when ``python`` names another
  interpreter (a server's own venv), in that one. This is what ``vllm --version`` prints
  (``vllm/entrypoints/cli/main.py`` reads ``importlib.metadata.version("vllm")``) and what
  ``sglang.__version__`` holds, without importing either (seconds, CUDA initialisation).
- ``vllm_version(python, executable)``: as above, else ``<executable> --version``.
- ``torch_versions(python)``: torch, its CUDA and its NCCL, from ``torch.version`` and
  ``torch.cuda.nccl.version()`` (the NCCL a server built on that torch loads, unless the
  server brings its own).
- ``driver_version()``: from ``nvidia-smi``.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess

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


def at_least(version: str | tuple | None, minimum: tuple[int, ...]) -> bool | None:
    """Whether ``version`` >= ``minimum``; None when the version is unknown."""
    v = version if isinstance(version, tuple) else parse_version(version)
    return None if v is None else tuple(v) >= tuple(minimum)


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
        import importlib.metadata

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
def vllm_version(python: str | None = None, executable: str | None = None) -> str | None:
    """Installed vLLM: metadata of ``python`` (or this interpreter), else ``vllm --version``."""
    found = package_version("vllm", python)
    if found or python is not None:
        return found
    exe = shutil.which(executable or "vllm")
    if exe is None:
        return None
    out = _run([exe, "--version"], 120.0)
    if not out:
        return None
    lines = [line.strip() for line in out.splitlines() if parse_version(line.strip())]
    return lines[-1] if lines else None


def sglang_version(python: str | None = None) -> str | None:
    """Installed SGLang (``sglang.__version__`` is the distribution's version)."""
    return package_version("sglang", python)


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
        import sys

        python = sys.executable
    out = _run([python, "-c", code], 120.0)
    try:
        data = json.loads(out) if out else {}
    except json.JSONDecodeError:
        data = {}
    return {"torch": data.get("torch"), "cuda": data.get("cuda"), "nccl": data.get("nccl")}


@functools.lru_cache(maxsize=None)
def driver_version() -> str | None:
    """NVIDIA driver version from ``nvidia-smi`` (None without one)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30.0)
    lines = [line.strip() for line in (out or "").splitlines() if line.strip()]
    return lines[0] if lines else None
