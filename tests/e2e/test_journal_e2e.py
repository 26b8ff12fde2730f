"""A crash or a full disk while the journal is written never loses the study: a journal cut in
the middle of its last line is still read by `status`, and `run` repairs it (one warning) and
resumes with every complete trial kept; a full disk (a small tmpfs as the study folder) stops
the run with one line and exit 1, the journal stays readable, and once space is freed the
run resumes with every complete trial kept. Real Ray, real reference servers, real files."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from conftest import mounted_tmpfs, write_job
from logtext import log_lines
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

SPACE = "params:\n  tp_size: {choices: [1, 2]}\n  backend.max_batch: {choices: [4, 8, 16, 32]}\n"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def complete(job) -> dict[int, float]:
    """Trial number -> decode tok/s of every COMPLETE trial, as `status` shows them."""
    return {r.number: r.value for r in trial_rows(open_study(job, create=False)) if r.state == "COMPLETE"}


def test_a_journal_cut_mid_line_is_read_by_status_and_resumed_by_run(tmp_path, ray_local, no_leftover_servers):
    job_path = write_job(tmp_path, study="cut", space_text=SPACE, budget={"trials": 2},
                         baseline={"tp_size": 1, "backend.max_batch": 8})
    code, _, err = run_cli("run", str(job_path))
    assert code == 0, err
    job = load_job(job_path)
    before = complete(job)
    assert len(before) == 2
    data = job.journal_path.read_bytes()
    last = data.splitlines(keepends=True)[-1]
    cut = data[: len(data) - len(last) // 2]  # the power went out in the middle of the last record
    job.journal_path.write_bytes(cut)

    code, out, err = run_cli("status", str(job_path), "--json")
    assert code == 0, err
    assert {r["number"]: r["value"] for r in json.loads(out)["trials"] if r["state"] == "COMPLETE"} == before
    assert job.journal_path.read_bytes() == cut  # read only

    code, _, err = run_cli("run", str(job_path), "--trials", "3")
    assert code == 0, err
    warnings = [line for line in log_lines(err) if "incomplete write" in line]
    assert len(warnings) == 1 and "every complete record before it is kept" in warnings[0], err
    (side,) = job.journal_path.parent.glob("study.journal.incomplete-*")
    assert side.read_bytes() == cut[len(data) - len(last):]
    after = complete(job)
    assert {n: after.get(n) for n in before} == before  # every complete trial kept, with its value
    assert sum(r.counted for r in trial_rows(open_study(job, create=False))) == 3


def test_a_full_disk_stops_the_run_with_one_line_and_the_study_resumes(tmp_path, ray_local, no_leftover_servers):
    disk = tmp_path / "disk"
    with mounted_tmpfs(disk, "160k"):
        folder = disk / "full"
        job_path = write_job(tmp_path, study="full", space_text=SPACE, budget={"trials": 4},
                             baseline={"tp_size": 1, "backend.max_batch": 8}, report_dir=str(folder))
        stat = os.statvfs(disk)
        filler = disk / "filler"  # leaves room for about the baseline's records, not for the rest
        filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 40 * 1024))

        code, _, err = run_cli("run", str(job_path))
        lines = log_lines(err.strip())
        assert code == 1, err
        stop = f"ncclsweep: error: stopping: cannot write to {folder}: No space left on device"
        assert lines[-1].startswith(stop), err
        assert "`ncclsweep run" in lines[-1] and "resumes the study" in lines[-1]
        assert sum(line.startswith("ncclsweep: error:") for line in lines) == 1
        assert not [line for line in lines if "Traceback" in line or "Logging error" in line], err
        job = load_job(job_path)
        assert job.journal_path.read_bytes().endswith(b"\n")  # whole records only
        code, out, status_err = run_cli("status", str(job_path), "--json")
        assert code == 0, status_err
        before = complete(job)
        assert before, "the baseline fitted before the disk filled"

        filler.unlink()  # space freed
        code, _, err = run_cli("run", str(job_path))
        assert code == 0, err
        after = complete(job)
        assert {n: after.get(n) for n in before} == before  # every complete trial kept
        assert sum(r.counted for r in trial_rows(open_study(job, create=False))) == 4


