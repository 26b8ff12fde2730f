"""Which all-reduce path is fastest per size and where that changes: crossovers found between
clear winners only, where the latencies meet; sizes within the noise say nothing."""

from __future__ import annotations

from orchestrator.core.prescreened import Prescreen
from orchestrator.driver.prescreen_paths import crossovers, standing, winners
from orchestrator.driver.prescreen_table import format_prescreen, sweep_csv

KB = 1024


def sweep_row(label: dict, points: dict[int, float], tp: int = 4) -> dict:
    return {"tp_size": tp, **label, "ok": True, "latency_us": points[min(points)], "bytes": min(points), "seconds": 1.0,
            "sweep": [{"bytes": b, "latency_us": lat} for b, lat in sorted(points.items())]}


def test_crossovers_between_nccl_settings_and_with_the_custom_path():
    """LL wins small messages and Simple large ones; the custom one-shot path beats NCCL's best
    below its crossover: both found, where the measured latencies meet (log size)."""
    ll = sweep_row({"env.NCCL_PROTO": "LL"}, {16 * KB: 10.0, 64 * KB: 20.0, 256 * KB: 60.0})
    simple = sweep_row({"env.NCCL_PROTO": "Simple"}, {16 * KB: 20.0, 64 * KB: 25.0, 256 * KB: 40.0})
    custom = sweep_row({}, {16 * KB: 5.0, 64 * KB: 30.0, 256 * KB: 80.0})
    record = {"rows": [ll, simple], "custom": [custom], "decode_sizes": {"1": 16 * KB}, "message_bytes": 16 * KB}
    data = Prescreen.from_record(record)
    found = crossovers(data)
    nccl_cross = next(c for c in found if not c.custom and c.below == "NCCL_PROTO=LL")
    assert nccl_cross.above == "NCCL_PROTO=Simple" and nccl_cross.between == (64 * KB, 256 * KB)
    assert 64 * KB < nccl_cross.nbytes < 256 * KB
    custom_cross = next(c for c in found if c.custom)
    assert custom_cross.below == "custom" and custom_cross.above == "NCCL"
    assert 16 * KB < custom_cross.nbytes < 64 * KB
    text = format_prescreen(Prescreen.from_record({**record, "allreduces_per_step": 0, "device": "cuda",
                                                   "crossovers": [c.to_record() for c in found]}))
    assert "custom all-reduce against NCCL's fastest: custom up to about" in text
    assert [(size, label) for size, label, _, clear in winners(data, 4) if clear] == [
        (16 * KB, "custom"), (64 * KB, "NCCL_PROTO=LL"), (256 * KB, "NCCL_PROTO=Simple")]
    assert standing(data, 4, 16 * KB, "custom") == "1" and standing(data, 4, 16 * KB, "NCCL_PROTO=LL") == "0"


def test_sizes_within_the_noise_make_no_crossover():
    """Two settings whose intervals overlap everywhere (gloo ignores NCCL's variables: two
    settings are one path) cross nowhere, however their medians order; the table says tie."""
    a = sweep_row({"env.NCCL_PROTO": "LL"}, {4 * KB: 10.0, 8 * KB: 12.0, 16 * KB: 10.0})
    b = sweep_row({"env.NCCL_PROTO": "Simple"}, {4 * KB: 11.0, 8 * KB: 11.0, 16 * KB: 11.0})
    for row in (a, b):
        for p in row["sweep"]:
            p["ci_us"] = [p["latency_us"] - 3.0, p["latency_us"] + 3.0]
    data = Prescreen.from_record({"rows": [a, b], "custom": [], "decode_sizes": {"1": 4 * KB},
                                  "message_bytes": 4 * KB, "allreduces_per_step": 0, "device": "cpu"})
    assert crossovers(data) == ()
    assert "4 KB-16 KB: within noise" in format_prescreen(data)
    assert {line.rsplit(",", 1)[1] for line in sweep_csv(data).splitlines()[1:]} == {"tie"}
