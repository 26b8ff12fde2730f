"""Process trees (node/proctree.py), on real processes: a process is known by pid and start
time, so a reused pid is never taken for ours; a zombie is not alive; a tree is the root and
every descendant; a process group keeps members whose parent died; ``end`` stops what TERM
does not stop with KILL, within its bounds, and never signals a process that is not the
recorded one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import kill_pids
from orchestrator.node import proctree

# A parent (its own session, so its pid is its group) with two children, printing their pids.
PARENT = ("import subprocess, sys, time\n"
          "kids = [subprocess.Popen(['sleep', '1000']) for _ in range(2)]\n"
          "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
          "time.sleep(1000)\n")


@pytest.fixture
def family():
    """(parent, [child pids]); everything is ended afterwards."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    kids = [int(p) for p in parent.stdout.readline().split()]
    try:
        yield parent, kids
    finally:
        kill_pids([parent.pid, *kids])
        parent.wait(10)


def _until(check, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_a_process_is_its_pid_and_its_start_time():
    me = proctree.start_time(os.getpid())
    assert me is not None and me == proctree.start_time(os.getpid())  # stable for the life of the process
    assert proctree.alive(os.getpid()) and proctree.alive(os.getpid(), me)
    assert not proctree.alive(os.getpid(), me + 1)  # the same pid, started at another time: not ours
    assert proctree.start_time(2**22 + 12345) is None and not proctree.alive(2**22 + 12345)


def test_a_zombie_is_not_alive():
    child = subprocess.Popen(["true"])
    assert _until(lambda: not proctree.alive(child.pid))  # exited, not yet reaped: a zombie
    assert os.path.exists(f"/proc/{child.pid}")  # still in the process table
    child.wait(5)


def test_the_tree_is_the_root_and_its_descendants(family):
    parent, kids = family
    members = proctree.tree(parent.pid)
    assert {m.pid for m in members} == {parent.pid, *kids}
    assert all(m.start == proctree.start_time(m.pid) for m in members)
    # a child just spawned can show an empty command line for a moment (its exec under way)
    assert _until(lambda: {m.cmdline for m in proctree.tree(parent.pid) if m.pid in kids} == {"sleep 1000"})
    members = proctree.tree(parent.pid)  # read again once every exec has finished
    assert proctree.tree(parent.pid, start=members[0].start + 1) == []  # a reused pid has no tree of ours
    again = [proctree.Member.from_dict(m.to_dict()) for m in members]  # as the supervisor writes them
    assert again == members and "sleep 1000" in again[-1].describe()


def test_the_group_keeps_children_whose_parent_died(family):
    parent, kids = family
    assert {m.pid for m in proctree.group(parent.pid)} == {parent.pid, *kids}
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    assert _until(lambda: {m.pid for m in proctree.group(parent.pid)} == set(kids))  # re-parented, still ours
    assert proctree.end(proctree.group(parent.pid), grace_s=2.0, pgid=parent.pid) == []
    assert proctree.group(parent.pid) == [] and not any(proctree.alive(k) for k in kids)


def test_end_kills_what_ignores_term_and_spares_a_reused_pid():
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(1, flush=True)\n"
                                 "time.sleep(1000)\n"], stdout=subprocess.PIPE, text=True)
    bystander = subprocess.Popen(["sleep", "1000"])
    try:
        stubborn.stdout.readline()  # its TERM handler is in place
        target = proctree.tree(stubborn.pid)
        reused = proctree.Member(bystander.pid, proctree.start_time(bystander.pid) + 1, "sleep")
        left = proctree.end([*target, reused], grace_s=0.3)
        assert left == [] and stubborn.wait(5) == -signal.SIGKILL  # TERM ignored: KILL after the grace
        assert bystander.poll() is None  # its pid was in the list, its start time was not
    finally:
        for proc in (stubborn, bystander):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def test_listeners_are_the_processes_a_connection_to_the_port_reaches():
    """A socket listening on 127.0.0.1:P or on every address is found with its process; one on
    another address or port is not; a port nobody listens on has none."""
    import socket

    listener = ("import socket, sys\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind((sys.argv[1], 0)); s.listen(); print(s.getsockname()[1], flush=True)\n"
                "import time; time.sleep(1000)\n")
    procs = [subprocess.Popen([sys.executable, "-c", listener, host], stdout=subprocess.PIPE, text=True)
             for host in ("127.0.0.1", "0.0.0.0", "127.0.0.2")]
    try:
        ports = [int(p.stdout.readline()) for p in procs]
        (local,) = proctree.listeners("127.0.0.1", ports[0])
        assert isinstance(local, proctree.Member) and local.pid == procs[0].pid and "socket" in local.cmdline
        (anywhere,) = proctree.listeners("127.0.0.1", ports[1])
        assert anywhere.pid == procs[1].pid  # every address: 127.0.0.1 reaches it too
        assert proctree.listeners("127.0.0.1", ports[2]) == []  # only 127.0.0.2's
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            assert proctree.listeners("127.0.0.1", s.getsockname()[1]) == []  # bound, not listening
    finally:
        kill_pids([p.pid for p in procs])
        for p in procs:
            p.wait()
