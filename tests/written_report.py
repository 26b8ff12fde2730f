"""What the report tests share: a report written from a real journal study with every outcome
(tests/recorded_study.py) and a compare.json of the motivating case measured in 4 rounds; a
section of report.md by its title."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import optuna
import recorded_study as fx  # a real journal study with every outcome

from orchestrator.results.compare_file import CompareFile
from orchestrator.results.report import write_report
from orchestrator.study.storage import storage

EXPECTED = {"trials.csv", "history.png", "params.png", "importance.png", "timeline.png", "startup.png", "report.md",
            "report.html"}


def rounds(per_config: dict[str, dict[str, list[float]]]) -> list[dict]:
    """compare.json's rounds from {label: {concurrency: [tok/s per round]}}, alternating order."""
    labels = list(per_config)
    n = max(len(v) for levels in per_config.values() for v in levels.values())
    return [{"round": r, "config": label, "trial": 0,
             "levels": {c: {"total_tok_s": vals[r]} for c, vals in per_config[label].items() if r < len(vals)}}
            for r in range(n) for label in (labels if r % 2 == 0 else labels[::-1])]


# The motivating case's figures, measured in 4 rounds: graphs win at 1 and 2, lose at 10 beyond
# noise, and tie at 64.
ROUNDS = rounds({
    "baseline": {"1": [20.0, 19.8, 20.2, 20.1], "2": [38.2, 38.0, 38.4, 38.3], "10": [154.0, 150.0, 158.0, 155.0],
                 "64": [292.9, 290.0, 305.0, 285.0]},
    "best": {"1": [42.7, 42.5, 42.9, 42.8], "2": [71.5, 71.0, 72.0, 71.2], "10": [128.7, 127.0, 131.0, 129.5],
             "64": [303.7, 300.0, 299.0, 298.0]},
    "trial-1": {"1": [42.0, 41.8, 42.3, 42.1], "2": [70.0, 69.1, 70.3, 70.2], "10": [160.6, 158.0, 163.0, 161.0],
                "64": [300.0, 301.0, 302.5, 299.0]},
})


COMPARE = {
    "concurrency": [1, 2, 10, 64], "baseline_trial": 0, "best_trial": 2, "same_config": False,
    "rounds_planned": 4, "complete": True, "rounds_done": 4,
    "baseline": {"1": 20.05, "2": 38.25, "10": 154.5, "64": 291.45},
    "best": {"1": 42.75, "2": 71.35, "10": 129.1, "64": 299.5},
    "others": [{"trial": 1, "label": "trial-1", "params": {"tp_size": 2, "graph_capture": True},
                "median": {"1": 42.05, "10": 160.8}}],
    "rounds": ROUNDS, "failures": [],
    "constraints": [{"concurrency": 10, "min_ratio": 0.9, "ratio": 0.84, "lo": 0.82, "hi": 0.85, "ok": False,
                     "state": "VIOLATED", "measured": True, "text": "95% CI 0.82-0.85x"}],
}


def section(md: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", md, re.S | re.M)
    assert m, title
    return m.group(0)


def one_trial_study(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.ok(fx.BASE, 20.0), baseline=True)
    job.report_dir.mkdir(parents=True, exist_ok=True)
    return job, study


COMPARE = CompareFile.from_record(COMPARE).to_record()  # the per-level intervals, as compare writes them


def write_demo_report(directory: Path) -> tuple[Any, list[Path]]:
    """The report of recorded_study's study, with COMPARE as its compare.json: (job, paths)."""
    job, _study = fx.build_study(directory)
    job.report_dir.mkdir(parents=True, exist_ok=True)
    (job.report_dir / "compare.json").write_text(json.dumps(COMPARE))
    paths = write_report(job, bandwidth_bytes_s=50e9, allreduce_latency_s=20e-6)  # loads the study from storage
    return job, paths
