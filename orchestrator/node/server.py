"""Start, watch and end one inference server's process tree, and find the ones a dead driver left.

A server runs in its own session and process group (``start_new_session=True``) so that
the whole tree it spawns (vLLM's engine core and workers, NCCL proxies) can be signalled
at once, and with a parent-death signal so that its first process dies with the process
that started it. Two more guards cover the rest of the tree:

- a ``TreeWatch`` (treewatch.py) watches every process of the tree and the log while the
  server starts and while it is measured: a worker that dies while the front process
  stays up, or a fatal line the engine logs, fails the trial within seconds instead of
  after the start-up timeout;
- a supervisor (supervise.py), in its own session, ends the whole tree when the process
  that launched it dies, however it dies (workers re-parented to init included).

Before a server is trusted it is written to a ``ServerRegistry`` (node, host, pid,
process-group id, process start time, port, argv; the supervisor adds the tree's members
beside it), so that a later ``cleanup_recorded`` can end it after the driver was killed,
without ever hitting a reused pid: a process is only signalled when its start time
matches the record. Process facts come from ``proctree`` (psutil), nowhere else.

Teardown is always bounded: TERM the tree and the group, wait up to a grace period, KILL,
wait a little more, reap. Processes that used NCCL often hang at exit, so nothing here
waits without a deadline.

Exceptions (only raised by ``ServerProcess.start`` / ``wait_ready``)::

    ServerError              anything that stops a server from becoming usable
    ├── SpawnFailed          the argv could not be executed at all (or not recorded)
    ├── ServerExited         the first process exited before it was ready (returncode, log tail)
    ├── ServerFailed         another process of the tree died, or the engine logged a fatal error
    ├── ServerStalled        the tree alive, not ready, and its log silent for the stall limit
    ├── ReadyTimeout         still not ready after the timeout (log tail)
    └── PortTaken            what answered on the server's port is a process outside its tree

Whose port: the port a trial's server is given was free a moment before (``free_port``), and
a real engine binds it minutes later; a process that takes it in between answers health and
the benchmark in the server's place. So a server is ready only when every process listening
where its clients connect belongs to its own tree (the launched process, its descendants, its
process group: vLLM's and SGLang's API server is the launched process, the reference
server's rank 0 too, a wrapper script's child is a descendant); ``foreign_listener`` names
the one that does not, and ``run_trial`` asks again after the benchmark.

Ready to serve: a server (or a proxy in front of it) may answer its health check before it
serves requests, and answer them ``503 Service Unavailable`` (often with ``Retry-After``)
while it warms up, or, a proxy whose engine is not up yet, ``502 Bad Gateway`` or ``504
Gateway Timeout`` (``NOT_SERVING_YET``). ``wait_serving`` sends one one-token completion
until the answer is none of those, waiting as ``Retry-After`` asks, within what is left of
the start-up budget; one that lasts past it is a ``ReadyTimeout`` (start-timeout: not
ready), never a benchmark error held against the config.
"""

from __future__ import annotations

import ctypes
import dataclasses
import http.client
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from orchestrator.core import files
from orchestrator.core.files import read_tail
from orchestrator.core.launch import LaunchSpec, WatchRules, exit_text
from orchestrator.core.records import ServerRecord
from orchestrator.node import proctree
from orchestrator.node import supervise as supervisor
from orchestrator.node.treewatch import TreeWatch

log = logging.getLogger(__name__)

__all__ = [
    "ServerError",
    "SpawnFailed",
    "ServerExited",
    "ServerFailed",
    "ServerStalled",
    "ReadyTimeout",
    "PortTaken",
    "ServerProcess",
    "ServerRegistry",
    "process_start_time",
    "kill_recorded",
    "cleanup_recorded",
    "node_id",
    "free_port",
]

_PR_SET_PDEATHSIG = 1
SERVING_PATH = "/v1/completions"  # what the benchmark asks of every server
PROBE_TIMEOUT_S = 30.0  # the longest one readiness request waits for its answer
MAX_RETRY_AFTER_S = 10.0  # a Retry-After longer than this is asked again sooner
# answers that mean "not serving yet" right after the health check: the server warming up, or a
# proxy in front of it whose engine is not up (refused: 502, or too slow to answer: 504)
NOT_SERVING_YET = {502: "Bad Gateway", 503: "Service Unavailable (warming up)", 504: "Gateway Timeout"}


