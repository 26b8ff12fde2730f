"""Where trials run: one abstract ``Executor`` and two implementations.

- ``RayExecutor``: one Ray actor per concurrently running trial. On GPU jobs an actor
  asks for ``num_gpus`` = GPUs per node, so it owns a node's GPUs and Ray sets
  CUDA_VISIBLE_DEVICES for it; on CPU jobs it asks for ``cpus_per_trial`` CPUs. Only
  the driver talks to Optuna storage: actors just return ``TrialResult``s.
- ``LocalExecutor``: runs trials in a thread of this process (``bench``, ``compare``).

Killing: ``ray.kill`` does not reach a server started in its own session, so an actor
kills its server's process group itself (``stop``), and the server carries a
parent-death signal so it dies with the actor's process.
"""

from __future__ import annotations

import abc
import itertools
import logging
import threading
from pathlib import Path
from typing import Any

from orchestrator.errors import RuntimeFailure
from orchestrator.records import TrialResult
from orchestrator.trial import TrialSpec, run_trial

log = logging.getLogger(__name__)


class Executor(abc.ABC):
    """Runs ``TrialSpec``s and hands back ``TrialResult``s.

    Contract: ``submit`` never blocks on the trial; ``wait`` returns finished
    (ticket, result) pairs, possibly none before ``timeout_s``; a trial whose worker
    vanished comes back as a FAIL ``node-lost`` result, never as an exception;
    ``cancel_all`` ends running servers now (their trials return ``interrupted``).
    """

    @property
    @abc.abstractmethod
    def slots(self) -> int:
        """How many trials may run at once."""

    @abc.abstractmethod
    def submit(self, spec: TrialSpec) -> int:
        """Start a trial; returns a ticket."""

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> list[tuple[int, TrialResult]]:
        """Finished trials since the last call."""

    @abc.abstractmethod
    def running(self) -> dict[int, TrialSpec]:
        """Tickets still in flight."""

    @abc.abstractmethod
    def cancel_all(self) -> None:
        """Kill the servers of running trials now."""

    def cleanup_orphans(self, registry_dir: Path) -> list[Any]:
        """End recorded servers a dead driver left behind (this host only by default)."""
        from orchestrator.server import ServerRegistry, cleanup_recorded

        return cleanup_recorded(ServerRegistry(Path(registry_dir)))

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release workers."""


class LocalExecutor(Executor):
    """Trials in a thread of this process: no Ray, one at a time."""

    def __init__(self) -> None:
        self._tickets = itertools.count()
        self._running: dict[int, TrialSpec] = {}
        self._done: list[tuple[int, TrialResult]] = []
        self._cond = threading.Condition()
        self._cancel = threading.Event()
        self._server = None

    @property
    def slots(self) -> int:
        return 1

    def submit(self, spec: TrialSpec) -> int:
        ticket = next(self._tickets)
        self._cancel.clear()
        self._running[ticket] = spec

        def work() -> None:
            result = run_trial(spec, self._cancel, on_server=self._set_server)
            with self._cond:
                self._running.pop(ticket, None)
                self._done.append((ticket, result))
                self._cond.notify_all()

        threading.Thread(target=work, name=f"trial-{spec.number}", daemon=True).start()
        return ticket

    def _set_server(self, server) -> None:
        self._server = server

    def wait(self, timeout_s: float) -> list[tuple[int, TrialResult]]:
        with self._cond:
            if not self._done:
                self._cond.wait(timeout_s)
            done, self._done = self._done, []
        return done

    def running(self) -> dict[int, TrialSpec]:
        return dict(self._running)

    def cancel_all(self) -> None:
        self._cancel.set()
        server = self._server
        if server is not None:
            server.stop(2.0)


class TrialActor:
    """Lives on one node, runs one trial at a time; ``stop`` may be called concurrently."""

    def __init__(self) -> None:
        self._cancel = threading.Event()
        self._server = None

    def run(self, spec: TrialSpec) -> TrialResult:
        self._cancel.clear()
        return run_trial(spec, self._cancel, on_server=self._set_server)

    def _set_server(self, server) -> None:
        self._server = server

    def stop(self) -> bool:
        self._cancel.set()
        server = self._server
        if server is not None:
            server.stop(2.0)
        return True

    def node(self) -> dict[str, Any]:
        from orchestrator.trial import node_info

        return node_info()


def _cleanup_task(registry_dir: str) -> list[dict]:
    from dataclasses import asdict

    from orchestrator.server import ServerRegistry, cleanup_recorded

    return [asdict(r) for r in cleanup_recorded(ServerRegistry(Path(registry_dir)))]


class RayExecutor(Executor):
    """One actor per concurrently running trial, on nodes that match the job."""

    def __init__(self, *, address: str | None, gpus_per_node: int, cpus_per_trial: int,
                 parallel: int | None = None, resources: dict[str, float] | None = None,
                 accelerator_type: str | None = None, local_num_cpus: int | None = None):
        import ray

        self._ray = ray
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    ray.init(num_cpus=local_num_cpus, include_dashboard=False,
                             logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"Ray address {address!r}" if address else "a local Ray instance"
                raise RuntimeFailure(f"could not connect to {where}: {exc}") from None
        opts: dict[str, Any] = {"max_concurrency": 2, "max_restarts": 0}
        if gpus_per_node > 0:
            opts["num_gpus"] = gpus_per_node
            opts["num_cpus"] = 1
        else:
            opts["num_cpus"] = cpus_per_trial
        if resources:
            opts["resources"] = dict(resources)
        if accelerator_type:
            opts["accelerator_type"] = accelerator_type
        self._actor_cls = ray.remote(TrialActor).options(scheduling_strategy="SPREAD", **opts)
        self._slots = parallel or self._matching_nodes(gpus_per_node, cpus_per_trial, resources) or 1
        self._tickets = itertools.count()
        self._idle: list[Any] = []
        self._busy: dict[Any, tuple[int, Any, TrialSpec]] = {}  # ref -> (ticket, actor, spec)

    def _matching_nodes(self, gpus: int, cpus: int, resources: dict[str, float] | None) -> int:
        count = 0
        for node in self._ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            need = {"GPU": gpus} if gpus > 0 else {"CPU": cpus}
            need.update(resources or {})
            if all(res.get(k, 0) >= v for k, v in need.items()):
                count += 1
        return count

    @property
    def slots(self) -> int:
        return self._slots

    def submit(self, spec: TrialSpec) -> int:
        actor = self._idle.pop() if self._idle else self._actor_cls.remote()
        ticket = next(self._tickets)
        ref = actor.run.remote(spec)
        self._busy[ref] = (ticket, actor, spec)
        return ticket

    def wait(self, timeout_s: float) -> list[tuple[int, TrialResult]]:
        if not self._busy:
            return []
        ready, _ = self._ray.wait(list(self._busy), num_returns=1, timeout=timeout_s)
        done = []
        for ref in ready:
            ticket, actor, spec = self._busy.pop(ref)
            try:
                result = self._ray.get(ref)
                self._idle.append(actor)
            except self._ray.exceptions.RayError as exc:
                # the actor or its node died mid-trial: not the config's fault
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                result = TrialResult.failed(spec.config, "node-lost",
                                            f"the worker running this trial died ({type(exc).__name__}: {first[:160]})")
                try:
                    self._ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            done.append((ticket, result))
        return done

    def running(self) -> dict[int, TrialSpec]:
        return {ticket: spec for ticket, _, spec in self._busy.values()}

    def cancel_all(self) -> None:
        refs = [actor.stop.remote() for _, actor, _ in self._busy.values()]
        try:
            self._ray.get(refs, timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor's server dies with it
            pass

    def cleanup_orphans(self, registry_dir: Path) -> list[Any]:
        """Run the registry cleanup on every alive node, through Ray."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self._ray.remote(_cleanup_task)
        refs = []
        for node in self._ray.nodes():
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

    def shutdown(self) -> None:
        for _, actor, _ in list(self._busy.values()):
            try:
                self._ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
        for actor in self._idle:
            try:
                self._ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
        self._idle.clear()
        self._busy.clear()
