"""Rank processes of the reference server: spawn, tie to the parent, watch, end.

Rank 0 is the process that was launched; it spawns ranks 1..N-1 as children running
``python -m orchestrator.refserver ... --rank K --master-port P`` with the inherited
environment (so NCCL_* reaches NCCL unchanged). The ranks meet on loopback only: rank 0's
rendezvous store listens on 127.0.0.1 (``loopback_listener``), and gloo's connections use
the loopback interface (``LOOPBACK_ENV``): the server's ranks are one machine's. Children stay in rank 0's process group
(no new session), so killing the group ends the whole server. Each child asks the kernel
for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``) and exits at once if the parent is
already gone. SIGTERM keeps its default action everywhere: the process ends at once,
even inside a blocking collective, and the children follow by the parent-death signal.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time

PARENT_ENV = "NCCLSWEEP_REFSERVER_PARENT"
_PR_SET_PDEATHSIG = 1


def log(msg: str, rank: int = 0) -> None:
    sys.stderr.write(f"[refserver rank{rank}] {msg}\n")
    sys.stderr.flush()


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")


def die_with_parent(parent_env: str = PARENT_ENV) -> None:
    """In a spawned rank: get SIGKILL when the parent dies; exit now if it already has (the parent's
    pid is in the environment variable ``parent_env``, which the parent set when it spawned it)."""
    expected = os.environ.get(parent_env)
    set_parent_death_signal()
    if expected and os.getppid() != int(expected):
        os._exit(1)


def default_signals() -> None:
    """SIGTERM and SIGINT end the process immediately (no Python-level handler)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def loopback_listener() -> socket.socket:
    """A listening socket on 127.0.0.1 at a port the OS picks: the ranks' rendezvous (torch's
    TCPStore takes it as ``master_listen_fd``), held from the start, so no other process can
    take the port in between and nothing outside the machine can reach it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


# gloo opens its pair connections, and NCCL its bootstrap and socket transport, on the interface
# these name (not the host name's address, reachable from the network); a user's own setting wins
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def meet_on_loopback() -> None:
    """This rank, and the ranks it spawns, open their collective connections on loopback only
    (``LOOPBACK_ENV``), unless the environment already names an interface."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Ranks:
    """The spawned ranks 1..N-1 of this server (empty at TP=1)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self._exiting = threading.Lock()

    def spawn(self, argv: list[str], world: int, master_port: int) -> None:
        """Start ranks 1..world-1; must run on the main thread (parent-death is per thread)."""
        for rank in range(1, world):
            env = dict(os.environ)
            env.update({
                PARENT_ENV: str(os.getpid()),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(master_port),
                "WORLD_SIZE": str(world),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
            })
            cmd = [sys.executable, "-m", "orchestrator.refserver", *argv,
                   "--rank", str(rank), "--master-port", str(master_port)]
            self.procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                               close_fds=True))

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def exit(self, code: int, msg: str | None = None) -> None:
        """End the whole server now: kill the ranks, reap them, ``os._exit(code)``."""
        with self._exiting:
            if msg:
                log(msg)
            self.kill()
            sys.stderr.flush()
            os._exit(code)

    def watch(self, interval_s: float = 0.2) -> None:
        """Background thread: if any rank exits, the server exits 1."""
        def run() -> None:
            while True:
                for rank, p in enumerate(self.procs, start=1):
                    code = p.poll()
                    if code is not None:
                        self.exit(1, f"rank {rank} exited with code {code}; stopping the server")
                time.sleep(interval_s)

        if self.procs:
            threading.Thread(target=run, name="rank-watch", daemon=True).start()


def end_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End a process started in its own session (its group id is its pid): SIGTERM to the
    group, SIGKILL to what is left after ``grace_s``, then reap ``proc``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            proc.poll()
            time.sleep(0.05)
        else:
            continue
        break
    proc.wait()
