"""Per-trial time split and orchestration overhead of a finished study (docs/benchmarks.md).

    python docs/trial_overhead.py JOB.yaml

For each launched trial: server start (spawn to healthy), warm-up, benchmark, correctness
check, teardown, and the rest (orchestration inside the worker: port, env, log parsing,
device check); then the driver's gap from one trial's end to the next trial's start.
"""

import statistics
import sys
from datetime import datetime

from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

PARTS = ("launch_s", "warmup_s", "bench_s", "check_s", "teardown_s")


def ts(text):
    return datetime.fromisoformat(text).timestamp() if text else None


def main(path: str) -> None:
    rows = [r for r in trial_rows(open_study(load_job(path), create=False))
            if r.counted and r.started_at and r.cached_from is None]
    rows.sort(key=lambda r: ts(r.started_at))
    print("| trial | state | kind | " + " | ".join(p[:-2] for p in PARTS) + " | rest | total | gap to next start |")
    print("|" + "---|" * (len(PARTS) + 6))
    rests, gaps = [], []
    for i, r in enumerate(rows):
        d = r.durations or {}
        rest = d.get("total_s", 0) - sum(d.get(p, 0) for p in PARTS)
        rests.append(rest)
        gap = ts(rows[i + 1].started_at) - ts(r.ended_at) if i + 1 < len(rows) else None
        if gap is not None:
            gaps.append(gap)
        cells = [f"{d.get(p, 0):.2f}" for p in PARTS]
        print(f"| {r.number} | {r.state} | {r.failure_kind or ''} | " + " | ".join(cells)
              + f" | {rest:.2f} | {d.get('total_s', 0):.2f} | {'' if gap is None else f'{gap:.2f}'} |")
    print(f"\nmedian rest inside the worker: {statistics.median(rests):.2f} s; "
          f"median driver gap between trials: {statistics.median(gaps):.2f} s" if gaps else "")


if __name__ == "__main__":
    main(sys.argv[1])
