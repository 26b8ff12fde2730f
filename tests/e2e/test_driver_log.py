"""reports/<study>/driver.log: what the terminal showed during a run, plus every warning,
including warnings logged inside the Ray actor that ran a trial (which reach no handler of
the driver by themselves): those also travel with the trial's record."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, run_end, study_servers, write_job

pytestmark = pytest.mark.slow


def _break_the_record_when_it_appears(servers_dir, stop: threading.Event) -> None:
    """Swap the first server record for a directory of the same name: the actor's teardown
    then cannot remove it and logs a warning (a real one, from server.py, in the actor)."""
    while not stop.is_set():
        records = list(servers_dir.glob("*.json")) if servers_dir.is_dir() else []
        if records:
            path = records[0]
            path.unlink()
            path.mkdir()
            (path / "keep").write_text("x")
            return
        time.sleep(0.05)


def test_actor_warnings_reach_driver_log_and_the_trial_record(tmp_path, no_leftover_servers):
    job_path = write_job(tmp_path, study="logged", budget={"trials": 1})
    report_dir = tmp_path / "reports" / "logged"
    stop = threading.Event()
    watcher = threading.Thread(target=_break_the_record_when_it_appears, args=(report_dir / "servers", stop),
                               daemon=True)
    watcher.start()
    try:
        run = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path)], capture_output=True,
                             text=True, timeout=300, cwd=REPO)
    finally:
        stop.set()
        watcher.join(5)
    assert run.returncode == 0, run.stderr
    log = (report_dir / "driver.log").read_text()
    # everything the terminal showed is in the file, time-stamped
    for line in run.stderr.splitlines():
        if line.startswith(("starting #", "  #0 ->", "budget reached")):
            assert line in log, line
    assert "cannot remove server record" in log and "#0:" in log  # the actor's warning, with its trial
    assert "cannot remove server record" in run.stderr
    logged = [line.split(" ", 2)[2] for line in log.strip().splitlines() if line[:2] == "20"]  # time-stamped
    assert run_end(logged)[0].startswith("the baseline #0 is the best")
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", str(job_path), "--json"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    rows = json.loads(status.stdout)["trials"]
    assert any("cannot remove server record" in w for w in rows[0]["warnings"]), rows[0]["warnings"]
    assert not study_servers(tmp_path / "reports")
    shutil.rmtree(report_dir / "servers")


def test_a_second_run_appends_and_bad_input_writes_no_log(tmp_path):
    job_path = write_job(tmp_path, study="twice", budget={"trials": 1})
    bad = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path), "--trials", "0"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bad.returncode == 2 and not (tmp_path / "reports").exists()
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path)], capture_output=True,
                             text=True, timeout=300, cwd=REPO)
        assert run.returncode == 0, run.stderr
    log = (tmp_path / "reports" / "twice" / "driver.log").read_text()
    assert log.count("study 'twice' of") == 2  # one header per run
    assert "budget reached: 1 of 1 trials already ran" in log
