"""Backends registered by another distribution through the ``ncclsweep.backends``
entry-point group, found without editing ncclsweep, their engines' knowledge with them (start-up
phases, notices, /metrics names: ``Backend.ENGINE``); ``doctor`` asks every registered backend
for its installed release.

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
from orchestrator.core import prometheus
from orchestrator.node import startup

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


ENGINE_PLUGIN = '''
import re

from orchestrator.backends.base import Backend, LaunchSpec
from orchestrator.core.engines import Engine, Reported, SpecCounters, pattern

ACME = Engine(
    name="acme",
    detect=pattern(r"^acme-serve\\["),
    markers=(("kernel autotune", pattern(r"autotuning kernels")),
             ("page pool", pattern(r"page pool reserved")),
             ("ready", pattern(r"acme listening on"))),
    reported=(Reported("autotune_s", pattern(r"autotune done in ([\\d.]+)s")),),
    segments=(("kernel autotune", ("autotune_s",), ()),),
    process=re.compile(r"^acme-serve\\[(shard\\d+)\\]"),
    notices=(pattern(r"falling back to the slow sampler"),),
    line_prefixes=(re.compile(r"^acme-serve\\[shard\\d+\\]\\s*"),),
    speculation=SpecCounters(drafts="acme_spec_rounds_total", draft_tokens="acme_spec_proposed_total",
                             accepted="acme_spec_kept_total", source="acme counters"),
)


class AcmeBackend(Backend):
    """A server of another distribution whose engine ncclsweep has never heard of."""

    kind = "acme"
    ENGINE = ACME

    @classmethod
    def example_settings(cls):
        return {}

    def default_config(self):
        return {"tp_size": 1}

    def launch_spec(self, config, host, port):
        return LaunchSpec(argv=["acme-serve", "--port", str(port)], env={}, host=host, port=port, model_name="m")
'''

ACME_LOG = """acme-serve[shard0] acme-serve 3.1 starting
acme-serve[shard0] autotuning kernels for 2 shards
acme-serve[shard1] autotuning kernels for 2 shards
acme-serve[shard0] autotune done in 4.5s
acme-serve[shard1] autotune done in 6.0s
acme-serve[shard1] sampler: falling back to the slow sampler (top-k too large)
acme-serve[shard0] sampler: falling back to the slow sampler (top-k too large)
acme-serve[shard0] page pool reserved: 1200 pages
acme-serve[shard0] acme listening on 127.0.0.1:8000
acme-serve[shard0] autotune done in 99.0s
"""
ACME_METRICS = (
    "# TYPE {name}_spec_rounds_total counter\n{name}_spec_rounds_total{{shard=\"0\"}} {rounds}\n"
    "{name}_spec_proposed_total{{shard=\"0\"}} {proposed}\n{name}_spec_kept_total{{shard=\"0\"}} {kept}\n")


@pytest.fixture
def engine_plugin(tmp_path, monkeypatch) -> Path:
    """A distribution that registers the ``acme`` backend, with an engine of its own, by entry point."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_plugin.py").write_text(textwrap.dedent(ENGINE_PLUGIN))
    dist = site / "acme_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ncclsweep.backends]\nacme = acme_plugin:AcmeBackend\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_third_party_backend_brings_its_engines_knowledge(engine_plugin):
    """Issue 46: the engine of a backend another distribution registers is read like a built-in one,
    with no line of ncclsweep edited: its log's start-up phases (its own markers, its durations per
    process, the slowest shard's, and nothing after its ready line), its notices (without its line
    prefix), and its speculative counters in /metrics. Nothing loads the backend first: being
    installed is enough."""
    phases = startup.parse(ACME_LOG, first_line_s=1.0, ready_s=20.0)
    assert phases["engine"] == "acme"
    assert phases["autotune_s"] == 6.0  # shard1 is the slower; the 99 s after "listening" is no start-up
    assert phases["segments"] == [["process start", 1.0], ["kernel autotune", 6.0], ["other", 13.0]]
    assert phases["last_phase"] == "ready"
    assert startup.last_phase("\n".join(ACME_LOG.splitlines()[:2])) == "kernel autotune"
    # said by both shards: one notice, without the shard
    assert startup.notices(ACME_LOG) == ["engine notice: sampler: falling back to the slow sampler (top-k too large)"]
    before = prometheus.snapshot(ACME_METRICS.format(name="acme", rounds=100, proposed=400, kept=200))
    after = prometheus.snapshot(ACME_METRICS.format(name="acme", rounds=300, proposed=1200, kept=700))
    got = prometheus.acceptance(before, after)
    assert got == {"acceptance_rate": 500 / 800, "mean_accepted_length": 1 + 500 / 200, "drafts": 200.0,
                   "draft_tokens": 800.0, "accepted_tokens": 500.0, "source": "acme counters"}
    # another engine's lines and counters of the same shape are not acme's
    assert startup.parse(ACME_LOG.replace("acme-serve[", "other-serve["))["segments"] == []
    assert prometheus.snapshot(ACME_METRICS.format(name="other", rounds=1, proposed=1, kept=1)) is None


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
