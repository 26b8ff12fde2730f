"""The all-reduce pre-screen: real probe processes (gloo on CPU), the drop rule, and a
study that never launches a server for a dropped NCCL setting."""

from __future__ import annotations

import io
import json

import pytest

from conftest import run_in_process, write_job
from orchestrator.config.job import DEFAULT_KEEP_WITHIN, load_job
from orchestrator.driver.prescreen import dropped_settings, format_prescreen, late_settings, run_prescreen, setting_key
from orchestrator.study.history import trial_rows
from orchestrator.study.storage import open_study

SPACE = "params:\n  tp_size: {choices: [1, 2]}\n  env.NCCL_PROTO: {choices: [LL, Simple]}\n"


def test_drop_rule_keeps_the_fastest_and_drops_failures():
    data = {"rows": [
        {"tp_size": 2, "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 10.0},
        {"tp_size": 2, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 11.5},
        {"tp_size": 2, "env.NCCL_PROTO": "LL128", "ok": True, "latency_us": 30.0},
        {"tp_size": 4, "env.NCCL_PROTO": "LL", "ok": False, "kind": "nccl-invalid", "reason": "invalid usage"},
    ]}
    dropped = dropped_settings(data, keep_within=1.2)
    assert setting_key({"tp_size": 2, "env.NCCL_PROTO": "LL"}) not in dropped
    assert setting_key({"tp_size": 2, "env.NCCL_PROTO": "Simple"}) not in dropped
    assert "30.0 us" in dropped[setting_key({"tp_size": 2, "env.NCCL_PROTO": "LL128"})]
    assert "nccl-invalid" in dropped[setting_key({"tp_size": 4, "env.NCCL_PROTO": "LL"})]
    assert setting_key({"tp_size": 1, "env.NCCL_PROTO": "LL"}) is None  # NCCL idle at TP=1


def test_a_setting_twice_as_slow_is_tried_late_not_dropped(tmp_path):
    """The prior the pre-screen gives the search (issue 26: "a setting 2x slower than the best
    in the microbenchmark is tried late, not dropped"): 2x the fastest all-reduce at its TP or
    more is late, under 2x is not, each TP has its own fastest, and the default drop rule
    keeps the late ones: they are launched after the others."""
    data = {"rows": [
        {"tp_size": 2, "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 10.0},
        {"tp_size": 2, "env.NCCL_PROTO": "LL128", "ok": True, "latency_us": 19.0},
        {"tp_size": 2, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 20.0},
        {"tp_size": 2, "env.NCCL_ALGO": "Tree", "ok": True, "latency_us": 25.0},
        {"tp_size": 2, "env.NCCL_ALGO": "Ring", "ok": True, "latency_us": 45.0},
        {"tp_size": 4, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 40.0},
        {"tp_size": 4, "env.NCCL_PROTO": "LL", "ok": False, "kind": "nccl-invalid", "reason": "invalid usage"},
    ]}
    late = late_settings(data)
    assert late == {setting_key({"tp_size": 2, "env.NCCL_PROTO": "Simple"}),
                    setting_key({"tp_size": 2, "env.NCCL_ALGO": "Tree"}),
                    setting_key({"tp_size": 2, "env.NCCL_ALGO": "Ring"})}
    dropped = dropped_settings(data, keep_within=DEFAULT_KEEP_WITHIN)
    assert not dropped.keys() & (late - {setting_key({"tp_size": 2, "env.NCCL_ALGO": "Ring"})})  # 2x-4x: kept
    assert setting_key({"tp_size": 2, "env.NCCL_ALGO": "Ring"}) in dropped  # 4.5x: dropped
    job = load_job(write_job(tmp_path, space_text=SPACE, prescreen={"enabled": True}))
    assert job.prescreen.keep_within == DEFAULT_KEEP_WITHIN  # what a job that only turns it on gets


@pytest.mark.slow
def test_probe_measures_each_setting_in_fresh_processes(tmp_path):
    job = load_job(write_job(tmp_path, study="ps", space_text=SPACE, baseline={"tp_size": 1}))
    data = run_prescreen(job, iters=30, measured={2: ({"tp_size": 2, "env.NCCL_PROTO": "LL"}, 50.0)},
                         say=lambda _: None)
    rows = data["rows"]
    assert sorted(r["env.NCCL_PROTO"] for r in rows) == ["LL", "Simple"]
    assert all(r["ok"] and r["latency_us"] > 0 and len(r["samples_us"]) == 30 for r in rows)
    assert data["message_bytes"] == 256 * 4 and data["allreduces_per_step"] == 8  # tiny, float32 on CPU
    ll = next(r for r in rows if r["env.NCCL_PROTO"] == "LL")
    assert ll["predicted_tok_s"] == pytest.approx(50.0)  # the measured config predicts itself
    assert json.loads((tmp_path / "reports" / "ps" / "prescreen.json").read_text())["rows"]
    assert "NCCL_PROTO=Simple" in format_prescreen(data)


@pytest.mark.slow
def test_study_never_launches_a_dropped_setting(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="psstudy", space_text=SPACE, baseline={"tp_size": 1},
                             budget={"trials": 3}, prescreen={"enabled": True, "keep_within": 1.0}))
    run_in_process(job, out=io.StringIO())
    data = json.loads((tmp_path / "reports" / "psstudy" / "prescreen.json").read_text())
    fastest = min(data["rows"], key=lambda r: r["latency_us"])["env.NCCL_PROTO"]
    rows = trial_rows(open_study(job, create=False))
    launched = [r for r in rows if r.counted]
    assert {r.params.get("env.NCCL_PROTO") for r in launched if r.params["tp_size"] == 2} == {fastest}
    assert len(launched) == 2  # TP=1 and the one kept TP=2 setting; the dropped one never ran
