"""RayExecutor: how `run` reaches a Ray cluster and what it makes of its nodes. An
unreachable ``--ray-address``, a port where something else listens, a token-auth cluster
without the token: each one clear line, fast (real Ray heads and sockets); without an
address a fresh local Ray, never a foreign one; slots from the nodes that match the job, one
trial per node first; a dead worker's trial FAIL node-lost (a stand-in for the ``ray``
module raising Ray's own exceptions); pre-flight on each matching node (real local Ray).

The study on a real multi-node cluster that loses a node is tests/e2e/test_cluster.py."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time

import pytest
from wrapped_server import SERVER, command_job, fake_backend, wrapper

from conftest import REPO, write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import RuntimeFailure
from orchestrator.driver.ray_executor import RayExecutor, probe_address
from orchestrator.node import preflight
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study


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
    proc, took = _run_against(job_path, address)
    assert took < RAY_RETRIES_S, took  # not ray.init's own retries
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert address in lines[0] and "cannot reach the Ray cluster" in lines[0] and "Traceback" not in proc.stderr


# ray.init on an address that does not answer as Ray retries for minutes; `run` gives up
# within CONNECT_TIMEOUT_S (25 s): a failure is "fast" when it is not those retries
RAY_RETRIES_S = 120


def _run_against(job_path, address: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path), "--ray-address", address],
                          capture_output=True, text=True, timeout=2 * RAY_RETRIES_S, cwd=REPO, env=env)
    return proc, time.monotonic() - t0


def test_something_else_listening_at_the_address_fails_fast(tmp_path):
    """A port where something listens that is not Ray (here: a bare TCP server) makes
    ray.init retry for many minutes: `run` gives up within the connect limit with one line
    that says what was tried and what to check, and releases the study's lock."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def answer() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    job_path = write_job(tmp_path, study="notray")
    try:
        proc, took = _run_against(job_path, address)
    finally:
        stop.set()
        thread.join(5)
        server.close()
    assert took < RAY_RETRIES_S, took
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert address in lines[0] and "no Ray GCS answered" in lines[0] and "RAY_AUTH_MODE=token" in lines[0]
    assert not (tmp_path / "reports" / "notray").exists()  # the lock released, no empty study left


@contextlib.contextmanager
def _ray_head(log_path, *args: str, **env_extra: str):
    """A real Ray head, started by this test in its own session (``ray start --block``) and
    ended by its process group: never `ray stop`, which would end every Ray on the machine."""
    import os
    import signal

    port = _unused_port()
    env = {**os.environ, **env_extra}
    head = subprocess.Popen(["ray", "start", "--head", f"--port={port}", "--include-dashboard=false",
                             "--disable-usage-stats", "--block", *args], env=env, start_new_session=True,
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(2)
        head.wait(30)


TOKEN = "ncclsweep-test-token-0123456789abcdef"


@pytest.fixture
def token_head(tmp_path):
    """A head with token authentication."""
    with _ray_head(tmp_path / "head.log", "--num-cpus=1", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN) as address:
        yield address, TOKEN


def test_without_an_address_a_fresh_local_ray_never_a_foreign_one(tmp_path, no_leftover_servers):
    """A Ray cluster already runs on the host (and RAY_ADDRESS names it): a run without an
    address starts its own local Ray. The foreign head has no CPU, so a driver that joined
    it would find no node for the trial (a fake server's)."""
    import os

    job_path = write_job(tmp_path, study="local", budget={"trials": 1}, backend=fake_backend(tmp_path))
    with _ray_head(tmp_path / "head.log", "--num-cpus=0") as address:
        env = {**os.environ, "RAY_ADDRESS": address}
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(job_path)], capture_output=True,
                              text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = trial_rows(open_study(load_job(job_path), create=False))
    assert [r.state for r in rows] == ["COMPLETE"]


