"""End to end with real parts: job YAML -> Optuna journal -> Ray actor -> reference server
-> decode tok/s; resume; status; export."""

from __future__ import annotations

import io
import json
import shlex
from contextlib import redirect_stdout

import pytest

from conftest import write_job
from orchestrator.cli import main
from orchestrator.history import trial_rows
from orchestrator.job import load_job
from orchestrator.study import StudyDriver, open_study

pytestmark = pytest.mark.slow


def run_cli(*argv: str) -> tuple[int, str]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(list(argv))
    return code, buf.getvalue()


def test_short_study_runs_resumes_and_exports(tmp_path, ray_local, no_leftover_servers):
    job_path = write_job(tmp_path, study="e2e")
    job = load_job(job_path)
    out = io.StringIO()
    summary = StudyDriver(job, out=out).run()
    log = out.getvalue()
    assert summary.reason == "budget reached", log
    rows = trial_rows(open_study(job, create=False))
    counted = [r for r in rows if r["counted"]]
    assert len(counted) == 3
    first = rows[0]
    assert first["is_baseline"] and first["params"]["tp_size"] == 1 and first["params"]["backend.threads"] == 1
    for row in counted:
        assert row["state"] == "COMPLETE", row
        assert row["value"] > 0 and row["node"]
        samples = row["metrics"]["decode_samples"]
        assert len(samples) == 2 and min(samples) <= row["value"] <= max(samples)
    # every counted trial is a distinct config
    assert len({r["config_key"] for r in counted}) == 3
    # the golden reference was calibrated from the baseline and the others passed the gate
    assert "golden" in open_study(job, create=False).user_attrs
    assert all(r["correctness"].get("ok") for r in counted)

    # run again with a larger budget: continues the same study, nothing re-measured
    before = {r["number"]: r["value"] for r in counted}
    StudyDriver(job, trials=4, out=io.StringIO()).run()
    rows = trial_rows(open_study(job, create=False))
    counted = [r for r in rows if r["counted"]]
    assert len(counted) == 4
    assert {r["number"]: r["value"] for r in counted if r["number"] in before} == before
    assert len({r["config_key"] for r in counted}) == 4  # the space's 4 configs, each once

    # and again: the space is exhausted, nothing launched
    summary = StudyDriver(job, trials=6, out=io.StringIO()).run()
    assert summary.reason == "space exhausted" and summary.launched == 0

    code, text = run_cli("status", str(job_path), "--json")
    assert code == 0
    records = json.loads(text)
    assert {r["number"] for r in records} >= {r["number"] for r in counted}
    assert all({"state", "params", "value", "failure_kind", "node", "started_at"} <= set(r) for r in records)

    code, env_text = run_cli("export", str(job_path), "--format", "env")
    assert code == 0
    lines = [ln for ln in env_text.splitlines() if ln and not ln.startswith("#")]
    assert all("=" in ln and " " not in ln.split("=", 1)[0] for ln in lines)

    code, cmd_text = run_cli("export", str(job_path), "--format", "cmd")
    cmd_line = [ln for ln in cmd_text.splitlines() if ln and not ln.startswith("#")][-1]
    argv = shlex.split(cmd_line)
    best = max(counted, key=lambda r: r["value"])
    assert "orchestrator.refserver" in argv
    assert argv[argv.index("--tp") + 1] == str(best["params"]["tp_size"])
