"""Issue 26's acceptance, end to end (real driver, real Ray, real servers): a start-up that
hangs silently ends as ``hang`` in the stall limit, not the start-up timeout, twice (the first
is re-queued once, the second is the config's answer), and nothing of its tree is left; a
stream that stops mid-benchmark is a ``hang`` too, in its own phase."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from conftest import timeouts_until_blamed, write_job
from logtext import said
from orchestrator.config.job import load_job
from orchestrator.driver.run import StudyDriver
from orchestrator.node import proctree
from orchestrator.node.server import ServerRegistry
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).resolve().parents[1] / "fake_openai_server.py")


def test_a_start_that_hangs_silently_is_a_hang_in_the_stall_limit(tmp_path, ray_local):
    """The command backend's test server prints its lines, starts two workers, then says
    nothing and never turns healthy (a deadlocked start: NCCL_P2P_LEVEL too high on a PCIe
    box). timeouts.startup 30m, timeouts.stall 10s (the test server's lines come within a second of
    its start): every launch ends as hang after about the stall, far below the start-up timeout, and
    the run ends."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    argv = ["{python}", FAKE, "--host", "{host}", "--port", "{port}", "--model", "fake", "--ready-after", "100000",
            "--workers", "2", "--pid-dir", str(pid_dir)]
    job = load_job(write_job(tmp_path, study="hang", space_text="params:\n  tp_size: {choices: [1]}\n",
                             backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                             baseline={"tp_size": 1}, correctness={"enabled": False}, budget={"trials": 1},
                             timeouts={"startup": "30m", "stall": "10s", "bench": "30s", "teardown": "5s"}))
    assert (job.timeouts.startup_s, job.timeouts.stall_s) == (1800, 10)
    out = io.StringIO()
    summary = StudyDriver(job, out=out).run()
    assert summary.reason == "space exhausted", out.getvalue()  # the one config has its answer: hang
    rows = [r for r in trial_rows(open_study(job, create=False)) if not r.skipped]
    assert [(r.state, r.failure_kind) for r in rows] == [("FAIL", "hang")] * len(rows), out.getvalue()
    timeouts_until_blamed(rows)  # re-queued once, like a first timeout (again on a busy host), then the config's
    for r in rows:
        assert r.failure_reason.startswith("stalled in start-up: no log output for 10 s and not ready")
        phases = r.startup_phases
        assert phases["stalled_in"] == "start-up" and phases["last_phase"] == "start-up"
        assert phases["first_line_s"] < phases["ended_s"]  # it printed, then went silent
        # ended by the stall, not by the start-up timeout: what "within minutes" means
        assert job.timeouts.stall_s <= r.durations["total_s"] < job.timeouts.startup_s / 10
    told = said(out.getvalue())
    assert told.count("FAIL hang") == len(rows) and "stalled in start-up: no log output" in told
    workers = [int(p.read_text()) for p in pid_dir.glob("worker-*.pid") if p.read_text().strip()]
    assert len(workers) >= 2 and not any(proctree.alive(p) for p in workers)  # nothing of either tree is left
    assert ServerRegistry(job.dir.servers).records() == []


def test_a_stream_that_stops_in_the_benchmark_is_a_hang_in_its_phase(tmp_path, ray_local, no_leftover_servers):
    """The reference server stops decoding after 4 tokens (fault hang-in-decode), health still
    200: the warm-up stream goes silent, and the trial ends after the stall limit as hang in
    the benchmark, not after timeouts.bench."""
    job = load_job(write_job(tmp_path, study="stream",
                             backend={"kind": "refserver", "settings": {"model": "tiny", "device": "cpu",
                                                                        "fault": "hang-in-decode"}},
                             space_text="params:\n  tp_size: {choices: [1]}\n", baseline={"tp_size": 1},
                             correctness={"enabled": False}, budget={"trials": 1},
                             timeouts={"startup": "60s", "stall": "20s", "bench": "10m", "teardown": "5s"}))
    out = io.StringIO()
    StudyDriver(job, out=out).run()
    rows = [r for r in trial_rows(open_study(job, create=False)) if not r.skipped]
    assert [r.failure_kind for r in rows] == ["hang"] * len(rows), out.getvalue()
    for r in rows:
        assert r.startup_phases["stalled_in"] == "benchmark" and r.startup_phases["ready_s"] > 0
        assert "a stream of the benchmark stopped: warm-up request 1 failed: stalled" in r.failure_reason
        # ended by the stall, before timeouts.bench could have: what a stall limit is for (on a loaded
        # box the start alone took 35 s of a 77 s trial, so the whole trial is no measure of it)
        assert r.durations["total_s"] - r.startup_phases["ready_s"] < job.timeouts.bench_s
    timeouts_until_blamed(rows)  # re-queued once (again on a busy host), then the config's