def test_token_auth_cluster_without_the_token_says_so(tmp_path, token_head, monkeypatch):
    import os

    from orchestrator.driver.ray_executor import probe_cluster

    address, token = token_head
    job_path = write_job(tmp_path, study="token")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "no-token-here")  # not the user's ~/.ray/auth_token
    proc, took = _run_against(job_path, address, env)
    assert took < RAY_RETRIES_S, took
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "InvalidAuthToken" in lines[0] and "export RAY_AUTH_MODE=token" in lines[0], lines[0]
    assert not (tmp_path / "reports" / "token" / "driver.lock").exists()
    # with the token exported the same address answers
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    assert probe_cluster(address) is None


class _FakeRay:
    """Stand-in for the ``ray`` module: nodes from a list, actor calls that fail with a
    chosen Ray exception (what a dead node, actor, owner or worker looks like)."""

    import ray.exceptions as exceptions

    def __init__(self, nodes: list[dict], error: BaseException | None = None):
        self.node_list = nodes
        self.error = error
        self.killed: list = []
        self.started: list[str] = []  # node id of every actor started
        fake = self

        class _Call:
            def __init__(self, actor):
                self.actor = actor

            def remote(self, spec):
                return ("ref", self.actor.node_id, spec.number)

        class _Actor:
            def __init__(self, node_id):
                self.node_id = node_id
                self.run = _Call(self)

        class _Cls:
            def options(self, scheduling_strategy=None, **_opts):
                node_id = scheduling_strategy.node_id
                fake.started.append(node_id)
                return type("_Pending", (), {"remote": staticmethod(lambda: _Actor(node_id))})()

        self._cls = _Cls()

    def remote(self, _cls):
        return self._cls

    def nodes(self):
        return [dict(n) for n in self.node_list]

    def wait(self, refs, num_returns=1, timeout=None):
        """Trials on dead nodes are the ones that are done."""
        dead = {n["NodeID"] for n in self.node_list if not n["Alive"]}
        ready = [r for r in refs if r[1] in dead][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(self, ref):
        raise self.error

    def kill(self, actor):
        self.killed.append(actor)


def _node(i: int, alive: bool = True, **resources) -> dict:
    return {"NodeID": f"{i:02d}" * 28, "Alive": alive, "NodeManagerHostname": f"host{i}",
            "NodeManagerAddress": f"10.0.0.{i}", "NodeName": f"10.0.0.{i}", "Resources": resources, "Labels": {}}


def _spec(number: int):
    from orchestrator.node.spec import BenchPlan, ServerPlan, TrialSpec

    return TrialSpec(number=number, config={"tp_size": 1}, server=ServerPlan("refserver", {}, None, {}),
                     bench=BenchPlan(prompts=("x",)), log_dir="/nonexistent", registry_dir="/nonexistent")


def _ray_errors():
    import ray.exceptions as e

    return [e.ActorDiedError(), e.NodeDiedError("node 0101 died"), e.OwnerDiedError("ab" * 14, None, ""),
            e.WorkerCrashedError(), e.ActorUnavailableError("socket closed", None),
            e.ActorUnschedulableError("node gone"), e.LocalRayletDiedError()]


@pytest.mark.parametrize("error", _ray_errors(), ids=lambda e: type(e).__name__)
def test_a_dead_worker_is_node_lost_and_the_slots_shrink(error):
    nodes = [_node(1, CPU=4, GPU=8, **{"accelerator_type:H200": 1}),
             _node(2, CPU=4, GPU=8, **{"accelerator_type:H200": 1}),
             _node(3, CPU=4, GPU=8, **{"accelerator_type:H100": 1}),  # wrong model
             _node(4, CPU=4, GPU=4, **{"accelerator_type:H200": 1})]  # too few GPUs
    fake = _FakeRay(nodes, error)
    ex = RayExecutor(address=None, gpus_per_node=8, cpus_per_trial=1, accelerator_type="NVIDIA H200", ray_api=fake)
    assert ex.slots == 2 and sorted(v["hostname"] for v in ex.nodes().values()) == ["host1", "host2"]
    ex.submit(_spec(0))
    ex.submit(_spec(1))
    assert sorted(fake.started) == sorted([nodes[0]["NodeID"], nodes[1]["NodeID"]])  # one trial per node
    fake.node_list[0]["Alive"] = False
    (ticket, result), = ex.wait(0.1)
    assert result.outcome == "FAIL" and result.failure_kind == "node-lost"
    assert type(error).__name__ in result.failure_reason and "continuing on 1 node" in result.failure_reason
    assert result.node["node_id"] and result.node["hostname"] in ("host1", "host2") and result.started_at
    assert len(fake.killed) == 1
    assert ex.slots == 1  # recounted at once: host1 is dead
    assert ex.wait(0.1) == []  # host2's trial is still running
    fake.node_list[1]["Alive"] = False
    (_, result), = ex.wait(0.1)
    assert result.failure_kind == "node-lost" and "continuing on 0 nodes" in result.failure_reason
    ex._refreshed = 0  # the next look at the nodes is not rate-limited
    with pytest.raises(RuntimeFailure, match="no Ray node that matches this job is left"):
        _ = ex.slots


def test_parallel_caps_at_what_the_nodes_hold_and_spreads_first():
    nodes = [_node(1, CPU=4, box=1), _node(2, CPU=4, box=1), _node(3, CPU=64)]
    fake = _FakeRay(nodes)
    ex = RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=2, parallel=8, resources={"box": 1},
                     ray_api=fake)
    assert ex.slots == 2  # one `box` per node, node 3 has none
    ex = RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=2, parallel=3, ray_api=fake)
    assert ex.slots == 3
    for n in range(3):
        ex.submit(_spec(n))
    assert len(set(fake.started[-3:])) == 3  # three nodes before any node gets a second trial
    with pytest.raises(RuntimeFailure, match="no Ray node matches this job: a node with CPU >= 2, GPU model A100"):
        RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=2, accelerator_type="A100", ray_api=fake)


