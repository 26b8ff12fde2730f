"""Values banned in real studies of real servers: a value whose launches crash at start (a
preset the reference server does not know, its crash-on-start fault) or give wrong output
(the garbage fault, of tests/fault_server.py: the fake server under the reference server's
fault name) is launched at most twice, then never proposed again; the driver says so and the
report lists it."""

from __future__ import annotations

import io

import pytest

from conftest import TESTS, run_in_process, write_job
from orchestrator.config.job import load_job
from orchestrator.results.report import write_report
from orchestrator.study.evidence import bans
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study


@pytest.mark.slow
def test_two_always_crashing_values_are_each_launched_at_most_twice(tmp_path, no_leftover_servers):
    """Acceptance: a preset the reference server does not know and its crash-on-start fault
    crash every server that carries them, and the logs say so; each is launched at most
    twice, then the study stops proposing it, says so, and the report lists it."""
    argv = ["{python}", "-m", "orchestrator.refserver", "--model", "{backend.preset}", "--fault", "{backend.fault}",
            "--device", "cpu", "--threads", "{backend.threads}", "--served-model-name", "tiny",
            "--host", "{host}", "--port", "{port}"]
    # slow-start:0 is a healthy server (the command backend passes the value as given)
    space = ("params:\n  backend.preset: {choices: [tiny, tinyy]}\n"
             "  backend.fault: {choices: [\"slow-start:0\", crash-on-start]}\n"
             "  backend.threads: {choices: [1, 2]}\n")
    job_path = write_job(tmp_path, study="bans", space_text=space, budget={"trials": 8}, max_consecutive_failures=10,
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "tiny"}},
                         baseline={"backend.preset": "tiny", "backend.fault": "slow-start:0", "backend.threads": 1},
                         sampler={"name": "tpe", "seed": 0})
    job = load_job(job_path)
    out = io.StringIO()
    summary = run_in_process(job, out=out)
    log = out.getvalue()
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.cached_from is None and not r.skipped]
    unknown = [r for r in rows if r.params["backend.preset"] == "tinyy"]
    crashing = [r for r in rows if r.params["backend.fault"] == "crash-on-start"]
    assert 1 <= len(unknown) <= 2 and 1 <= len(crashing) <= 2, log
    assert all(r.state == "FAIL" for r in unknown + crashing)
    healthy = [r for r in rows if r not in unknown + crashing]
    assert len(healthy) == 2 and all(r.state == "COMPLETE" for r in healthy)  # both healthy configs measured
    assert summary.reason == "space exhausted", log
    for value in ("backend.preset=tinyy", "backend.fault=crash-on-start"):
        if sum(1 for r in rows if value.split("=")[1] in r.params.values()) == 2:
            assert f"not proposing {value} any more" in log
    banned = bans.banned_values(trial_rows(open_study(job, create=False)))
    paths = write_report(job, out_dir=tmp_path / "report", bandwidth_bytes_s=50e9, allreduce_latency_s=20e-6)
    text = next(p for p in paths if p.suffix == ".md").read_text()
    assert banned and "values not proposed any more" in text
    for pair in banned:
        assert bans.describe(pair) in text


@pytest.mark.slow
def test_a_value_that_always_gives_wrong_output_is_launched_at_most_twice(tmp_path, no_leftover_servers):
    """Acceptance (issue 28, item 6), real servers: `backend.fault: garbage` gives wrong output
    with every thread count. Three of the six configs carry it and the budget would launch all
    six; after two wrong launches (once a correct config other than the baseline passed) it is
    not proposed again, the driver says so, and the report lists it. The servers: the fake server
    under the reference server's fault names (tests/fault_server.py; the thread count reaches its
    command line, as a tuned value must, and changes nothing), a token every 20 ms."""
    argv = ["{python}", str(TESTS / "fault_server.py"), "--fault", "{backend.fault}", "--title",
            "threads-{backend.threads}", "--token-delay", "0.02", "--model", "tiny", "--host", "{host}",
            "--port", "{port}"]
    space = "params:\n  backend.threads: {choices: [1, 2, 3]}\n  backend.fault: {choices: [none, garbage]}\n"
    job_path = write_job(tmp_path, study="wrong-value", space_text=space, budget={"trials": 6},
                         max_consecutive_failures=10, baseline={"backend.threads": 1, "backend.fault": "none"},
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "tiny"}},
                         sampler={"name": "tpe", "seed": 0})
    job = load_job(job_path)
    out = io.StringIO()
    summary = run_in_process(job, out=out)
    log = out.getvalue()
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.cached_from is None and not r.skipped]
    garbage = [r for r in rows if r.params["backend.fault"] == "garbage"]
    assert len(garbage) == 2 and all((r.state, r.failure_kind) == ("FAIL", "wrong-output") for r in garbage), log
    healthy = [r for r in rows if r not in garbage]
    assert len(healthy) == 3 and all(r.state == "COMPLETE" and r.correctness.get("ok") for r in healthy), log
    assert summary.reason == "space exhausted", log  # the third garbage config was never proposed
    assert "not proposing backend.fault=garbage any more" in log and "gave wrong output" in log
    banned = bans.banned_values(trial_rows(open_study(job, create=False)))
    assert list(banned) == [("backend.fault", "garbage")]  # no thread count banned with it
    paths = write_report(job, out_dir=tmp_path / "report", bandwidth_bytes_s=50e9, allreduce_latency_s=20e-6)
    text = next(p for p in paths if p.suffix == ".md").read_text()
    assert "values not proposed any more" in text and "backend.fault=garbage" in text
