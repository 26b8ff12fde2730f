"""``trials.csv``: one row per trial, params (``param.<name>``), every scalar metric
(``metric.<key>``, sample lists ";"-joined) and timings (``timing.<phase>``) flattened."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.core.records import TrialRow


def trials_frame(rows: list[TrialRow]):
    """pandas DataFrame: one row per trial, params/metrics/timings flattened."""
    import pandas as pd  # heavy: imported only when a table is built

    records = []
    for r in rows:
        rec: dict[str, Any] = {
            "number": r.number, "state": r.state, "value": r.value, "spread": r.spread,
            "cv": r.cv, "rel_ci": r.rel_ci, "failure_kind": r.failure_kind,
            "failure_reason": r.failure_reason, "node": r.node, "node_id": r.node_id,
            "started_at": r.started_at, "ended_at": r.ended_at, "cached_from": r.cached_from,
            "counted": r.counted, "is_baseline": r.is_baseline, "config_key": r.config_key,
            "correctness_ok": (r.correctness or {}).get("ok"),
            "correctness_reason": (r.correctness or {}).get("reason"),
            "warnings": " | ".join(r.warnings), "nccl": r.nccl_summary,
            "optuna_state": r.optuna_state,
            "server_command": (r.server or {}).get("command"), "server_version": (r.server or {}).get("version"),
        }
        for k, v in sorted((r.params or {}).items()):
            rec[f"param.{k}"] = v
        stored = {**(r.measurement.to_record() if r.measurement is not None else {}), **(r.metrics or {})}
        for k, v in sorted(stored.items()):  # the record as stored: the columns every version wrote
            if isinstance(v, (list, tuple)):
                v = ";".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in v)
            elif isinstance(v, dict):
                v = json.dumps(v, sort_keys=True)
            rec[f"metric.{k}"] = v
        for k, v in sorted((r.durations or {}).items()):
            rec[f"timing.{k}"] = v
        records.append(rec)
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        frame = pd.DataFrame(columns=["number", "state", "value", "failure_kind", "failure_reason"])
    fixed = [c for c in frame.columns if not c.startswith(("param.", "metric.", "timing."))]
    grouped = [c for p in ("param.", "metric.", "timing.") for c in sorted(c for c in frame.columns if c.startswith(p))]
    return frame[fixed + grouped]
