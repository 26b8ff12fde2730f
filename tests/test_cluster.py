"""Scale-out on a real multi-node Ray cluster on this host (``ray.cluster_utils.Cluster``):
node matching and slot count, parallel trials on distinct nodes, a node killed mid-study
(its trial FAIL node-lost, re-run on another node, the study completes), and an
unreachable ``--ray-address`` as one clear error line.

Nodes are CPU-only: each worker node has 1 CPU and one ``trial_node`` custom resource
(the job's ``ray.node_selector.resources``), so one trial fits per node. The servers sit
in a 3 s ``slow-start`` so trials last long enough to overlap and to be caught mid-trial
on a 2-core machine, while using almost no CPU.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, write_job
from orchestrator.errors import RuntimeFailure
from orchestrator.executor import RayExecutor, probe_address
from orchestrator.history import trial_rows
from orchestrator.job import load_job
from orchestrator.study import StudyDriver, open_study

NODES = 3
SELECTOR = {"trial_node": 1}
SPACE = """\
params:
  tp_size: {choices: [1]}
  backend.threads: {choices: [1]}
  backend.max_batch: {choices: [8, 16, 24, 32, 40, 48, 56, 64]}
"""


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_ray_address_is_one_clear_line(tmp_path):
    """`run --ray-address` where nothing listens: exit 1 and one error line, in seconds
    (ray.init alone would retry for minutes)."""
    address = f"127.0.0.1:{_unused_port()}"
    assert "refused" in (probe_address(address) or "").lower()
    assert probe_address("auto") is None
    assert "not a number" in probe_address("head:port")
    job_path = write_job(tmp_path, study="unreachable")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(job_path), "--ray-address", address],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert address in lines[0] and "cannot reach the Ray cluster" in lines[0] and "Traceback" not in proc.stderr


@pytest.fixture
def cluster():
    """Head (no CPUs: the driver's node runs no trials) + 3 worker nodes; torn down, and
    Ray left shut down, whatever happens. Shuts down a Ray this session started before."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(NODES):
            c.add_node(num_cpus=1, resources=dict(SELECTOR), include_dashboard=False)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _overlap(spans: list[tuple[float, float, str]], after: float = 0.0) -> list[list[str]]:
    """At each trial's start (later than ``after``), the nodes of the trials running then."""
    return [[n for s, e, n in spans if s <= t < e] for t, _, _ in spans if t > after]


def _spans(attrs: list[dict]) -> list[tuple[float, float, str]]:
    return [(a["started_at"], a["ended_at"], a["node"]["node_id"]) for a in attrs
            if a.get("started_at") and a.get("ended_at") and (a.get("node") or {}).get("node_id")]


@pytest.mark.slow
def test_study_spreads_over_nodes_and_survives_losing_one(tmp_path, no_leftover_servers, cluster):
    # node matching: 3 nodes carry the selector's resource; nothing matches an impossible one
    ex = RayExecutor(address=cluster.address, gpus_per_node=0, cpus_per_trial=1, parallel=None, resources=SELECTOR)
    assert ex.slots == NODES and len(ex.nodes()) == NODES
    ex.shutdown()
    assert RayExecutor(address=cluster.address, gpus_per_node=0, cpus_per_trial=1, parallel=2,
                       resources=SELECTOR).slots == 2
    for kw in ({"resources": {"trial_node": 2}}, {"accelerator_type": "H200"}, {"gpus_per_node": 1}):
        args = {"gpus_per_node": 0, "cpus_per_trial": 1, "resources": SELECTOR, **kw}
        with pytest.raises(RuntimeFailure, match="no Ray node matches"):
            RayExecutor(address=cluster.address, **args)

    budget = 7
    job_path = write_job(
        tmp_path, study="cluster", space_text=SPACE, budget={"trials": budget},
        baseline={"tp_size": 1, "backend.threads": 1, "backend.max_batch": 64},
        backend={"kind": "refserver", "settings": {"model": "tiny", "device": "cpu", "fault": "slow-start:3"}},
        bench={"output_tokens": 16, "warmup": 1, "repeats": 1, "max_repeats": 1},
        sampler={"name": "bruteforce", "seed": 0},
        ray={"address": cluster.address, "parallel": NODES, "node_selector": {"resources": SELECTOR}})
    job = load_job(job_path)
    out = io.StringIO()
    driver = StudyDriver(job, out=out)
    executor = driver.make_executor()
    assert executor.slots == NODES

    # kill the node of a trial of the second parallel round (ticket >= 4: after the
    # reference and one full round), 1.5 s into it: the server is still in its slow start
    killed: dict = {}

    def killer() -> None:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not killed:
            try:
                flights = executor.placements()
            except RuntimeError:  # the driver changed it while we read
                continue
            late = [(t, f) for t, f in flights.items() if t >= 4 and time.time() - f["submitted_at"] >= 1.5]
            if late:
                ticket, flight = max(late)
                node = next(n for n in cluster.worker_nodes if n.node_id == flight["node_id"])
                killed.update(node_id=flight["node_id"], trial=flight["trial"], at=time.time())
                cluster.remove_node(node, allow_graceful=False)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    t0 = time.monotonic()
    summary = driver.run()
    thread.join(timeout=30)
    log = out.getvalue()
    wall = time.monotonic() - t0
    assert killed, log
    assert summary.reason == "budget reached", log

    study = open_study(job, create=False)
    rows = trial_rows(study)
    attrs = [t.user_attrs for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)]
    counted = [r for r in rows if r["counted"]]
    assert len(counted) == budget, log
    assert all(r["state"] == "COMPLETE" for r in counted), log

    # every trial knows its node; three distinct nodes ran trials at the same time
    assert all(r["node_id"] and r["node"] for r in rows if r["started_at"]), rows
    spans = _spans(attrs)
    assert len({n for _, _, n in spans}) == NODES
    assert any(len(set(nodes)) == NODES for nodes in _overlap(spans)), (spans, log)

    # the trial on the killed node failed as node-lost, and its config ran again elsewhere
    lost = [r for r in rows if r["state"] == "FAIL" and r["failure_kind"] == "node-lost"]
    assert [r["number"] for r in lost] == [killed["trial"]], log
    assert lost[0]["node_id"] == killed["node_id"] and "died" in lost[0]["failure_reason"]
    rerun = [r for r in rows if r["config_key"] == lost[0]["config_key"] and r["state"] == "COMPLETE"
             and r["number"] > lost[0]["number"]]
    assert rerun and rerun[0]["node_id"] != killed["node_id"], log

    # after the loss: nothing more on the dead node, at most 2 trials at once
    after = [(s, e, n) for s, e, n in spans if s > killed["at"]]
    assert after and all(n != killed["node_id"] for _, _, n in after), (after, killed)
    assert all(len(nodes) <= NODES - 1 for nodes in _overlap(spans, after=killed["at"])), (spans, killed)
    print(log); print(killed); print([(round(s - t0w, 2), round(e - t0w, 2), n[:6], a.get("failure_kind"), a.get("timing", {}).get("dispatch_s"), a.get("timing", {}).get("collect_s")) for (s, e, n), a, t0w in [(sp, a, spans[0][0]) for sp, a in zip(spans, [a for a in attrs if a.get("started_at")])]])
    assert wall < 110, f"the study took {wall:.0f}s"
