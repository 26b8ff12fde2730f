"""Process trees, the one place that looks at processes (psutil).

A real engine is a tree: vLLM's API server, its engine core, one worker per GPU (which
rename themselves, e.g. ``VLLM::Worker_TP0``), compile workers, short-lived tools. Every
question the study asks about a server's processes is answered here, by pid *and* start
time, so a reused pid is never mistaken for ours:

- ``start_time(pid)``: the process's start time (seconds since the epoch, as psutil
  reports it; stable for the life of the process), None if there is no such process;
- ``alive(pid, start)``: it runs (not a zombie) and, if given, started at ``start``;
- ``tree(pid)``: the process and its descendants, as ``Member``s;
- ``group(pgid)``: the live members of a process group (workers re-parented to init
  when their parent died stay in the group); ``cpu_seconds(pgid)``: the CPU they used;
- ``end(members, grace_s)``: TERM, wait, KILL, wait: bounded, never raises;
- ``listeners(host, port)``: the processes a TCP connection to ``host:port`` may reach.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass

import psutil

_DEAD = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
_POLL_S = 0.05


@dataclass(frozen=True)
class Member:
    """One process of a server's tree, identified by pid and start time."""

    pid: int
    start: float
    name: str = ""
    cmdline: str = ""
    exe: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Member":
        return cls(int(data["pid"]), float(data["start"]), str(data.get("name", "")), str(data.get("cmdline", "")),
                   str(data.get("exe", "")))

    def describe(self) -> str:
        return f"pid {self.pid} ({(self.cmdline or self.name)[:120]})"


def start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def alive(pid: int, start: float | None = None) -> bool:
    """True when ``pid`` runs (a zombie does not) and, if ``start`` is given, started then."""
    try:
        proc = psutil.Process(pid)
        if start is not None and proc.create_time() != start:
            return False
        return proc.status() not in _DEAD
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True


def _member(proc: psutil.Process) -> Member | None:
    try:
        with proc.oneshot():
            if proc.status() in _DEAD:
                return None
            try:
                cmd = " ".join(proc.cmdline())
            except (psutil.AccessDenied, psutil.ZombieProcess):
                cmd = ""
            try:
                exe = proc.exe()
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                exe = ""
            return Member(proc.pid, proc.create_time(), proc.name(), cmd, exe)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def tree(pid: int, start: float | None = None) -> list[Member]:
    """``pid`` (when it is the process that started at ``start``) and its live descendants."""
    try:
        root = psutil.Process(pid)
        if start is not None and root.create_time() != start:
            return []
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [m for m in (_member(p) for p in procs) if m is not None]


def group(pgid: int) -> list[Member]:
    """Live processes whose process group is ``pgid``."""
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
        except (ProcessLookupError, PermissionError, OSError):
            continue
        m = _member(proc)
        if m is not None:
            out.append(m)
    return out


_ANY_ADDRESS = ("0.0.0.0", "::")


def listeners(host: str, port: int) -> list[Member | int | None]:
    """The processes listening on TCP ``port`` where a connection to ``host`` lands (that
    address, or every address): a ``Member`` each, the bare pid of one that ended meanwhile,
    None for a socket whose process this user cannot see (another user's). Empty when no
    listener is visible here (none yet, or one in another network namespace)."""
    wanted = {host, f"::ffff:{host}", *_ANY_ADDRESS}
    try:
        sockets = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    pids = {c.pid for c in sockets if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
            and c.laddr.ip in wanted}
    out: list[Member | int | None] = []
    for pid in sorted(pids, key=lambda p: -1 if p is None else p):
        if pid is None:
            out.append(None)
            continue
        try:
            member = _member(psutil.Process(pid))
        except psutil.NoSuchProcess:
            member = None
        out.append(member if member is not None else pid)
    return out


def cpu_seconds(pgid: int) -> float | None:
    """CPU seconds (user + system, with the reaped children each counts) the live members of
    process group ``pgid`` have used; None when the group has no member."""
    total, seen = 0.0, False
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
            t = proc.cpu_times()
        except (ProcessLookupError, PermissionError, OSError, psutil.Error):
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
        seen = True
    return total if seen else None


def _signal(member: Member, sig: int) -> None:
    try:
        proc = psutil.Process(member.pid)
        if proc.create_time() == member.start:
            proc.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        pass


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group that still has members (an empty group's id can be reused)."""
    if not group(pgid):
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end(members: list[Member], grace_s: float, *, pgid: int | None = None, kill_wait_s: float = 5.0) -> list[Member]:
    """End ``members`` (and group ``pgid``, if given): TERM, up to ``grace_s`` for them to go,
    KILL, up to ``kill_wait_s`` more. Returns the members still alive after that."""
    def left() -> list[Member]:
        return [m for m in members if alive(m.pid, m.start)]

    def send(sig: int) -> None:
        if pgid is not None:
            signal_group(pgid, sig)
        for m in left():
            _signal(m, sig)

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        if not left() and (pgid is None or not group(pgid)):
            return []
        send(sig)
        deadline = time.monotonic() + max(0.0, wait_s)
        while time.monotonic() < deadline:
            if not left() and (pgid is None or not group(pgid)):
                return []
            time.sleep(_POLL_S)
    return left()
