"""The all-reduce pre-screen: real probe processes (gloo on CPU), the drop rule, and a
study that never launches a server for a dropped NCCL setting."""

from __future__ import annotations

import io
import json

import pytest

from conftest import run_in_process, write_job
from orchestrator.config.job import DEFAULT_KEEP_WITHIN, load_job
from orchestrator.driver.prescreen import (
    crossovers,
    decode_sizes,
    dropped_settings,
    format_prescreen,
    late_settings,
    run_prescreen,
    setting_key,
    sweep_csv,
    sweep_sizes,
)
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
                         say=lambda _: None, rounds=1)  # one launch per setting (two: test_export's sweep)
    rows = data["rows"]
    assert sorted(r["env.NCCL_PROTO"] for r in rows) == ["LL", "Simple"]
    assert all(r["ok"] and r["latency_us"] > 0 and len(r["samples_us"]) == 30 for r in rows)
    assert data["message_bytes"] == 256 * 4 and data["allreduces_per_step"] == 8  # tiny, float32 on CPU
    ll = next(r for r in rows if r["env.NCCL_PROTO"] == "LL")
    assert ll["predicted_tok_s"] == pytest.approx(50.0)  # the measured config predicts itself
    assert json.loads((tmp_path / "reports" / "ps" / "prescreen.json").read_text())["rows"]
    assert "NCCL_PROTO=Simple" in format_prescreen(data)
    # the sweep: every size, each row's points in size order, the table beside the JSON
    assert data["decode_sizes"] == {"1": 256 * 4} and data["sizes"][0] == 256 * 4
    for r in rows:
        assert [p["bytes"] for p in r["sweep"]] == sorted(data["sizes"])
        assert all(p["latency_us"] > 0 for p in r["sweep"])
    assert (tmp_path / "reports" / "ps" / "prescreen-sweep.csv").read_text().count("\n") == 1 + 2 * len(data["sizes"])
    (custom,) = data["custom"]
    assert not custom["ok"] and "needs CUDA devices with P2P" in custom["reason"]  # torch cannot run it on CPU
    assert "custom all-reduce | not-runnable" in format_prescreen(data)


@pytest.mark.slow
def test_study_never_launches_a_dropped_setting(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="psstudy", space_text=SPACE, baseline={"tp_size": 1},
                             budget={"trials": 3}, prescreen={"enabled": True, "keep_within": 1.0, "rounds": 1}))
    run_in_process(job, out=io.StringIO())
    data = json.loads((tmp_path / "reports" / "psstudy" / "prescreen.json").read_text())
    fastest = min(data["rows"], key=lambda r: r["latency_us"])["env.NCCL_PROTO"]
    rows = trial_rows(open_study(job, create=False))
    launched = [r for r in rows if r.counted]
    assert {r.params.get("env.NCCL_PROTO") for r in launched if r.params["tp_size"] == 2} == {fastest}
    assert len(launched) == 2  # TP=1 and the one kept TP=2 setting; the dropped one never ran


# ---- the sizes decode uses ----------------------------------------------------------------------------

def test_decode_sizes_follow_hidden_size_tokens_in_flight_and_element_bytes():
    assert decode_sizes(6144, 2, [1, 10]) == {1: 12288, 10: 122880}  # GLM-5 at 1 and 10 streams: 12 KB, 120 KB
    sizes = sweep_sizes(decode_sizes(6144, 2, [1, 10, 64]))
    assert {12288, 122880, 786432} <= set(sizes) and sizes == sorted(set(sizes))
    assert all(s % 16 == 0 for s in sizes)  # what the engines' custom kernels take
    fine = [s for s in sizes if s <= 512 * 1024]
    assert fine[0] <= 16 * 1024 and all(b - a <= 16 * 1024 for a, b in zip(fine, fine[1:]))  # 16 KB bins to 512 KB
    assert 512 * 1024 in sizes and max(sweep_sizes({1: 8 * 1024 * 1024})) == 8 * 1024 * 1024


