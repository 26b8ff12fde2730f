"""Installed versions (core/versions.py), read without importing the server: a distribution's
version in this interpreter and in another one (a real venv holding a release, as a server's
own venv does), what a command prints, torch's CUDA and NCCL; None, never an exception, for
anything absent."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.core import versions


@pytest.fixture(autouse=True)
def fresh():
    """Answers are cached per process: each test asks afresh."""
    for cached in (versions.package_version, versions.command_output, versions.torch_versions):
        cached.cache_clear()
    yield
    for cached in (versions.package_version, versions.command_output, versions.torch_versions):
        cached.cache_clear()


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory) -> str:
    """A real venv with none of this interpreter's packages and one release installed: vllm 0.26.0."""
    root = tmp_path_factory.mktemp("server-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object')\n")
    (site / "vllm-0.26.0.dist-info").mkdir()
    (site / "vllm-0.26.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n")
    return str(python)


@pytest.mark.parametrize("text, version", [
    ("0.33.0", (0, 33, 0)), ("0.5.15.post1", (0, 5, 15)), ("0.11.1rc2.dev3+g12", (0, 11, 1)), ("b7000", (7000, 0, 0)),
    ("vllm 0.9", (0, 9, 0)), ("", None), (None, None), ("dev", None),
])
def test_parse_version(text, version):
    assert versions.parse_version(text) == version


def test_a_distributions_version_here_and_in_a_servers_own_interpreter(server_venv):
    assert versions.package_version("optuna") == importlib.metadata.version("optuna")
    assert versions.package_version("no-such-distribution-here") is None
    # read from the release's metadata: its package cannot even be imported there (no CUDA)
    assert versions.package_version("vllm", server_venv) == "0.26.0"
    assert versions.package_version("optuna", server_venv) is None  # not installed in that venv
    assert versions.package_version("vllm", "/nonexistent/bin/python") is None


def test_what_a_command_prints_on_stdout_and_stderr(tmp_path):
    tool = tmp_path / "llama-server"
    tool.write_text("#!/bin/sh\necho 'version: 7000 (abc)' >&2\necho built with gcc\n")
    tool.chmod(0o755)
    assert versions.command_output((str(tool), "--version")) == "built with gcc\nversion: 7000 (abc)\n"
    failing = tmp_path / "broken"
    failing.write_text("#!/bin/sh\necho nope\nexit 1\n")
    failing.chmod(0o755)
    assert versions.command_output((str(failing), "--version")) is None
    assert versions.command_output((str(tmp_path / "missing"), "--version")) is None


def test_torch_and_its_cuda_and_nccl(server_venv):
    torch = pytest.importorskip("torch")
    here = versions.torch_versions()
    assert here["torch"] == torch.__version__ and here["cuda"] == torch.version.cuda
    if torch.cuda.is_available():
        assert here["nccl"]
    assert versions.torch_versions(server_venv) == {"torch": None, "cuda": None, "nccl": None}  # no torch there
