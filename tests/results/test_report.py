"""write_report: every file of the report from a real journal study, from a study where nothing
ran, and the journal still opens with Optuna's own loader afterwards."""

from __future__ import annotations

import optuna
import pytest
import recorded_study as fx  # a real journal study with every outcome
from written_report import EXPECTED, write_demo_report

from orchestrator.results.report import write_report
from orchestrator.study import storage


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of a real journal study with every outcome (written once for the module)."""
    return write_demo_report(tmp_path_factory.mktemp("report"))



def test_all_files_written(report):
    job, paths = report
    assert {p.name for p in paths} == EXPECTED
    for p in paths:
        assert p.parent == job.report_dir and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_storage_still_opens_with_optunas_loader(report):
    """What optuna-dashboard does with the journal file path: the report must not disturb it."""
    job, _ = report
    backend = optuna.storages.journal.JournalFileBackend(str(storage.journal_path(job.storage)))
    study = optuna.load_study(study_name=job.study, storage=optuna.storages.JournalStorage(backend))
    assert len(study.trials) == 13


def test_report_of_an_empty_study(tmp_path):
    job = fx.make_job(tmp_path)
    optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    paths = write_report(job)
    assert {p.name for p in paths} == EXPECTED
    assert "no trials yet" in (job.report_dir / "report.md").read_text()