def sweep_row(label: dict, points: dict[int, float], tp: int = 4) -> dict:
    return {"tp_size": tp, **label, "ok": True, "latency_us": points[min(points)], "bytes": min(points), "seconds": 1.0,
            "sweep": [{"bytes": b, "latency_us": lat} for b, lat in sorted(points.items())]}


def test_crossovers_between_nccl_settings_and_with_the_custom_path():
    """LL wins small messages and Simple large ones; the custom one-shot path beats NCCL's best
    below its crossover: both found, where the measured latencies meet (log size)."""
    kb = 1024
    ll = sweep_row({"env.NCCL_PROTO": "LL"}, {16 * kb: 10.0, 64 * kb: 20.0, 256 * kb: 60.0})
    simple = sweep_row({"env.NCCL_PROTO": "Simple"}, {16 * kb: 20.0, 64 * kb: 25.0, 256 * kb: 40.0})
    custom = {**sweep_row({}, {16 * kb: 5.0, 64 * kb: 30.0, 256 * kb: 80.0}), "custom": True}
    data = {"rows": [ll, simple], "custom": [custom], "decode_sizes": {"1": 16 * kb}, "message_bytes": 16 * kb}
    found = crossovers(data)
    nccl_cross = next(c for c in found if not c["custom"] and c["below"] == "NCCL_PROTO=LL")
    assert nccl_cross["above"] == "NCCL_PROTO=Simple" and nccl_cross["between"] == [64 * kb, 256 * kb]
    assert 64 * kb < nccl_cross["bytes"] < 256 * kb
    custom_cross = next(c for c in found if c["custom"])
    assert custom_cross["below"] == "custom" and custom_cross["above"] == "NCCL"
    assert 16 * kb < custom_cross["bytes"] < 64 * kb
    text = format_prescreen({**data, "allreduces_per_step": 0, "device": "cuda", "crossovers": found})
    assert "custom all-reduce against NCCL's fastest: custom up to about" in text


def test_sizes_within_the_noise_make_no_crossover():
    """Two settings whose intervals overlap everywhere (gloo ignores NCCL's variables: two
    settings are one path) cross nowhere, however their medians order; the table says tie."""
    kb = 1024
    a = sweep_row({"env.NCCL_PROTO": "LL"}, {4 * kb: 10.0, 8 * kb: 12.0, 16 * kb: 10.0})
    b = sweep_row({"env.NCCL_PROTO": "Simple"}, {4 * kb: 11.0, 8 * kb: 11.0, 16 * kb: 11.0})
    for row in (a, b):
        for p in row["sweep"]:
            p["ci_us"] = [p["latency_us"] - 3.0, p["latency_us"] + 3.0]
    data = {"rows": [a, b], "custom": [], "decode_sizes": {"1": 4 * kb}, "message_bytes": 4 * kb}
    assert crossovers(data) == []
    assert "4 KB-16 KB: within noise" in format_prescreen({**data, "allreduces_per_step": 0, "device": "cpu"})
    assert {line.rsplit(",", 1)[1] for line in sweep_csv(data).splitlines()[1:]} == {"tie"}


def test_the_prior_is_judged_at_the_objectives_decode_sizes():
    """A setting fastest at one stream but 5x slower at ten is late for a job tuned at both (the
    geometric mean of its ratios, sqrt(1 x 5) = 2.2, is past LATE_RATIO) and not for one tuned at one."""
    kb = 1024
    a = sweep_row({"env.NCCL_PROTO": "LL"}, {12 * kb: 10.0, 120 * kb: 150.0})
    b = sweep_row({"env.NCCL_PROTO": "Simple"}, {12 * kb: 12.0, 120 * kb: 30.0})
    one = {"rows": [a, b], "decode_sizes": {"1": 12 * kb}, "message_bytes": 12 * kb}
    both = {**one, "decode_sizes": {"1": 12 * kb, "10": 120 * kb}}
    assert late_settings(one) == set()
    assert late_settings(both) == {setting_key({"tp_size": 4, "env.NCCL_PROTO": "LL"})}
    assert not dropped_settings(both, keep_within=4.0) and dropped_settings(both, keep_within=2.0)
