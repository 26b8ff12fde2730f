"""Files written whole and read from the end (core/files.py): a reader sees the old document or
the new one, never half of one, even when the writer is killed mid-write (a real writer
process, SIGKILLed); a write that fails leaves the old document and no temporary file; the
tail of a log is its last lines, read without reading all of it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from orchestrator.core.files import read_tail, write_text

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
