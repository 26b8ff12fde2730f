"""Flags read from the installed release: the backend asks the server's own Python for its
parser (``parser_dump``), caches the table per interpreter and release, and checks every
flag against it, whichever release is installed.

vLLM and SGLang cannot be installed here, so the releases are small packages installed
into a real venv that honour the interface the real ones expose: the distribution's
metadata (``importlib.metadata.version``), and the parser built the way each server's own
command line builds it: vLLM's ``vllm.entrypoints.cli.serve.ServeSubcommand`` whose
``subparser_init(subparsers)`` returns the ``serve`` parser, a
``vllm.utils.argparse_utils.FlexibleArgumentParser``; SGLang's
``sglang.srt.server_args.ServerArgs.add_cli_args(parser)``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.backends import known_flags
from orchestrator.backends.sglang import SglangBackend
from orchestrator.backends.vllm import VllmBackend
from orchestrator.core import versions
from orchestrator.core.errors import BadInput, ConfigRejected

VLLM_SERVE = '''
import argparse

from vllm.utils.argparse_utils import FlexibleArgumentParser


class DeprecatedAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class ServeSubcommand:
    name = "serve"

    def subparser_init(self, subparsers):
        parser = subparsers.add_parser(self.name, usage="vllm serve [model_tag] [options]")
        parser.add_argument("model_tag", nargs="?")
        for flag in ("--host", "--port", "--tensor-parallel-size", "--pipeline-parallel-size",
                     "--compilation-config", "--served-model-name", FLAG):
            parser.add_argument(flag)
        parser.add_argument("--cudagraph-capture-sizes", nargs="+", type=int)
        parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
        parser.add_argument("--disable-custom-all-reduce", action=argparse.BooleanOptionalAction)
        parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
        parser.add_argument("--old-knob", action=DeprecatedAction)
        return parser


def cmd_init():
    return [ServeSubcommand()]
'''

SGLANG_ARGS = '''
import argparse

LOAD_FORMAT_CHOICES = ["auto", "safetensors", "pt"]


class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        for flag in ("--model-path", "--tp-size", "--pp-size", "--host", "--port", "--mem-fraction-static"):
            parser.add_argument(flag)
        parser.add_argument("--load-format", choices=LOAD_FORMAT_CHOICES)
        parser.add_argument("--cuda-graph-bs-decode", nargs="+", type=int)
        parser.add_argument("--disable-decode-cuda-graph", action="store_true")
        parser.add_argument("--disable-prefill-cuda-graph", action="store_true")
'''


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def install_vllm(site: Path, version: str, flag: str = "--fake-only-flag", broken: bool = False,
                 load_formats: tuple[str, ...] | None = None) -> None:
    """A vLLM release in ``site``; ``load_formats``: its built-in formats, kept as vLLM keeps
    them (``LoadFormats``, a ``Literal`` in ``vllm.model_executor.model_loader``) while its
    parser takes any string for ``--load-format``."""
    serve = "raise ImportError('libcudart.so.13: cannot open shared object file')\n" if broken else \
        VLLM_SERVE.replace("FLAG)", f"{flag!r}, '--load-format')")
    for old in site.glob("vllm-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    loader = site / "vllm" / "model_executor" / "model_loader" / "__init__.py"
    if load_formats is None and loader.exists():
        loader.unlink()
    if load_formats is not None:
        _write(site, {"vllm/model_executor/__init__.py": "",
                      "vllm/model_executor/model_loader/__init__.py":
                          f"from typing import Literal\n\nLoadFormats = Literal{list(load_formats)!r}\n"})
    _write(site, {
        "vllm/__init__.py": "", "vllm/utils/__init__.py": "", "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/utils/argparse_utils.py": "import argparse\n\n\nclass FlexibleArgumentParser(argparse.ArgumentParser):\n"
                                        "    pass\n",
        "vllm/entrypoints/cli/serve.py": serve,
        f"vllm-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n",
    })


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> tuple[str, Path]:
    """A real venv (its own site-packages, none of this interpreter's packages)."""
    root = tmp_path_factory.mktemp("server-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    return str(python), site


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """Each test with its own cache directory and no answers remembered from another."""
    monkeypatch.setenv("NCCLSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    for cached in (known_flags.installed_table, versions.package_version):
        cached.cache_clear()
    yield
    for cached in (known_flags.installed_table, versions.package_version):
        cached.cache_clear()


def cached_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "flags").glob("*.json"))


def test_vllm_flags_come_from_the_installed_release(venv, tmp_path):
    python, site = venv
    install_vllm(site, "0.26.0")
    b = VllmBackend({"model": "m", "python": python}, "jobs/x.yaml")
    assert b.version() == "0.26.0"
    assert b.flag_note == f"flags: the parser of vllm 0.26.0 in {python}"
    words = b.launch_spec({"tp_size": 2, "backend.fake_only_flag": "x", "backend.enable_prefix_caching": False,
                           "graph_capture": True, "capture_sizes": "1,2"}, "127.0.0.1", 8000).argv
    assert words[:5] == [python, "-m", "vllm.entrypoints.cli.main", "serve", "m"]
    assert words[words.index("--fake-only-flag") + 1] == "x"
    assert "--no-enable-prefix-caching" in words  # the negative the installed parser has
    # the bundled 0.26.0 table has --max-num-seqs; the installed parser does not: it decides
    with pytest.raises(ConfigRejected, match=r"--max-num-seqs is not a flag of vLLM 0\.26\.0"):
        b.check_config({"backend.max_num_seqs": 8})
    with pytest.raises(ConfigRejected, match="deprecated in vLLM 0.26.0"):
        b.check_config({"backend.old_knob": 1})
    with pytest.raises(BadInput, match="not a flag of vLLM 0.26.0"):
        VllmBackend({"model": "m", "python": python, "extra_args": ["--max-model-len", "8"]})
    assert len(cached_files(tmp_path)) == 1


def test_the_table_is_cached_per_python_and_release(venv, tmp_path):
    python, site = venv
    install_vllm(site, "0.26.0")
    VllmBackend({"model": "m", "python": python})
    [first] = cached_files(tmp_path)
    install_vllm(site, "0.26.0", broken=True)  # the cache answers: the parser is not built again
    known_flags.installed_table.cache_clear()
    b = VllmBackend({"model": "m", "python": python})
    assert b.flag_note.startswith("flags: the parser of vllm 0.26.0")
    b.check_config({"backend.fake_only_flag": 1})

    install_vllm(site, "0.27.1", flag="--new-in-0-27")  # a release with no bundled table: dumped too
    versions.package_version.cache_clear()
    b = VllmBackend({"model": "m", "python": python})
    assert b.version() == "0.27.1" and len(cached_files(tmp_path)) == 2
    b.check_config({"backend.new_in_0_27": 1})
    with pytest.raises(ConfigRejected, match=r"--fake-only-flag is not a flag of vLLM 0\.27\.1"):
        b.check_config({"backend.fake_only_flag": 1})
    assert first in cached_files(tmp_path)


def test_a_release_that_does_not_import_falls_back_and_says_why(venv, tmp_path):
    python, site = venv
    install_vllm(site, "0.26.0", broken=True)
    b = VllmBackend({"model": "m", "python": python})
    assert "could not be read" in b.flag_note and "libcudart.so.13" in b.flag_note
    assert "delete it to retry" in b.flag_note
    with pytest.raises(ConfigRejected, match=r"not a flag of vLLM 0\.26\.0"):  # the bundled 0.26.0 table
        b.check_config({"backend.fake_only_flag": 1})
    lines, warnings = b.diagnose()
    assert "libcudart.so.13" in lines[0] and not warnings


def test_the_jobs_version_wins_over_another_installed_release(venv):
    python, site = venv
    install_vllm(site, "0.26.0")
    b = VllmBackend({"model": "m", "python": python, "version": "0.33.0"})
    assert b.version() == "0.33.0" and b.flag_note == "flags: the table bundled for vllm 0.33.0"
    assert "--max-cudagraph-capture-size" in b.launch_spec({"backend.max_cudagraph_capture_size": 8}, "h", 1).argv


def test_sglang_flags_come_from_the_installed_release(venv):
    python, site = venv
    _write(site, {"sglang/__init__.py": "", "sglang/srt/__init__.py": "", "sglang/srt/server_args.py": SGLANG_ARGS,
                  "sglang-0.5.30.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.30\n"})
    b = SglangBackend({"model": "m", "python": python})
    assert b.version() == "0.5.30" and "the parser of sglang 0.5.30" in b.flag_note
    words = b.launch_spec({"graph_capture": False, "backend.mem_fraction_static": 0.8}, "h", 1).argv
    assert words[-4:] == ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph", "--mem-fraction-static",
                          "0.8"]
    with pytest.raises(ConfigRejected, match=r"--enable-torch-compile is not a flag of SGLang 0\.5\.30"):
        b.check_config({"backend.enable_torch_compile": True})


