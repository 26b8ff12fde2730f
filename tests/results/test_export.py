"""export: every format from a real study; yaml/json round-trip through load_config_file."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import optuna
import pytest
import recorded_study as fx  # a real journal study with every outcome
import yaml

from orchestrator.backends.command import CommandBackend
from orchestrator.backends.refserver import RefServerBackend
from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.results.export import export, load_config_file, nccl_tuner_rules
from orchestrator.study import history, storage


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One study for the module: exports only read it."""
    job, study = fx.build_study(tmp_path_factory.mktemp("export"))
    return job, history.trial_rows(study)


def _env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_env(built):
    job, rows = built
    text = export(job, rows, "env")
    env = _env_lines(text)
    assert env == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    blob = "\n".join(comments)
    for needle in ("study demo, trial 2", "57.000 tok/s", "+-1.0%", "2.85x baseline", "refserver",
                   "NCCL 2.21.5", "CUDA 12.4", "driver 550.54.15", "NVIDIA H200", "model: tiny",
                   "graph_capture=1 tp_size=2 max_batch=8"):
        assert needle in blob, needle
    assert all(line.startswith("#") or "=" in line for line in text.splitlines() if line)


def test_cmd_is_the_backends_launch_line(built):
    job, rows = built
    text = export(job, rows, "cmd", host="127.0.0.1", port=9000)
    cmd = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(cmd) == 1
    want = RefServerBackend({"model": "tiny"}).launch_spec(fx.BEST, "127.0.0.1", 9000)
    words = shlex.split(cmd[0])
    assert words[:3] == ["NCCL_ALGO=Ring", "NCCL_NVLS_ENABLE=0", "NCCL_PROTO=LL"]
    assert words[3:] == want.argv


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_yaml_json_round_trip(built, tmp_path, fmt):
    job, rows = built
    text = export(job, rows, fmt)
    path = tmp_path / f"best.{fmt}"
    path.write_text(text)
    assert load_config_file(path) == fx.BEST
    doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    prov = doc["provenance"]
    assert prov["trial"] == 2 and prov["study"] == "demo" and prov["value_tok_s"] == 57.0
    assert prov["spread"] == 0.01 and prov["x_baseline"] == pytest.approx(2.85)
    assert prov["backend"] == {"kind": "refserver", "version": "refserver 0.1.0"}
    assert prov["nccl_version"] == "2.21.5" and prov["cuda_version"] == "12.4"
    assert prov["driver_version"] == "550.54.15" and prov["gpu_model"] == "NVIDIA H200" and prov["model"] == "tiny"
    assert doc["env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    # bool and int types survive
    again = load_config_file(path)
    assert again["graph_capture"] is True and again["tp_size"] == 2


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_top_k_documents(built, tmp_path, fmt):
    job, rows = built
    text = export(job, rows, fmt, top=3)
    path = tmp_path / f"top.{fmt}"
    path.write_text(text)
    docs = json.loads(text) if fmt == "json" else list(yaml.safe_load_all(text))
    assert [d["provenance"]["trial"] for d in docs] == [2, 1, 9]
    assert [d["rank"] for d in docs] == [1, 2, 3]
    assert load_config_file(path) == fx.BEST
    assert load_config_file(path, rank=2) == {**fx.BASE, "graph_capture": True}
    with pytest.raises(BadInput, match="rank 4"):
        load_config_file(path, rank=4)


def test_top_k_line_formats_keep_one_active_block(built):
    job, rows = built
    text = export(job, rows, "env", top=2)
    assert "# ===== 1 of 2: trial 2 (active) =====" in text
    assert "# ===== 2 of 2: trial 1" in text
    assert _env_lines(text) == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    assert "# NCCL_PROTO=Simple" in text  # the alternative, commented out
    cmd = export(job, rows, "cmd", top=2)
    assert sum(1 for line in cmd.splitlines() if line and not line.startswith("#")) == 1


def test_nccl_tuner(built):
    job, rows = built
    text = export(job, rows, "nccl-tuner")
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == ["allreduce,0,4294967295,ring,ll,-1,1,2"]
    assert "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks" in text
    assert all(len(line) < 200 for line in text.splitlines())  # the plugin reads 256-byte lines


def test_nccl_tuner_rule_variants():
    rule, _ = nccl_tuner_rules({"tp_size": 4, "env.NCCL_ALGO": "allreduce:tree;broadcast:ring",
                                "env.NCCL_PROTO": "simple", "env.NCCL_MIN_CTAS": 4, "env.NCCL_MAX_CTAS": 4})
    assert rule == ["allreduce,0,4294967295,tree,simple,4,1,4"]
    none, notes = nccl_tuner_rules({"tp_size": 2})
    assert none == [] and "nothing to export" in notes[0]
    none, notes = nccl_tuner_rules({"tp_size": 2, "env.NCCL_ALGO": "^Tree", "env.NCCL_PROTO": "LL"})
    assert none == [] and "excludes" in notes[0]
    # protocol only: the algorithm NCCL logged in the measured run completes the rule
    rule, notes = nccl_tuner_rules({"tp_size": 2, "env.NCCL_PROTO": "LL"}, {"allreduce_algo": "RING"})
    assert rule == ["allreduce,0,4294967295,ring,ll,-1,1,2"] and "as NCCL chose it" in notes[0]
    none, notes = nccl_tuner_rules({"tp_size": 2, "env.NCCL_PROTO": "LL"})
    assert none == [] and "NCCL_ALGO is not set" in notes[0]
    rule, _ = nccl_tuner_rules({"tp_size": 8, "env.NCCL_ALGO": "NVLSTree", "env.NCCL_PROTO": "LL128"})
    assert rule == ["allreduce,0,4294967295,nvls_tree,ll128,-1,1,8"]


def test_nccl_tuner_without_nccl_settings_is_a_comment(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    cfg = {"tp_size": 1, "graph_capture": True}
    fx.record(study, policy, cfg, fx.ok(cfg, 12.0), baseline=True)
    text = export(job, history.trial_rows(study), "nccl-tuner")
    assert all(line.startswith("#") for line in text.splitlines() if line)
    assert "nothing to export" in text


def test_no_completed_trial(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.failed(fx.BASE, "start-crash", "exit 1"))
    rows = history.trial_rows(study)
    for fmt in ("env", "yaml", "json", "cmd", "nccl-tuner"):
        with pytest.raises(RuntimeFailure, match="no completed trial to export"):
            export(job, rows, fmt)


def test_bad_arguments(built):
    job, rows = built
    with pytest.raises(BadInput, match="format must be one of"):
        export(job, rows, "toml")
    with pytest.raises(BadInput, match="--top"):
        export(job, rows, "env", top=0)


def test_load_config_file_plain_mapping_and_errors(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("tp_size: 2\nenv.NCCL_PROTO: LL\ngraph_capture: true\ncapture_sizes: '1,2,4,8'\n")
    assert load_config_file(plain) == {"tp_size": 2, "env.NCCL_PROTO": "LL", "graph_capture": True,
                                       "capture_sizes": "1,2,4,8"}
    nested = tmp_path / "nested.yaml"
    nested.write_text("env:\n  NCCL_PROTO: LL\n")
    with pytest.raises(BadInput, match="env.NCCL_PROTO: LL"):
        load_config_file(nested)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_config_file(broken)
    with pytest.raises(BadInput, match="cannot read"):
        load_config_file(tmp_path / "missing.yaml")


# An exported speculative config carries what the server counted when it was measured:
# acceptance rate and mean accepted length, in the YAML/JSON provenance and the comment header of
# the line formats; a config without speculation says nothing about it.
SETTINGS = {"argv": ["{python}", "-m", "server", "--port", "{port}", "--spec", "{speculative.method}",
                     "--k", "{speculative.num_tokens}"], "defaults": {"speculative.method": "none",
                                                                      "speculative.num_tokens": 0}}


def rows(**best) -> list[TrialRow]:
    return [TrialRow(number=0, state=COMPLETE, value=500.0, counted=True, is_baseline=True, config_key="a"),
            TrialRow(number=1, state=COMPLETE, value=760.0, counted=True, config_key="b",
                     params={"speculative.method": "ngram", "speculative.num_tokens": 4}, **best)]


JOB = SimpleNamespace(study="s", storage="journal:x", backend=SimpleNamespace(kind="command", settings=SETTINGS),
                      env={})


def test_the_provenance_carries_acceptance():
    backend = CommandBackend(SETTINGS, "job.yaml")
    doc = json.loads(export(JOB, rows(acceptance_rate=0.766, mean_accepted_length=3.74), "json", backend=backend))
    assert doc["provenance"]["acceptance_rate"] == 0.766 and doc["provenance"]["mean_accepted_length"] == 3.74
    cmd = export(JOB, rows(acceptance_rate=0.766, mean_accepted_length=3.74), "cmd", backend=backend)
    assert "# speculative decoding: 76.6% of drafted tokens accepted, 3.74 tokens per target step" in cmd
    assert "--spec ngram --k 4" in cmd


def test_no_speculation_says_nothing():
    backend = CommandBackend(SETTINGS, "job.yaml")
    doc = json.loads(export(JOB, rows(), "json", backend=backend))
    assert doc["provenance"]["acceptance_rate"] is None and doc["provenance"]["mean_accepted_length"] is None
    assert "speculative decoding" not in export(JOB, rows(), "env", backend=backend)
