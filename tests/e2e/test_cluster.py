"""Scale-out on a real multi-node Ray cluster on this host (``ray.cluster_utils.Cluster``):
node matching and slot count, parallel trials on distinct nodes, a node killed mid-study
(its trial FAIL node-lost, re-run on another node, the study completes).

Nodes are CPU-only: each worker node has 1 CPU and one ``trial_node`` custom resource
(the job's ``ray.node_selector.resources``), so one trial fits per node. The servers sit
in a 3 s ``slow-start`` so trials last long enough to overlap and to be caught mid-trial
on a 2-core machine, while using almost no CPU.
"""

from __future__ import annotations

import io
import threading
import time

import pytest

from conftest import TEST_PROMPT, write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import RuntimeFailure
from orchestrator.driver.ray_executor import RayExecutor
from orchestrator.driver.run import StudyDriver
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

NODES = 3
SELECTOR = {"trial_node": 1}
SPACE = """\
params:
  tp_size: {choices: [1]}
  backend.threads: {choices: [1]}
  backend.max_batch: {choices: [8, 16, 24, 32, 40, 48, 56, 64]}
"""


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
        bench={"prompt": TEST_PROMPT, "output_tokens": 16, "warmup": 1, "repeats": 1, "max_repeats": 1},
        sampler={"name": "bruteforce", "seed": 0},
        ray={"address": cluster.address, "parallel": NODES, "node_selector": {"resources": SELECTOR}})
    job = load_job(job_path)
    out = io.StringIO()
    driver = StudyDriver(job, out=out)
    executor = driver.make_executor()
    assert executor.slots == NODES

    # kill (SIGKILL, as a crashed machine) the node of a trial of the second parallel round
    # (ticket >= 4: after the reference and one full round), 1.5 s into it: its server is
    # still in its slow start
    killed: dict = {}

    def killer() -> None:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not killed:
            try:
                flights = executor.placements()
            except RuntimeError:  # the driver changed it while we read
                continue
            late = [(t, f) for t, f in flights.items()
                    if t >= 4 and f["trial"] < 9000 and time.time() - f["submitted_at"] >= 1.5]  # not a baseline repeat
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
    counted = [r for r in rows if r.counted]
    assert len(counted) == budget, log
    assert all(r.state == "COMPLETE" for r in counted), log

    # every trial knows its node; three distinct nodes ran trials at the same time
    assert all(r.node_id and r.node for r in rows if r.started_at), rows
    spans = _spans(attrs)
    assert len({n for _, _, n in spans}) == NODES
    assert any(len(set(nodes)) == NODES for nodes in _overlap(spans)), (spans, log)

    # the baseline was repeated on the other nodes (uncounted), so the nodes can be compared
    base_nodes = {r.node_id for r in rows if r.config_key == rows[0].config_key and r.state == "COMPLETE"
                  and r.cached_from is None}
    assert len(base_nodes) >= 2, log
    assert "repeating the baseline on node" in log

    # the trial on the killed node failed as node-lost, and its config ran again elsewhere
    lost = [r for r in rows if r.state == "FAIL" and r.failure_kind == "node-lost"]
    assert [r.number for r in lost] == [killed["trial"]], log
    assert lost[0].node_id == killed["node_id"] and "died" in lost[0].failure_reason
    rerun = [r for r in rows if r.config_key == lost[0].config_key and r.state == "COMPLETE"
             and r.number > lost[0].number]
    assert rerun and rerun[0].node_id != killed["node_id"], log

    # once the loss is known: nothing more on the dead node, at most 2 trials at once
    noticed = attrs[lost[0].number]["ended_at"]
    busy = sum(e - s for s, e, _ in spans)
    print(f"node killed {killed['at'] - spans[0][0]:.1f}s into the study, loss noticed {noticed - killed['at']:.2f}s "
          f"later; study {wall:.1f}s, its trials {busy:.1f}s end to end")
    # the loss ended the trial, not its own start-up timeout (it was in its slow start)
    assert noticed - attrs[lost[0].number]["started_at"] < job.timeouts.startup_s, (killed, noticed)
    after = [(s, e, n) for s, e, n in spans if s >= noticed]
    assert after and all(n != killed["node_id"] for _, _, n in after), (after, killed)
    assert all(len(nodes) <= NODES - 1 for nodes in _overlap(spans, after=noticed)), (spans, killed)
    # the trials ran side by side: the study took less than its trials one after another
    # (both measured on this machine, under the same load)
    assert wall < busy, (wall, busy, spans)
