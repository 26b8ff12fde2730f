"""The study's journal file: written only at line boundaries, repaired before a write.

Optuna's journal is one JSON record per line, appended; its reader takes a line only when
it ends in a newline and parses, and stops with an error at a bad line that has any line
after it. A crash, a power loss or a full disk in the middle of an append leaves a partial
last line. Readers skip it, but the next append would be glued onto it, and from then on
the study could not be read at all. So:

- ``open_storage(path, writable=True)`` (``ncclsweep run``: the only writer) repairs the
  file before anything is written: it is cut at the end of its last complete record
  (a line that ends in a newline and parses; a JSON record without its newline is not
  one: its writer never saw it written), and what follows goes to a side file next to it
  (``<name>.incomplete-<UTC time>``, byte for byte, never overwriting an earlier one), with
  one warning saying so. A partial line that a later append was glued onto (by an earlier
  ncclsweep, which then failed on it) is cut the same way, with the records that run
  appended: nobody could read them. A journal whose lines are all complete records is not
  touched. A bad line of any other kind with records after it is refused with one line:
  nothing can read that study, and cutting it would hide records.
- Every append (``JournalFile.append_logs``) happens under Optuna's own lock file, checks
  first that the file ends at a line boundary (repairing it if not), and a write that
  fails (any ``OSError``: no space, quota, read-only, I/O) is cut back to where it began
  and raised as ``StorageWriteError``: the file holds whole records only, readable and
  resumable.
- Read-only commands (``writable=False``) never change the file; they read what Optuna
  reads (a partial last line is skipped).
- A record edited by hand that Optuna cannot apply (a parameter whose stored value is not a
  point of its own distribution: a categorical index out of range, a number outside its
  bounds, a distribution that does not parse) would make every command fail on the whole
  study: it is left out when the journal is read, named once in a warning (which record,
  which trial and parameter); the trial is read from the rest of its record, which
  ``history`` checks against itself.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from orchestrator.core.errors import RuntimeFailure, StorageWriteError

log = logging.getLogger(__name__)

RECORD_START = b'{"op_code":'  # how Optuna writes every record (json.dumps, compact, op_code first)
SET_TRIAL_PARAM = 5  # Optuna's journal operation that sets a trial's parameter (JournalOperation)
LONGEST_LINE = 256 << 20  # a "line" longer than this is damage, not a record (bounded memory)
_CHUNK = 1 << 20


class JournalFile(JournalFileBackend):
    """Optuna's journal file backend, appending only onto whole lines (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock = JournalFileSymlinkLock(str(self.path))  # the lock Optuna's own appends take
        super().__init__(str(self.path), lock_obj=self.lock)

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        """Optuna's records, less those it could not apply (module docstring)."""
        for number, record in enumerate(super().read_logs(log_number_from), start=log_number_from):
            problem = bad_param(record)
            if problem is None:
                yield record
                continue
            if (self.path, number) not in _WARNED:
                _WARNED.add((self.path, number))
                log.warning("%s: record %d (trial id %s) is left out: %s (edited by hand?); the trial is read "
                            "from the rest of its record", self.path, number + 1, record.get("trial_id"), problem)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = ("\n".join(json.dumps(r, separators=(",", ":")) for r in logs) + "\n").encode("utf-8")
        with _writing(self.path), _locked(self.lock):
            if not _ends_at_line_boundary(self.path):
                _repair_locked(self.path)  # a crash left a partial line since we opened it
            _append(self.path, data)


_WARNED: set[tuple[Path, int]] = set()  # records already named in this process


def bad_param(record: dict[str, Any]) -> str | None:
    """Why Optuna could not apply a parameter record (None: it can, or it is another record):
    its distribution does not parse, or its stored value is not one of its points."""
    if not isinstance(record, dict) or record.get("op_code") != SET_TRIAL_PARAM:
        return None
    name, value = record.get("param_name"), record.get("param_value_internal")
    try:
        dist = optuna.distributions.json_to_distribution(str(record.get("distribution")))
    except Exception:  # noqa: BLE001 - any damage of the distribution's JSON
        return f"parameter {name!r} has a distribution that does not parse"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return f"parameter {name!r} holds {value!r}, not a number"
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        if value != int(value) or not 0 <= value < len(dist.choices):
            return f"parameter {name!r} holds choice index {value!r} of {len(dist.choices)} choices"
    elif isinstance(dist, (optuna.distributions.IntDistribution, optuna.distributions.FloatDistribution)):
        if not dist.low <= value <= dist.high:
            return f"parameter {name!r} holds {value!r}, outside its range {dist.low}..{dist.high}"
    return None


