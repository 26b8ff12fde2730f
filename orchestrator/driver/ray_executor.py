"""``RayExecutor``: the ``Executor`` (``orchestrator.driver.executor``) ``ncclsweep run`` uses.

``RayExecutor``: one Ray actor per trial slot, pinned to one node that matches the
  job's node selector. Matching: GPU jobs need a node with at least ``gpus_per_node``
  GPUs (the actor takes ``num_gpus=gpus_per_node`` of it, so it owns the node's GPUs
  and Ray sets CUDA_VISIBLE_DEVICES), CPU jobs ``cpus_per_trial`` CPUs, both the
  custom resources in ``node_selector.resources`` and, when set, the GPU model
  ``node_selector.gpu_model`` (the node's ``accelerator_type`` resource or label).
  Slots = the number of matching nodes, one trial per node at a time, or
  ``ray.parallel`` when set (at most as many trials as the matching nodes' resources
  hold; still spread over distinct nodes first). Actors are pinned to nodes (hard
  node affinity) rather than left to Ray's best-effort SPREAD, so two concurrent
  trials never share a node unless ``parallel`` asks for more trials than nodes. The first
  trial sent starts an actor on each other matching node too (up to the slots), so their
  start-up runs beside it, not after it (``_start_ahead``).
  Only the driver talks to Optuna storage: actors just return ``TrialResult``s. The
  driver itself takes no Ray resources (it can run on a CPU head node). (``bench`` runs its
  one trial with ``trial.run_trial`` in this process, ``compare`` its servers with
  ``trial.prepare_server``: neither needs an executor.)

Node loss: a trial whose actor, worker or node died comes back as FAIL ``node-lost``
(never an exception), with the node it ran on; the actor is dropped, its node is kept
out for ``QUARANTINE_S`` (Ray may still list it as alive for a few seconds), the nodes
are counted again and the slots shrink (or grow, when nodes join). The driver re-queues
the config once. With no matching node left and nothing in flight, ``slots`` raises
``RuntimeFailure``: nothing is lost, and ``ncclsweep run`` resumes once nodes are back.

Connecting (``connect_ray``): ``address`` (``ray.address`` / ``--ray-address``) joins an
existing cluster; an address where nothing listens fails at once, one where something
listens that does not answer as Ray (or refuses the token) within ``CONNECT_TIMEOUT_S``,
as one ``RuntimeFailure`` line (Ray itself would retry for minutes). Without an address
a fresh local Ray is started (``address="local"``), never a cluster found on the host, on
loopback only, with its services out of the driver's process group and only those a run
uses (``local_ray``).

Killing: ``ray.kill`` does not reach a server started in its own session, so an actor
kills its server's process group itself (``stop``), and the server carries a
parent-death signal so it dies with the actor's process.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.core.errors import RuntimeFailure
from orchestrator.core.records import FailureKind, TrialResult
from orchestrator.driver import local_ray
from orchestrator.driver.executor import Executor
from orchestrator.node.hwprobe import node_info
from orchestrator.node.phases import TrialPhase
from orchestrator.node.preflight import check_task
from orchestrator.node.server import ServerRegistry, cleanup_recorded
from orchestrator.node.spec import TrialSpec
from orchestrator.node.trial import run_trial

log = logging.getLogger(__name__)


class TrialActor:
    """Lives on one node, runs one trial at a time; ``stop`` and ``phase`` may be called
    concurrently (a threaded actor: ``max_concurrency``)."""

    def __init__(self) -> None:
        self._cancel = threading.Event()
        self._server = None
        self._phase: TrialPhase | None = None

    def run(self, spec: TrialSpec) -> TrialResult:
        self._cancel.clear()
        self._phase = None
        try:
            return run_trial(spec, self._cancel, on_server=self._set_server, on_phase=self._set_phase)
        finally:
            self._phase = None

    def _set_phase(self, phase: TrialPhase) -> None:
        self._phase = phase

    def phase(self) -> TrialPhase | None:
        """The running trial's latest phase (the driver polls it for the status line)."""
        return self._phase

    def _set_server(self, server) -> None:
        self._server = server

    def stop(self) -> bool:
        self._cancel.set()
        server = self._server
        if server is not None:
            server.stop(2.0)
        return True

    def node(self) -> dict[str, Any]:
        return node_info()



