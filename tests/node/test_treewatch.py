"""Real engines are process trees: a failure anywhere in the tree is seen within seconds,
and nothing of the tree outlives its owner (real processes throughout)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TESTS, kill_pids
from orchestrator.core.launch import LaunchSpec, WatchRules
from orchestrator.node import client, proctree
from orchestrator.node.server import (
    ServerExited,
    ServerFailed,
    ServerProcess,
    ServerRegistry,
    cleanup_recorded,
    free_port,
)

pytestmark = pytest.mark.timeout(90)

FAKE = str(TESTS / "fake_openai_server.py")
REPO = str(Path(__file__).resolve().parents[2])
VLLM_FATAL = (r"WorkerProc hit an exception", r"EngineCore failed to start")


def _spec(port: int, *args: str) -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, FAKE, "--port", str(port), *args], host="127.0.0.1", port=port,
                      model_name="fake")


def _pids(pid_dir: Path, n: int, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(pid_dir.glob("worker-*.pid"))
        if len(files) == n and all(f.read_text().strip() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"{n} workers did not start")


def _gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(proctree.alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(proctree.alive(p) for p in pids)


def _tree_server(tmp_path: Path, servers: list, workers: int, *args: str, watch: WatchRules | None = None):
    """A started server whose tree has ``workers`` workers; returns it and the workers' pids."""
    pid_dir = tmp_path / f"pids-{len(servers)}"
    pid_dir.mkdir()
    sp = ServerProcess(_spec(free_port(), "--workers", str(workers), "--pid-dir", str(pid_dir), *args),
                       tmp_path / f"s{len(servers)}.log", watch=watch)
    servers.append(sp)
    sp.start()
    return sp, _pids(pid_dir, workers)


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
    assert _gone(workers, 5) and not sp.alive()


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
    assert _gone([sp.pid, *workers], 10)


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
    sp = ServerProcess(_spec(port, "--ready-after", "4", "--helper-after", "0.2:2.0"), tmp_path / "s.log",
                       watch=WatchRules(transient_processes=("fake-helper",)))
    servers.append(sp)
    sp.start()
    assert sp.wait_ready(30) >= 3.5 and sp.fatal is None
    # the same helper, not declared transient: it is a member of the tree, and its exit is fatal
    other = ServerProcess(_spec(free_port(), "--ready-after", "6", "--helper-after", "0.2:2.0"), tmp_path / "o.log")
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
    sp = ServerProcess(_spec(free_port(), "--crash-on-start", "4"), tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    with pytest.raises(ServerExited):
        sp.wait_ready(30)


def _owner_script(tmp_path: Path, port: int, pid_dir: Path, *extra: str) -> str:
    return textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {REPO!r})
        from orchestrator.core.launch import LaunchSpec
        from orchestrator.node.server import ServerProcess, ServerRegistry
        spec = LaunchSpec(argv=[sys.executable, {FAKE!r}, "--port", "{port}", "--workers", "2",
                                "--pid-dir", {str(pid_dir)!r}, *{list(extra)!r}], port={port})
        sp = ServerProcess(spec, {str(tmp_path / 's.log')!r}, ServerRegistry({str(tmp_path / 'reg')!r}))
        sp.start()
        print(sp.pid, flush=True)
        time.sleep(1000)
        """)


@pytest.mark.parametrize("setsid", [False, True], ids=["same-group", "left-the-group"])
def test_the_whole_tree_dies_within_seconds_of_a_kill_9_of_its_owner(tmp_path, setsid):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    extra = ("--workers-setsid",) if setsid else ()
    owner = subprocess.Popen([sys.executable, "-c", _owner_script(tmp_path, free_port(), pid_dir, *extra)],
                             stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        front = int(owner.stdout.readline())
        workers = _pids(pid_dir, 2)
        time.sleep(1.5)  # the supervisor has seen the whole tree
        owner.send_signal(signal.SIGKILL)
        owner.wait(5)
        t0 = time.monotonic()
        assert _gone([front, *workers], 20), "a process of the tree outlived its owner by 20 s"
        print(f"tree gone {time.monotonic() - t0:.2f} s after kill -9 of its owner")
    finally:
        owner.kill()
        kill_pids(workers)


def test_cleanup_ends_recorded_descendants_that_left_the_group(tmp_path):
    """The registry keeps the tree the supervisor saw: cleanup needs nothing else."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    reg = ServerRegistry(tmp_path / "reg")
    sp = ServerProcess(_spec(free_port(), "--workers", "2", "--pid-dir", str(pid_dir), "--workers-setsid"),
                       tmp_path / "s.log", reg, supervise=True)
    sp.start()
    workers = _pids(pid_dir, 2)
    try:
        deadline = time.monotonic() + 10
        while len(reg.tree(sp.record)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {m.pid for m in reg.tree(sp.record)} >= {sp.pid, *workers}
        # a driver that died: nobody calls stop(); its supervisor is gone too
        sp.watch.end()
        os.kill(sp.supervisor_pid, signal.SIGKILL)
        os.kill(sp.pid, signal.SIGKILL)
        sp.proc.wait(5)
        assert all(proctree.alive(w) for w in workers)  # in sessions of their own: not in the group
        killed = cleanup_recorded(reg, grace_s=0.5)
        assert [r.pid for r in killed] == [sp.pid]
        assert _gone(workers, 5) and reg.records() == []
    finally:
        kill_pids(workers)
        sp._owner_fd = None


def test_cleanup_command_needs_only_the_study(tmp_path):
    """`ncclsweep cleanup JOB` with the job's space file gone and an unknown backend kind:
    the recorded tree (a worker in a session of its own included) is ended."""
    from conftest import write_job

    job_path = write_job(tmp_path, study="orphans")
    (tmp_path / "space.yaml").unlink()
    job_path.write_text(job_path.read_text().replace("kind: refserver", "kind: gone-backend"))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    reg = ServerRegistry(tmp_path / "reports" / "orphans" / "servers")
    sp = ServerProcess(_spec(free_port(), "--workers", "1", "--pid-dir", str(pid_dir), "--workers-setsid"),
                       tmp_path / "s.log", reg)
    sp.start()
    (worker,) = _pids(pid_dir, 1)
    try:
        deadline = time.monotonic() + 10
        while len(reg.tree(sp.record)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        sp.watch.end()
        os.kill(sp.supervisor_pid, signal.SIGKILL)  # as after a kill -9 of the whole node's study
        out = subprocess.run([sys.executable, "-m", "orchestrator", "cleanup", str(job_path)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert f"ended server pid {sp.pid}" in out.stdout and "1 server(s) ended" in out.stdout
        assert _gone([sp.pid, worker], 5)
    finally:
        sp._owner_fd = None
        kill_pids((sp.pid, worker))
        sp.proc.wait(5)
