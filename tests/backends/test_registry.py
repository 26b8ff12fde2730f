"""Backends registered by another distribution through the ``ncclsweep.backends``
entry-point group, found without editing ncclsweep; ``doctor`` asks every registered
backend for its installed release.

The third party is a real distribution on ``sys.path``: a module and a ``.dist-info``
folder whose ``entry_points.txt`` names it, exactly what ``pip install`` leaves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.backends import BUILTIN, backend_kinds, get_backend_class, registry, shadowed
from orchestrator.backends.vllm import VllmBackend

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''
import sys

from orchestrator.backends.base import Backend, LaunchSpec
from orchestrator.backends import common


class TinyServerBackend(Backend):
    """The reference server, registered from outside ncclsweep."""

    kind = "tinyserver"

    @classmethod
    def example_settings(cls):
        return {}

    @classmethod
    def installed_release(cls):
        return "7.3"

    def __init__(self, settings, job_file=None):
        super().__init__(settings, job_file)
        common.check_setting_keys(self, {"threads": "CPU threads"})

    def default_config(self):
        return {"tp_size": 1}

    def check_config(self, config):
        common.positive_int(config, "tp_size", self.job_file)
        common.positive_int(config, "pp_size", self.job_file)
        self.check_nccl_env(config)

    def launch_spec(self, config, host, port):
        argv = [sys.executable, "-m", "orchestrator.refserver", "--model", "tiny", "--device", "cpu",
                "--tp", str(config.get("tp_size", 1)), "--host", host, "--port", str(port)]
        return LaunchSpec(argv=argv, env=common.config_env(self, config), host=host, port=port, model_name="tiny")


class NotABackend:
    kind = "notabackend"
'''


@pytest.fixture
def third_party(tmp_path, monkeypatch) -> Path:
    site = tmp_path / "site"
    (site / "tinyserver_plugin.py").parent.mkdir()
    (site / "tinyserver_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = site / "tinyserver_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyserver-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[ncclsweep.backends]\n"
        "tinyserver = tinyserver_plugin:TinyServerBackend\n"
        "vllm = tinyserver_plugin:TinyServerBackend\n"
        "notabackend = tinyserver_plugin:NotABackend\n"
        "broken = tinyserver_plugin_missing:Whatever\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_builtins_need_no_entry_point():
    assert tuple(BUILTIN) == backend_kinds()[:len(BUILTIN)]
    assert get_backend_class("vllm") is VllmBackend


def test_a_third_party_backend_is_found_by_its_entry_point(third_party):
    kinds = backend_kinds()
    assert kinds[:len(BUILTIN)] == tuple(BUILTIN) and {"tinyserver", "broken", "notabackend"} <= set(kinds)
    cls = get_backend_class("tinyserver")
    assert cls.__module__ == "tinyserver_plugin" and cls.kind == "tinyserver"
    spec = cls({"threads": 1}, "j.yaml").launch_spec({"tp_size": 1, "env.NCCL_ALGO": "ring"}, "127.0.0.1", 9)
    assert spec.argv[-1] == "9" and spec.env == {"NCCL_ALGO": "Ring"}


def test_a_built_in_kind_cannot_be_replaced(third_party):
    assert get_backend_class("vllm") is VllmBackend
    assert registry()["vllm"] == BUILTIN["vllm"]
    assert shadowed() == ["vllm (tinyserver_plugin:TinyServerBackend)"]


def test_a_broken_registration_fails_only_when_used_with_one_line(third_party):
    with pytest.raises(ImportError, match=r"backend 'broken' \(tinyserver_plugin_missing:Whatever\) cannot be "
                                          r"loaded: ModuleNotFoundError"):
        get_backend_class("broken")
    with pytest.raises(ImportError, match="not a Backend subclass whose kind is 'notabackend'"):
        get_backend_class("notabackend")
    with pytest.raises(KeyError):
        get_backend_class("nosuch")


def test_doctor_asks_every_registered_backend(third_party, monkeypatch):
    from orchestrator.backends.llamacpp import LlamaCppBackend
    from orchestrator.backends.serving import ServingBackend
    from orchestrator.node import doctor

    releases = {"vllm": "0.26.0"}
    monkeypatch.setattr(ServingBackend, "installed_release", classmethod(lambda cls: releases.get(cls.package)))
    monkeypatch.setattr(LlamaCppBackend, "installed_release", classmethod(lambda cls: None))
    lines = doctor._backend_lines()
    assert "vllm: 0.26.0" in lines and "tinyserver: 7.3" in lines
    assert not any(line.startswith(("sglang:", "llamacpp:", "refserver:", "command:")) for line in lines)
    assert any(line.startswith("broken: cannot be loaded") for line in lines)
    assert "entry point ignored, it names a built-in backend: vllm (tinyserver_plugin:TinyServerBackend)" in lines


def test_validate_runs_a_job_of_the_third_party_backend(third_party, tmp_path):
    """End to end: the CLI loads the job, checks every config with the plugin's backend and
    prints its commands; an unknown kind lists the registered ones."""
    (tmp_path / "space.yaml").write_text("params:\n  tp_size: [1, 2]\n  env.NCCL_PROTO: [LL, Simple]\n")
    job = tmp_path / "job.yaml"
    job.write_text("study: plugin\nbackend: {kind: tinyserver, settings: {threads: 1}}\ngpus_per_node: 0\n"
                   "cpus_per_trial: 1\nspace: space.yaml\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(third_party), str(REPO)])}
    done = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job), "--commands"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "orchestrator.refserver" in done.stdout and "NCCL_PROTO=LL" in done.stdout
    job.write_text(job.read_text().replace("kind: tinyserver", "kind: tinyservr"))
    done = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(job)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert "did you mean 'tinyserver'" in done.stderr + done.stdout and "llamacpp" in done.stderr + done.stdout
