"""Start, watch and end one inference server process, and find the ones a dead driver left.

A server runs in its own session and process group (``start_new_session=True``) so that
the whole tree it spawns (vLLM workers, NCCL proxies) can be signalled at once, and with
a parent-death signal so that it dies with the process that started it. Before a server
is trusted it is written to a ``ServerRegistry`` (node, host, pid, process-group id,
process start time, port, argv), so that a later ``cleanup_recorded`` can end it after
the driver was killed, without ever hitting a reused pid: a process is only signalled
when its start time (``/proc/<pid>/stat`` field 22) matches the record.

Teardown is always bounded: TERM the group, wait up to a grace period for the leader
and every group member to be gone, then KILL the group, wait a little more, reap.
Processes that used NCCL often hang at exit, so nothing here waits without a deadline.

Exceptions (only raised by ``ServerProcess.start`` / ``wait_ready``)::

    ServerError              anything that stops a server from becoming usable
    ├── SpawnFailed          the argv could not be executed at all (or not recorded)
    ├── ServerExited         the process exited before it was ready (returncode, log tail)
    └── ReadyTimeout         still not ready after the timeout (log tail)

Standard library only. Linux is the target (``/proc``, ``prctl``); elsewhere the
start-time checks are unavailable and the parent-death signal is skipped.
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
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from orchestrator.backends.base import LaunchSpec
from orchestrator.records import ServerRecord

log = logging.getLogger(__name__)

__all__ = [
    "ServerError",
    "SpawnFailed",
    "ServerExited",
    "ReadyTimeout",
    "ServerProcess",
    "ServerRegistry",
    "process_start_time",
    "terminate_group",
    "kill_recorded",
    "cleanup_recorded",
    "node_id",
    "free_port",
    "port_in_use",
    "read_tail",
]

_PR_SET_PDEATHSIG = 1
_KILL_WAIT_S = 5.0  # after SIGKILL: how long to wait for the group to disappear
_POLL_S = 0.05


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
        if returncode is not None and returncode < 0:
            try:
                how = f"killed by {signal.Signals(-returncode).name}"
            except ValueError:
                how = f"killed by signal {-returncode}"
        else:
            how = f"exit code {returncode}"
        last = _last_line(log_tail)
        msg = f"server exited before it was ready ({how})"
        super().__init__(f"{msg}: {last}" if last else msg, log_tail=log_tail)


class ReadyTimeout(ServerError):
    """The server did not answer its health check in time."""

    def __init__(self, timeout_s: float, log_tail: str = "", last_status: str | None = None):
        self.timeout_s = timeout_s
        self.last_status = last_status
        msg = f"server not ready after {timeout_s:.1f} s"
        if last_status:
            msg += f" (last health check: {last_status})"
        super().__init__(msg, log_tail=log_tail)


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""


# --------------------------------------------------------------------------------------
# /proc helpers
# --------------------------------------------------------------------------------------
def _read_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat, 1-indexed as in proc(5) (index 0 unused), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    close = raw.rfind(")")
    if close < 0:
        return None
    head = raw[: raw.find("(")].strip()
    comm = raw[raw.find("(") + 1 : close]
    rest = raw[close + 1 :].split()
    return ["", head, comm, *rest]


def process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` in clock ticks since boot (field 22), None if no such process."""
    fields = _read_stat(pid)
    if fields is None or len(fields) < 23:
        return None
    try:
        return float(fields[22])
    except ValueError:
        return None


def _state(pid: int) -> str | None:
    fields = _read_stat(pid)
    return fields[3] if fields else None


def _live(pid: int, start_time: float | None = None) -> bool:
    """True if ``pid`` exists, is not a zombie, and (if given) started at ``start_time``."""
    fields = _read_stat(pid)
    if fields is None:
        if not os.path.isdir("/proc/self"):  # no procfs: best effort
            try:
                os.kill(pid, 0)
                return True
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        return False
    if fields[3] in ("Z", "X", "x"):
        return False
    if start_time is not None and float(fields[22]) != float(start_time):
        return False
    return True


def _group_members(pgid: int) -> list[tuple[int, str, int, float]]:
    """(pid, state, session id, start time) of every process whose pgrp is ``pgid``."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        fields = _read_stat(int(name))
        if fields is None or len(fields) < 23:
            continue
        try:
            if int(fields[5]) == pgid:
                out.append((int(name), fields[3], int(fields[6]), float(fields[22])))
        except ValueError:
            continue
    return out


def _reap(pid: int) -> bool:
    """Reap ``pid`` if it is our exited child; True when it was reaped (or is not ours)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:
        return True
    except OSError:
        return True