def _cleanup_task(registry_dir: str) -> list[dict]:
    return [asdict(r) for r in cleanup_recorded(ServerRegistry(Path(registry_dir)))]


RAY_DEFAULT_PORT = 6379  # GCS port of `ray start --head` without --port
RAY_CLIENT_PORT = 10001  # ray:// (Ray Client) default port
PROBE_TIMEOUT_S = 5.0


def probe_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing answers at a Ray address (None: something listens there, or the
    address is ``auto``/``local`` and Ray finds the cluster itself).

    ``ray.init(address=...)`` retries an unreachable GCS for minutes; a plain TCP connect
    tells "nothing there" in at most ``timeout_s``."""
    text = address.strip()
    if text in ("auto", "local", ""):
        return None
    default_port = RAY_DEFAULT_PORT
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme == "ray":
            default_port = RAY_CLIENT_PORT
    text = text.split("/", 1)[0]
    host, port = text, default_port
    if text.startswith("["):  # [ipv6]:port
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        if not p.isdigit():
            return f"the port {p!r} is not a number (expected HOST:PORT, e.g. 10.0.0.1:6379)"
        port = int(p)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.gaierror as exc:
        return f"cannot resolve host {host!r} ({exc.strerror or exc})"
    except (TimeoutError, socket.timeout):
        return f"no answer from {host}:{port} within {timeout_s:.0f}s"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"


CONNECT_TIMEOUT_S = 25.0  # an explicit address: Ray must have answered by then
TOKEN_HINT = ("the cluster uses token authentication: export RAY_AUTH_MODE=token before `ncclsweep run`, "
              "with the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token")
_AUTH_MARKERS = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError")
_PROBE = ("import logging, sys, ray\n"
          "ray.init(address=sys.argv[1], logging_level=logging.WARNING, log_to_driver=False)\n"
          "print('NCCLSWEEP_RAY_OK', flush=True)\n"
          "ray.shutdown()\n")


def probe_cluster(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why ``ray.init(address)`` would not work (None: it does), in at most ``timeout_s``.

    ``ray.init`` against something that is not a Ray GCS retries for many minutes, and a
    token-auth cluster answers a driver without the token with lines of ``InvalidAuthToken``.
    So a throw-away process tries first, in its own process group, ended when it runs
    past ``timeout_s`` or as soon as its log says the token was refused."""
    proc = subprocess.Popen([sys.executable, "-c", _PROBE, address], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    lines: list[str] = []
    auth = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line.rstrip())
            if any(m in line for m in _AUTH_MARKERS):
                auth.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and not auth.is_set() and time.monotonic() < deadline:
        time.sleep(0.1)
    timed_out = proc.poll() is None and not auth.is_set()
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    reader.join(2.0)
    if any("NCCLSWEEP_RAY_OK" in ln for ln in lines) and proc.returncode == 0:
        return None
    if auth.is_set() or any(m in ln for ln in lines for m in _AUTH_MARKERS):
        return f"the token was refused (InvalidAuthToken): {TOKEN_HINT}"
    if timed_out:
        return (f"something listens there but no Ray GCS answered within {timeout_s:.0f}s: check that it is "
                f"the GCS address `ray start --head` printed (port {RAY_DEFAULT_PORT} by default), that the "
                f"Ray versions match, and, if the cluster uses token authentication, that RAY_AUTH_MODE=token "
                f"is exported")
    return _last_error(lines) or f"the probe exited with code {proc.returncode}"


def _last_error(lines: list[str]) -> str | None:
    """The exception line of a failed ``ray.init`` (``ConnectionError: ...``), if any."""
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception")) and " " not in head.strip():
            return line.strip()[:300]
    return None


