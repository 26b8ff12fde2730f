"""Files that are always whole: written to a temporary file beside them, then renamed.

A reader (a status command, a cleanup, a report) sees the old document or the new one,
never half of one, even when the writer is killed mid-write.
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
