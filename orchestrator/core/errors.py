"""One exception root for everything ncclsweep reports to a user.

    NcclsweepError                 any failure the CLI prints as one line
    ├── BadInput                   exit 2: a job, space, flag or file the user must fix
    │   └── ConfigRejected         a configuration a backend cannot express (found at validate time)
    └── RuntimeFailure             exit 1: something broke while running (storage, Ray, a lock)
        ├── StudyLocked            another live driver owns the study
        ├── CircuitOpen            the study stopped itself after repeated failures
        └── StorageWriteError      a file of the study could not be written (disk full, ...)

Only ``orchestrator.cli`` catches these, prints ``str(exc)`` and picks the exit code.
A failed *trial* is not an exception: it is data (see ``orchestrator.core.records``).

``brief(value)`` is how every message shows a user's value: its repr cut to a short prefix,
computed in bounded time and memory however large the value is. A ``BadInput`` is one line
and at most ``MAX_MESSAGE`` characters, whatever went into it.
"""

import errno
import os
import reprlib
from typing import Any

BRIEF_CHARS = 80  # the longest rendering of a user's value in a message
MAX_MESSAGE = 2000  # the longest BadInput line; real ones are a few hundred characters


def _make_repr():
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlong = 3, BRIEF_CHARS - 10, BRIEF_CHARS - 10, 40
    r.maxlist = r.maxtuple = r.maxset = r.maxfrozenset = r.maxdeque = r.maxarray = 6
    r.maxdict = 4
    return r


_REPR = _make_repr()


def brief(value: Any) -> str:
    """``repr(value)`` cut to a short prefix: what a message shows of a user's value (reprlib
    stops after a few levels and items, so a huge or self-referencing value costs nothing)."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails (an integer past Python's digit limit)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= BRIEF_CHARS else text[: BRIEF_CHARS - 3] + "..."


class NcclsweepError(Exception):
    """Root of every error the CLI reports as one line."""

    exit_code = 1


class BadInput(NcclsweepError):
    """Input the user must fix; the message names the file, the key path and what is allowed."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.file = file
        self.key = key if key is None or len(key) <= 4 * BRIEF_CHARS else key[: 4 * BRIEF_CHARS - 3] + "..."
        where = ": ".join(part for part in (file, self.key) if part)
        text = (f"{where}: {message}" if where else message).replace("\n", " ")
        super().__init__(text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "...")


class ConfigRejected(BadInput):
    """A configuration the backend cannot express, or NCCL would refuse."""


class RuntimeFailure(NcclsweepError):
    """Something broke while running; the study stays resumable."""

    exit_code = 1


class StudyLocked(RuntimeFailure):
    """A second driver tried to run a study whose owner is alive."""


class CircuitOpen(RuntimeFailure):
    """Too many consecutive failures, or GPUs unusable after a teardown."""


# What to do about a write that failed, by errno (strerror names the cause itself).
_WRITE_HINTS = {
    errno.ENOSPC: "free space there",
    errno.EDQUOT: "free space there (a disk quota is full)",
    errno.EFBIG: "the file reached a size limit (ulimit -f, or the file system's)",
    errno.EROFS: "make it writable (the file system is mounted read-only)",
    errno.EACCES: "check the folder's permissions",
    errno.EPERM: "check the folder's permissions",
    errno.EIO: "check the disk (dmesg)",
}
_FULL_OR_READ_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def is_file_write_failure(exc: OSError) -> bool:
    """A file system refusing a write: no space, quota, file too big, read-only (errors that
    mean nothing else; a permission error may be a command that cannot be executed)."""
    return exc.errno in _FULL_OR_READ_ONLY


class StorageWriteError(RuntimeFailure):
    """A write into the study's folder failed (no space, quota, read-only, I/O error): the
    one line names the folder and the cause; what was written before stays readable."""

    def __init__(self, folder, exc: OSError, name: str | None = None):
        self.folder = str(folder)
        self.errno = exc.errno
        self.cause = exc.strerror or str(exc)
        self.name = name or (os.path.basename(exc.filename) if isinstance(exc.filename, str) else None)
        self.hint = _WRITE_HINTS.get(exc.errno or 0, "fix that")
        super().__init__(f"{self.where}; {self.hint}, then run again")

    @property
    def where(self) -> str:
        """``cannot write to FOLDER: CAUSE (writing FILE)``."""
        return f"cannot write to {self.folder}: {self.cause}" + (f" (writing {self.name})" if self.name else "")

    def to_dict(self) -> dict:
        """Plain data, for a trial's record (an actor's failure travels back as data)."""
        return {"folder": self.folder, "errno": self.errno, "cause": self.cause, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict) -> "StorageWriteError":
        return cls(data.get("folder", "?"), OSError(data.get("errno"), data.get("cause", "write failed")),
                   data.get("name"))
