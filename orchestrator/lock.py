"""One driver per study: a lock file naming its owner (host, pid, process start time).

A second ``run`` is refused while the owner lives; a lock whose owner is dead (same
host, pid gone or reused by a process with another start time) is taken over.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from orchestrator.errors import StudyLocked
from orchestrator.server import process_start_time


class DriverLock:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.held = False

    def _me(self) -> dict:
        pid = os.getpid()
        return {"host": socket.gethostname(), "pid": pid, "start_time": process_start_time(pid)}

    def owner(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def owner_alive(owner: dict) -> bool:
        if owner.get("host") != socket.gethostname():
            return True  # cannot check another host: assume alive, say so in the message
        start = process_start_time(int(owner.get("pid", -1)))
        return start is not None and start == owner.get("start_time")

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = self._me()
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self.owner()
                if owner and self.owner_alive(owner):
                    raise StudyLocked(
                        f"study is being run by pid {owner.get('pid')} on {owner.get('host')} "
                        f"(lock {self.path}); wait for it or stop it first") from None
                self.path.unlink(missing_ok=True)  # dead owner: take over
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            self.held = True
            return
        raise StudyLocked(f"could not take the study lock {self.path}")

    def release(self) -> None:
        if self.held:
            owner = self.owner()
            if owner and owner.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> "DriverLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
