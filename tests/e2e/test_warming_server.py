"""A server that answers its health check before it serves (issue 38): /health says 200 while
completions are answered ``503 Service Unavailable`` with ``Retry-After`` for its first
seconds, as a warming engine or a proxy in front of one does. That is "not ready yet" within
the start-up budget, and the trial measures the server once it serves; a 503 that outlasts
the budget is ``start-timeout`` (blameless the first time: re-queued once), never a
``bench-error`` that would ban the config. Real Ray, real processes, the real command line."""

from __future__ import annotations

import io
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from conftest import FAKE_OPENAI, timeouts_until_blamed, write_job
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.node.spec import startup_limit
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow


def warming_job(tmp_path: Path, warming_s: list[float], startup: str, trials: int) -> Path:
    """The fake server warming ``backend.warm`` seconds; the baseline is the first value."""
    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--warming", "{backend.warm}"]
    return write_job(tmp_path, study="warming", space_text=f"params:\n  backend.warm: {{choices: {warming_s}}}\n",
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline={"backend.warm": warming_s[0]}, budget={"trials": trials},
                     timeouts={"startup": startup, "bench": "30s", "teardown": "5s"})


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def test_a_server_that_warms_up_behind_a_healthy_health_check_is_measured_once_it_serves(tmp_path, ray_local):
    job_path = warming_job(tmp_path, [3], startup="60s", trials=1)
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    (row,) = trial_rows(open_study(load_job(job_path), create=False))
    assert (row.state, row.counted) == ("COMPLETE", True) and row.value > 0, row.failure_reason
    assert row.durations["launch_s"] >= 3  # ready counted to the first served request


def test_a_503_that_outlasts_the_start_up_budget_is_a_start_timeout_not_a_bench_error(tmp_path, ray_local):
    job_path = warming_job(tmp_path, [0, 100_000], startup="4s", trials=2)
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    rows = [r for r in trial_rows(open_study(load_job(job_path), create=False)) if not r.skipped]
    assert (rows[0].state, rows[0].counted) == ("COMPLETE", True)
    # blameless once, again while the host was busy, then the config's
    timeouts = rows[1:]
    assert [(r.state, r.failure_kind) for r in timeouts] == [("FAIL", "start-timeout")] * len(timeouts), rows
    timeouts_until_blamed(timeouts)
    # the start-up limit: timeouts.startup, or 4x the study's longest measured start where that is longer
    limit_s, basis = startup_limit(4.0, [rows[0].durations["launch_s"]])
    for row in rows[1:]:
        assert row.params["backend.warm"] == 100_000
        assert (f"not ready after {limit_s:.0f}s ({basis}): health answered, but /v1/completions still answered "
                "HTTP 503 Service Unavailable (warming up)") in row.failure_reason, row.failure_reason
