"""The reference server's rank processes (procs.py): ranks inherit the environment unchanged
and stay in rank 0's process group; SIGTERM to rank 0 alone, or rank 0 dying without any
cleanup (SIGKILL), ends every rank and closes the port; on CUDA (NCCL ranks, CUDA graphs)
too."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from refserver_helpers import (
    FAULT_BASE,
    NCCL_ENV,
    TINY,
    RefServer,
    greedy,
    group_members,
    on_cuda,
    port_closed,
    tp_max,
    wait_group_gone,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture
def launch(tmp_path):
    """Start servers for one test; every one is stopped (group TERM, KILL, reap) after it."""
    started: list[RefServer] = []

    def _launch(args, name="server", env=None):
        server = RefServer([*FAULT_BASE, *args], tmp_path, name, env=env).start()
        started.append(server)
        return server

    try:
        yield _launch
    finally:
        for server in started:
            server.stop()


def rank_pids(server: RefServer) -> list[int]:
    return [p for p in group_members(server.pgid) if p != server.proc.pid]


def test_slow_start_then_sigterm_ends_every_rank(launch):
    s = launch(["--tp", "2", "--fault", "slow-start:2"], env={"NCCL_PROTO": "Simple"})
    seen = []
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        assert s.proc.poll() is None, s.log()
        status = s.health()
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == 200:
            break
        time.sleep(0.05)
    assert seen[-1] == 200 and 503 in seen, seen
    assert "fault slow-start" in s.log()
    # the ranks are in the launched process group and got the environment unchanged
    (rank1,) = rank_pids(s)
    env = Path(f"/proc/{rank1}/environ").read_bytes().split(b"\0")
    assert b"NCCL_PROTO=Simple" in env
    assert greedy(s.port, "hi", n=3)["usage"]["completion_tokens"] == 3
    os.kill(s.proc.pid, signal.SIGTERM)  # rank 0 only, not the group
    s.proc.wait(timeout=5)
    assert wait_group_gone(s.pgid, 5) == []  # every rank gone, though only rank 0 was signalled
    assert port_closed(s.port)


def test_the_ranks_meet_on_loopback_only(launch):
    """Nothing of a TP=2 server listens beyond the machine: its HTTP port where it was told
    (127.0.0.1 here), the ranks' rendezvous store and gloo's connections on loopback."""
    import psutil

    s = launch(["--tp", "2"])
    s.wait_healthy()
    members = set(group_members(s.pgid))
    assert len(members) == 2
    listening = [c.laddr for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid in members]
    assert len(listening) >= 3, listening  # the API, the rendezvous store, gloo's pairs
    assert all(addr.ip == "127.0.0.1" for addr in listening), listening
    (rank1,) = rank_pids(s)  # spawned with the environment rank 0 set: NCCL (on GPUs) bootstraps on loopback too
    env = psutil.Process(rank1).environ()
    assert env.get("NCCL_SOCKET_IFNAME") == "lo" and env.get("GLOO_SOCKET_IFNAME") == "lo"


def test_garbage_changes_output_and_ranks_die_with_their_parent(launch):
    good = launch(["--tp", "1"], "good")
    bad = launch(["--tp", "2", "--fault", "garbage"], "garbage")
    good.wait_healthy()
    bad.wait_healthy()
    for prompt in ("The quick brown fox", "Tensor parallel"):
        a = greedy(good.port, prompt, n=16)["choices"][0]["text"]
        b = greedy(bad.port, prompt, n=16)["choices"][0]["text"]
        assert a != b
    ranks = rank_pids(bad)
    assert len(ranks) == 1
    os.kill(bad.proc.pid, signal.SIGKILL)  # rank 0 dies without any cleanup
    bad.proc.wait(timeout=5)
    assert wait_group_gone(bad.pgid, 5) == []


@on_cuda
def test_sigterm_ends_every_rank(tmp_path):
    s = RefServer([*TINY, "--device", "cuda", "--tp", str(tp_max()), "--graph-capture"],
                  tmp_path, "term", env=NCCL_ENV).start()
    try:
        s.wait_healthy(180)
        assert greedy(s.port, "hi", n=4)["usage"]["completion_tokens"] == 4
        os.kill(s.proc.pid, signal.SIGTERM)
        s.proc.wait(timeout=10)
        assert wait_group_gone(s.pgid, 10) == []  # every rank gone, though only rank 0 was signalled
    finally:
        s.stop()


def test_a_rank_whose_parent_is_already_gone_exits_at_once_under_the_variable_its_spawner_names(tmp_path):
    """``die_with_parent(name)`` reads the parent's pid from the variable the spawner set (the
    reference server's ranks and the pre-screen's probe each name their own): a rank whose recorded
    parent is not its parent any more exits 1 before doing anything; one under its parent goes on."""
    import subprocess
    import sys

    code = ("import sys; from orchestrator.refserver.procs import die_with_parent; "
            "die_with_parent('NCCLSWEEP_TEST_PARENT'); print('alive')")
    gone = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NCCLSWEEP_TEST_PARENT": "1"},
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 1 and "alive" not in gone.stdout
    kept = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NCCLSWEEP_TEST_PARENT": str(os.getpid())},
                          capture_output=True, text=True, timeout=60)
    assert kept.returncode == 0 and kept.stdout.strip() == "alive", kept.stderr
