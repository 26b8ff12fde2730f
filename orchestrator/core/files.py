"""Files: written whole (a temporary file beside them, then renamed), and read from the end.

A reader (a status command, a cleanup, a report) sees the old document or the new one,
never half of one, even when the writer is killed mid-write. ``read_tail`` reads the last
lines of a log that may be large and still growing, without reading all of it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text(path: Path | str, text: str) -> Path:
    """Replace ``path`` with ``text`` in one rename (flushed to disk first)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
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
