"""The private local Ray a run starts (``driver.local_ray``), started for real in a process of
its own session, as a driver is: its services listen on loopback only, none of them is in
the driver's process group, so a signal to that group (``timeout``'s SIGTERM) reaches the
driver alone, and only the services a run uses are started."""

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
from ray._private.node import Node
from orchestrator.driver.ray_executor import connect_ray
popen = services.ConsolePopen
starts = {name: getattr(Node, name) for name in ("start_monitor", "start_log_monitor", "start_api_server")}
ray = connect_ray(None, 2)
import time; time.sleep(1.5)  # Ray prestarts its workers within a second of a driver's connection where it does
idle = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
node_ip = ray.get(ray.remote(lambda: ray.util.get_node_ip_address()).remote())
under = psutil.Process().children(recursive=True)
tree = {p.pid for p in under} | {os.getpid()}
listening = sorted({c.laddr.ip for c in psutil.net_connections("inet") if c.status == "LISTEN" and c.pid in tree})
groups = {f"{p.pid} {p.name()}": os.getpgid(p.pid) for p in under}
commands = [" ".join(p.cmdline()) for p in under]
print(json.dumps({"node_ip": node_ip, "listening": listening, "driver_group": os.getpgid(0), "groups": groups,
                  "popen_restored": services.ConsolePopen is popen, "commands": commands, "before_a_task": idle,
                  "starts_restored": all(getattr(Node, n) is f for n, f in starts.items()),
                  "tasks_answer": ray.get(ray.remote(lambda: 6 * 7).remote()),
                  "nodes": len(ray.nodes())}))
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


def test_only_the_services_a_run_uses_are_started(report):
    """No autoscaler monitor (a local node has nothing to scale), no log monitor (the driver asks
    for no worker logs), no API server (no dashboard, job or state API is used) and no worker
    started ahead of a task: 0.5-0.9 CPU-s each a study. What a run needs still works (a task,
    the node list), Ray's own methods are put back, and the raylet keeps its agents."""
    commands = report["commands"]
    for service in ("autoscaler/_private/monitor.py", "log_monitor.py", "dashboard/dashboard.py"):
        assert not [c for c in commands if service in c], (service, commands)
    assert any("raylet" in c for c in commands) and any("gcs_server" in c for c in commands), commands
    assert any("dashboard/agent.py" in c for c in commands), commands  # the raylet's, kept
    # a worker: default_worker.py until it names itself ray::IDLE or ray::<task>; the raylet's own command
    # line names that script too (what it starts workers with) and its agents are ray::<Name>Agent
    def workers(commands: list[str]) -> list[str]:
        return [c for c in commands if ("default_worker.py" in c and not c.split()[0].endswith("/raylet"))
                or (c.startswith("ray::") and not c.split()[0].endswith("Agent"))]
    assert workers(report["before_a_task"]) == []  # none ahead of a task (Ray prestarts one per CPU: 2 here)
    assert workers(commands)  # a task still gets one
    assert report["tasks_answer"] == 42 and report["nodes"] == 1
    assert report["starts_restored"]
