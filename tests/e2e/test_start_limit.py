"""A start's limit follows the starts the study has measured (issue 38): the larger of
``timeouts.startup`` and 4x the longest start so far, so a host that got busier (every start
slower alike) does not turn a config's start into a timeout that the fixed figure alone would
decide. Real Ray, real server processes, the real command line."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

import pytest

from conftest import FAKE_OPENAI, write_job
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.node.spec import startup_limit
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow


def test_a_start_slower_than_timeouts_startup_but_in_the_studys_pace_is_measured(tmp_path, ray_local):
    # the baseline's server is ready after 4 s; the other config's after 10 s, past timeouts.startup (8s)
    # but within 4x the baseline's measured start. The margins hold on a loaded host, where a start has
    # measured up to 3.6 s longer than its server's own delay (7 s read 10.6 s beside two busy loops)
    argv = ["{python}", str(FAKE_OPENAI), "--port", "{port}", "--model", "fake", "--ready-after", "{backend.ready}"]
    job_path = write_job(tmp_path, study="start-limit", space_text="params:\n  backend.ready: {choices: [4, 10]}\n",
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                         baseline={"backend.ready": 4}, budget={"trials": 2},
                         timeouts={"startup": "8s", "bench": "30s", "teardown": "5s"})
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(["run", str(job_path)])
    assert code == 0, err.getvalue()
    base, slow = [r for r in trial_rows(open_study(load_job(job_path), create=False)) if not r.skipped]
    assert (base.params["backend.ready"], slow.params["backend.ready"]) == (4, 10)
    assert (slow.state, slow.counted) == ("COMPLETE", True), slow.failure_reason
    assert slow.durations["launch_s"] > 8  # over timeouts.startup: the fixed figure alone would have ended it
    limit_s, basis = startup_limit(8.0, [base.durations["launch_s"]])
    assert slow.durations["launch_s"] < limit_s and basis.startswith("4x the longest start this study measured")
