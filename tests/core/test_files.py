"""Files written whole and read from the end (core/files.py): a reader sees the old document or
the new one, never half of one, even when the writer is killed mid-write (a real writer
process, SIGKILLed); a write that fails leaves the old document and no temporary file; the
tail of a log is its last lines, read without reading all of it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from orchestrator.core.files import read_tail, write_text, write_whole

# A writer that rewrites one JSON document (about 2 MB) as fast as it can, numbering each version.
WRITER = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from orchestrator.core.files import write_text
n = 0
while True:
    write_text(sys.argv[1], json.dumps({{"version": n, "filler": "x" * 2_000_000}}))
    n += 1
    if n == 2:
        print("writing", flush=True)
"""


def test_a_writer_killed_mid_write_leaves_a_whole_document(tmp_path):
    path = tmp_path / "compare.json"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        seen = set()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # read while it writes: every read is one whole version
            doc = json.loads(path.read_text())
            assert len(doc["filler"]) == 2_000_000
            seen.add(doc["version"])
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(10)
    last = json.loads(path.read_text())  # the kill landed somewhere in a write: still a whole document
    assert len(last["filler"]) == 2_000_000 and last["version"] >= max(seen)
    assert len(seen) > 1  # the reads overlapped writes of several versions


def test_a_write_that_fails_keeps_the_old_document_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "records" / "server.json"
    write_text(path, '{"pid": 1}')  # the folder is made
    with pytest.raises(UnicodeEncodeError):
        write_text(path, '{"pid": "\udcff"}')  # a lone surrogate cannot be written: the write fails midway
    assert path.read_text() == '{"pid": 1}'
    assert [p.name for p in path.parent.iterdir()] == ["server.json"]
    with pytest.raises(OSError):
        write_text("/dev/full/x.json", "{}")  # no such folder can be made


def test_the_tail_is_the_last_lines_read_from_the_end(tmp_path):
    log = tmp_path / "trial-0001.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)) + b"bad \xff byte\nlast")
    assert read_tail(log, 3).splitlines() == ["line 199999", "bad \ufffd byte", "last"]
    assert read_tail(log, 10**9, max_bytes=64).splitlines()[-1] == "last"  # at most 64 bytes were read
    assert len(read_tail(log, 10**9, max_bytes=64)) <= 64
    assert read_tail(log, 0) == ""
    assert read_tail(tmp_path / "missing.log") == ""


# Every file the tool writes goes through this module (whole or absent), but for these, each
# with its own rule for a partial write: a pattern that writes a file anywhere else fails here.
WRITES = re.compile(r"""\bopen\([^)]*["'][rb]*[wax+][rwabx+]*["']|(?<!files)\.write_(text|bytes)\(|\.savefig\(|"""
                    r"""\.to_csv\(|json\.dump\(|\bos\.open\([^)]*O_(WRONLY|RDWR|CREAT)|\bos\.write\(|"""
                    r"""FileHandler\b|\.touch\(|shutil\.(copy|move)""")
OWN_RULES = {
    "orchestrator/core/files.py": "the one writer: a temporary file, flushed, renamed",
    "orchestrator/study/storage/journal.py": "the journal: appended at line boundaries, a partial line moved aside",
    "orchestrator/node/server.py": "a server's log: a stream the server itself appends to",
    "orchestrator/driver/lock.py": "the lock file is the locked inode; a failed owner line removes it",
    "orchestrator/core/logs.py": "driver.log: a stream of lines; a failed write stops the run",
    "orchestrator/refserver/export_hf.py": "a program of its own: the checkpoint into a folder beside, then renamed",
    "orchestrator/refserver/benchmark.py": "a program of its own: a log stream, the JSON through a renamed file",
    "orchestrator/results/report/plots.py": "a figure rendered in memory, then written by files.write_whole",
    "orchestrator/results/report/__init__.py": "trials.csv rendered in memory, then written by files.write_whole",
    "orchestrator/cli.py": "standard output pointed at /dev/null after it failed",
}


def test_no_module_writes_a_file_but_through_this_one():
    found = {}
    for path in sorted((REPO / "orchestrator").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if WRITES.search(line)]
        if hits and rel not in OWN_RULES:
            found[rel] = hits
    assert not found, f"files written without core.files (whole or absent): {found}"
    assert all((REPO / rel).exists() for rel in OWN_RULES)


def test_a_refused_write_is_one_line_naming_the_folder_and_leaves_the_file_as_it_was(tmp_path):
    """A file size limit (ulimit -f: the write fails with EFBIG part way, as on a full disk)."""
    import os

    path = tmp_path / "out" / "report.html"
    write_whole(path, "<p>old</p>")
    script = (f"import resource, sys; sys.path.insert(0, {str(REPO)!r}); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
              "from orchestrator.core.files import write_whole\n"
              "from orchestrator.core.errors import StorageWriteError\n"
              f"try:\n    write_whole({str(path)!r}, 'x' * 100_000)\n"
              "except StorageWriteError as exc:\n    print(exc)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == (f"cannot write to {path.parent}: File too large (writing report.html); the file "
                                   "reached a size limit (ulimit -f, or the file system's), then run again"), done
    assert path.read_text() == "<p>old</p>" and os.listdir(path.parent) == ["report.html"]
