"""Two drivers on one study through a real PostgreSQL server (tests/postgres.py starts one of the
test's own): both make progress, a kill -9 of one in the middle of a trial loses nothing (the
survivor takes its trial over once its heartbeat is stale, and measures its config), and no
config is measured twice. The servers: tests/fake_openai_server.py through the command backend, a
front and one worker process per rank (``--workers``: like an engine's, they outlive a front killed
with SIGKILL)."""

from __future__ import annotations

import io
import os
import re
import signal

import pytest

from conftest import (
    ANY_SERVER,
    FAKE_OPENAI,
    STANDINS,
    TEST_PROMPT,
    run_in_process,
    server_processes,
    start_driver,
    study_servers,
    wait_for,
    write_job,
)
from orchestrator.config.job import load_job
from orchestrator.core.study_dir import trial_log_name as log_name
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.shared import SharedStudy
from orchestrator.study.storage.storage import open_study
from postgres import postgres_server

pytestmark = pytest.mark.slow

SPACE = "params:\n  tp_size: {choices: [1, 2]}\n  backend.max_batch: {choices: [8, 16, 32]}\n"
CONFIGS = 6  # every config of SPACE
# the fake server, a token every 40 ms: one worker process per rank, the batch's room its slots
ARGV = ["{python}", str(FAKE_OPENAI), "--host", "{host}", "--port", "{port}", "--model", "tiny",
        "--workers", "{tp_size}", "--slots", "{backend.max_batch}", "--token-delay", "0.04"]
BACKEND = {"kind": "command", "settings": {"argv": ARGV, "model_name": "tiny"}}


def _job(directory, url):
    directory.mkdir()
    # one trial at a time per driver; long enough decodes (3 x 75 tokens at 25 tok/s: 9 s) that the kill lands while
    # a trial runs, and that the first driver has configs left to measure once the second (its start, a new Ray)
    # measured one; a dead driver's trial is taken over after 8 s without a heartbeat (timeouts.takeover; 45 s by
    # default)
    return write_job(directory, study="shared", storage=url, budget={"trials": CONFIGS}, space_text=SPACE,
                     backend=BACKEND, baseline={"tp_size": 1, "backend.max_batch": 8}, ray={"parallel": 1},
                     bench={"prompt": TEST_PROMPT, "output_tokens": 75, "warmup": 1, "repeats": 2,
                            "max_repeats": 2},
                     timeouts={"startup": "60s", "bench": "30s", "teardown": "5s", "takeover": "8s"})


def _launched_by(report_dir, numbers):
    """The trials (of ``numbers``) whose server this driver launched: their logs are in its folder."""
    return {n for n in numbers if (report_dir / "logs" / log_name(n)).exists()}


def test_two_drivers_share_a_study_and_survive_a_kill_9(tmp_path, no_leftover_servers):
    before = {pid for pid, _ in server_processes(ANY_SERVER)}
    with postgres_server() as url:
        job_a, job_b = _job(tmp_path / "a", url), _job(tmp_path / "b", url)
        dir_a, dir_b = tmp_path / "a" / "reports" / "shared", tmp_path / "b" / "reports" / "shared"
        log_a, log_b = tmp_path / "driver-a.log", tmp_path / "driver-b.log"
        job = load_job(job_a)
        a = start_driver(job_a, log_a)
        b = None
        try:
            wait_for(lambda: "is shared through" in log_a.read_text(), 300, "the first driver to open the study")
            b = start_driver(job_b, log_b)
            shared = open_study(job, create=False)  # one storage (its connection pool) for every look

            def counted():
                return {r.number for r in trial_rows(shared) if r.counted and r.state == "COMPLETE"}

            def ready_to_kill():
                done = counted()
                # both measured something, and the first driver has a server up for a trial not yet recorded
                return (_launched_by(dir_a, done) and _launched_by(dir_b, done)
                        and list((dir_a / "servers").glob("*.json")) and len(done) < CONFIGS - 1)

            wait_for(ready_to_kill, 900, "both drivers to measure a config while the first runs another")
            before_kill = counted()
            os.kill(a.pid, signal.SIGKILL)
            a.wait(30)
            assert b.wait(900) == 0, log_b.read_text()[-3000:]
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        out_b = log_b.read_text()
        rows = trial_rows(open_study(job, create=False))

    # the survivor took the dead driver's trial over: recorded interrupted, its config re-queued
    taken = re.findall(r"#(\d+) was left running by a driver that stopped \(no heartbeat\): marked interrupted", out_b)
    assert len(taken) == 1, out_b[-3000:]
    lost = next(r for r in rows if r.number == int(taken[0]))
    assert lost.failure_kind == "interrupted" and not lost.counted
    assert (dir_a / "logs" / log_name(lost.number)).exists()  # it was the first driver's launch
    assert not any(r.state == "RUNNING" for r in rows)
    counted = [r for r in rows if r.counted]
    # nothing lost: every config of the space measured; none measured twice
    assert all(r.state == "COMPLETE" for r in counted)
    assert len({r.config_key for r in counted}) == len(counted) == CONFIGS
    assert sum(r.config_key == lost.config_key for r in counted) == 1
    # what was measured before the kill is kept, and both drivers made progress
    assert before_kill <= {r.number for r in counted}
    numbers = {r.number for r in counted}
    assert _launched_by(dir_a, numbers) and _launched_by(dir_b, numbers)
    assert not _launched_by(dir_a, numbers) & _launched_by(dir_b, numbers)
    assert not study_servers(tmp_path, STANDINS), "a server outlived the killed driver"
    # nor a worker of one (their command lines name no port)
    assert not [(p, c) for p, c in server_processes(ANY_SERVER) if p not in before]
    assert not list((dir_b / "servers").glob("*.json"))


def test_the_relaunches_and_the_race_are_the_driver_that_holds_them(tmp_path, no_leftover_servers):
    # a second driver of the study holds them (its advisory lock): this one only searches, though its job
    # asks for relaunches and a race
    with postgres_server() as url:
        holder = SharedStudy(url, "extras")
        try:
            assert holder.take_extras()
            job = load_job(write_job(tmp_path, study="extras", storage=url, backend=BACKEND, space_text=SPACE,
                                     baseline={"tp_size": 1, "backend.max_batch": 8},
                                     budget={"trials": 2, "relaunch": 0.5, "confirm": 4}))
            out = io.StringIO()
            run_in_process(job, out=out)
        finally:
            holder.close()
        rows = trial_rows(open_study(job, create=False))
    assert "the relaunches and the race of the finalists are another driver's" in out.getvalue()
    assert len([r for r in rows if r.counted and r.state == "COMPLETE"]) == 2
    assert not [r for r in rows if r.launch_role], [(r.number, r.launch_role) for r in rows]
