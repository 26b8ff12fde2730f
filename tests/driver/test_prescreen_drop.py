"""The pre-screen's decision before any launch: failed and far slower settings dropped, the ones
2x the fastest or slower tried late, judged at the objective's decode sizes."""

from __future__ import annotations

from conftest import write_job
from orchestrator.config.job import DEFAULT_KEEP_WITHIN, load_job
from orchestrator.core.prescreened import Prescreen
from orchestrator.driver.prescreen_drop import dropped_settings, late_settings, setting_key

SPACE = "params:\n  tp_size: {choices: [1, 2]}\n  env.NCCL_PROTO: {choices: [LL, Simple]}\n"


def test_drop_rule_keeps_the_fastest_and_drops_failures():
    data = Prescreen.from_record({"rows": [
        {"tp_size": 2, "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 10.0},
        {"tp_size": 2, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 11.5},
        {"tp_size": 2, "env.NCCL_PROTO": "LL128", "ok": True, "latency_us": 30.0},
        {"tp_size": 4, "env.NCCL_PROTO": "LL", "ok": False, "kind": "nccl-invalid", "reason": "invalid usage"},
    ]})
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
    data = Prescreen.from_record({"rows": [
        {"tp_size": 2, "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 10.0},
        {"tp_size": 2, "env.NCCL_PROTO": "LL128", "ok": True, "latency_us": 19.0},
        {"tp_size": 2, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 20.0},
        {"tp_size": 2, "env.NCCL_ALGO": "Tree", "ok": True, "latency_us": 25.0},
        {"tp_size": 2, "env.NCCL_ALGO": "Ring", "ok": True, "latency_us": 45.0},
        {"tp_size": 4, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 40.0},
        {"tp_size": 4, "env.NCCL_PROTO": "LL", "ok": False, "kind": "nccl-invalid", "reason": "invalid usage"},
    ]})
    late = late_settings(data)
    assert late == {setting_key({"tp_size": 2, "env.NCCL_PROTO": "Simple"}),
                    setting_key({"tp_size": 2, "env.NCCL_ALGO": "Tree"}),
                    setting_key({"tp_size": 2, "env.NCCL_ALGO": "Ring"})}
    dropped = dropped_settings(data, keep_within=DEFAULT_KEEP_WITHIN)
    assert not dropped.keys() & (late - {setting_key({"tp_size": 2, "env.NCCL_ALGO": "Ring"})})  # 2x-4x: kept
    assert setting_key({"tp_size": 2, "env.NCCL_ALGO": "Ring"}) in dropped  # 4.5x: dropped
    job = load_job(write_job(tmp_path, space_text=SPACE, prescreen={"enabled": True}))
    assert job.prescreen.keep_within == DEFAULT_KEEP_WITHIN  # what a job that only turns it on gets


def sweep_row(label: dict, points: dict[int, float], tp: int = 4) -> dict:
    return {"tp_size": tp, **label, "ok": True, "latency_us": points[min(points)], "bytes": min(points), "seconds": 1.0,
            "sweep": [{"bytes": b, "latency_us": lat} for b, lat in sorted(points.items())]}


def test_the_prior_is_judged_at_the_objectives_decode_sizes():
    """A setting fastest at one stream but 5x slower at ten is late for a job tuned at both (the
    geometric mean of its ratios, sqrt(1 x 5) = 2.2, is past LATE_RATIO) and not for one tuned at one."""
    kb = 1024
    a = sweep_row({"env.NCCL_PROTO": "LL"}, {12 * kb: 10.0, 120 * kb: 150.0})
    b = sweep_row({"env.NCCL_PROTO": "Simple"}, {12 * kb: 12.0, 120 * kb: 30.0})
    one = {"rows": [a, b], "decode_sizes": {"1": 12 * kb}, "message_bytes": 12 * kb}
    both = Prescreen.from_record({**one, "decode_sizes": {"1": 12 * kb, "10": 120 * kb}})
    assert late_settings(Prescreen.from_record(one)) == set()
    assert late_settings(both) == {setting_key({"tp_size": 4, "env.NCCL_PROTO": "LL"})}
    assert not dropped_settings(both, keep_within=4.0) and dropped_settings(both, keep_within=2.0)