def _append(path: Path, data: bytes) -> None:
    """Append ``data`` and fsync it, unbuffered (nothing left to flush later); a write that
    fails is cut back to where it began (best effort: after a power loss the next repair
    does it)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def open_storage(path: str | os.PathLike[str], *, writable: bool) -> optuna.storages.JournalStorage:
    """The journal at ``path`` as Optuna storage; ``writable``: created if missing and
    repaired first (``repair``). A journal Optuna cannot read is one RuntimeFailure line."""
    path = Path(path)
    if writable:
        with _writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.touch()
        repair(path)
    try:
        return optuna.storages.JournalStorage(JournalFile(path))  # replays the file: a bad line raises here
    except ValueError as exc:
        raise unreadable(path, exc) from None


def unreadable(path: str | os.PathLike[str], exc: Exception) -> RuntimeFailure:
    """The one line for a journal Optuna could not read, saying whether ``ncclsweep run``
    repairs it (read only: nothing is changed here)."""
    path = Path(path)
    try:
        damage = _damage(path)
    except RuntimeFailure as refused:
        return refused
    except OSError as err:
        return RuntimeFailure(f"cannot read {path}: {err}")
    if damage is None:
        return RuntimeFailure(f"cannot read the study in {path}: {type(exc).__name__}: {exc}")
    return RuntimeFailure(f"{path} holds an incomplete write (a crash or a full disk while it was written) "
                          f"that Optuna cannot read past; `ncclsweep run` moves it to a side file before it writes "
                          f"anything, keeping every complete record")


def repair(path: str | os.PathLike[str]) -> Path | None:
    """Move the bytes of incomplete writes out of the journal (module docstring), under the
    journal's lock; the side file they went to, or None when nothing was incomplete."""
    path = Path(path)
    with _writing(path), _locked(JournalFileSymlinkLock(str(path))):
        return _repair_locked(path)


def _repair_locked(path: Path) -> Path | None:
    damage = _damage(path)
    if damage is None:
        return None
    keep, size, records_after = damage
    side = _side_file(path)
    try:
        with open(path, "rb") as src, open(side, "xb") as out:
            src.seek(keep)
            while chunk := src.read(_CHUNK):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.truncate(path, keep)
    except OSError:
        side.unlink(missing_ok=True)
        raise
    after = (f", with the {records_after} record(s) a later run appended onto it before it failed on it"
             if records_after else "")
    log.warning("%s ended in an incomplete write (%d byte(s)%s: a crash, a power loss or a full disk while it was "
                "written): moved to %s; every complete record before it is kept", path, size - keep, after, side.name)
    return side


def _damage(path: Path) -> tuple[int, int, int] | None:
    """Where the journal's complete records end, its size, and how many records follow the
    first incomplete one (appended onto it); None when every line is a complete record. A
    bad line with records after it that is not such a glued write: RuntimeFailure."""
    bad: tuple[int, int, bool] | None = None  # offset, line number, glued
    records_after = 0
    offset = 0
    with open(path, "rb") as fh:
        for number, line in enumerate(_lines(fh), start=1):
            record = _is_record(line)
            if bad is None and not record:
                bad = (offset, number, _glued_record(line) is not None)
            elif bad is not None and record:
                if not bad[2]:
                    raise RuntimeFailure(
                        f"{path}: line {bad[1]} is not a journal record and records follow it, so the study "
                        "cannot be read; it is not the partial write of a crash that ncclsweep moves aside: copy "
                        "the file, remove that line by hand and run again")
                records_after += 1
            offset += len(line)
    if bad is None:
        return None
    return bad[0], offset, records_after


def _lines(fh) -> Iterator[bytes]:
    """The file's lines, each at most LONGEST_LINE bytes (a longer one comes in pieces, none
    of which is a record)."""
    while True:
        line = fh.readline(LONGEST_LINE)
        if not line:
            return
        yield line


def _is_record(line: bytes) -> bool:
    """A whole journal record: newline-terminated JSON object with an op_code."""
    if not line.endswith(b"\n"):
        return False
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and "op_code" in record


def _glued_record(line: bytes) -> int | None:
    """Where a whole record starts inside a line that is not one (a partial write with a
    later record appended onto it), or None."""
    at = line.find(RECORD_START, 1)
    while at > 0:
        if _is_record(line[at:]):
            return at
        at = line.find(RECORD_START, at + 1)
    return None


def _side_file(path: Path) -> Path:
    """``<name>.incomplete-<UTC time>`` beside the journal; never an existing file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = path.with_name(f"{path.name}.incomplete-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.incomplete-{stamp}-{n}")
    return candidate


def _ends_at_line_boundary(path: Path) -> bool:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return True
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


@contextmanager
def _locked(lock: JournalFileSymlinkLock) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        try:
            lock.release()
        except RuntimeError:  # taken from us after Optuna's grace period: nothing to release
            pass


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while writing the journal (or its lock or side file) is a StorageWriteError."""
    try:
        yield
    except OSError as exc:
        raise StorageWriteError(path.parent, exc, path.name) from exc
