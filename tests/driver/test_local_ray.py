"""The private local Ray a run starts (``driver.local_ray``), started for real in a process of
its own session, as a driver is: its services listen on loopback only, and none of them is in
the driver's process group, so a signal to that group (``timeout``'s SIGTERM) reaches the
driver alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

# A driver's own local Ray, after a task ran: the node's address, what its process tree listens
# on, and the process group of each process under the driver beside the driver's own.
REPORT = """
import json, os, psutil
from ray._private import services
from orchestrator.driver.ray_executor import connect_ray
popen = services.ConsolePopen
ray = connect_ray(None, 1)
node_ip = ray.get(ray.remote(lambda: ray.util.get_node_ip_address()).remote())
under = psutil.Process().children(recursive=True)
tree = {p.pid for p in under} | {os.getpid()}
listening = sorted({c.laddr.ip for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid in tree})
groups = {f"{p.pid} {p.name()}": os.getpgid(p.pid) for p in under}
print(json.dumps({"node_ip": node_ip, "listening": listening, "driver_group": os.getpgid(0), "groups": groups,
                  "popen_restored": services.ConsolePopen is popen}))
ray.shutdown()
"""


@pytest.fixture(scope="module")
def report():
    done = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=300, cwd=REPO,
                          start_new_session=True)  # a driver's own session, as `start_driver` gives it
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_local_ray_listens_on_loopback_only(report):
    """A single-node study's private Ray is reached by nothing outside the machine: its
    GCS, raylet, workers and agents listen on 127.0.0.1, not on the machine's interfaces."""
    assert report["node_ip"] == "127.0.0.1"
    assert report["listening"] and set(report["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, report


def test_no_ray_service_shares_the_drivers_process_group(report):
    """GCS, raylet, agents and workers each lead a group of their own: a signal to the
    driver's group (`timeout 8h ncclsweep run`, `kill -TERM -- -PGID`) does not end the Ray the
    driver's running trial needs; Ray's spawning is left as it was after the start."""
    names = " ".join(report["groups"])
    assert "gcs_server" in names and "raylet" in names, report["groups"]  # the services were seen
    shared = [name for name, group in report["groups"].items() if group == report["driver_group"]]
    assert not shared, f"in the driver's process group: {shared}"
    assert report["popen_restored"]
