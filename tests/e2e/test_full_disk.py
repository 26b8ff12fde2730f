"""Every file the tool writes is whole or absent (issue 38): each command that writes, run by
the real command line against a real full file system (a small tmpfs, filled), leaves the file
as it was (absent, or the previous whole one), no temporary file, and says one line, ``cannot
write to FOLDER: cause``, exit 1. The journal's own full disk is tests/e2e/test_journal_e2e.py;
a trial's server log and record, tests/node/test_trial.py; that no module writes a file by any
other path than core/files.py, tests/core/test_files.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import recorded_study as fx

from conftest import REPO, fill_disk, mounted_tmpfs, write_job
from orchestrator.config.job import load_job
from orchestrator.study.storage import storage


def cli(*argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """The real command line, as a user runs it (its own process: stdout is a real file)."""
    return subprocess.run([sys.executable, "-m", "orchestrator", *argv], cwd=REPO, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300)


def one_line(done: subprocess.CompletedProcess, folder: Path) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"ncclsweep: error: cannot write to {folder}: No space left on device"), lines
    assert "internal error" not in lines[0] and "Traceback" not in done.stderr
    return lines[0]


def ends_in_one_line(done: subprocess.CompletedProcess, folder: Path) -> str:
    """A command that says its progress on stderr as it goes: its last line is the one error line."""
    assert done.stderr.strip(), done
    *progress, last = done.stderr.strip().splitlines()
    one_line(subprocess.CompletedProcess(done.args, done.returncode, done.stdout, last), folder)
    assert not any("error" in line for line in progress), done.stderr
    return last


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*.tmp")]


@pytest.fixture
def study_on_a_disk(tmp_path):
    """A recorded study whose folder is on a 4 MB tmpfs: (job file, the study's folder, the disk)."""
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk:
        folder = disk / "study"
        job_path = write_job(tmp_path, study="demo", report_dir=str(folder))
        job = load_job(job_path)
        study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage),
                                    direction="maximize")
        policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
        choices = {"tp_size": [1, 2], "backend.threads": [1, 2]}
        for i, config in enumerate([{"tp_size": 1, "backend.threads": 1}, {"tp_size": 2, "backend.threads": 2}]):
            fx.record(study, policy, config, fx.ok(config, 20.0 + 10 * i, at=70 * i), baseline=i == 0,
                      choices=choices)
        yield job_path, folder, disk


def test_report_on_a_full_disk_keeps_the_previous_report_whole(study_on_a_disk):
    job_path, folder, disk = study_on_a_disk
    done = cli("report", str(job_path))
    assert done.returncode == 0, done.stderr
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != "study.journal"}
    assert {"report.md", "report.html", "trials.csv", "history.png"} <= set(before)
    fill_disk(disk)
    one_line(cli("report", str(job_path)), folder)
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != "study.journal"}
    assert after == before  # each file the previous whole one: none cut, none emptied
    assert not leftovers(disk)


def test_a_first_report_on_a_full_disk_leaves_no_file(study_on_a_disk):
    job_path, folder, disk = study_on_a_disk
    fill_disk(disk)
    one_line(cli("report", str(job_path)), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["study.journal"] and not leftovers(disk)


def test_export_to_a_full_disk_leaves_no_file_and_keeps_a_previous_one(study_on_a_disk):
    job_path, folder, disk = study_on_a_disk
    kept = disk / "kept.env"
    assert cli("export", str(job_path), "--format", "env", "-o", str(kept)).returncode == 0
    previous = kept.read_text()
    assert "NCCL_NVLS_ENABLE=0" in previous.splitlines()
    fill_disk(disk)
    for fmt in ("env", "cmd", "yaml", "json", "nccl-tuner"):
        new = disk / f"best.{fmt}"
        one_line(cli("export", str(job_path), "--format", fmt, "-o", str(new)), disk)
        assert not new.exists()  # not a 0-byte file docker --env-file would take silently
        one_line(cli("export", str(job_path), "--format", fmt, "-o", str(kept)), disk)
        assert kept.read_text() == previous
    assert not leftovers(disk)


def test_status_into_a_file_on_a_full_disk_says_so(study_on_a_disk):
    job_path, folder, disk = study_on_a_disk
    fill_disk(disk)
    for args in (("status", str(job_path), "--json"), ("status", str(job_path))):
        with open(disk / "status.out", "w") as out:  # the shell's `> FILE`: the file exists, its writes fail
            line = one_line(cli(*args, stdout=out), disk)
        assert line.endswith("(writing status.out); free space there, then run again"), line


def test_a_read_only_file_system_says_to_make_it_writable(study_on_a_disk):
    job_path, folder, disk = study_on_a_disk
    done = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount read-only here: {done.stderr.strip()}")
    done = cli("report", str(job_path))
    assert done.returncode == 1 and done.stderr.strip() == (
        f"ncclsweep: error: cannot write to {folder}: Read-only file system (writing trials.csv); make it writable "
        "(the file system is mounted read-only), then run again"), done.stderr


def test_simulate_json_onto_a_full_disk_leaves_no_file(tmp_path):
    """`simulate --json FILE` (the search-strategy replay's figures) is a writer too."""
    with mounted_tmpfs(tmp_path / "disk", "1m") as disk:
        fill_disk(disk)
        out = disk / "sim.json"
        done = cli("simulate", str(REPO / "docs" / "tables" / "cpu-demo.csv"), "--sampler", "random", "--seeds", "2",
                   "--json", str(out))
        ends_in_one_line(done, disk)
        assert not out.exists() and leftovers(disk) == []


@pytest.mark.slow
def test_prescreen_onto_a_full_disk_leaves_neither_file(tmp_path):
    """The all-reduce pre-screen measures (real gloo processes), then cannot write its findings:
    one line, and neither prescreen.json nor its sweep table half-written."""
    with mounted_tmpfs(tmp_path / "disk", "1m") as disk:
        folder = disk / "ps"
        space = "params:\n  tp_size: {choices: [1, 2]}\n  env.NCCL_PROTO: {choices: [LL, Simple]}\n"
        job_path = write_job(tmp_path, study="ps", report_dir=str(folder), space_text=space,
                             baseline={"tp_size": 1})
        folder.mkdir()
        fill_disk(disk)
        done = cli("prescreen", str(job_path), "--iters", "20")
        ends_in_one_line(done, folder)
        assert sorted(p.name for p in folder.iterdir()) == [] and leftovers(disk) == []


def test_compare_onto_a_full_disk_says_so_and_leaves_the_study_readable(study_on_a_disk):
    """`compare` relaunches the best and the baseline and records their launches in the study: on a
    full disk it stops with the one line, leaves no half-written file, and the study still reads."""
    job_path, folder, disk = study_on_a_disk
    before = cli("status", str(job_path), "--json")
    assert before.returncode == 0
    fill_disk(disk)
    done = cli("compare", str(job_path), "--rounds", "1")
    assert ends_in_one_line(done, folder).endswith("(writing compare.json); free space there, then run again")
    assert leftovers(disk) == [] and not (folder / "compare.json").exists()
    after = cli("status", str(job_path), "--json")
    assert after.returncode == 0 and after.stdout == before.stdout  # nothing of the stopped compare half-recorded
