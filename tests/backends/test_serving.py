"""ServingBackend (backends/serving.py): what an OpenAI model server with releases gets by stating
only its differences, as docs/architecture.md "How to add a backend" step 1 says (``package``,
``server``, ``parser_recipe`` "DIST MODULE:CALLABLE", ``SETTINGS``, ``TP_FLAG``, ``PP_FLAG``,
``MANAGED``, ``command()``, ``graph_args(config)``). The server is a made-up one, "toyserve",
installed into a real venv (its distribution's metadata and a module whose callable adds its
flags to an argparse parser), as a real server sits in its own venv: its release is read
there, its flags come from its own parser, and every command line is checked against them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.backends import known_flags
from orchestrator.backends.serving import ServingBackend
from orchestrator.core import versions
from orchestrator.core.errors import BadInput, ConfigRejected

TOYSERVE_CLI = '''
import argparse


def add_args(parser):
    for flag in ("--model", "--tensor-parallel", "--pipeline-parallel", "--host", "--port", "--served-model-name",
                 "--max-num-seqs"):
        parser.add_argument(flag)
    parser.add_argument("--graph-sizes", nargs="+", type=int)
    parser.add_argument("--eager", action="store_true")
    parser.add_argument("--disable-custom-all-reduce", action="store_true")
    parser.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--load-format", choices=["auto", "safetensors"])
    return parser
'''


class ToyserveBackend(ServingBackend):
    """toyserve: ``python -m toyserve MODEL`` (this test's made-up server)."""

    kind = "toyserve"
    package = "toyserve"
    server = "Toyserve"
    parser_recipe = "toyserve toyserve.cli:add_args"
    example_release = "2.1.0"
    SETTINGS = {"model": "model path or id", "python": "python of toyserve's venv"}
    TP_FLAG, PP_FLAG = "--tensor-parallel", "--pipeline-parallel"
    MANAGED = {"--model": "settings.model", "--tensor-parallel": "tp_size", "--pipeline-parallel": "pp_size",
               "--host": "the trial", "--port": "the trial", "--eager": "graph_capture",
               "--graph-sizes": "capture_sizes", "--disable-custom-all-reduce": "custom_all_reduce"}
    GRAPH_ONLY = ("capture_sizes",)

    def command(self) -> list[str]:
        return [self.python or sys.executable, "-m", "toyserve", self.model]

    def graph_args(self, config):
        if config.get("graph_capture", True) is False:
            return ["--eager"]
        if config.get("capture_sizes"):
            return ["--graph-sizes", *config["capture_sizes"].split(",")]
        return []


@pytest.fixture(scope="module")
def toyserve_python(tmp_path_factory) -> str:
    """A real venv (none of this interpreter's packages) with toyserve 2.1.0 installed."""
    root = tmp_path_factory.mktemp("toyserve-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "toyserve").mkdir()
    (site / "toyserve" / "__init__.py").write_text("")
    (site / "toyserve" / "cli.py").write_text(textwrap.dedent(TOYSERVE_CLI))
    (site / "toyserve-2.1.0.dist-info").mkdir()
    (site / "toyserve-2.1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: toyserve\n"
                                                                "Version: 2.1.0\n")
    return str(python)


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """Each test with its own flag cache and no version remembered from another."""
    monkeypatch.setenv("NCCLSWEEP_CACHE_DIR", str(tmp_path / "cache"))
    for cached in (known_flags.installed_table, versions.package_version):
        cached.cache_clear()
    yield
    for cached in (known_flags.installed_table, versions.package_version):
        cached.cache_clear()


def toy(python, job_file="job.yaml", **settings):
    return ToyserveBackend({"model": "/models/m", "python": python, **settings}, job_file)


def test_the_release_and_its_flags_come_from_the_servers_own_venv(toyserve_python):
    b = toy(toyserve_python)
    assert b.version() == "2.1.0" and b.effective_release() == (2, 1, 0)
    lines, warnings = b.diagnose()
    assert lines == [f"backend toyserve flags: the parser of toyserve 2.1.0 in {toyserve_python}"] and warnings == []
    assert b.flags().table.knows("--no-prefix-caching")


def test_the_command_line_from_the_neutral_params_and_the_releases_flags(toyserve_python):
    b = toy(toyserve_python, served_model_name="m-1", extra_args=["--load-format", "safetensors"])
    spec = b.launch_spec(b.normalize({"tp_size": 2, "pp_size": 2, "custom_all_reduce": False,
                                      "capture_sizes": "4, 1 2", "backend.max_num_seqs": 64,
                                      "backend.prefix_caching": False, "env.NCCL_PROTO": "ll"}), "127.0.0.1", 8123)
    assert spec.argv == [toyserve_python, "-m", "toyserve", "/models/m", "--tensor-parallel", "2",
                         "--pipeline-parallel", "2", "--host", "127.0.0.1", "--port", "8123",
                         "--served-model-name", "m-1", "--graph-sizes", "1", "2", "4", "--disable-custom-all-reduce",
                         "--max-num-seqs", "64", "--no-prefix-caching", "--load-format", "safetensors"]
    assert spec.env == {"NCCL_PROTO": "LL"} and spec.model_name == "m-1" and spec.health_path == "/health"
    eager = b.launch_spec(b.normalize({"graph_capture": False, "capture_sizes": "1,2"}), "h", 1).argv
    assert eager[-3:] == ["--eager", "--load-format", "safetensors"] and "--graph-sizes" not in eager
    assert b.gpus_per_trial({"tp_size": 2, "pp_size": 2}) == 4


def test_normalize_drops_what_cannot_matter(toyserve_python):
    b = toy(toyserve_python)
    assert b.normalize({}) == {"tp_size": 1, "pp_size": 1, "graph_capture": True}  # the server's own defaults
    assert b.normalize({"tp_size": 1, "custom_all_reduce": False, "env.NCCL_PROTO": "LL"}) == \
        b.normalize({})  # no all-reduce, no NCCL at one GPU
    assert "capture_sizes" not in b.normalize({"graph_capture": False, "capture_sizes": "1,2"})
    assert b.normalize({"capture_sizes": "8 1"})["capture_sizes"] == "1,8"


def test_what_the_release_cannot_take_is_refused_at_validate(toyserve_python):
    b = toy(toyserve_python)
    with pytest.raises(ConfigRejected, match=r"job.yaml: backend.max_num_seq: --max-num-seq is not a flag of "
                                             r"Toyserve 2.1.0 \(did you mean '--max-num-seqs'\?\)"):
        b.check_config({"backend.max_num_seq": 8})
    with pytest.raises(ConfigRejected, match="backend.eager: --eager is set by the tuner from graph_capture"):
        b.check_config({"backend.eager": True})
    with pytest.raises(ConfigRejected, match="tp_size: tp_size must be a positive integer"):
        b.check_config({"tp_size": 0})
    with pytest.raises(BadInput, match=r"backend.settings.extra_args: '--tensor-parallel': .*set by the tuner from "
                                       r"tp_size"):
        toy(toyserve_python, extra_args=["--tensor-parallel", "2"])
    with pytest.raises(BadInput, match="backend.settings.extra_args: '--load-format=gguf': --load-format 'gguf' is "
                                       "not a value Toyserve 2.1.0 accepts"):
        toy(toyserve_python, extra_args=["--load-format=gguf"])
    with pytest.raises(BadInput, match=r"backend.settings.model: '/m/x.gguf' is a GGUF file, which Toyserve 2.1.0 "
                                       r"cannot load \(its --load-format takes auto, safetensors; no gguf\)"):
        toy(toyserve_python, model="/m/x.gguf")
    with pytest.raises(BadInput, match="backend.settings.version: must be a release like '2.1.0', not 'latest'"):
        toy(toyserve_python, version="latest")


def test_without_the_release_installed_only_the_spellings_are_checked(tmp_path):
    """Another venv, without toyserve, and a release named in the job: no table anywhere."""
    b = toy(sys.executable, version="2.2.0")
    lines, _ = b.diagnose()
    assert "no table for Toyserve 2.2.0; only the spellings the backend knows are checked" in lines[0]
    assert b.launch_spec({"backend.brand_new_flag": 1}, "h", 1).argv[-2:] == ["--brand-new-flag", "1"]
    assert toy(sys.executable).diagnose()[1][0].startswith("toyserve is not installed where ncclsweep runs")
