"""The errors a user sees (core/errors.py): a user's value is shown as a short prefix at bounded
cost however large or strange it is; a BadInput is one line of bounded length naming file and
key; a failed write into the study folder is one line naming the folder, the cause and what to
do (from a real full device), and travels back from a worker as plain data."""

from __future__ import annotations

import errno

import pytest

from orchestrator.core.errors import (
    BRIEF_CHARS,
    MAX_MESSAGE,
    BadInput,
    CircuitOpen,
    ConfigRejected,
    RuntimeFailure,
    StorageWriteError,
    StudyLocked,
    brief,
    is_file_write_failure,
)


def test_a_value_is_shown_as_a_short_prefix_whatever_it_is():
    loop: list = []
    loop.append(loop)
    deep: list = [[[[[["x" * 10_000]]]]]]
    huge = {f"k{i}": "v" * 1000 for i in range(100_000)}
    for value in ("y" * 1_000_000, loop, deep, huge, 10 ** 5000, b"\xff" * 100_000, range(10**12)):
        shown = brief(value)
        assert 0 < len(shown) <= BRIEF_CHARS, shown
    assert brief("LL129") == "'LL129'" and brief(8) == "8"  # short values as written, quoted strings
    assert brief(10 ** 5000) == "<int>"  # past Python's digit limit: named, not printed


def test_bad_input_is_one_line_naming_file_and_key():
    exc = BadInput("must be an integer >= 1,\nnot 'two'", file="job.yaml", key="budget.trials")
    assert str(exc) == "job.yaml: budget.trials: must be an integer >= 1, not 'two'"
    assert (exc.file, exc.key, exc.exit_code) == ("job.yaml", "budget.trials", 2)
    assert str(BadInput("no file given")) == "no file given"
    long = BadInput("x" * 10_000, file="space.yaml", key="params." + "p" * 10_000)
    assert len(str(long)) <= MAX_MESSAGE and "\n" not in str(long) and str(long).endswith("...")
    assert len(long.key) <= 4 * BRIEF_CHARS
    assert isinstance(ConfigRejected("x"), BadInput) and ConfigRejected("x").exit_code == 2
    for runtime in (RuntimeFailure("x"), StudyLocked("x"), CircuitOpen("x")):
        assert runtime.exit_code == 1


def test_a_write_into_a_full_folder_is_one_line_with_what_to_do(tmp_path):
    with pytest.raises(OSError) as info, open("/dev/full", "w") as full:
        full.write("a trial record")
        full.flush()
    assert info.value.errno == errno.ENOSPC and is_file_write_failure(info.value)
    stop = StorageWriteError(tmp_path, info.value, name="study.journal")
    assert stop.where == f"cannot write to {tmp_path}: No space left on device (writing study.journal)"
    assert str(stop) == f"{stop.where}; free space there, then run again" and stop.exit_code == 1
    back = StorageWriteError.from_dict(stop.to_dict())  # what a trial's record carries back from its node
    assert (back.where, back.hint, back.errno) == (stop.where, stop.hint, errno.ENOSPC)


def test_only_a_full_or_read_only_file_system_stops_the_run():
    """A permission error may be a command that cannot be executed (the node's, not the disk's)."""
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS):
        assert is_file_write_failure(OSError(code, "x"))
    for code in (errno.EACCES, errno.ENOENT, errno.EIO):
        assert not is_file_write_failure(OSError(code, "x"))
    assert StorageWriteError("/s", OSError(errno.EROFS, "Read-only file system")).hint == \
        "make it writable (the file system is mounted read-only)"
    assert StorageWriteError("/s", OSError(errno.ENOTSUP, "Operation not supported")).hint == "fix that"
