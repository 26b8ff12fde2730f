"""Stopping `ncclsweep run` the ways a night can go: Ctrl-C once (the running trial finishes),
twice (it is killed), SIGHUP to the whole process group (the ssh session dropped); the
driver exits 130, leaves no trial RUNNING and no server behind, tells the job's `notify:`
command once that it stopped, and the next `run` resumes the study (and tells it finished).
A real driver process, real Ray, real server processes: tests/fake_openai_server.py through the
command backend, a front and one worker process per rank (``--workers``: like an engine's, they
outlive a front killed with SIGKILL, so a stop must end the server's whole tree)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import FAKE_OPENAI, STANDINS, TEST_PROMPT, TESTS, start_driver, study_servers, wait_for, write_job
from logtext import log_lines
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow




def _wait_text(path, text, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}:\n{path.read_text()}")


STOPS = [  # (signal, how many, to whom: the driver, its process group, or every process of the run)
    (signal.SIGINT, 1, "driver"), (signal.SIGINT, 2, "driver"),
    (signal.SIGHUP, 1, "group"),  # the ssh session dropped: the terminal's group gets SIGHUP
    (signal.SIGTERM, 1, "group"),  # `timeout 8h ncclsweep run ...` when the time is up: SIGTERM to its group
    (signal.SIGTERM, 1, "every"),  # a service manager's stop (systemd's control-group kill): every process
]


def _send(sig: int, driver_pid: int, to: str) -> None:
    """``sig`` to the driver, to its process group, or to it and every process under it at once."""
    import psutil

    if to == "group":
        os.killpg(driver_pid, sig)
        return
    targets = [driver_pid] + ([p.pid for p in psutil.Process(driver_pid).children(recursive=True)]
                              if to == "every" else [])
    for pid in targets:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _session_processes(sid: int) -> list[str]:
    """The live processes of session ``sid`` (the driver's: it and all it started), as text."""
    import psutil

    left = []
    for proc in psutil.process_iter(["pid", "name", "status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{proc.pid} {proc.info['name']}")
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return left


@pytest.mark.parametrize("sig,count,to", STOPS, ids=["int-once", "int-twice", "hup-group", "term-group", "term-every"])
def test_a_signal_stops_the_run_cleanly_and_the_study_resumes(tmp_path, sig, count, to, no_leftover_servers):
    """Ctrl-C, SIGTERM and SIGHUP mid-trial: once finishes the trial, twice kills it; the
    driver exits 130, leaves no trial RUNNING, no server and no process of its own (Ray's
    services included), and `run` continues the study. A signal to the driver's whole group
    reaches only the driver: the local Ray it started keeps serving until the driver stops it.
    A stop that reaches every process ends the trial's server too: that trial is interrupted
    (not counted, not banned: re-queued, as the int-twice case's is measured by the next run)."""
    space = "params:\n  tp_size: {choices: [1, 2]}\n  backend.max_batch: {choices: [8, 16]}\n"
    study = f"sig-{signal.Signals(sig).name.lower()}-{count}-{to}"
    told = tmp_path / "told.jsonl"
    argv = ["{python}", str(FAKE_OPENAI), "--host", "{host}", "--port", "{port}", "--model", "tiny",
            "--workers", "{tp_size}", "--slots", "{backend.max_batch}", "--token-delay", "0.02"]
    job_path = write_job(tmp_path, study=study, budget={"trials": 2}, space_text=space,
                         notify=[sys.executable, str(TESTS / "notify_recorder.py"), str(told)],
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "tiny"}},
                         baseline={"tp_size": 1, "backend.max_batch": 8},
                         # a trial of a launch and 4 x 150 tokens at 50 tok/s (12 s) outlasts the stops sent
                         # 2.5-3 s into it
                         bench={"prompt": TEST_PROMPT, "output_tokens": 150, "warmup": 1, "repeats": 3,
                                "max_repeats": 3},
                         timeouts={"startup": "60s", "bench": "120s", "teardown": "5s"})
    log_path = tmp_path / "driver.out"
    driver = start_driver(job_path, log_path)
    try:
        _wait_text(log_path, "starting #0")
        if to == "every":  # the server must be up for the stop to reach it
            _wait_text(log_path, "#0 measuring")
        else:
            time.sleep(2.5)  # the server is up, the benchmark running
        for _ in range(count):
            _send(sig, driver.pid, to)
            time.sleep(0.5)
        assert driver.wait(90) == 130, log_path.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # what the driver started dies with it (the wait: a guard for the parent-death signal's delivery, not a bound)
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not _session_processes(driver.pid), 60, "the run's processes to end")
    assert not _session_processes(driver.pid), f"left behind: {_session_processes(driver.pid)}"
    text = log_path.read_text()
    name = signal.Signals(sig).name
    assert f"{name}: stopping after the running trial" in text
    rows = trial_rows(open_study(load_job(job_path), create=False))
    assert "RUNNING" not in [r.state for r in rows]
    if to == "every":  # its server got the same SIGTERM: not the config's doing
        assert rows[0].state == "FAIL" and rows[0].failure_kind in ("interrupted", "node-lost") \
            and not rows[0].counted, (rows[0].failure_kind, rows[0].failure_reason)
    elif count == 1:
        assert [r.state for r in rows] == ["COMPLETE"] and "stopped by signal" in text
    else:
        assert f"{name}: killing the running trial now" in text
        assert rows[0].state == "FAIL" and rows[0].failure_kind == "interrupted" and not rows[0].counted
    assert "`ncclsweep run" in log_lines(text)[-1]  # the last line says how to continue
    # driver.log in the study's folder has what the terminal showed
    logged = (tmp_path / "reports" / study / "driver.log").read_text()
    assert f"{name}: stopping after the running trial" in logged and "starting #0" in logged
    assert not study_servers(tmp_path / "reports", STANDINS)
    (stopped,) = [json.loads(line)["stdin"] for line in told.read_text().splitlines()]  # told once
    assert stopped["status"] == "stopped" and stopped["exit_code"] == 130 and stopped["study"] == study
    if count == 1 and sig != signal.SIGHUP:
        return  # a stopped study like the SIGHUP case's, which resumes (an interrupted trial is re-queued once)
    # resumable: the next run completes the budget (the interrupted config re-queued and measured)
    rerun = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path)], capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    counted = [r for r in trial_rows(open_study(load_job(job_path), create=False)) if r.counted]
    assert len(counted) == 2 and all(r.state == "COMPLETE" for r in counted), \
        [(r.state, r.failure_kind, r.failure_reason) for r in counted]
    assert not study_servers(tmp_path / "reports", STANDINS)
    finished = json.loads(told.read_text().splitlines()[-1])["stdin"]  # the rerun told once more
    assert len(told.read_text().splitlines()) == 2 and finished["status"] == "finished"
    assert finished["best"]["trial"] in {r.number for r in counted} and finished["export"].startswith(
        "ncclsweep export ")
