"""How busy this host is while a launch is measured, read from the operating system.

``HostSampler(pgid)`` notes, when made, the load average, the CPU seconds the whole host has
spent busy, those of the server's process group and those of this process (the measuring
client); ``finish()`` reads them again and returns a ``core.measurement.HostLoad`` of the
difference. A server's tree is its process group (a server starts in its own session), so
workers that re-parented stay counted. Nothing here raises: a figure that cannot be read is
None.
"""

from __future__ import annotations

import os
import time

import psutil

from orchestrator.core.measurement import HostLoad
from orchestrator.node import proctree


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _host_busy_s() -> float | None:
    """CPU seconds the whole host has spent not idle since boot."""
    try:
        times = psutil.cpu_times()
    except (OSError, RuntimeError):
        return None
    idle = times.idle + getattr(times, "iowait", 0.0)
    return sum(times) - idle - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _own_s() -> float:
    t = os.times()
    return t.user + t.system


class HostSampler:
    """Samples the host around one benchmark (module docstring)."""

    def __init__(self, server_pgid: int | None):
        self.pgid = server_pgid
        self.t0 = time.monotonic()
        self.load0 = _load()
        self.host0 = _host_busy_s()
        self.server0 = proctree.cpu_seconds(server_pgid) if server_pgid else None
        self.own0 = _own_s()

    def finish(self) -> HostLoad:
        """The host's load since this sampler was made."""
        host1 = _host_busy_s()
        server1 = proctree.cpu_seconds(self.pgid) if self.pgid else None
        server = server1 - self.server0 if server1 is not None and self.server0 is not None else None
        return HostLoad(load_start=self.load0, load_end=_load(), cpus=psutil.cpu_count() or os.cpu_count(),
                        wall_s=time.monotonic() - self.t0,
                        host_cpu_s=host1 - self.host0 if host1 is not None and self.host0 is not None else None,
                        server_cpu_s=max(0.0, server) if server is not None else None,
                        client_cpu_s=_own_s() - self.own0)
