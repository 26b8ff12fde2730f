"""Environment failures are not config failures: a server command missing on the node stops
the run at pre-flight (one line per node, nothing launched); one that cannot be executed
once launched is `env-error`: never cached, never banned, re-queued, and two in a row stop
the study with what to fix. After the fix the next run measures the baseline. Real Ray,
real processes (the reference server behind a wrapper script), real Optuna journals."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import yaml

from conftest import write_job
from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.core import outcome
from orchestrator.core.records import TrialResult
from orchestrator.node import preflight
from orchestrator.study.history import trial_rows
from orchestrator.study.storage import open_study

SERVER = "run-orchestrator.refserver"  # the name carries the marker the leftover-server guard looks for


def wrapper(directory: Path, interpreter: str = sys.executable) -> Path:
    """An executable script that runs the reference server with ``interpreter``."""
    exe = directory / "bin" / SERVER
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{interpreter}\nimport runpy\nrunpy.run_module('orchestrator.refserver', run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def command_job(directory: Path, exe: Path, **sections) -> Path:
    argv = [str(exe), "--model", "tiny", "--device", "cpu", "--tp", "{tp_size}", "--threads", "{backend.threads}",
            "--served-model-name", "tiny", "--host", "{host}", "--port", "{port}"]
    return write_job(directory, study="env", backend={"kind": "command", "settings": {
        "argv": argv, "model_name": "tiny", "model_facts": {"heads": 8, "kv_heads": 4}}}, **sections)


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def no_config_banned(job) -> None:
    """Every config that failed did so for the environment: none is cached as its answer."""
    rows = trial_rows(open_study(job, create=False))
    assert not [r for r in rows if r.state == "FAIL" and r.counted], rows
    assert not [r for r in rows if r.cached_from is not None and r.state == "FAIL"]


@pytest.mark.slow
def test_missing_server_command_stops_at_preflight_then_the_fixed_run_measures_the_baseline(
        tmp_path, ray_local, no_leftover_servers):
    exe = tmp_path / "bin" / SERVER  # not there yet
    job_path = command_job(tmp_path, exe, budget={"trials": 2})
    code, err = run_cli("run", str(job_path))
    lines = err.strip().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("ncclsweep: error:"))  # after the study's first line
    assert code == 1, err
    assert lines[first] == "ncclsweep: error: pre-flight failed on 1 of 1 node(s); nothing was launched:", err
    assert len(lines) == first + 2 and str(exe) in lines[-1] and "not found on this node's PATH" in lines[-1]
    assert not (tmp_path / "reports").exists()  # a run refused before any launch creates no study

    wrapper(tmp_path)  # the fix: the command exists on the node
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    base = next(r for r in rows if r.is_baseline)
    assert base.state == "COMPLETE" and base.value > 0 and base.counted
    no_config_banned(job)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["command", "refserver"])
def test_the_full_path_the_preflight_advises_is_taken_and_the_next_run_measures_the_baseline(
        tmp_path, ray_local, no_leftover_servers, kind):
    """The issue's path: the server is not where the job says; pre-flight refuses and says
    to set its full path; the user does; the next run measures the baseline (the server's
    location is not part of the study's identity, and the refused run left no study)."""
    exe = wrapper(tmp_path)  # installed, but not on PATH
    if kind == "command":
        job_path = command_job(tmp_path, Path(SERVER), budget={"trials": 1})  # a bare name: not found
        fixed, found = {"argv": [str(exe)]}, str(exe)
    else:
        missing = str(tmp_path / "venv" / "python")
        job_path = write_job(tmp_path, study="env", budget={"trials": 1}, backend={
            "kind": "refserver", "settings": {"model": "tiny", "device": "cpu", "python": missing}})
        fixed, found = {"python": sys.executable}, sys.executable
    code, err = run_cli("run", str(job_path))
    assert code == 1 and "not found on this node's PATH" in err and "to its full path" in err, err
    assert not (tmp_path / "reports").exists()

    doc = yaml.safe_load(job_path.read_text())
    settings = doc["backend"]["settings"]
    if "argv" in fixed:
        settings["argv"] = fixed["argv"] + settings["argv"][1:]
    else:
        settings.update(fixed)
    job_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    job = load_job(job_path)
    (base,) = trial_rows(open_study(job, create=False))
    assert base.is_baseline and base.state == "COMPLETE" and base.value > 0 and base.counted
    server = base.to_json()["server"]  # what `status --json` shows: the server this trial ran
    assert server["command"] == found and server["version"] == job.backend_obj().version()


@pytest.mark.slow
def test_a_command_that_cannot_execute_is_env_error_twice_then_stops_and_bans_nothing(
        tmp_path, ray_local, no_leftover_servers):
    """The script is there (pre-flight finds it) but the Python it names is gone, as when a
    virtual environment was deleted: the launch fails before any server runs."""
    exe = wrapper(tmp_path, interpreter=str(tmp_path / "gone-venv" / "bin" / "python"))
    job_path = command_job(tmp_path, exe, budget={"trials": 3})
    code, err = run_cli("run", str(job_path))
    last = err.strip().splitlines()[-1]
    assert code == 1 and "stopping after 2 trials in a row failed for a reason outside their configs" in last, err
    assert "env-error" in last and "cannot be executed on that node" in last and "no config was banned" in last
    job = load_job(job_path)
    rows = trial_rows(open_study(job, create=False))
    assert [(r.state, r.failure_kind, r.counted) for r in rows] == [("FAIL", "env-error", False)] * 2
    assert all(r.is_baseline for r in rows)  # the baseline, re-queued once, never replaced by another config
    no_config_banned(job)

    wrapper(tmp_path)  # the fix
    code, err = run_cli("run", str(job_path))
    assert code == 0, err
    rows = trial_rows(open_study(job, create=False))
    measured = [r for r in rows if r.counted]
    assert len(measured) == 3 and all(r.state == "COMPLETE" and r.value > 0 for r in measured), rows
    base = next(r for r in measured if r.is_baseline)
    assert base.params == {"tp_size": 1, "backend.threads": 1}
    no_config_banned(job)


def test_a_taken_port_in_a_real_server_log_is_env_error():
    """The reference server refuses a port another process holds; that is the node's fault."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "orchestrator.refserver", "--model", "tiny", "--port", str(port)],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    raw = TrialResult.failed({"tp_size": 1}, "start-crash", "server exited with code 2 before it was ready",
                             log_tail=out.stdout + out.stderr, nccl={"version": "2.28.9"}, warnings=["w"],
                             server={"port": port})
    final = outcome.decide(raw)
    assert final.result.failure_kind == "env-error" and "port was taken" in final.result.failure_reason
    assert final.blameless and not final.counted and final.requeue
    assert (final.result.nccl, final.result.warnings, final.result.server) == (raw.nccl, raw.warnings, raw.server)


def test_preflight_checks_command_path_gpus_and_model(tmp_path, monkeypatch):
    job = load_job(command_job(tmp_path, tmp_path / "bin" / SERVER))
    need = preflight.needs(job)
    assert need["command"] == str(tmp_path / "bin" / SERVER) and need["gpus"] == 0
    assert "not found on this node's PATH" in preflight.node_problems(need)[0]
    wrapper(tmp_path)
    assert preflight.node_problems(need) == []
    # a bare command resolves on the PATH of the job's env:, not the driver's
    bare = {**need, "command": SERVER}
    assert preflight.node_problems(bare)
    assert preflight.node_problems({**bare, "env": {"PATH": str(tmp_path / "bin")}}) == []
    assert "does not exist" in preflight.node_problems({**need, "model": str(tmp_path / "m.gguf")})[0]
    monkeypatch.setattr(preflight, "gpu_count", lambda: 2)  # a node whose nvidia-smi lists 2 GPUs
    assert preflight.node_problems({**need, "gpus": 8}) == ["the job needs 8 GPUs per node; nvidia-smi lists 2 here"]


def test_ray_preflight_runs_on_each_matching_node(tmp_path, ray_local):
    from orchestrator.driver.ray_executor import RayExecutor

    job = load_job(command_job(tmp_path, tmp_path / "bin" / SERVER))
    executor = RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=1)
    try:
        got = executor.preflight(preflight.needs(job))
        assert len(got) == len(executor.nodes()) == 1
        (problems,) = got.values()
        assert problems and "not found on this node's PATH" in problems[0]
        wrapper(tmp_path)
        assert list(executor.preflight(preflight.needs(job)).values()) == [[]]
    finally:
        executor.shutdown()