def connect_ray(address: str | None, local_num_cpus: int | None = None):
    """``ray.init`` for the driver (no resources asked for it); every failure is one
    ``RuntimeFailure`` line. Reuses a Ray this process already initialised.

    No address: a fresh local Ray of this process (``address="local"``), never a cluster
    that happens to run on the host. An explicit address is probed first (``probe_cluster``)
    so a wrong one fails within ``CONNECT_TIMEOUT_S`` with what was tried and what to check.
    """
    import ray  # heavy: imported only when trials run on Ray

    if ray.is_initialized():
        return ray
    if address:
        why = probe_address(address) or probe_cluster(address)
        if why:
            tail = "" if TOKEN_HINT in why else ("; start it there with `ray start --head`, fix the address, or "
                                                 "leave it out for a local Ray")
            raise RuntimeFailure(f"cannot reach the Ray cluster at {address!r} (ray.address / --ray-address): "
                                 f"{why}{tail}")
    # Ray's local services are spawned now: they ignore SIGHUP (a dropped terminal must not end
    # them under the driver, which stops gracefully), and Ray's own SIGTERM handler (exit at
    # once) is replaced by the one the CLI installed (stop like Ctrl-C).
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)} if main else {}
    try:
        if main:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:
            # a private local Ray: Ray's notice that it turned token auth on for it is noise here
            notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
            level = notice.level
            notice.setLevel(logging.ERROR)
            try:
                local_ray.on_loopback()
                with local_ray.own_process_groups(), local_ray.only_what_a_run_uses():
                    ray.init(address="local", num_cpus=local_num_cpus, include_dashboard=False,
                             logging_level=logging.WARNING, log_to_driver=False,
                             _system_config=dict(local_ray.SYSTEM_CONFIG))
            finally:
                notice.setLevel(level)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, version mismatch, ...
        where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
        text = str(exc).strip()
        first = (text.splitlines() or [type(exc).__name__])[0]
        hint = f"; {TOKEN_HINT}" if any(m in text for m in _AUTH_MARKERS) else ""
        raise RuntimeFailure(f"could not connect to {where}: {first}{hint}") from None
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
    return ray


def _model_key(name: str) -> str:
    """``NVIDIA H200`` / ``h200`` / ``H200`` compare equal."""
    key = name.strip().lower().replace("_", " ").replace("-", " ")
    if key.startswith("nvidia "):
        key = key[len("nvidia "):]
    return " ".join(key.split())


def _node_gpu_models(node: dict[str, Any]) -> set[str]:
    models = {k.split(":", 1)[1] for k in (node.get("Resources") or {}) if k.startswith("accelerator_type:")}
    label = (node.get("Labels") or {}).get("ray.io/accelerator-type")
    if label:
        models.add(label)
    return models


@dataclass
class _Worker:
    actor: Any
    node_id: str


@dataclass
class _Flight:
    ticket: int
    worker: _Worker
    spec: TrialSpec
    submitted_at: float
    phase: TrialPhase | None = None  # the latest the actor answered
    polling: Any = None  # an unanswered ``phase`` call


