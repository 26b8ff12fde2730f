"""The study folder's layout is one table: every file a study writes is named by StudyDir, and
a real job's study writes where StudyDir says."""

from __future__ import annotations

from pathlib import Path

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core.study_dir import StudyDir, trial_log_name


def test_every_file_lives_under_the_root(tmp_path):
    d = StudyDir(tmp_path / "s")
    files = [d.journal, d.lock, d.driver_log, d.servers, d.logs, d.bench_logs, d.compare_logs, d.compare,
             d.prescreen, d.report_md, d.report_html, d.trials_csv, d.plot("history.png"), d.logs / trial_log_name(7)]
    assert all(f.parent == d.root or f.parent.parent == d.root for f in files)
    assert len({str(f) for f in files}) == len(files)  # no two share a name
    assert trial_log_name(7) == "trial-0007.log"


def test_a_job_stores_its_journal_where_the_study_dir_says(tmp_path):
    job = load_job(write_job(tmp_path))
    assert job.dir == StudyDir(Path(job.report_dir))
    assert job.storage == f"journal:{job.dir.journal}"
