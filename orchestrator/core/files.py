"""Files: written whole (a temporary file beside them, then renamed), and read from the end.

A reader (a status command, a cleanup, a report) sees the old document or the new one,
never half of one, even when the writer is killed mid-write or the disk fills: the
temporary file is flushed to disk before the rename, and removed when anything failed.
Every file the tool writes goes through here; ``write_whole`` is what a command uses (a
refusal becomes the one line ``cannot write to FOLDER: cause``, exit 1), ``write_text`` and
``write_bytes`` what a caller that handles ``OSError`` itself uses. ``read_tail`` reads the
last lines of a log that may be large and still growing, without reading all of it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from orchestrator.core.errors import StorageWriteError


def write_bytes(path: Path | str, data: bytes, *, mode: int | None = None) -> Path:
    """Replace ``path`` with ``data`` in one rename (flushed to disk first); ``mode``: its
    permission bits (default: a new file's, as ``open`` would make it). Raises ``OSError``;
    whatever failed, ``path`` is as it was and no temporary file is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), _new_file_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(path.parent)
    return path


def write_text(path: Path | str, text: str, *, mode: int | None = None) -> Path:
    """``write_bytes`` of ``text`` in UTF-8 (a text that cannot be encoded changes nothing)."""
    return write_bytes(path, text.encode("utf-8"), mode=mode)


def write_whole(path: Path | str, data: str | bytes, *, mode: int | None = None) -> Path:
    """``write_text``/``write_bytes`` for a command: a file system that refuses the write (no
    space, a size limit, read-only, permissions) is ``StorageWriteError`` naming the folder and
    the cause, and the file is as it was (absent, or the previous whole one)."""
    path = Path(path)
    try:
        if isinstance(data, str):
            return write_text(path, data, mode=mode)
        return write_bytes(path, data, mode=mode)
    except OSError as exc:
        raise StorageWriteError(path.parent, exc, name=path.name) from exc


def _new_file_mode() -> int:
    """The permission bits ``open`` gives a new file (0666 less the umask): ``mkstemp``'s 0600
    would make a report or an export unreadable to the user's other accounts. Read from
    /proc where it is (setting the umask to read it is not safe beside other threads)."""
    try:
        with open("/proc/self/status") as fh:
            umask = next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def _sync_folder(folder: Path) -> None:
    """Flush the rename itself to disk (best effort: some file systems cannot sync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
