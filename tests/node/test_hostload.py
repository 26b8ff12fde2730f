"""The host's load around a benchmark, read from the operating system with real processes: a
server that burns CPU is counted as the server's, a busy neighbour as other work. The figures
are checked against each process's own CPU clock, so a loaded box changes nothing here."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from orchestrator.node.hostload import HostSampler

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _spinner(seconds: float, new_group: bool) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)], start_new_session=new_group)


def _cpu(proc: subprocess.Popen) -> float:
    t = psutil.Process(proc.pid).cpu_times()
    return t.user + t.system


def test_the_servers_cpu_is_its_own_and_a_neighbours_is_other_work():
    server = _spinner(60.0, new_group=True)  # a server starts in its own session: its group is its pid
    neighbour = _spinner(60.0, new_group=False)
    try:
        time.sleep(0.2)  # both interpreters started
        s0, n0 = _cpu(server), _cpu(neighbour)
        sampler = HostSampler(server.pid)
        while _cpu(server) - s0 < 0.5 or _cpu(neighbour) - n0 < 0.5:  # each had half a CPU-second, however busy
            time.sleep(0.05)
        got = sampler.finish()
        served, neighboured = _cpu(server) - s0, _cpu(neighbour) - n0
    finally:
        for p in (server, neighbour):
            p.kill()
            p.wait()
    assert got.cpus and got.wall_s and got.load_start is not None and got.load_end is not None
    assert got.server_cpu_s == pytest.approx(served, abs=0.15)  # the server's group, as its own clock says
    # the neighbour's CPU is other work, never the server's
    assert got.others_cpus * got.wall_s >= 0.8 * neighboured


def test_a_server_that_is_gone_has_no_cpu_figure():
    server = _spinner(0.1, new_group=True)
    sampler = HostSampler(server.pid)
    server.wait(timeout=60)
    got = sampler.finish()
    assert got.server_cpu_s is None and got.host_cpu_s is not None and got.others_cpus is not None