def _group_alive(pgid: int, *, reap_zombies: bool = True) -> bool:
    """Whether any non-zombie process is still in group ``pgid``; zombies that are our
    own children are reaped on the way (others belong to their parent or init)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    alive = False
    for pid, state, _sid, _start in _group_members(pgid):
        if state in ("Z", "X", "x"):
            if reap_zombies:
                _reap(pid)
        else:
            alive = True
    return alive


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:
        log.warning("cannot signal process group %d: %s", pgid, exc)


def terminate_group(
    pgid: int,
    grace_s: float,
    *,
    leader_done: Callable[[], bool],
    signal_leader: Callable[[int], None] | None = None,
    kill_wait_s: float = _KILL_WAIT_S,
) -> bool:
    """TERM process group ``pgid``, wait up to ``grace_s`` for ``leader_done()`` and the
    group to be gone, then KILL it and wait up to ``kill_wait_s`` more.

    ``leader_done`` must also reap the leader when it is our child. ``signal_leader``
    (optional) signals the leader directly as well, in case it left the group.
    Returns True when everything is gone, False if something survived SIGKILL (e.g. a
    process stuck in the kernel); never raises for processes that are already gone.
    """

    def gone() -> bool:
        return leader_done() and not _group_alive(pgid)

    def send(sig: int) -> None:
        # Only signal a group that still has members: once it is empty its id could be
        # reused by an unrelated process that made itself a group leader.
        if not leader_done() or _group_alive(pgid, reap_zombies=False):
            _signal_group(pgid, sig)
        if signal_leader is not None and not leader_done():
            signal_leader(sig)

    if gone():
        return True
    send(signal.SIGTERM)
    deadline = time.monotonic() + max(0.0, grace_s)
    while time.monotonic() < deadline:
        if gone():
            return True
        time.sleep(_POLL_S)
    if gone():
        return True
    log.info("process group %d still alive after %.1f s grace: SIGKILL", pgid, grace_s)
    send(signal.SIGKILL)
    deadline = time.monotonic() + max(0.0, kill_wait_s)
    while time.monotonic() < deadline:
        if gone():
            return True
        time.sleep(_POLL_S)
    if gone():
        return True
    survivors = [p for p, st, _, _ in _group_members(pgid) if st not in ("Z", "X", "x")]
    log.warning("process group %d survived SIGKILL for %.1f s (pids %s)", pgid, kill_wait_s, survivors)
    return False


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


def port_in_use(host: str, port: int) -> bool:
    """True if something accepts connections on host:port, or the port cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            if s.connect_ex((host, port)) == 0:
                return True
        except OSError:
            pass
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            import errno

            return exc.errno == errno.EADDRINUSE
    return False


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
        path = self._path(record)
        blob = json.dumps(dataclasses.asdict(record), indent=1, sort_keys=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path

    def remove(self, record: ServerRecord) -> None:
        try:
            self._path(record).unlink()
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
    """One server process in its own process group.

    Use as a context manager (``__enter__`` starts it if needed, ``__exit__`` stops it)
    or call ``start`` / ``wait_ready`` / ``stop`` yourself. ``stop`` is idempotent and
    safe from another thread (e.g. a signal handler's helper), and ``wait_ready`` then
    raises ``ServerExited`` at once.

    The parent-death signal (``parent_death_signal=True``) follows the Linux rule: it
    fires when the *thread* that called ``start`` exits, so start servers from a
    long-lived thread (the main thread or a Ray actor's task thread).
    """

    def __init__(
        self,
        spec: LaunchSpec,
        log_path: Path | str,
        registry: ServerRegistry | None = None,
        base_env: Mapping[str, str] | None = None,
        *,
        parent_death_signal: bool = True,
    ):
        self.spec = spec
        self.log_path = Path(log_path)
        self.registry = registry
        self.base_env = base_env
        self.parent_death_signal = parent_death_signal
        self.proc: subprocess.Popen | None = None
        self.record: ServerRecord | None = None
        self.started_at: float | None = None  # time.monotonic() at spawn
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
        """True while the leader process runs (not exited, not reaped)."""
        return self.proc is not None and self.proc.poll() is None

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> ServerRecord:
        """Spawn ``spec.argv`` and record it in the registry before returning."""
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
        log.debug("started server pid=%d pgid=%d: %s", pid, pgid, self.spec.shell_line())
        return self.record

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

    def wait_ready(self, timeout_s: float, poll_s: float = 0.25) -> float:
        """Poll health and the process until ready; return seconds waited.

        Raises ``ServerExited`` as soon as the process exits, ``ReadyTimeout`` after
        ``timeout_s``.
        """
        if self.proc is None:
            raise ServerError("server not started")
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        last = None
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerExited(rc, self.log_tail())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadyTimeout(timeout_s, self.log_tail(), last)
            ok, last = self._health(min(1.0, remaining))
            if ok:
                rc = self.proc.poll()
                if rc is not None:  # something else answered on our port
                    raise ServerExited(rc, self.log_tail())
                return time.monotonic() - t0
            remaining = deadline - time.monotonic()
            try:  # returns at once when the process exits
                self.proc.wait(timeout=max(0.0, min(poll_s, remaining)))
            except subprocess.TimeoutExpired:
                pass

    def stop(self, grace_s: float = 5.0) -> float:
        """TERM the process group, wait up to ``grace_s``, KILL, reap, unregister.

        Idempotent; never raises for a process that is already gone; returns seconds spent.
        """
        t0 = time.monotonic()
        with self._lock:
            if self.proc is None or self._stopped:
                return 0.0
            proc = self.proc
            pgid = self.record.pgid if self.record is not None else proc.pid

            def leader_done() -> bool:
                return proc.poll() is not None

            def signal_leader(sig: int) -> None:
                try:
                    proc.send_signal(sig)
                except (ProcessLookupError, OSError):
                    pass

            gone = terminate_group(pgid, grace_s, leader_done=leader_done, signal_leader=signal_leader)
            if proc.poll() is None:  # survived SIGKILL (stuck in the kernel): last bounded wait
                try:
                    proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    pass
            if gone:
                self._stopped = True
                if self.registry is not None and self.record is not None:
                    try:
                        self.registry.remove(self.record)
                    except OSError as exc:
                        log.warning("cannot remove server record: %s", exc)
            else:
                log.warning("server pid %d not fully gone; its record stays for cleanup", proc.pid)
        return time.monotonic() - t0

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the server log ("" if there is none)."""
        return read_tail(self.log_path, lines)


def read_tail(path: Path | str, lines: int = 60, max_bytes: int = 256 * 1024) -> str:
    """Last ``lines`` lines of a text file, decoded leniently."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


# --------------------------------------------------------------------------------------
# Cleanup of servers a dead driver left behind
# --------------------------------------------------------------------------------------
def kill_recorded(record: ServerRecord, grace_s: float = 3.0) -> str:
    """End the server of one record on this host, if it is still the same process.

    Returns "killed" (its group was ended), "stale" (nothing of it is left, or its pid
    now belongs to another process: nothing signalled), or "survived" (signalled, but
    something survived SIGKILL). Use it on remote nodes (e.g. from a Ray task).

    When the leader is gone but members of its session/group remain (workers orphaned
    by a leader killed with SIGKILL), those members are ended too: a process-group id
    cannot be reused while members of the group exist, and they must have started after
    the recorded leader.
    """
    pid, pgid, start = int(record.pid), int(record.pgid), float(record.start_time)
    now = process_start_time(pid)
    if now is not None and now != start:
        return "stale"  # pid reused by another process: never touch it or its group
    if now is None:
        members = [
            m
            for m in _group_members(pgid)
            if m[2] == pgid and m[3] >= start and m[1] not in ("Z", "X", "x")
        ]
        if pgid != pid or not members:
            return "stale"

    def leader_done() -> bool:
        if process_start_time(pid) != start:
            return True
        if _state(pid) in ("Z", "X", "x"):
            _reap(pid)  # ours? reap it; someone else's? its parent or init will
            return True
        return False

    def signal_leader(sig: int) -> None:
        if process_start_time(pid) == start:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    gone = terminate_group(pgid, grace_s, leader_done=leader_done, signal_leader=signal_leader)
    _reap(pid)
    return "killed" if gone else "survived"


def cleanup_recorded(registry: ServerRegistry, grace_s: float = 3.0) -> list[ServerRecord]:
    """End every recorded server on this host whose pid still has the recorded start
    time; drop stale records. Records of other hosts are left alone. Returns the
    records of the servers that were ended."""
    host = socket.gethostname()
    killed = []
    for record in registry.records():
        if record.hostname != host:
            continue
        outcome = kill_recorded(record, grace_s)
        if outcome == "killed":
            log.info("ended leftover server pid=%d pgid=%d port=%s", record.pid, record.pgid, record.port)
            killed.append(record)
            registry.remove(record)
        elif outcome == "stale":
            registry.remove(record)
        else:
            log.warning("leftover server pid=%d survived SIGKILL; record kept", record.pid)
    return killed
