"""One driver per study: an OS file lock, held for the life of the ``run``.

``flock`` on ``driver.lock`` is released by the kernel when its holder dies, however it
dies (kill -9 included): no stale-owner detection, no takeover logic, no race between
two drivers that both find a dead owner. The owner (host, pid, start time) is written
into the locked file for the message a second ``run`` prints. The file is removed on
release; a driver that acquired a file just unlinked by its previous holder notices
(the path no longer names the file it locked) and tries again.

(The ``filelock`` package was not used: where the OS lock is unavailable it falls back
to a "soft" lock, a file whose existence is the lock, which a kill -9 leaves behind.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from orchestrator.core.errors import StorageWriteError, StudyLocked
from orchestrator.node.server import process_start_time


def holder(path: Path) -> dict | None:
    """The owner line of the live driver that holds the lock at ``path`` ({} when it holds it
    without one yet), None when no driver holds it (none ever ran, it ended, or it was killed:
    the kernel released its lock). Reads only: never creates the file nor keeps a lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return DriverLock(path).owner() or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class DriverLock:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def owner(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def acquire(self) -> None:
        """Take the lock, or ``StudyLocked`` naming its live owner; ``StorageWriteError`` when the
        study's folder refuses the lock file (a full disk: the one line every write gives)."""
        try:
            self._acquire()
        except OSError as exc:
            raise StorageWriteError(self.path.parent, exc, name=self.path.name) from exc

    def _acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                owner = self.owner() or {}
                raise StudyLocked(f"study is being run by pid {owner.get('pid', '?')} on {owner.get('host', '?')} "
                                  f"(lock {self.path}); wait for it or stop it first") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # its holder removed it between our open and our lock: take the new one
                os.close(fd)
                continue
            pid = os.getpid()
            me = {"host": socket.gethostname(), "pid": pid, "start_time": process_start_time(pid)}
            try:
                os.ftruncate(fd, 0)
                os.write(fd, json.dumps(me).encode())
            except OSError:
                self._fd = fd
                self.release()  # an owner line cut short names nobody: no lock file stays behind
                raise
            self._fd = fd
            return
        raise StudyLocked(f"could not take the study lock {self.path}")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still locked: nobody holds a lock on a removed file
        finally:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None

    def __enter__(self) -> "DriverLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