class RayExecutor(Executor):
    """One actor per trial slot, each pinned to one node that matches the job."""

    REFRESH_S = 5.0  # how often ``slots`` asks Ray for the node list (and on every actor death)
    GCS_ANSWER_S = 10.0  # a node listing the GCS has not answered by then will not come (it was stopped)
    QUARANTINE_S = 60.0  # a node whose actor died is not used again for this long

    def __init__(self, *, address: str | None, gpus_per_node: int, cpus_per_trial: int,
                 parallel: int | None = None, resources: dict[str, float] | None = None,
                 accelerator_type: str | None = None, local_num_cpus: int | None = None,
                 ray_api: Any = None):
        # ray_api: a stand-in for the ``ray`` module (tests that fake node and actor deaths)
        self._ray = ray_api if ray_api is not None else connect_ray(address, local_num_cpus)
        self._parallel = parallel
        self._resources = dict(resources or {})
        self._gpu_model = accelerator_type
        # what one trial actor takes; a node matches when its totals hold at least this
        self._need: dict[str, float] = ({"GPU": gpus_per_node, "CPU": 1} if gpus_per_node > 0
                                        else {"CPU": cpus_per_trial})
        self._need.update(self._resources)
        opts: dict[str, Any] = {"max_concurrency": 3, "max_restarts": 0}  # run, stop, phase
        if gpus_per_node > 0:
            opts["num_gpus"] = gpus_per_node
            opts["num_cpus"] = 1
        else:
            opts["num_cpus"] = cpus_per_trial
        if self._resources:
            opts["resources"] = dict(self._resources)
        self._actor_cls = self._ray.remote(TrialActor)
        self._actor_opts = opts
        self._tickets = itertools.count()
        self._workers: list[_Worker] = []
        self._busy: dict[Any, _Flight] = {}  # object ref -> flight
        self._nodes: dict[str, dict[str, Any]] = {}  # matching alive node id -> {hostname, node_ip, capacity}
        self._node_info: dict[str, dict[str, Any]] = {}  # every node seen -> {hostname, node_ip, node_name}
        self._quarantine: dict[str, float] = {}  # node id -> monotonic time its actor died
        self._lost: list[str] = []
        self._slots = 0
        self._refreshed = 0.0
        self._refresh(force=True)
        if not self._nodes:
            hint = ""
            if gpus_per_node > 0 and not any((n.get("Resources") or {}).get("GPU") for n in self._list_nodes()):
                hint = ("; no node has GPUs: run this on the GPU machines, or to try the job without GPUs start "
                        f"a Ray head that declares them (`ray start --head --num-gpus={gpus_per_node} --block`) "
                        "and pass its address with --ray-address")
            raise RuntimeFailure(f"no Ray node matches this job: {self._describe_need()}; "
                                 f"nodes: {self._describe_nodes()}{hint}")

    # ---- nodes --------------------------------------------------------------------------
    def _list_nodes(self) -> list[Any]:
        """``ray.nodes()``, waited for at most ``GCS_ANSWER_S``: Ray waits for its GCS without
        a limit, and a GCS that a stop signal ended (every process of a service got it) never
        answers, while the driver still has its stop to finish. RuntimeFailure past the limit."""
        answer: list[Any] = []

        def ask() -> None:
            try:
                answer.append(self._ray.nodes())
            except Exception as exc:  # noqa: BLE001 - handed to the caller below
                answer.append(exc)

        asking = threading.Thread(target=ask, name="ray-nodes", daemon=True)
        asking.start()
        asking.join(self.GCS_ANSWER_S)
        if not answer:
            raise RuntimeFailure(f"the Ray GCS did not answer a node listing within {self.GCS_ANSWER_S:.0f}s "
                                 "(stopped with the run, or its machine is gone); `ncclsweep run` resumes the study")
        if isinstance(answer[0], Exception):
            raise answer[0]
        return answer[0]

    def _describe_need(self) -> str:
        parts = [f"{k} >= {v:g}" for k, v in self._need.items()]
        if self._gpu_model:
            parts.append(f"GPU model {self._gpu_model}")
        return "a node with " + ", ".join(parts)

    def _describe_nodes(self) -> str:
        out = []
        for node in self._list_nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources") or {}
            shown = {k: v for k, v in res.items() if k in ("CPU", "GPU") or k in self._resources}
            models = sorted(_node_gpu_models(node))
            out.append(f"{node.get('NodeManagerHostname')} "
                       + ", ".join(f"{k}={v:g}" for k, v in sorted(shown.items()))
                       + (f", {'/'.join(models)}" if models else ""))
        return "; ".join(out) or "none alive"

    def _capacity(self, node: dict[str, Any]) -> int:
        """How many trial actors this node's resources hold (0: it does not match)."""
        res = node.get("Resources") or {}
        if self._gpu_model:
            want = _model_key(self._gpu_model)
            if not any(_model_key(m) == want for m in _node_gpu_models(node)):
                return 0
        fits = [int(res.get(k, 0) // v) for k, v in self._need.items() if v > 0]
        return min(fits) if fits else 1

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._refreshed < self.REFRESH_S:
            return
        self._refreshed = now
        try:
            listing = self._list_nodes()
        except Exception as exc:  # noqa: BLE001 - GCS hiccup: keep the last known nodes
            log.warning("could not list Ray nodes: %s", exc)
            return
        self._quarantine = {n: t for n, t in self._quarantine.items() if now - t < self.QUARANTINE_S}
        nodes: dict[str, dict[str, Any]] = {}
        for node in listing:
            node_id = node.get("NodeID")
            info = {"hostname": node.get("NodeManagerHostname"), "node_ip": node.get("NodeManagerAddress"),
                    "node_name": node.get("NodeName")}
            self._node_info[node_id] = info
            if not node.get("Alive") or node_id in self._quarantine:
                continue
            capacity = self._capacity(node)
            if capacity > 0:
                nodes[node_id] = {**info, "capacity": capacity}
        self._nodes = nodes
        # idle actors on nodes that are gone: drop them now, before a trial is sent to one
        for w in [w for w in self._workers if w.node_id not in nodes and not self._is_busy(w)]:
            self._drop(w)
        if self._parallel:
            self._slots = min(self._parallel, sum(n["capacity"] for n in nodes.values()))
        else:
            self._slots = len(nodes)

    def _is_busy(self, worker: _Worker) -> bool:
        return any(f.worker is worker for f in self._busy.values())

    def _drop(self, worker: _Worker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
        try:
            self._ray.kill(worker.actor)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Matching alive nodes: node id -> {hostname, node_ip, node_name, capacity}."""
        self._refresh()
        return {k: dict(v) for k, v in self._nodes.items()}

    def placements(self) -> dict[int, dict[str, Any]]:
        """Trials in flight: ticket -> {node_id, hostname, trial, submitted_at (unix)}."""
        return {f.ticket: {"node_id": f.worker.node_id, "trial": f.spec.number, "submitted_at": f.submitted_at,
                           **self._node_info.get(f.worker.node_id, {})}
                for f in self._busy.values()}

    @property
    def slots(self) -> int:
        self._refresh()
        if not self._nodes and not self._busy:
            self._refresh(force=True)
            if not self._nodes:
                lost = f" ({len(self._lost)} lost during this run)" if self._lost else ""
                raise RuntimeFailure(f"no Ray node that matches this job is left{lost}: {self._describe_need()}; "
                                     f"nodes: {self._describe_nodes()}; `ncclsweep run` resumes the study "
                                     "once nodes are back")
        return self._slots

    # ---- trials -------------------------------------------------------------------------
    def _worker_for(self, node_id: str | None) -> _Worker:
        """An actor for the next trial: on the matching node running the fewest trials
        (``node_id`` when given), reusing its idle actor or starting one there."""
        busy = Counter(f.worker.node_id for f in self._busy.values())
        actors = Counter(w.node_id for w in self._workers)
        idle: dict[str, list[_Worker]] = {}
        for w in self._workers:
            if not self._is_busy(w):
                idle.setdefault(w.node_id, []).append(w)
        # fewest trials running first; among those, a node whose actor is already up
        candidates = [node_id] if node_id else sorted(
            self._nodes, key=lambda n: (busy[n], 0 if idle.get(n) else 1, actors[n]))
        for n in candidates:
            if idle.get(n):
                return idle[n][0]
            if node_id or actors[n] < self._nodes[n]["capacity"]:
                return self._start_actor(n)
        # more trials than the nodes hold (``parallel`` too high): queue on the least used node
        return self._start_actor(candidates[0] if candidates else next(iter(self._node_info)))

    def _start_actor(self, node_id: str) -> _Worker:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # heavy

        pin = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        actor = self._actor_cls.options(**self._actor_opts, scheduling_strategy=pin).remote()
        worker = _Worker(actor, node_id)
        self._workers.append(worker)
        return worker

    def submit(self, spec: TrialSpec, node_id: str | None = None) -> int:
        """Start a trial on a free matching node (or on ``node_id``, e.g. to repeat the
        baseline on every node)."""
        self._refresh()
        worker = self._worker_for(node_id)
        ticket = next(self._tickets)
        ref = worker.actor.run.remote(spec)
        self._busy[ref] = _Flight(ticket, worker, spec, time.time())
        self._start_ahead()
        return ticket

    def _start_ahead(self) -> None:
        """An actor started now on every matching node that has none, up to the slots, so that the
        next trials find theirs up. An actor takes as long to start as its node takes to spawn a
        worker and import the node's code; started only when a trial was sent there, the nodes'
        actors started after the baseline, which runs alone, and the first round of trials waited
        for them while the one node whose actor was up ran trial after trial (on a 3-node cluster
        of busy nodes: 25-30 s, longer than a trial, so its three trials never ran at once)."""
        have = {w.node_id for w in self._workers}
        room = self._slots - len(self._workers)
        for node_id in self._nodes:
            if room <= 0:
                return
            if node_id not in have:
                self._start_actor(node_id)
                room -= 1

    def wait(self, timeout_s: float) -> list[tuple[int, TrialResult]]:
        if not self._busy:
            return []
        refs = list(self._busy)
        ready, rest = self._ray.wait(refs, num_returns=1, timeout=timeout_s)
        if ready and rest:  # collect everything else that is done too
            more, _ = self._ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return [self._collect(ref) for ref in ready]

    def _collect(self, ref) -> tuple[int, TrialResult]:
        flight = self._busy.pop(ref)
        try:
            result = self._ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - RayError (actor/node/owner died, worker crashed) and the rest
            return flight.ticket, self._lost_trial(flight, exc)
        received = time.time()
        if result.started_at:
            result.timing["dispatch_s"] = round(max(0.0, result.started_at - flight.submitted_at), 4)
        if result.ended_at:
            result.timing["collect_s"] = round(max(0.0, received - result.ended_at), 4)
        return flight.ticket, result

    def _lost_trial(self, flight: _Flight, exc: BaseException) -> TrialResult:
        """The worker running this trial is gone: FAIL node-lost, and count the nodes again."""
        node_id = flight.worker.node_id
        self._drop(flight.worker)
        self._quarantine[node_id] = time.monotonic()
        self._lost.append(node_id)
        self._refresh(force=True)
        info = dict(self._node_info.get(node_id, {}))
        host = info.get("hostname") or "?"
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        left = len(self._nodes)
        reason = (f"the worker running this trial on node {host} ({node_id[:8]}) died "
                  f"({type(exc).__name__}: {first[:160]}); continuing on {left} node{'s' if left != 1 else ''}")
        return TrialResult.failed(flight.spec.config, FailureKind.NODE_LOST, reason, node={"node_id": node_id, **info},
                                  started_at=flight.submitted_at, ended_at=time.time())

    def running(self) -> dict[int, TrialSpec]:
        return {f.ticket: f.spec for f in self._busy.values()}

    def phases(self) -> dict[int, TrialPhase]:
        """Each running trial's latest phase: the answers of earlier ``phase`` calls that have
        arrived, and a new call to every actor that has none pending (never waits; a call that
        fails is dropped: the status line is a courtesy)."""
        flights = list(self._busy.values())
        pending = [f.polling for f in flights if f.polling is not None]
        ready: set = set()
        if pending:
            try:
                done, _ = self._ray.wait(pending, num_returns=len(pending), timeout=0)
                ready = set(done)
            except Exception:  # noqa: BLE001 - a lost update, never an error
                ready = set()
        for f in flights:
            if f.polling is not None and f.polling in ready:
                try:
                    f.phase = self._ray.get(f.polling) or f.phase
                except Exception:  # noqa: BLE001 - the actor is gone: ``wait`` reports the trial
                    pass
                f.polling = None
            if f.polling is None:
                try:
                    f.polling = f.worker.actor.phase.remote()
                except Exception:  # noqa: BLE001 - a fake or a dead actor: no phase
                    f.polling = None
        return {f.ticket: f.phase for f in flights if f.phase is not None}

    def cancel_all(self) -> None:
        refs = [f.worker.actor.stop.remote() for f in self._busy.values()]
        try:
            self._ray.get(refs, timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor's server dies with it
            pass

    def cleanup_orphans(self, registry_dir: Path) -> list[Any]:
        """Run the registry cleanup on every alive node, through Ray."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # heavy

        task = self._ray.remote(_cleanup_task)
        refs = []
        for node in self._list_nodes():
            if node.get("Alive"):
                strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
                refs.append(task.options(num_cpus=0, scheduling_strategy=strategy).remote(str(registry_dir)))
        killed: list[Any] = []
        for ref in refs:
            try:
                killed.extend(self._ray.get(ref, timeout=60))
            except Exception as exc:  # noqa: BLE001 - report, keep going
                log.warning("cleanup on a node failed: %s", exc)
        return killed

    def preflight(self, need: dict[str, Any]) -> dict[str, list[str]]:
        """Pre-flight on every matching node, each by a task pinned to it (num_cpus=0)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # heavy

        task = self._ray.remote(check_task)
        refs = {}
        for node_id in self.nodes():
            strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
            refs[node_id] = task.options(num_cpus=0, scheduling_strategy=strategy).remote(need)
        out: dict[str, list[str]] = {}
        for node_id, ref in refs.items():
            name = f"{self._node_info.get(node_id, {}).get('hostname') or '?'} ({node_id[:8]})"
            try:
                _, problems = self._ray.get(ref, timeout=120)
            except Exception as exc:  # noqa: BLE001 - the node could not even run the check
                problems = [f"the pre-flight check could not run there ({type(exc).__name__}: {exc})"]
            out[name] = list(problems)
        return out

    def shutdown(self) -> None:
        for worker in list(self._workers):
            self._drop(worker)
        self._workers.clear()
        self._busy.clear()
