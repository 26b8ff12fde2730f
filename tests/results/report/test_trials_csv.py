"""trials.csv (trials_csv.py): one row per trial of a real journal study, params, metrics
(sample lists joined) and timings flattened into columns."""

from __future__ import annotations

import pandas as pd
import pytest
import recorded_study as fx  # a real journal study with every outcome

from orchestrator.results.report.trials_csv import trials_frame
from orchestrator.study.evidence import history
from orchestrator.study.storage import storage


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """trials.csv of a real journal study with every outcome, written as write_report writes it."""
    job, _study = fx.build_study(tmp_path_factory.mktemp("csv"))
    job.report_dir.mkdir(parents=True, exist_ok=True)
    trials_frame(history.trial_rows(storage.load_study(job))).to_csv(job.report_dir / "trials.csv", index=False)
    return job, None


def test_csv_one_row_per_trial(report):
    job, _ = report
    df = pd.read_csv(job.report_dir / "trials.csv")
    assert len(df) == 13 and list(df["number"]) == list(range(13))
    for col in ("state", "value", "spread", "failure_kind", "failure_reason", "node", "started_at", "ended_at",
                "cached_from", "counted", "param.tp_size", "param.env.NCCL_PROTO", "param.graph_capture",
                "metric.decode_tok_s", "metric.cv", "metric.rel_ci", "metric.decode_samples", "timing.launch_s",
                "timing.total_s", "warnings"):
        assert col in df.columns, col
    row3 = df[df["number"] == 3].iloc[0]
    assert row3["state"] == "FAIL" and row3["failure_kind"] == "wrong-output" and pd.isna(row3["value"])
    assert df[df["number"] == 2].iloc[0]["param.env.NCCL_PROTO"] == "LL"
    assert df[df["number"] == 2].iloc[0]["metric.decode_samples"].count(";") == 2
    assert list(df["state"]).count("COMPLETE") == 7
