"""Issue 26's acceptance: every trial of the CPU demo (``jobs/demo.yaml``, a copy in a temporary
folder) records where its start-up went: spawn -> first log line -> ready, the reference
server's own weights line, and the engines' caches it ran with (the node's, the same on every
trial); ``status --json`` shows it and the report draws it."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout

import pytest

from conftest import REPO
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.driver.run import StudyDriver
from orchestrator.study.history import trial_rows
from orchestrator.study.storage import open_study

pytestmark = pytest.mark.slow


def test_every_trial_of_the_cpu_demo_records_its_start_up(tmp_path, ray_local, no_leftover_servers):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "search_spaces").mkdir()
    shutil.copy(REPO / "jobs" / "demo.yaml", tmp_path / "jobs" / "demo.yaml")
    shutil.copy(REPO / "search_spaces" / "refserver-cpu-demo.yaml", tmp_path / "search_spaces")
    job = load_job(tmp_path / "jobs" / "demo.yaml")
    StudyDriver(job, trials=3, out=io.StringIO()).run()
    rows = [r for r in trial_rows(open_study(job, create=False)) if not r.skipped and r.cached_from is None]
    assert len([r for r in rows if r.counted]) == 3
    for r in rows:
        p = r.startup_phases
        assert p["engine"] == "refserver" and p["caches"]["HOME"], r
        if r.state in ("COMPLETE", "PRUNED"):
            assert 0 < p["first_line_s"] < p["ready_s"]
            assert p["ready_s"] == pytest.approx(r.durations["launch_s"], abs=1e-3)
            assert sum(s for _, s in p["segments"]) == pytest.approx(p["ready_s"], abs=0.01)
            assert [name for name, _ in p["segments"]][:2] == ["process start", "weights"]
            assert p["last_phase"] == "ready"
    assert len({json.dumps(r.startup_phases["caches"], sort_keys=True) for r in rows}) == 1  # one set for every trial

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["status", str(job.path), "--json"]) == 0
    shown = [t for t in json.loads(buf.getvalue()) if t.get("startup_phases")]
    assert {t["number"] for t in shown} >= {r.number for r in rows}
    with redirect_stdout(io.StringIO()):
        assert main(["report", str(job.path)]) == 0
    md = (job.report_dir / "report.md").read_text()
    assert "## Start-up" in md and "Starting servers took" in md and (job.report_dir / "startup.png").stat().st_size
