"""The host's load around a benchmark, read from the operating system with real processes: a
server that burns CPU is counted as the server's, a busy neighbour as other work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.node.hostload import HostSampler

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _spinner(seconds: float, new_group: bool) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)], start_new_session=new_group)


def test_the_servers_cpu_is_its_own_and_a_neighbours_is_other_work():
    server = _spinner(1.0, new_group=True)  # a server starts in its own session: its group is its pid
    try:
        sampler = HostSampler(server.pid)
        server.wait(timeout=60)
    finally:
        server.kill()
    # the server exited: its group is gone, so its CPU could not be read at the end
    lone = sampler.finish()
    assert lone.cpus and lone.wall_s and lone.host_cpu_s is not None and lone.load_start is not None
    server = _spinner(30.0, new_group=True)
    neighbour = _spinner(30.0, new_group=False)
    try:
        sampler = HostSampler(server.pid)
        while (got := sampler.finish()).wall_s < 1.5:
            pass
    finally:
        for p in (server, neighbour):
            p.kill()
            p.wait()
    assert got.server_cpu_s == pytest.approx(got.wall_s, rel=0.6)  # one CPU's worth, give or take the box
    assert got.others_cpus >= 0.4  # the neighbour's CPU is not the server's