# --------------------------------------------------------------------------------------
# Exceptions
# --------------------------------------------------------------------------------------
class ServerError(Exception):
    """Root of the errors a server start can raise."""

    def __init__(self, message: str, *, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class SpawnFailed(ServerError):
    """The server's argv could not be executed (missing binary, bad cwd, ...)."""


class ServerExited(ServerError):
    """The server process exited before it became ready."""

    def __init__(self, returncode: int | None, log_tail: str = ""):
        self.returncode = returncode
        how = exit_text(returncode)
        last = _last_line(log_tail)
        msg = f"server exited before it was ready ({how})"
        super().__init__(f"{msg}: {last}" if last else msg, log_tail=log_tail)


class ServerFailed(ServerError):
    """A process of the server's tree died, or the engine logged a fatal error, while the
    first process still ran (the ``TreeWatch`` found it)."""

    def __init__(self, reason: str, log_tail: str = ""):
        self.reason = reason
        super().__init__(reason, log_tail=log_tail)


class ServerStalled(ServerError):
    """The server's tree is alive but it is not ready and has written nothing to its log for
    ``stall_s`` (a deadlocked start-up: GPUs busy, no progress): ``timeouts.stall``."""

    def __init__(self, stall_s: float, log_tail: str = ""):
        self.stall_s = stall_s
        super().__init__(f"no log output for {stall_s:.0f} s and not ready", log_tail=log_tail)


class ReadyTimeout(ServerError):
    """The server did not answer its health check in time (``why``: what it answered instead;
    ``warming``: health answered, the API kept saying it is not serving yet: 502, 503, 504)."""

    def __init__(self, timeout_s: float, log_tail: str = "", last_status: str | None = None, *,
                 why: str = "health never answered 200", warming: bool = False):
        self.timeout_s = timeout_s
        self.last_status = last_status
        self.why = why
        self.warming = warming
        msg = f"server not ready after {timeout_s:.1f} s"
        if last_status:
            msg += f" (last health check: {last_status})"
        super().__init__(msg, log_tail=log_tail)


class PortTaken(ServerError):
    """A process outside the server's tree listens on its port: whatever answered there was
    not this server (``foreign``: which process)."""

    def __init__(self, host: str, port: int, foreign: str, log_tail: str = ""):
        self.foreign = foreign
        super().__init__(f"port {port} on {host} is answered by {foreign}, not by this trial's server (it took the "
                         "port after it was picked; what it answered is not this config's)", log_tail=log_tail)


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the delay form; an HTTP date is not waited for), None if absent."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` (seconds since the epoch), None if there is no such process."""
    return proctree.start_time(pid)


# --------------------------------------------------------------------------------------
# Where we are
# --------------------------------------------------------------------------------------
def node_id() -> str:
    """Ray node id when known (env RAY_NODE_ID, or an initialized Ray), else the hostname."""
    env = os.environ.get("RAY_NODE_ID")
    if env:
        return env
    ray = sys.modules.get("ray")  # never import Ray here: only ask one that is running
    if ray is not None:
        try:
            if ray.is_initialized():
                return str(ray.get_runtime_context().get_node_id())
        except Exception:  # noqa: BLE001 - best effort
            pass
    return socket.gethostname()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------
