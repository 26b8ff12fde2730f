"""A server that exits (cleanly, code 0) right after it answered its health check, or as the
benchmark begins, is reported as exited, with its exit code: not as a stream that "ended
without [DONE]"; a config that crashes only at concurrency 10 keeps what level 1 measured in
its record (issue 38). Real Ray, real processes, the real command line."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

import pytest

from conftest import FAKE_OPENAI, write_job
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow


def test_a_server_that_exits_0_is_reported_as_exited(tmp_path, ray_local):
    """backend.exit: the requests the test server answers before it exits 0 (0: never). 1: its
    health check only; 2: health and the readiness request, then gone as the benchmark begins."""
    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--exit-after", "{backend.exit}"]
    job_path = write_job(tmp_path, study="exits", space_text="params:\n  backend.exit: {choices: [0, 1, 2]}\n",
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                         baseline={"backend.exit": 0}, budget={"trials": 3}, correctness={"enabled": False})
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["run", str(job_path)]) == 0, err.getvalue()
    rows = {r.params["backend.exit"]: r for r in trial_rows(open_study(load_job(job_path), create=False))
            if r.counted}
    assert rows[0].state == "COMPLETE"
    assert (rows[1].state, rows[1].failure_kind) == ("FAIL", "start-crash")
    assert rows[1].failure_reason == "server exited with code 0 before it was ready", rows[1].failure_reason
    assert (rows[2].state, rows[2].failure_kind) == ("FAIL", "bench-error")
    assert rows[2].failure_reason.startswith("server exited during the benchmark (exit code 0): "), \
        rows[2].failure_reason
    assert "[DONE]" not in rows[2].failure_reason.split(": ", 1)[0]


def test_a_config_that_crashes_only_at_concurrency_10_keeps_its_level_1_measurement(tmp_path, ray_local):
    """A plan over concurrency 1 and 10; backend.crash: the most requests the test server takes at
    once before it crashes (0: never). The config that crashes at 10 is FAIL, and its record
    still holds what level 1 measured: fast at 1, crashed at 10."""
    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--crash-above", "{backend.crash}",
            "--token-delay", "0.002"]
    job_path = write_job(tmp_path, study="crash10", space_text="params:\n  backend.crash: {choices: [0, 4]}\n",
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                         baseline={"backend.crash": 0}, budget={"trials": 2}, correctness={"enabled": False},
                         objective={"concurrency": [1, 10]})
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["run", str(job_path)]) == 0, err.getvalue()
    rows = {r.params["backend.crash"]: r for r in trial_rows(open_study(load_job(job_path), create=False))
            if r.counted}
    assert rows[0].state == "COMPLETE"
    crashed = rows[4]
    assert (crashed.state, crashed.failure_kind) == ("FAIL", "bench-error"), crashed.failure_reason
    assert crashed.failure_reason.startswith("server exited during the benchmark (exit code 1): concurrency 10: ")
    levels = crashed.to_json()["levels"]  # what `status --json` shows
    assert list(levels) == ["1"] and levels["1"]["samples"] and levels["1"]["value"] > 0  # level 1 measured