def test_the_first_trial_starts_an_actor_on_every_other_node_up_to_the_slots():
    """The actors of the nodes the baseline does not run on start beside it, not after it: on busy nodes
    an actor took 25-30 s to start, and the first round of trials waited for it while the one node whose
    actor was up ran trial after trial."""
    nodes = [_node(1, CPU=4), _node(2, CPU=4), _node(3, CPU=4)]
    fake = _FakeRay(nodes)
    ex = RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=4, ray_api=fake)
    assert fake.started == []  # nothing before a trial is sent (an executor may be made only to count nodes)
    ex.submit(_spec(0))
    assert sorted(fake.started) == sorted(n["NodeID"] for n in nodes)  # one actor a node, started at once
    ex.submit(_spec(1))
    ex.submit(_spec(2))
    assert len(fake.started) == 3  # the next trials found theirs up: none started again
    assert sorted(r[1] for r in ex._busy) == sorted(n["NodeID"] for n in nodes)  # one trial a node
    fake = _FakeRay(nodes)
    ex = RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=4, parallel=2, ray_api=fake)
    ex.submit(_spec(0))
    assert len(fake.started) == 2  # no more actors than slots: a third node is left free


def test_ray_preflight_runs_on_each_matching_node(tmp_path, ray_local):
    from orchestrator.driver.ray_executor import RayExecutor

    job = load_job(command_job(tmp_path, tmp_path / "bin" / SERVER))
    executor = RayExecutor(address=None, gpus_per_node=0, cpus_per_trial=1)
    try:
        got = executor.preflight(preflight.needs(job))
        assert len(got) == len(executor.nodes()) == 1
        (problems,) = got.values()
        assert problems and "not found on this node's PATH" in problems[0]
        wrapper(tmp_path)
        assert list(executor.preflight(preflight.needs(job)).values()) == [[]]
    finally:
        executor.shutdown()