def test_the_installed_releases_load_formats_decide_whether_a_gguf_loads(venv):
    """The parser dump reads the release's own formats (vLLM's parser takes any string):
    a release with gguf among them takes the .gguf model, one without refuses it; an installed
    release is the authority over the bundled table of the same version."""
    python, site = venv
    install_vllm(site, "0.26.0", load_formats=("auto", "safetensors", "gguf"))
    b = VllmBackend({"model": "/models/x.gguf", "python": python}, "jobs/x.yaml")
    assert b.flags().table.flags["--load-format"].choices == ("auto", "safetensors", "gguf")
    assert b.launch_spec({}, "h", 1).argv[4] == "/models/x.gguf"
    with pytest.raises(BadInput, match=r"--load-format 'tensorizer' is not a value vLLM 0\.26\.0 accepts; "
                                       r"allowed: auto, safetensors, gguf"):
        VllmBackend({"model": "m", "python": python, "extra_args": ["--load-format", "tensorizer"]})

    install_vllm(site, "0.27.1", load_formats=("auto", "safetensors"))
    versions.package_version.cache_clear()
    with pytest.raises(BadInput, match=r"backend\.settings\.model: '/models/x\.gguf' is a GGUF file, which vLLM "
                                       r"0\.27\.1 cannot load \(its --load-format takes auto, safetensors; no gguf\)"):
        VllmBackend({"model": "/models/x.gguf", "python": python}, "jobs/x.yaml")

    install_vllm(site, "0.27.2")  # formats not kept where the dump looks: nothing known, nothing refused
    versions.package_version.cache_clear()
    b = VllmBackend({"model": "/models/x.gguf", "python": python})
    assert b.version() == "0.27.2" and b.flags().table.flags["--load-format"].choices is None


def test_sglang_refuses_a_gguf_where_its_parsers_choices_lack_it(venv):
    python, site = venv
    _write(site, {"sglang/__init__.py": "", "sglang/srt/__init__.py": "", "sglang/srt/server_args.py": SGLANG_ARGS,
                  "sglang-0.5.30.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.30\n"})
    with pytest.raises(BadInput, match=r"is a GGUF file, which SGLang 0\.5\.30 cannot load \(its --load-format takes "
                                       r"auto, safetensors, pt; no gguf\); serve a GGUF with llama\.cpp"):
        SglangBackend({"model": "/models/x.gguf", "python": python})
