"""The pre-screen's table and CSV as a user reads them: every setting's row (a failure with its
kind and reason), the custom path, the fastest path per size; the CSV one line per setting and
size with the median's interval, what NCCL logged it chose, and whether it was fastest."""

from __future__ import annotations

from orchestrator.core.prescreened import Prescreen
from orchestrator.driver.prescreen_table import format_prescreen, sweep_csv

KB = 1024


def test_the_table_names_each_setting_its_failure_and_the_fastest_path_per_size():
    rows = [{"tp_size": 2, "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 10.0, "bytes": 4 * KB, "seconds": 2.0,
             "graph": True, "predicted_tok_s": 123.45, "warnings": [],
             "sweep": [{"bytes": 4 * KB, "latency_us": 10.0, "ci_us": [9.5, 10.5], "algo": "Ring", "proto": "LL"},
                       {"bytes": 8 * KB, "latency_us": 30.0, "ci_us": [29.0, 31.0], "algo": "Ring", "proto": "LL"}]},
            {"tp_size": 2, "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 20.0, "bytes": 4 * KB,
             "seconds": 3.0, "graph": True, "warnings": ["NCCL_PROTO=Simple not applied"],
             "sweep": [{"bytes": 4 * KB, "latency_us": 20.0, "ci_us": [19.0, 21.0]},
                       {"bytes": 8 * KB, "latency_us": 15.0, "ci_us": [14.0, 16.0]}]},
            {"tp_size": 2, "env.NCCL_PROTO": "LL128", "ok": False, "kind": "nccl-invalid", "reason": "invalid usage",
             "seconds": 1.0}]
    data = Prescreen.from_record({"message_bytes": 4 * KB, "allreduces_per_step": 16, "device": "cuda",
                                  "rows": rows, "decode_sizes": {"1": 4 * KB, "10": 40 * KB}, "custom": [
                                      {"tp_size": 2, "ok": False, "kind": "not-runnable", "reason": "no P2P"}]})
    text = format_prescreen(data).splitlines()
    assert text[0] == ("All-reduce of 4096 bytes (the decode message at the objective's first level; decode sizes: "
                       "4096 B at 1 stream, 40960 B at 10 streams), 16 per decode step, on cuda:")
    assert "| tp_size=2 NCCL_PROTO=LL | 10.0 us | 123.5 | 2.0s | in a CUDA graph |" in text
    assert "| tp_size=2 NCCL_PROTO=Simple | 20.0 us | - | 3.0s | NCCL_PROTO=Simple not applied |" in text
    assert "| tp_size=2 NCCL_PROTO=LL128 | FAIL nccl-invalid | - | 1.0s | invalid usage |" in text
    assert "| tp_size=2 custom all-reduce | not-runnable | - | - | no P2P |" in text
    assert text[-2:] == ["  4 KB: NCCL_PROTO=LL", "  8 KB: NCCL_PROTO=Simple"]
    assert sweep_csv(data).splitlines() == [
        "tp_size,setting,bytes,latency_us,ci_lo_us,ci_hi_us,algo,proto,fastest",
        "2,NCCL_PROTO=LL,4096,10.000,9.500,10.500,Ring,LL,1", "2,NCCL_PROTO=LL,8192,30.000,29.000,31.000,Ring,LL,0",
        "2,NCCL_PROTO=Simple,4096,20.000,19.000,21.000,,,0", "2,NCCL_PROTO=Simple,8192,15.000,14.000,16.000,,,1"]
