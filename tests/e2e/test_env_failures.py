"""Environment failures are not config failures: a server command missing on the node stops
the run at pre-flight (one line per node, nothing launched); one that cannot be executed
once launched is `env-error`: never cached, never banned, re-queued, and two in a row stop
the study with what to fix. After the fix the next run measures the baseline. Real Ray,
real processes (a server behind a wrapper script: the fake OpenAI server where the job's command
is at stake, the reference server where its own ``python`` setting is), real Optuna journals."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import yaml
from wrapped_server import FAKE_SERVER, command_job, fake_wrapper

from conftest import TESTS, write_job
from logtext import log_lines
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def no_config_banned(job) -> None:
    """Every config that failed did so for the environment: none is cached as its answer."""
    rows = trial_rows(open_study(job, create=False))
    assert not [r for r in rows if r.state == "FAIL" and r.counted], rows
    assert not [r for r in rows if r.cached_from is not None and r.state == "FAIL"]


@pytest.mark.slow
def test_missing_server_command_stops_at_preflight_then_the_fixed_run_measures_the_baseline(
        tmp_path, ray_local, no_leftover_servers):
    exe = tmp_path / "bin" / FAKE_SERVER  # not there yet
    job_path = command_job(tmp_path, exe, budget={"trials": 2})
    told = tmp_path / "told.jsonl"
    code, err = run_cli("run", str(job_path), "--notify", f"{sys.executable} {TESTS / 'notify_recorder.py'} {told}")
    (failed,) = [json.loads(line)["stdin"] for line in told.read_text().splitlines()]  # --notify: told once
    assert failed["status"] == "failed" and failed["exit_code"] == 1 and "pre-flight failed" in failed["reason"]
    lines = err.strip().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("ncclsweep: error:"))  # after the study's first line
    assert code == 1, err
    assert lines[first] == "ncclsweep: error: pre-flight failed on 1 of 1 node(s); nothing was launched:", err
    assert len(lines) == first + 2 and str(exe) in lines[-1] and "not found on this node's PATH" in lines[-1]
    assert not (tmp_path / "reports").exists()  # a run refused before any launch creates no study

    fake_wrapper(tmp_path)  # the fix: the command exists on the node
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    base = next(r for r in rows if r.is_baseline)
    assert base.state == "COMPLETE" and base.value > 0 and base.counted
    no_config_banned(job)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["command", "refserver"])
def test_the_full_path_the_preflight_advises_is_taken_and_the_next_run_measures_the_baseline(
        tmp_path, ray_local, no_leftover_servers, kind):
    """The issue's path: the server is not where the job says; pre-flight refuses and says
    to set its full path; the user does; the next run measures the baseline (the server's
    location is not part of the study's identity, and the refused run left no study). The
    command's server is the fake one; the refserver kind's ``python`` runs the reference server."""
    if kind == "command":
        exe = fake_wrapper(tmp_path)  # installed, but not on PATH
        job_path = command_job(tmp_path, Path(FAKE_SERVER), budget={"trials": 1})  # a bare name: not found
        fixed, found = {"argv": [str(exe)]}, str(exe)
    else:
        missing = str(tmp_path / "venv" / "python")
        job_path = write_job(tmp_path, study="env", budget={"trials": 1}, backend={
            "kind": "refserver", "settings": {"model": "tiny", "device": "cpu", "python": missing}})
        fixed, found = {"python": sys.executable}, sys.executable
    code, err = run_cli("run", str(job_path))
    assert code == 1 and "not found on this node's PATH" in err and "to its full path" in err, err
    assert not (tmp_path / "reports").exists()

    doc = yaml.safe_load(job_path.read_text())
    settings = doc["backend"]["settings"]
    if "argv" in fixed:
        settings["argv"] = fixed["argv"] + settings["argv"][1:]
    else:
        settings.update(fixed)
    job_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    job = load_job(job_path)
    (base,) = trial_rows(open_study(job, create=False))
    assert base.is_baseline and base.state == "COMPLETE" and base.value > 0 and base.counted
    server = base.to_json()["server"]  # what `status --json` shows: the server this trial ran
    assert server["command"] == found and server["version"] == job.backend_obj().version()


@pytest.mark.slow
def test_a_command_that_cannot_execute_is_env_error_twice_then_stops_and_bans_nothing(
        tmp_path, ray_local, no_leftover_servers):
    """The script is there (pre-flight finds it) but the Python it names is gone, as when a
    virtual environment was deleted: the launch fails before any server runs."""
    exe = fake_wrapper(tmp_path, interpreter=str(tmp_path / "gone-venv" / "bin" / "python"))
    job_path = command_job(tmp_path, exe, budget={"trials": 3})
    code, err = run_cli("run", str(job_path))
    last = log_lines(err)[-1]
    assert code == 1 and "stopping after 2 trials in a row failed for a reason outside their configs" in last, err
    assert "env-error" in last and "cannot be executed on that node" in last and "no config was banned" in last
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    assert [(r.state, r.failure_kind, r.counted) for r in rows] == [("FAIL", "env-error", False)] * 2
    assert all(r.is_baseline for r in rows)  # the baseline, re-queued once, never replaced by another config
    no_config_banned(job)

    fake_wrapper(tmp_path)  # the fix
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    rows = trial_rows(open_study(job, create=False))
    measured = [r for r in rows if r.counted]
    assert len(measured) == 3 and all(r.state == "COMPLETE" and r.value > 0 for r in measured), rows
    base = next(r for r in measured if r.is_baseline)
    assert base.params == {"tp_size": 1, "backend.threads": 1}
    no_config_banned(job)


