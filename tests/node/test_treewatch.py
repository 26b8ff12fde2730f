"""The tree watch: real engines are process trees, and a failure anywhere in the tree (a
worker that exits, an engine's fatal log line) is seen within seconds, not at the start-up
timeout (real processes: the multi-process fake server); the fatal lines are found in a
real vLLM crash and in no healthy start (real engine logs, tests/fixtures/vllm/)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tree_servers import fake_spec, gone, worker_pids

from conftest import TESTS
from orchestrator.backends import get_backend_class
from orchestrator.core import nccl
from orchestrator.core.launch import WatchRules
from orchestrator.node import client
from orchestrator.node.server import (
    ServerExited,
    ServerFailed,
    ServerProcess,
    free_port,
)
from orchestrator.node.treewatch import find_fatal

pytestmark = pytest.mark.timeout(90)

VLLM_FATAL = (r"WorkerProc hit an exception", r"EngineCore failed to start")


def _tree_server(tmp_path: Path, servers: list, workers: int, *args: str, watch: WatchRules | None = None):
    """A started server whose tree has ``workers`` workers; returns it and the workers' pids."""
    pid_dir = tmp_path / f"pids-{len(servers)}"
    pid_dir.mkdir()
    sp = ServerProcess(fake_spec(free_port(), "--workers", str(workers), "--pid-dir", str(pid_dir), *args),
                       tmp_path / f"s{len(servers)}.log", watch=watch)
    servers.append(sp)
    sp.start()
    return sp, worker_pids(pid_dir, workers)


@pytest.fixture
def servers():
    made: list[ServerProcess] = []
    try:
        yield made
    finally:
        for sp in made:
            sp.stop(grace_s=0.5)


def test_a_worker_that_dies_while_the_front_waits_fails_the_start_within_seconds(tmp_path, servers):
    ready_after, startup_timeout = 600, 150
    sp, workers = _tree_server(tmp_path, servers, 2, "--ready-after", str(ready_after), "--worker-dies-after", "2")
    t0 = time.monotonic()
    with pytest.raises(ServerFailed) as info:
        sp.wait_ready(timeout_s=startup_timeout)
    # seen when the worker died, not when the start-up timeout (or the front's readiness) came
    assert time.monotonic() - t0 < startup_timeout / 5, "a dead worker was seen only near the timeout"
    print(f"worker death seen {time.monotonic() - t0 - 2.0:.1f} s after it (at most)")
    assert f"pid {workers[0]}" in info.value.reason and "exited while" in info.value.reason
    assert "exiting with code 1" in info.value.log_tail
    sp.stop(1.0)
    assert gone(workers, 5) and not sp.alive()


def test_an_engines_fatal_line_fails_the_start_and_the_server_is_ended(tmp_path, servers):
    line = "(Worker_TP1 pid=3006) ERROR 11-30 21:19:29 [multiproc_executor.py:1007] WorkerProc hit an exception."
    startup_timeout = 150
    sp, workers = _tree_server(tmp_path, servers, 1, "--ready-after", "600", "--say-after", f"1.5:{line}",
                               watch=WatchRules(fatal_log_patterns=VLLM_FATAL))
    t0 = time.monotonic()
    with pytest.raises(ServerFailed) as info:
        sp.wait_ready(timeout_s=startup_timeout)
    assert time.monotonic() - t0 < startup_timeout / 5  # at the fatal line, not at the timeout
    assert "WorkerProc hit an exception" in info.value.reason
    # the watch ends the server itself (so a benchmark waiting on it returns at once)
    assert gone([sp.pid, *workers], 10)


def test_a_worker_dying_during_the_benchmark_ends_the_request_at_once(tmp_path, servers):
    sp, _ = _tree_server(tmp_path, servers, 1, "--worker-dies-after", "4")
    sp.wait_ready(30)
    deadline = 60
    t0 = time.monotonic()
    got = client.stream_completion(sp.spec.base_url, "fake", "a prompt", 2000, timeout_s=deadline,
                                  extra={"fake": {"token_delay": 0.05}})  # 100 s of tokens
    assert not got.ok and not got.timed_out  # ended by the dead worker, not by the deadline
    assert time.monotonic() - t0 < deadline / 2
    assert sp.fatal and "exited while" in sp.fatal


