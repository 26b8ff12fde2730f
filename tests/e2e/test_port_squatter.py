"""Whose numbers a trial records (issue 38): the port a trial's server is given is free when
picked and bound later; a process that takes it in between answers health and the benchmark
in the server's place. A trial counts only what its own process tree answered: a squatter
outside the tree is ``env-error`` naming it (pid, command; blameless: re-queued, never
banned, two in a row stop the study with that line); a server whose API process is its own
child is the server's (COMPLETE). Real Ray, real processes, the real command line."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from conftest import kill_pids, write_job
from logtext import log_lines
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PORT_SERVER, LOAD_SERVER = str(HERE / "port_server.py"), str(HERE / "load_server.py")


def port_job(tmp_path: Path, mode: str, trials: int) -> Path:
    argv = ["{python}", PORT_SERVER, "--mode", mode, "--port", "{port}", "--handoff", str(tmp_path / "handoff")]
    (tmp_path / "handoff").mkdir()
    return write_job(tmp_path, study=f"port-{mode}", space_text="params:\n  tp_size: {choices: [1]}\n",
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "load"}},
                     baseline={"tp_size": 1}, budget={"trials": trials})


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def test_a_server_whose_api_process_is_its_child_is_the_trials(tmp_path, ray_local):
    job_path = port_job(tmp_path, "child", trials=1)
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    (row,) = trial_rows(open_study(load_job(job_path), create=False))
    assert (row.state, row.counted) == ("COMPLETE", True) and row.value > 0, row.failure_reason


def test_a_squatter_outside_the_tree_is_env_error_naming_it(tmp_path, ray_local):
    """The squatter (the real API server, started by this test) takes each port the moment the
    trial's server announces it; the server dies of EADDRINUSE after its 'model load'."""
    job_path = port_job(tmp_path, "late", trials=2)
    squatters: dict[str, subprocess.Popen] = {}
    done = threading.Event()

    def squat() -> None:
        while not done.is_set():
            for path in (tmp_path / "handoff").iterdir():
                if path.name not in squatters:
                    squatters[path.name] = subprocess.Popen(
                        [sys.executable, LOAD_SERVER, "--port", path.name, "--model", "load"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(0.05)

    watcher = threading.Thread(target=squat, daemon=True)
    watcher.start()
    try:
        code, err = run_cli("run", str(job_path))
    finally:
        done.set()
        watcher.join()
        kill_pids([p.pid for p in squatters.values()])
        for p in squatters.values():
            p.wait()
    last = log_lines(err)[-1]
    assert code == 1 and "stopping after 2 trials in a row failed for a reason outside their configs" in last, err
    assert "env-error" in last and "no config was banned" in last
    rows = trial_rows(open_study(load_job(job_path), create=False))
    assert [(r.state, r.failure_kind, r.counted) for r in rows] == [("FAIL", "env-error", False)] * 2, rows
    for row in rows:  # each names the process that answered: its pid and its command
        port = str(row.to_json()["server"]["port"])
        squatter = squatters[port]
        assert f"port {port} on 127.0.0.1 is answered by pid {squatter.pid} (" in row.failure_reason, row
        assert f"load_server.py --port {port} --model load" in row.failure_reason
        assert "not by this trial's server" in row.failure_reason and row.value is None
    assert not [r for r in rows if r.cached_from is not None]