class ServerRegistry:
    """One JSON file per live server in ``directory``; atomic writes (temp + rename).

    File name: ``<host>-<pid>-<start time>.json``, so records of different hosts sharing
    one directory never collide and a reused pid gets a new file.
    """

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, record: ServerRecord) -> Path:
        host = re.sub(r"[^A-Za-z0-9_.-]", "_", record.hostname or "host")
        return self.directory / f"{host}-{record.pid}-{int(record.start_time)}.json"

    def add(self, record: ServerRecord) -> Path:
        return files.write_text(self._path(record), json.dumps(dataclasses.asdict(record), indent=1, sort_keys=True))

    def tree_path(self, record: ServerRecord) -> Path:
        """Where the server's supervisor keeps the members of its tree (not a ``*.json``)."""
        return self._path(record).with_suffix(".tree")

    def tree(self, record: ServerRecord) -> list[proctree.Member]:
        """The tree members the supervisor recorded (empty when none were)."""
        try:
            return [proctree.Member.from_dict(d) for d in json.loads(self.tree_path(record).read_text())]
        except (OSError, ValueError, TypeError, KeyError):
            return []

    def remove(self, record: ServerRecord) -> None:
        for path in (self._path(record), self.tree_path(record)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def records(self) -> list[ServerRecord]:
        out = []
        names = {f.name for f in dataclasses.fields(ServerRecord)}
        for path in sorted(self.directory.glob("*.json")):
            if path.name.startswith(".tmp-"):
                continue
            try:
                data = json.loads(path.read_text())
                out.append(ServerRecord(**{k: v for k, v in data.items() if k in names}))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("ignoring unreadable server record %s: %s", path, exc)
        return out


# --------------------------------------------------------------------------------------
# One server
# --------------------------------------------------------------------------------------
def _parent_death_preexec(parent_pid: int) -> Callable[[], None]:
    """preexec_fn: ask the kernel for SIGKILL when the parent dies (Linux, best effort)."""

    try:  # resolve prctl in the parent: the child should do as little as possible
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def preexec() -> None:
        if prctl is None:
            return
        try:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except Exception:  # noqa: BLE001 - best effort; never fail the spawn
            return
        if os.getppid() != parent_pid:  # parent already died before prctl took effect
            os._exit(1)

    return preexec


class ServerProcess:
    """One server: its first process in its own process group, its tree watched.

    Use as a context manager (``__enter__`` starts it if needed, ``__exit__`` stops it)
    or call ``start`` / ``wait_ready`` / ``stop`` yourself. ``stop`` is idempotent and
    safe from another thread (e.g. a signal handler's helper, or the tree watch when it
    finds the server dead), and ``wait_ready`` then raises at once.

    The parent-death signal (``parent_death_signal=True``) follows the Linux rule: it
    fires when the *thread* that called ``start`` exits, so start servers from a
    long-lived thread (the main thread or a Ray actor's task thread). It reaches the
    first process only; the supervisor (``supervise=True``) ends the rest of the tree.
    """

    def __init__(
        self,
        spec: LaunchSpec,
        log_path: Path | str,
        registry: ServerRegistry | None = None,
        base_env: Mapping[str, str] | None = None,
        *,
        parent_death_signal: bool = True,
        watch: WatchRules | None = None,
        supervise: bool = True,
        on_output: Callable[[list[str]], None] | None = None,
    ):
        self.spec = spec
        self.log_path = Path(log_path)
        self.registry = registry
        self.base_env = base_env
        self.parent_death_signal = parent_death_signal
        self.rules = watch or WatchRules()
        self.supervise = supervise
        self.on_output = on_output  # new lines of the server's log, as the tree watch reads them
        self.proc: subprocess.Popen | None = None
        self.record: ServerRecord | None = None
        self.watch: TreeWatch | None = None
        self.started_at: float | None = None  # time.monotonic() at spawn
        self._output_offset: int | None = None  # the log's size before the server wrote to it
        self.supervisor_pid: int | None = None
        self._owner_fd: int | None = None
        self._stopped = False
        self._lock = threading.Lock()

    # ---- context manager ---------------------------------------------------------------
    def __enter__(self) -> "ServerProcess":
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- properties --------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def alive(self) -> bool:
        """True while the first process runs (not exited, not reaped)."""
        return self.proc is not None and self.proc.poll() is None

    def exited(self, within_s: float = 0.0) -> int | None:
        """The first process's return code once it has exited, waiting up to ``within_s`` for it
        (a stream that ended because its server is exiting ends a moment before the exit does);
        None while it runs."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=max(0.0, within_s))
        except subprocess.TimeoutExpired:
            return None

    @property
    def first_output_s(self) -> float | None:
        """Seconds from spawn to the server's first log output (None: none yet, or unwatched)."""
        first = self.watch.first_output if self.watch is not None else None
        return None if first is None or self.started_at is None else first - self.started_at

    def silent_s(self) -> float | None:
        """Seconds since the server last wrote to its log (since spawn before it wrote
        anything); None when its log is not watched."""
        if self.watch is None or self.started_at is None:
            return None
        return time.monotonic() - (self.watch.last_output or self.started_at)

    @property
    def fatal(self) -> str | None:
        """Why the tree watch took the server for dead (None while it has not)."""
        return self.watch.fatal if self.watch is not None else None

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> ServerRecord:
        """Spawn ``spec.argv`` and record it in the registry before returning; then start
        its supervisor and its tree watch."""
        if self.proc is not None:
            raise ServerError("server already started")
        env = dict(os.environ if self.base_env is None else self.base_env)
        env.update({str(k): str(v) for k, v in self.spec.env.items()})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        preexec = None
        if self.parent_death_signal and sys.platform.startswith("linux"):
            preexec = _parent_death_preexec(os.getpid())
        with open(self.log_path, "ab", buffering=0) as logf:
            logf.write(f"# ncclsweep: {self.spec.shell_line()}\n".encode())
            self._output_offset = logf.tell()
            try:
                self.proc = subprocess.Popen(
                    list(self.spec.argv),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=preexec,
                    close_fds=True,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise SpawnFailed(f"cannot start {self.spec.argv[:1]}: {exc}") from exc
        self.started_at = time.monotonic()
        pid = self.proc.pid
        try:
            pgid = os.getpgid(pid)
        except OSError:
            pgid = pid  # start_new_session: the leader's pid is the group id
        start_time = process_start_time(pid)
        self.record = ServerRecord(
            node_id=node_id(),
            hostname=socket.gethostname(),
            pid=pid,
            pgid=pgid,
            start_time=start_time if start_time is not None else 0.0,
            port=int(self.spec.port),
            argv=list(self.spec.argv),
        )
        if self.registry is not None:
            try:
                self.registry.add(self.record)
            except BaseException as exc:
                self.stop(grace_s=0.0)  # never leave an unrecorded server running
                raise SpawnFailed(f"cannot record server in {self.registry.directory}: {exc}") from exc
        if start_time is not None:
            if self.supervise:
                members = self.registry.tree_path(self.record) if self.registry is not None else None
                try:
                    self.supervisor_pid, self._owner_fd = supervisor.launch(pid, start_time, pgid, members)
                except OSError as exc:  # the parent-death signal and cleanup remain
                    log.warning("could not start the supervisor of server pid %d: %s", pid, exc)
            self.watch = TreeWatch(pid, start_time, self.log_path, self.rules,
                                   on_fatal=self._stop_now, offset=self._output_offset,
                                   on_output=self.on_output).begin()
        log.debug("started server pid=%d pgid=%d: %s", pid, pgid, self.spec.shell_line())
        return self.record

    def _stop_now(self) -> None:
        """The watcher found the server dead: end its process group now."""
        self.stop(2.0)

    def _health(self, timeout: float) -> tuple[bool, str]:
        conn = http.client.HTTPConnection(self.spec.host, int(self.spec.port), timeout=max(0.05, timeout))
        try:
            conn.request("GET", self.spec.health_path or "/")
            resp = conn.getresponse()
            resp.read(65536)
            return resp.status == self.spec.ready_status, f"HTTP {resp.status}"
        except (OSError, http.client.HTTPException) as exc:
            return False, type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()

    def _raise_if_dead(self) -> None:
        if self.fatal is not None:
            raise ServerFailed(self.fatal, "\n".join(self.watch.evidence) if self.watch else self.log_tail())
        assert self.proc is not None, "wait_ready before start"
        rc = self.proc.poll()
        if rc is not None:
            raise ServerExited(rc, self.log_tail())

    def wait_ready(self, timeout_s: float, poll_s: float = 0.25, *, stall_s: float | None = None) -> float:
        """Poll health, the first process and the tree watch until ready; return seconds waited.

        Raises ``ServerExited`` as soon as the first process exits, ``ServerFailed`` as
        soon as the tree watch finds the server dead, ``ServerStalled`` once the log has been
        silent for ``stall_s`` (None: never) while the server is not ready, ``ReadyTimeout``
        after ``timeout_s``.
        """
        if self.proc is None:
            raise ServerError("server not started")
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        last = None
        while True:
            self._raise_if_dead()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadyTimeout(timeout_s, self.log_tail(), last)
            ok, last = self._health(min(1.0, remaining))
            if ok:
                self._raise_if_dead()  # it died meanwhile
                self.raise_if_port_taken()  # something else answered on our port
                return time.monotonic() - t0
            silent = self.silent_s() if stall_s is not None else None
            if silent is not None and silent >= stall_s:  # type: ignore[operator]
                self._raise_if_dead()  # a tree that died is a crash, not a stall
                raise ServerStalled(float(stall_s), self.log_tail())  # type: ignore[arg-type]
            remaining = deadline - time.monotonic()
            try:  # returns at once when the process exits
                self.proc.wait(timeout=max(0.0, min(poll_s, remaining)))
            except subprocess.TimeoutExpired:
                pass

    def foreign_listener(self) -> str | None:
        """The process outside this server's tree that listens where its clients connect
        (``pid N (command)``), None when every listener there is the tree's (or none is
        visible here, as behind another network namespace)."""
        if self.proc is None or self.record is None:
            return None
        own = {m.pid for m in proctree.tree(self.proc.pid, self.record.start_time)}
        own |= {m.pid for m in proctree.group(self.record.pgid)}
        own |= {pid for pid, _ in list(self.watch.seen if self.watch is not None else {})}  # a copy: it grows
        for found in proctree.listeners(self.spec.host, int(self.spec.port)):
            if found is None:
                return "a process of another user (its pid is not visible to this one)"
            pid = found if isinstance(found, int) else found.pid
            if pid not in own:
                return found.describe() if isinstance(found, proctree.Member) else f"pid {pid} (ended since)"
        return None

    def raise_if_port_taken(self) -> None:
        """``PortTaken`` when a process outside the tree listens on the server's port."""
        foreign = self.foreign_listener()
        if foreign is not None:
            raise PortTaken(self.spec.host, int(self.spec.port), foreign, self.log_tail())

    def _serving(self, timeout: float) -> tuple[bool, str, float | None]:
        """One one-token completion: (serving, what it answered, Retry-After seconds). Anything
        but ``NOT_SERVING_YET`` is serving (the benchmark judges the rest); no answer within ``timeout`` too
        (it took the request: its first, maybe slow, generation is the warm-up's to wait for)."""
        body = json.dumps({"model": self.spec.model_name, "prompt": "Hello", "max_tokens": 1,
                           "temperature": 0}).encode()
        conn = http.client.HTTPConnection(self.spec.host, int(self.spec.port), timeout=max(0.05, timeout))
        try:
            conn.request("POST", SERVING_PATH, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read(65536)
            if resp.status not in NOT_SERVING_YET:
                return True, f"HTTP {resp.status}", None
            retry_after = _retry_after(resp.getheader("Retry-After"))
            return False, f"HTTP {resp.status} {NOT_SERVING_YET[resp.status]}", retry_after
        except TimeoutError:
            return True, "no answer yet", None
        except (OSError, http.client.HTTPException) as exc:
            return False, type(exc).__name__ if not str(exc) else f"{type(exc).__name__}: {exc}", None
        finally:
            conn.close()

    def wait_serving(self, timeout_s: float, poll_s: float = 0.5) -> float:
        """After ``wait_ready``: send a one-token completion until the server answers it with
        anything but ``NOT_SERVING_YET`` (module docstring), at least once; return seconds
        waited. Raises ``ReadyTimeout`` (``warming``) when it still does after ``timeout_s``, and what
        ``wait_ready`` raises when the server dies meanwhile."""
        t0 = time.monotonic()
        deadline = t0 + max(0.0, timeout_s)
        while True:
            self._raise_if_dead()
            ok, answer, retry_after = self._serving(min(PROBE_TIMEOUT_S, max(1.0, deadline - time.monotonic())))
            if ok:
                self._raise_if_dead()
                return time.monotonic() - t0
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                warming = answer.startswith("HTTP ")  # a not-serving-yet answer, not a refused connection
                raise ReadyTimeout(timeout_s, self.log_tail(), answer, warming=warming,
                                   why=f"health answered, but {SERVING_PATH} still answered {answer}")
            wait = min(remaining, poll_s if retry_after is None else min(retry_after, MAX_RETRY_AFTER_S))
            try:  # returns at once when the process exits
                self.proc.wait(timeout=max(0.0, wait))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                pass

    def stop(self, grace_s: float = 5.0) -> float:
        """End the tree: TERM it and the process group, wait up to ``grace_s``, KILL, reap,
        unregister, let the supervisor go.

        Idempotent; never raises for a process that is already gone; returns seconds spent.
        """
        t0 = time.monotonic()
        watch = self.watch
        if watch is not None:
            watch.end()  # a deliberate teardown is not a crash
        with self._lock:
            if self.proc is None or self._stopped:
                return 0.0
            proc = self.proc
            pgid = self.record.pgid if self.record is not None else proc.pid
            members = {(m.pid, m.start): m for m in (watch.seen.values() if watch is not None else ())}
            if self.record is not None:
                for m in proctree.tree(proc.pid, self.record.start_time) + proctree.group(pgid):
                    members.setdefault((m.pid, m.start), m)
            left = proctree.end(list(members.values()), grace_s, pgid=pgid)
            try:
                proc.wait(timeout=1.0 if left else 5.0)  # reap the first process
            except subprocess.TimeoutExpired:
                pass
            self._release_supervisor()
            if not left and proc.poll() is not None:
                self._stopped = True
                if self.registry is not None and self.record is not None:
                    try:
                        self.registry.remove(self.record)
                    except OSError as exc:
                        log.warning("cannot remove server record: %s", exc)
            else:
                pids = [m.pid for m in left] or [proc.pid]
                log.warning("server pid %d: processes %s survived SIGKILL; its record stays for cleanup",
                            proc.pid, pids)
        return time.monotonic() - t0

    def _release_supervisor(self) -> None:
        """Close our end of the supervisor's pipe: it ends whatever is left, then exits."""
        if self._owner_fd is not None:
            try:
                os.close(self._owner_fd)
            except OSError:
                pass
            self._owner_fd = None

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the server log ("" if there is none)."""
        return read_tail(self.log_path, lines)


# --------------------------------------------------------------------------------------
# Cleanup of servers a dead driver left behind
# --------------------------------------------------------------------------------------
def kill_recorded(record: ServerRecord, grace_s: float = 3.0, registry: ServerRegistry | None = None) -> str:
    """End the server of one record on this host, if it is still the same process tree.

    Returns "killed" (its tree was ended), "stale" (nothing of it is left, or its pid
    now belongs to another process: nothing signalled), or "survived" (signalled, but
    something survived SIGKILL). Use it on remote nodes (e.g. from a Ray task).

    What is ended: the first process and its descendants when the start time matches;
    every member its supervisor recorded that still runs with its recorded start time
    (workers that left the process group included); and, when the first process is gone,
    the members of its group that started after it (workers orphaned by a first process
    killed with SIGKILL: a process-group id cannot be reused while members exist).
    """
    pid, pgid, start = int(record.pid), int(record.pgid), float(record.start_time)
    now = process_start_time(pid)
    if now is not None and now != start:
        return "stale"  # pid reused by another process: never touch it or its group
    members = {(m.pid, m.start): m for m in (registry.tree(record) if registry is not None else [])
               if proctree.alive(m.pid, m.start)}
    if now is not None:
        for m in proctree.tree(pid, start):
            members.setdefault((m.pid, m.start), m)
    orphans = [m for m in proctree.group(pgid) if m.start >= start and _session(m.pid) == pgid]
    for m in orphans:
        members.setdefault((m.pid, m.start), m)
    if not members:
        return "stale"
    left = proctree.end(list(members.values()), grace_s, pgid=pgid if (now is not None or orphans) else None)
    try:
        os.waitpid(pid, os.WNOHANG)  # ours? reap it; someone else's? its parent or init will
    except (ChildProcessError, OSError):
        pass
    return "survived" if left else "killed"


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def cleanup_recorded(registry: ServerRegistry, grace_s: float = 3.0) -> list[ServerRecord]:
    """End every recorded server on this host whose pid still has the recorded start
    time; drop stale records. Records of other hosts are left alone. Returns the
    records of the servers that were ended."""
    host = socket.gethostname()
    killed = []
    for record in registry.records():
        if record.hostname != host:
            continue
        outcome = kill_recorded(record, grace_s, registry)
        if outcome == "killed":
            log.info("ended leftover server pid=%d pgid=%d port=%s", record.pid, record.pgid, record.port)
            killed.append(record)
            registry.remove(record)
        elif outcome == "stale":
            registry.remove(record)
        else:
            log.warning("leftover server pid=%d survived SIGKILL; record kept", record.pid)
    return killed