def test_short_lived_tools_and_transient_helpers_are_no_failure(tmp_path, servers):
    port = free_port()
    sp = ServerProcess(fake_spec(port, "--ready-after", "4", "--helper-after", "0.2:2.0"), tmp_path / "s.log",
                       watch=WatchRules(transient_processes=("fake-helper",)))
    servers.append(sp)
    sp.start()
    assert sp.wait_ready(30) >= 3.5 and sp.fatal is None
    # the same helper, not declared transient: it is a member of the tree, and its exit is fatal
    other = ServerProcess(fake_spec(free_port(), "--ready-after", "6", "--helper-after", "0.2:2.0"), tmp_path / "o.log")
    servers.append(other)
    other.start()
    with pytest.raises(ServerFailed, match="fake-helper"):
        other.wait_ready(30)


def test_with_essential_processes_named_only_they_count(tmp_path, servers):
    """vLLM's rule: its retitled engine processes are the tree; a Python helper that ends
    (a P2P check, a model inspection) is none of them."""
    rules = WatchRules(essential_processes=(r"FAKE::Worker",))
    sp, _ = _tree_server(tmp_path, servers, 1, "--ready-after", "5", "--helper-after", "0.2:2.0", watch=rules)
    assert sp.wait_ready(30) >= 4.0 and sp.fatal is None
    dying, _ = _tree_server(tmp_path, servers, 1, "--ready-after", "600", "--worker-dies-after", "2", watch=rules)
    with pytest.raises(ServerFailed, match="--worker 0"):
        dying.wait_ready(150)


def test_the_first_process_exiting_is_still_reported_as_such(tmp_path, servers):
    sp = ServerProcess(fake_spec(free_port(), "--crash-on-start", "4"), tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    with pytest.raises(ServerExited):
        sp.wait_ready(30)


LOGS = TESTS / "fixtures" / "vllm"


HEALTHY = ["vllm-0.26.0-h200-tp1-eager-serve.log", "vllm-0.26.0-h200-tp1-graphs-serve.log",
           "vllm-0.26.0-h200-tp1-graphs-trial.log", "vllm-0.26.0-2xh200-tp2-eager-p2poff-simple-nccl-info.log",
           "vllm-0.26.0-2xh200-tp2-eager-p2poff-ll-nccl-info.log",
           "vllm-0.26.0-2xh200-tp2-graphs-p2poff-simple-ring-trial.log"]


CRASH = "vllm-0.26.0-2xh200-tp2-graphs-p2poff-crash-illegal-address.log"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(errors="replace").splitlines()


@pytest.fixture(scope="module")
def vllm_fatal():
    return get_backend_class("vllm")({"model": "/models/m", "version": "0.26.0"}).watch_rules().fatal_regex()


def test_the_worker_crash_is_found_at_its_first_line(vllm_fatal):
    lines = _lines(CRASH)
    i = find_fatal(lines, vllm_fatal)
    assert i is not None and "WorkerProc hit an exception" in lines[i]
    assert "21:19:29" in lines[i]  # the moment the workers died, not the end of the log
    later = [j for j, line in enumerate(lines) if "EngineCore failed to start" in line]
    assert later and later[0] > i


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_starts_have_no_fatal_line(name, vllm_fatal):
    """What the watch reads: the log until the study tears the server down (vLLM logs an
    EngineDeadError while it shuts down on our SIGTERM; the watch has stopped by then)."""
    lines = _lines(name)
    teardown = next((i for i, line in enumerate(lines) if "[shutdown]" in line), len(lines))
    assert find_fatal(lines[:teardown], vllm_fatal) is None


def test_nccl_algo_tree_for_every_collective_kills_vllms_workers(vllm_fatal):
    """Seen on 2x H200: NCCL_ALGO=Tree applies to every collective, and NCCL has no Tree
    AllGather (vLLM gathers logits with one at TP > 1): NCCL refuses (invalid usage), the
    workers die while the API server stays up. The watch sees the worker's line; the trial is
    the config's fault (nccl-invalid), not a crash to retry. Tuning the all-reduce alone is
    NCCL_ALGO=allreduce:tree."""
    name = "vllm-0.26.0-2xh200-tp2-graphs-p2poff-tree-ll-allgather-refused.log"
    text = (LOGS / name).read_text(errors="replace")
    lines = text.splitlines()
    i = find_fatal(lines, vllm_fatal)
    assert i is not None and "WorkerProc hit an exception" in lines[i]
    assert nccl.classify_failure(text) == "nccl-invalid"
    refusal = [ln for ln in lines if "no algorithm/protocol available for function AllGather" in ln]
    assert refusal and "NCCL_ALGO was set to Tree" in refusal[0]
