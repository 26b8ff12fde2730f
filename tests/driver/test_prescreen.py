"""The all-reduce pre-screen: real probe processes (gloo on CPU) over the decode sizes and the
sweep, and a study that never launches a server for a dropped NCCL setting."""

from __future__ import annotations

import io
import json

import pytest

from conftest import run_in_process, write_job
from orchestrator.config.job import load_job
from orchestrator.core import prescreened
from orchestrator.core.prescreened import Point, Probed
from orchestrator.driver.prescreen import decode_sizes, merge_rounds, run_prescreen, sweep_sizes
from orchestrator.driver.prescreen_table import format_prescreen
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

SPACE = "params:\n  tp_size: {choices: [1, 2]}\n  env.NCCL_PROTO: {choices: [LL, Simple]}\n"


@pytest.mark.slow
def test_probe_measures_each_setting_in_fresh_processes(tmp_path):
    job = load_job(write_job(tmp_path, study="ps", space_text=SPACE, baseline={"tp_size": 1}))
    data = run_prescreen(job, iters=30, measured={2: ({"tp_size": 2, "env.NCCL_PROTO": "LL"}, 50.0)},
                         say=lambda _: None, rounds=1)  # one launch per setting (two: test_export's sweep)
    rows = data.rows
    assert sorted(r.env["env.NCCL_PROTO"] for r in rows) == ["LL", "Simple"]
    assert all(r.ok and r.latency_us > 0 and len(r.samples_us) == 30 for r in rows)
    assert data.message_bytes == 256 * 4 and data.allreduces_per_step == 8  # tiny, float32 on CPU
    ll = next(r for r in rows if r.env["env.NCCL_PROTO"] == "LL")
    assert ll.predicted_tok_s == pytest.approx(50.0)  # the measured config predicts itself
    stored = json.loads((tmp_path / "reports" / "ps" / "prescreen.json").read_text())
    assert stored["rows"] and stored["version"] == prescreened.VERSION
    assert prescreened.load(tmp_path / "reports" / "ps" / "prescreen.json") == data  # read back as written
    assert "NCCL_PROTO=Simple" in format_prescreen(data)
    # the sweep: every size, each row's points in size order, the table beside the JSON
    assert data.decode_sizes == {"1": 256 * 4} and data.sizes[0] == 256 * 4
    for r in rows:
        assert [p.nbytes for p in r.sweep] == sorted(data.sizes)
        assert all(p.latency_us > 0 for p in r.sweep)
    assert (tmp_path / "reports" / "ps" / "prescreen-sweep.csv").read_text().count("\n") == 1 + 2 * len(data.sizes)
    (custom,) = data.custom
    assert not custom.ok and "needs CUDA devices with P2P" in (custom.reason or "")  # torch cannot run it on CPU
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


def test_two_rounds_merge_into_one_row_whose_intervals_span_both_launches():
    """Two launches of one setting that disagree at a size: its median is theirs, its interval the
    union of theirs (so the size is within the noise), every sample kept; a failed launch is the row."""
    def launch(latency: float, lo: float, hi: float, seconds: float) -> Probed:
        return Probed(2, {"env.NCCL_PROTO": "LL"}, ok=True, latency_us=latency, samples_us=(latency,), nbytes=4096,
                      seconds=seconds, sweep=(Point(4096, latency, ci_us=(lo, hi), algo="Ring", proto="LL"),),
                      warnings=("NCCL_PROTO not applied",))
    merged = merge_rounds([launch(10.0, 9.0, 11.0, 1.5), launch(20.0, 19.0, 21.0, 2.5)])
    assert merged.latency_us == 15.0 and merged.samples_us == (10.0, 20.0) and merged.seconds == 4.0
    assert merged.rounds == 2 and merged.warnings == ("NCCL_PROTO not applied",)
    (point,) = merged.sweep
    assert point.interval == (15.0, 9.0, 21.0) and point.rounds_us == (10.0, 20.0) and point.algo == "Ring"
    failed = Probed(2, {"env.NCCL_PROTO": "LL"}, kind="timeout", reason="no answer in 60s", seconds=60.0)
    assert merge_rounds([launch(10.0, 9.0, 11.0, 1.0), failed]) == failed
