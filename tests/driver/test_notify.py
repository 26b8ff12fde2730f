"""Told when it ends (driver/notify.py): the notify command runs once, however the run ended
(finished, failed, Ctrl-C), with the summary on stdin and in its environment, never through
a shell; a notify command that fails or is missing is a warning, never the run's failure."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from conftest import TESTS, write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import RuntimeFailure
from orchestrator.driver import notify
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.progress import RunSummary
from orchestrator.driver.run import StudyDriver

RECORDER = str(TESTS / "notify_recorder.py")
BEST = {"number": 4, "value": 139.8, "config": {"tp_size": 1, "backend.threads": 2}, "vs_baseline": 2.24,
        "interval": {"lo": 1.76, "hi": 2.82, "confidence": 0.95},
        "verdict": "2.24x the baseline, beyond noise, 95% CI 1.76-2.82x"}


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_command_gets_the_summary_on_stdin_and_in_its_environment_never_through_a_shell(tmp_path):
    job = load_job(write_job(tmp_path))
    said = notify.ending(job, RunSummary("budget reached", launched=5, best=BEST), None, counted=8, best=BEST)
    out = tmp_path / "told.jsonl"
    assert notify.send([sys.executable, RECORDER, str(out), "two words", "$HOME"], said)
    (got,) = records(out)
    assert got["argv"] == ["two words", "$HOME"]  # one word each, nothing expanded: no shell
    summary = got["stdin"]
    assert summary["status"] == "finished" and summary["reason"] == "budget reached" and summary["exit_code"] == 0
    assert summary["trials_counted"] == 8 and summary["launched"] == 5 and summary["study"] == "t"
    assert summary["best"] == {"trial": 4, "config": BEST["config"], "value": 139.8, "unit": "tok/s",
                               "vs_baseline": 2.24, "interval": BEST["interval"], "verdict": BEST["verdict"]}
    assert summary["export"] == f"ncclsweep export {job.path} --format cmd"
    env = got["env"]
    assert json.loads(env["NCCLSWEEP_SUMMARY"]) == summary and env["NCCLSWEEP_STATUS"] == "finished"
    assert env["NCCLSWEEP_BEST_TRIAL"] == "4" and env["NCCLSWEEP_BEST_VALUE"] == "139.8"
    assert env["NCCLSWEEP_BEST_CONFIG"] == "tp_size=1 backend.threads=2"
    assert env["NCCLSWEEP_BEST_VERDICT"] == BEST["verdict"] and env["NCCLSWEEP_EXPORT"] == summary["export"]


def test_a_failing_or_missing_notify_command_is_a_warning(tmp_path, caplog):
    job = load_job(write_job(tmp_path))
    said = notify.ending(job, RunSummary("budget reached"), None, counted=1, best=None)
    with caplog.at_level(logging.WARNING):
        assert not notify.send([sys.executable, "-c", "import sys; print('no route'); sys.exit(3)"], said)
        assert not notify.send([str(tmp_path / "no-such-notifier")], said)
    assert "exited with code 3: no route" in caplog.text and "could not run" in caplog.text


def test_a_run_that_fails_tells_once_then_fails(tmp_path):
    """A real driver whose run is refused at pre-flight (the server command is not there)."""
    backend = {"kind": "command", "settings": {"argv": [str(tmp_path / "no-server"), "--port", "{port}"],
                                               "model_name": "x"}}
    job = load_job(write_job(tmp_path, backend=backend, space_text="params:\n  env.K: {choices: [a, b]}\n",
                             baseline={"env.K": "a"}))
    out = tmp_path / "told.jsonl"
    executor = InProcessExecutor()
    try:
        with pytest.raises(RuntimeFailure, match="pre-flight failed"):
            notify.run_notified(StudyDriver(job, executor=executor), [sys.executable, RECORDER, str(out)])
    finally:
        executor.shutdown()
    (got,) = records(out)
    summary = got["stdin"]
    assert summary["status"] == "failed" and summary["exit_code"] == 1 and "pre-flight failed" in summary["reason"]
    assert summary["best"] is None and summary["export"] is None and summary["trials_counted"] is None


class _Interrupted:
    """A driver Ctrl-C stops before its own signal handling is in place (Ray still starting)."""

    def __init__(self, job):
        self.job = job

    def run(self):
        raise KeyboardInterrupt

    def counted(self):
        return None

    def best_now(self):
        return None


def test_ctrl_c_before_the_run_took_hold_tells_once_then_stops(tmp_path):
    job = load_job(write_job(tmp_path))
    out = tmp_path / "told.jsonl"
    with pytest.raises(KeyboardInterrupt):
        notify.run_notified(_Interrupted(job), [sys.executable, RECORDER, str(out)])
    (got,) = records(out)
    assert got["stdin"]["status"] == "stopped" and got["stdin"]["exit_code"] == 130
