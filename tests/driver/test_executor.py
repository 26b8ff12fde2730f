"""What every Executor does unless it knows better (driver/executor.py), checked on the
in-process executor, which keeps the defaults: trials run on this host alone (no other node
to repeat the baseline on), pre-flight checks this host (a real command on a real PATH), and
the servers a dead driver left behind are ended, by pid and start time, never a stranger."""

from __future__ import annotations

import socket
import subprocess

import pytest
from wrapped_server import SERVER, command_job, wrapper

from orchestrator.config.job import load_job
from orchestrator.core.records import ServerRecord
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.node import preflight
from orchestrator.node.server import ServerRegistry, process_start_time


@pytest.fixture
def executor():
    ex = InProcessExecutor()
    try:
        yield ex
    finally:
        ex.shutdown()


def _record(pid: int, start_time: float) -> ServerRecord:
    return ServerRecord(node_id="n", hostname=socket.gethostname(), pid=pid, pgid=pid, start_time=start_time, port=0)


def test_one_host_and_no_other_node(executor):
    assert executor.nodes() == {}  # the driver repeats the baseline nowhere else


def test_preflight_checks_this_host(tmp_path, executor):
    job = load_job(command_job(tmp_path, tmp_path / "bin" / SERVER))
    ((host, problems),) = executor.preflight(preflight.needs(job)).items()
    assert host == socket.gethostname()
    assert len(problems) == 1 and "not found on this node's PATH" in problems[0]
    wrapper(tmp_path)
    assert executor.preflight(preflight.needs(job)) == {socket.gethostname(): []}


def test_cleanup_ends_the_recorded_orphan_and_spares_a_reused_pid(tmp_path, executor):
    """Two processes in sessions of their own, as a dead driver leaves its servers: one whose
    record matches it, one whose record has its pid but another start time (a reused pid)."""
    orphan = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        registry = ServerRegistry(tmp_path / "servers")
        registry.add(_record(orphan.pid, process_start_time(orphan.pid)))
        registry.add(_record(stranger.pid, process_start_time(stranger.pid) + 500))
        ended = executor.cleanup_orphans(tmp_path / "servers")
        assert [r.pid for r in ended] == [orphan.pid]
        assert orphan.wait(10) is not None and stranger.poll() is None
        assert registry.records() == []  # the stranger's stale record is dropped, the stranger left alone
        assert executor.cleanup_orphans(tmp_path / "servers") == []  # nothing twice
    finally:
        for proc in (orphan, stranger):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
