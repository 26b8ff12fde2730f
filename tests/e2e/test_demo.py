"""The demo (`ncclsweep run jobs/demo.yaml`, README Quickstart line 1) shows what the tool
is for, on a 2-core CPU box (a few minutes there): the baseline is beaten, a fast config
with wrong output is refused by the correctness gate, the study ends on its trial budget
(not its 15-minute timeout), and the last line gives the ratio and what to run next; every
trial records where its start-up went (issue 26: spawn -> first log line -> ready, the
reference server's weights line, the node's caches, the same on every trial), which
``status --json`` shows and the report draws. Run on a copy of the job, so reports/demo is
left alone."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, study_servers
from orchestrator.config.job import load_job
from orchestrator.study.history import trial_rows
from orchestrator.study.storage import open_study

pytestmark = pytest.mark.slow


def test_the_demo_beats_its_baseline_and_shows_the_gate(tmp_path, no_leftover_servers):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "search_spaces").mkdir()
    shutil.copy(REPO / "jobs" / "demo.yaml", tmp_path / "jobs" / "demo.yaml")
    shutil.copy(REPO / "search_spaces" / "refserver-cpu-demo.yaml", tmp_path / "search_spaces")
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "orchestrator", "run", "jobs/demo.yaml"], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    print(f"the demo took {time.monotonic() - t0:.0f} s")
    assert run.returncode == 0, run.stderr
    lines = run.stderr.strip().splitlines()
    ends = [ln for ln in lines if ln.startswith(("budget reached:", "space exhausted:", "timeout:"))]
    assert ends and ends[-1].startswith(("budget reached: 8 trials counted", "space exhausted:")), ends  # not timeout
    assert any("FAIL wrong-output" in ln and "do not count" in ln for ln in lines), run.stderr
    last = lines[-1]
    ratio = re.search(r"best #\d+ [0-9.]+ tok/s \(median of \d+ launch(es)?\) = ([0-9.]+)x the baseline, "
                      r"(beyond noise|within noise)", last)
    assert ratio and float(ratio.group(2)) > 1.0, last  # "beyond noise" on a box that is not overloaded
    assert any(ln.startswith("relaunching the baseline #0") for ln in lines), run.stderr  # the launch noise
    assert "`ncclsweep report jobs/demo.yaml`" in last and "compare" in last and "export" in last
    assert (tmp_path / "reports" / "demo" / "driver.log").exists()  # output_dir: ../reports, next to jobs/
    assert not study_servers(tmp_path / "reports")
    assert_start_ups_recorded(tmp_path)


def assert_start_ups_recorded(tmp_path) -> None:
    job = load_job(tmp_path / "jobs" / "demo.yaml")
    rows = [r for r in trial_rows(open_study(job, create=False)) if not r.skipped and r.cached_from is None]
    assert rows
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
    assert len({r.run for r in rows}) == 1 and rows[0].run  # one run recorded them all: the report's wall clock
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", "jobs/demo.yaml", "--json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    shown = [t for t in json.loads(status.stdout) if t.get("startup_phases")]
    assert {t["number"] for t in shown} >= {r.number for r in rows}
    report = subprocess.run([sys.executable, "-m", "orchestrator", "report", "jobs/demo.yaml"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    md = (job.report_dir / "report.md").read_text()
    assert "## Start-up" in md and "Starting servers took" in md and (job.report_dir / "startup.png").stat().st_size



def test_the_demo_with_a_garbage_baseline_stops_at_once_and_exports_nothing(tmp_path, no_leftover_servers):
    """Acceptance (issue 28, item 2): the demo with its baseline set to `backend.fault: garbage`
    (tp_size 1, threads 1). The correct configs all carry the healthy default `fault: none` and
    agree with each other: the study stops with one line naming them before the budget is
    spent, bans nothing, and `export` refuses with one line instead of exporting the garbage."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "search_spaces").mkdir()
    text = (REPO / "jobs" / "demo.yaml").read_text()
    line = "baseline: {tp_size: 2, backend.threads: 1, backend.fault: none}"
    assert line in text
    (tmp_path / "jobs" / "demo.yaml").write_text(
        text.replace(line, "baseline: {tp_size: 1, backend.threads: 1, backend.fault: garbage}"))
    shutil.copy(REPO / "search_spaces" / "refserver-cpu-demo.yaml", tmp_path / "search_spaces")

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "orchestrator", *argv], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path)

    run = cli("run", "jobs/demo.yaml")
    assert run.returncode == 1, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    stop = re.match(r"ncclsweep: error: stopping: the golden reference \(the baseline, trial 0\) looks wrong: "
                    r"trials (\d+(?:, \d+)+) \(different configs\) agree with each other", last)
    assert stop, run.stderr
    outvoters = stop.group(1).split(", ")
    starts = [ln for ln in run.stderr.splitlines() if ln.startswith("starting #")]
    assert len(starts) == 1 + len(outvoters) < 8, run.stderr  # the baseline and the outvoters; budget 8
    assert all(f"starting #{n} " in run.stderr for n in outvoters)
    assert "not proposing" not in run.stderr  # no value banned for the garbage reference's verdicts
    export = cli("export", "jobs/demo.yaml", "--format", "env")
    assert export.returncode == 1 and not export.stdout, export.stdout
    assert len(export.stderr.strip().splitlines()) == 1 and "nothing to export" in export.stderr, export.stderr
    status = cli("status", "jobs/demo.yaml")
    assert "best: none: the golden reference (trial 0) was outvoted" in status.stdout, status.stdout
    assert not study_servers(tmp_path / "reports")
