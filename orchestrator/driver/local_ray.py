"""The private local Ray a run starts when no cluster address is given: how it is spawned.

Loopback only (``LOOPBACK_ONLY``): Ray's single-machine mode (its default on macOS and
Windows) puts the node's address on loopback, so every service (GCS, raylet, workers, the
runtime-env agent) listens on 127.0.0.1, not on the machine's network interfaces: nothing
outside the machine joins it. (``ray.init(_node_ip_address="127.0.0.1")`` is rewritten to
the machine's address.) Ray reads the setting when it is imported; its processes inherit it.

Out of the driver's process group (``own_process_groups``): a signal sent to the driver's
whole group (``timeout 8h ncclsweep run ...`` sends SIGTERM to its group when the time is
up, so does ``kill -TERM -- -PGID``) would also reach Ray's services. Their own SIGTERM
handlers exit at once, the raylet goes with its agents, and the driver, which was finishing
its running trial as a first signal asks, is left waiting on a GCS that no longer answers.
So each service Ray spawns here leads a process group of its own, as Ray already does on
Windows: the driver alone decides how the run stops, and stops Ray. They still die with the
driver (Ray's parent-death signal), which is why this is done only where the kernel offers
that signal: without it Ray's reaper needs them in the driver's group.

Only the services a run uses (``only_what_a_run_uses``, ``SYSTEM_CONFIG``): the driver talks to
its GCS and raylet (nodes, actors, ``get``/``wait``/``kill``) and to nothing else. Ray's head
also starts the autoscaler's monitor (a fixed local node has nothing to scale), the log monitor
(it tails the workers' logs for the driver, which asks for none: ``log_to_driver=False``), the
API server behind the dashboard, ``ray job`` and the state API (none used; Ray runs without it
where it fails to start), and, when a driver connects, one Python worker per CPU ahead of any
task (a run asks for one actor per trial slot; once its first task or actor is asked for, Ray
starts the per-CPU workers all the same). Each is a Python process of its own: 0.5-0.9
CPU-s to start, and they poll while the run lasts. None is started: a local study's Ray cost
3.3 CPU-s, not 6.0, over a 20-second study on the 2-core VM (docs/benchmarks.md). The GCS, the
raylet and the raylet's two agents (it needs them) are started as before; an address given to
``ray.init`` is a cluster somebody else started, which this does not touch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

LOOPBACK_ONLY = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# ``ray.init(_system_config=...)`` of the private local Ray: no worker started before a task asks
SYSTEM_CONFIG = {"prestart_worker_first_driver": False}

# the head's services a run does not use (module docstring): ``Node``'s methods that start them
UNUSED_SERVICES = ("start_monitor", "start_log_monitor", "start_api_server")


def on_loopback() -> None:
    """The private local Ray this process starts listens on loopback only (``LOOPBACK_ONLY``)."""
    name, value = LOOPBACK_ONLY
    os.environ[name] = value
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # Ray was imported before (its constants are read when it is)
        setattr(constants, "ENABLE_RAY_CLUSTER", False)  # noqa: B010 - a module attribute, set


def _leader_first(preexec: Any):
    """A ``preexec_fn`` that makes the child the leader of a new process group, then runs
    Ray's own (``preexec``, if any)."""

    def run() -> None:
        os.setpgid(0, 0)
        if preexec is not None:
            preexec()

    return run


@contextlib.contextmanager
def own_process_groups() -> Iterator[bool]:
    """While the context is open, every process Ray's ``services`` spawn leads a process
    group of its own (module docstring). Yields whether that holds: False where the kernel
    has no parent-death signal or this Ray spawns its services some other way (then they
    stay in the driver's group, as before)."""
    try:
        from ray._private import services, utils
    except ImportError:  # pragma: no cover - Ray always has them today
        yield False
        return
    popen = getattr(services, "ConsolePopen", None)
    if sys.platform == "win32" or popen is None or not utils.detect_fate_sharing_support():
        yield False
        return

    class LeaderPopen(popen):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["preexec_fn"] = _leader_first(kwargs.get("preexec_fn"))
            super().__init__(*args, **kwargs)

    setattr(services, "ConsolePopen", LeaderPopen)  # noqa: B010 - a module attribute, swapped for the start
    try:
        yield True
    finally:
        setattr(services, "ConsolePopen", popen)  # noqa: B010 - and put back


def _not_started(name: str):
    """What ``Node.<name>`` does instead while ``only_what_a_run_uses`` is open: nothing, and
    for the API server what Ray records where it could not start one (no dashboard URL)."""

    def skip(self: Any, *args: Any, **kwargs: Any) -> None:
        if name == "start_api_server":
            self._webui_url = None
        log.debug("local Ray: %s skipped (a run does not use it)", name)

    return skip


@contextlib.contextmanager
def only_what_a_run_uses() -> Iterator[list[str]]:
    """While the context is open, a Ray node started in this process does not start the head's
    services a run does not use (``UNUSED_SERVICES``, module docstring). Yields the names of
    those it skips: none where this Ray starts its services some other way (then all are
    started, as before). Ray's own methods are put back when the context closes."""
    try:
        from ray._private.node import Node
    except ImportError:  # pragma: no cover - Ray always has it today
        yield []
        return
    saved = {name: Node.__dict__[name] for name in UNUSED_SERVICES if callable(Node.__dict__.get(name))}
    if len(saved) < len(UNUSED_SERVICES):  # another Ray: leave it as it is
        yield []
        return
    for name in saved:
        setattr(Node, name, _not_started(name))
    try:
        yield list(saved)
    finally:
        for name, method in saved.items():
            setattr(Node, name, method)
