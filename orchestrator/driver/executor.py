"""The ``Executor`` contract: where the study driver's trials run.

The driver (``orchestrator.driver.run``) is the only caller, from one thread: it submits
``TrialSpec``s, polls ``wait`` for their ``TrialResult``s and stores them; an executor
never touches Optuna storage. Two implementations: ``RayExecutor``
(``orchestrator.driver.ray_executor``: one Ray actor per trial slot, pinned to the nodes
that own the GPUs; what ``ncclsweep run`` uses) and ``InProcessExecutor``
(``orchestrator.driver.in_process``: threads of this process on this host; the driver's
tests that are not about Ray, and any caller that wants no cluster).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any

from orchestrator.core.records import TrialResult
from orchestrator.node.phases import TrialPhase
from orchestrator.node.preflight import check_task
from orchestrator.node.server import ServerRegistry, cleanup_recorded
from orchestrator.node.spec import TrialSpec


class Executor(abc.ABC):
    """Runs ``TrialSpec``s somewhere and hands back their ``TrialResult``s.

    Every method is called from the driver's thread only (implementations may use threads
    or processes of their own inside). No method raises for what a trial or its server
    does: a failure is a FAIL result (``node-lost`` when the worker that ran it vanished).
    """

    @property
    @abc.abstractmethod
    def slots(self) -> int:
        """How many trials may run at once now (may change as nodes come and go).

        Raises:
            RuntimeFailure: no place to run a trial is left and nothing is in flight.
        """

    @abc.abstractmethod
    def submit(self, spec: TrialSpec, node_id: str | None = None) -> int:
        """Start one trial without waiting for it.

        Args:
            spec: the trial to run.
            node_id: run it on this node (a baseline repeat there); None: any free slot.
        Returns:
            A ticket, unique within this executor, that ``wait`` hands back with the result.
        """

    @abc.abstractmethod
    def wait(self, timeout_s: float) -> list[tuple[int, TrialResult]]:
        """The trials that finished since the last call, waiting up to ``timeout_s`` for one.

        Returns:
            (ticket, result) pairs, possibly none; each ticket comes back exactly once.
        """

    @abc.abstractmethod
    def running(self) -> dict[int, TrialSpec]:
        """Tickets still in flight and their specs."""

    def phases(self) -> dict[int, TrialPhase]:
        """The latest phase each trial in flight reported (``node.phases``), by ticket: what
        the status line shows. Best effort and never blocking: a trial whose report has not
        arrived (or was lost) is missing. None by default."""
        return {}

    @abc.abstractmethod
    def cancel_all(self) -> None:
        """End the servers of running trials now; their results still come back through
        ``wait`` (FAIL ``interrupted``)."""

    def nodes(self) -> dict[str, dict[str, Any]]:
        """The nodes trials may run on: node id -> facts. Empty by default: one host, where
        the driver repeats the baseline nowhere else."""
        return {}

    def cleanup_orphans(self, registry_dir: Path) -> list[Any]:
        """End recorded servers a dead driver left behind (this host by default).

        Returns:
            What was ended (one record per server).
        """
        return cleanup_recorded(ServerRegistry(Path(registry_dir)))

    def preflight(self, need: dict[str, Any]) -> dict[str, list[str]]:
        """Pre-flight problems per node (``orchestrator.node.preflight``), this host by
        default: {host: [one line per problem]}."""
        host, problems = check_task(need)
        return {host: problems}

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release workers; the executor is not used again."""
