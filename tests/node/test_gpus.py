"""Before a trial, GPUs held by processes that are not the study's are seen, named, and
keep the trial from starting (nvidia-smi is faked: no GPU here; the processes are real)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.core.records import NOT_THE_CONFIGS_FAULT
from orchestrator.node import gpus
from orchestrator.node.spec import BenchPlan, ServerPlan, TrialSpec
from orchestrator.node.trial import run_trial


def fake_smi(tmp_path: Path, apps: list[tuple[str, int, int]], used: dict[str, int]) -> Path:
    """An nvidia-smi on PATH that reports 2 GPUs, their used memory and compute processes."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    gpu_rows = "\n".join(f"{i}, GPU-{i}, {used.get(str(i), 0)}" for i in range(2))
    app_rows = "\n".join(f"GPU-{g}, {pid}, {mib}" for g, pid, mib in apps)
    script = bindir / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      'case "$*" in\n'
                      f"  *query-gpu=index,uuid*) printf '%s\\n' \"{gpu_rows}\" ;;\n"
                      f"  *query-compute-apps*) printf '%s\\n' \"{app_rows}\" ;;\n"
                      "  *) printf 'ok\\n' ;;\n"
                      "esac\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


@pytest.fixture
def stranger():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "VLLM::Worker_TP0"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(5)


def test_a_foreign_process_on_our_gpu_is_named(tmp_path, monkeypatch, stranger):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, [('1', stranger.pid, 2400)], {'1': 2410})}:{os.environ['PATH']}")
    problems = gpus.foreign_use(["0", "1"], {os.getpid()}, settle_s=0)
    assert len(problems) == 1
    assert problems[0].startswith("GPU 1: 2410 MiB") and f"pid {stranger.pid}" in problems[0]
    assert "VLLM::Worker_TP0" in problems[0] and "2400 MiB" in problems[0]
    assert gpus.foreign_use(["0"], {os.getpid()}, settle_s=0) == []  # not one of the trial's GPUs


def test_our_own_context_and_idle_memory_are_not_foreign(tmp_path, monkeypatch):
    me = os.getpid()
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, [('0', me, 530)], {'0': 534, '1': 4})}:{os.environ['PATH']}")
    assert gpus.foreign_use(None, {me}, settle_s=0) == []


def test_memory_no_visible_process_explains_is_foreign(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, [], {'0': 30000})}:{os.environ['PATH']}")
    (problem,) = gpus.foreign_use(["0"], {os.getpid()}, settle_s=0)
    assert "30000 MiB" in problem and "does not show" in problem


def test_the_trial_does_not_start_on_held_gpus_and_it_is_not_the_configs_fault(tmp_path, monkeypatch, stranger):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, [('0', stranger.pid, 2400)], {'0': 2404})}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(gpus, "foreign_use", lambda v, own, settle_s=0.0, poll_s=1.0:
                        gpus._foreign(gpus.read(v), own))  # no settling wait in the test
    spec = TrialSpec(number=1, config={"tp_size": 1},
                     server=ServerPlan("refserver", {"model": "tiny", "device": "cpu"}, None, {}),
                     bench=BenchPlan(prompts=("hi",)), log_dir=str(tmp_path / "logs"),
                     registry_dir=str(tmp_path / "servers"), device_check=True, measure_bandwidth=False)
    result = run_trial(spec)
    assert result.outcome == "FAIL" and result.failure_kind == "env-error"
    assert result.failure_kind in NOT_THE_CONFIGS_FAULT
    assert f"pid {stranger.pid}" in result.failure_reason
    assert not (tmp_path / "logs" / "trial-0001.log").exists()  # nothing was launched
