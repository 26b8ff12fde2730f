"""The journal is written only at line boundaries: a journal a crash cut in the middle of a
write (at any byte of its last line), a complete record that lost its newline, a journal that
is only half a line, and one an earlier ncclsweep appended onto a partial line are repaired
before anything is written (the incomplete bytes moved to a side file, every complete record
kept); an intact journal is not touched; read-only commands never change the file; a write
that fails (a file size limit, as a full disk) is cut back and named in one line. Real files:
the CPU study recorded in tests/data/recorded, read and written through Optuna."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from orchestrator.core.errors import RuntimeFailure
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage import journal
from orchestrator.study.storage.storage import storage_for

REPO = Path(__file__).resolve().parents[3]
RECORDED = REPO / "tests/data/recorded/cpu-faults/study.journal"
STUDY = "cpu-faults"


@pytest.fixture(scope="module")
def recorded() -> bytes:
    return RECORDED.read_bytes()


def lines_of(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def rows_of(path: Path) -> list[tuple]:
    """What `status` shows of the study in ``path`` (read only)."""
    study = optuna.load_study(study_name=STUDY, storage=storage_for(f"journal:{path}", create=False))
    return [(r.number, r.state, r.value, r.counted) for r in trial_rows(study)]


def side_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".incomplete-*"))


def test_a_cut_at_any_byte_of_the_last_line_is_moved_aside_and_every_complete_record_kept(tmp_path, recorded):
    last = lines_of(recorded)[-1]
    head = recorded[: len(recorded) - len(last)]
    path = tmp_path / "study.journal"
    for cut in range(1, len(last)):  # 1 byte .. the whole record but its newline
        path.write_bytes(head + last[:cut])
        for old in side_files(path):
            old.unlink()
        side = journal.repair(path)
        assert path.read_bytes() == head, cut
        assert side is not None and side_files(path) == [side] and side.read_bytes() == last[:cut], cut
    json.loads(last[:-1])  # the longest cut is a complete JSON record without its newline: moved aside too
    assert rows_of(path) == rows_of(RECORDED)  # the last trial lost its final state only: its record is whole


def test_what_optuna_reads_of_a_cut_journal_is_what_the_repair_keeps(tmp_path, recorded):
    last = lines_of(recorded)[-1]
    for cut in (1, len(last) // 2, len(last) - 1):
        path = tmp_path / f"cut-{cut}.journal"
        path.write_bytes(recorded[: len(recorded) - len(last) + cut])
        before = rows_of(path)  # read only: status on the cut journal works and changes nothing
        assert path.read_bytes() == recorded[: len(recorded) - len(last) + cut]
        journal.repair(path)
        assert rows_of(path) == before


def test_a_journal_that_is_only_half_a_line_becomes_empty_and_takes_a_new_study(tmp_path, recorded):
    path = tmp_path / "study.journal"
    path.write_bytes(lines_of(recorded)[0][:20])
    storage = storage_for(f"journal:{path}")  # the writer's open repairs it
    assert path.read_bytes() == b"" and side_files(path)[0].read_bytes() == lines_of(recorded)[0][:20]
    optuna.create_study(study_name="new", storage=storage).set_user_attr("a", 1)
    assert [json.loads(line)["op_code"] for line in lines_of(path.read_bytes())] == [0, 2]


def test_an_intact_journal_is_not_touched(tmp_path, recorded):
    path = tmp_path / "study.journal"
    path.write_bytes(recorded)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert journal.repair(path) is None
    storage_for(f"journal:{path}")
    assert path.read_bytes() == recorded and path.stat().st_mtime_ns == 1_000_000_000
    assert side_files(path) == [] and not Path(str(path) + ".lock").exists()


def test_a_journal_an_earlier_version_appended_onto_a_partial_line_is_repaired(tmp_path, recorded):
    """What the issue saw: the next run's records glued onto the cut line, then every command
    failing. Readers say what `run` does about it; `run`'s open cuts at the partial line."""
    lines = lines_of(recorded)
    head, last = recorded[: len(recorded) - len(lines[-1])], lines[-1]
    later = [json.dumps({"op_code": 0, "worker_id": "w", "study_name": STUDY, "directions": [2]}).encode() + b"\n",
             json.dumps({"op_code": 2, "worker_id": "w", "study_id": 0, "user_attr": {"x": 1}}).encode() + b"\n"]
    path = tmp_path / "study.journal"
    path.write_bytes(head + last[:60] + b"".join(later))
    with pytest.raises(RuntimeFailure, match="`ncclsweep run` moves it to a side file"):
        storage_for(f"journal:{path}", create=False)
    assert path.read_bytes() == head + last[:60] + b"".join(later)  # read only: untouched
    side = journal.repair(path)
    assert path.read_bytes() == head and side.read_bytes() == last[:60] + b"".join(later)
    assert len(rows_of(path)) == 10


def test_a_bad_line_with_records_after_it_that_no_crash_explains_is_refused_untouched(tmp_path, recorded):
    lines = lines_of(recorded)
    damaged = b"".join(lines[:5]) + b"not a record\n" + b"".join(lines[5:])
    path = tmp_path / "study.journal"
    path.write_bytes(damaged)
    with pytest.raises(RuntimeFailure, match="line 6 is not a journal record and records follow it"):
        storage_for(f"journal:{path}")
    assert path.read_bytes() == damaged and side_files(path) == []


def test_side_files_never_overwrite_each_other(tmp_path, recorded):
    path = tmp_path / "study.journal"
    tails = []
    for cut in (10, 20, 30):
        tail = lines_of(recorded)[-1][:cut]
        path.write_bytes(recorded[: len(recorded) - len(lines_of(recorded)[-1])] + tail)
        journal.repair(path)
        tails.append(tail)
    assert sorted(p.read_bytes() for p in side_files(path)) == sorted(tails)


def test_an_append_after_another_writer_crashed_mid_line_repairs_first(tmp_path, recorded):
    path = tmp_path / "study.journal"
    path.write_bytes(recorded)
    study = optuna.load_study(study_name=STUDY, storage=storage_for(f"journal:{path}"))
    with open(path, "ab") as fh:  # another process dies in the middle of its append
        fh.write(b'{"op_code":2,"worker_id":"gone","study_id":0,"user_attr":{"half')
    study.set_user_attr("after", True)
    assert all(json.loads(line) for line in lines_of(path.read_bytes()))
    assert side_files(path)[0].read_bytes().startswith(b'{"op_code":2,"worker_id":"gone"')
    assert optuna.load_study(study_name=STUDY, storage=storage_for(f"journal:{path}", create=False)
                             ).user_attrs["after"] is True


FILL = """
import resource, signal, sys
from orchestrator.core.errors import StorageWriteError
from orchestrator.study.storage.storage import storage_for
import optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = sys.argv[1]
study = optuna.load_study(study_name="cpu-faults", storage=storage_for("journal:" + path))
import os
limit = os.path.getsize(path) + 100
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    study.set_user_attr("big", "x" * 10000)
except StorageWriteError as exc:
    print(exc)
    sys.exit(3)
"""


def test_a_write_that_fails_is_cut_back_and_named_in_one_line(tmp_path, recorded):
    """A file size limit (ulimit -f) makes the append fail part way, as a full disk does."""
    path = tmp_path / "study.journal"
    path.write_bytes(recorded)
    out = subprocess.run([sys.executable, "-c", FILL, str(path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 3, out.stdout + out.stderr
    assert out.stdout.strip() == (f"cannot write to {tmp_path}: File too large (writing study.journal); the file "
                                  "reached a size limit (ulimit -f, or the file system's), then run again")
    assert path.read_bytes() == recorded  # the part that was written is gone again
    assert rows_of(path) == rows_of(RECORDED)


def test_a_trial_whose_last_line_was_its_final_state_is_kept_as_recorded(tmp_path, recorded):
    """The last line of a finished study is its last trial's final state: cut, that trial is
    RUNNING in storage with its whole record; the next driver tells it as recorded."""
    lines = lines_of(recorded)
    path = tmp_path / "study.journal"
    path.write_bytes(recorded[:-40])
    storage = storage_for(f"journal:{path}")
    study = optuna.load_study(study_name=STUDY, storage=storage)
    policy = SearchPolicy(study, space=SimpleNamespace(), normalize=dict, baseline=None, budget=None)
    assert policy.finish_recorded() == [9]
    assert rows_of(path) == rows_of(RECORDED)
    # a cut in the constraint (set after every attribute, before the final state): not whole, not kept
    path.write_bytes(b"".join(lines[:-2]) + lines[-2][:30])
    study = optuna.load_study(study_name=STUDY, storage=storage_for(f"journal:{path}"))
    policy = SearchPolicy(study, space=SimpleNamespace(), normalize=dict, baseline=None, budget=None)
    assert policy.finish_recorded() == [] and [t.number for t in policy.pending_running()] == [9]


def test_the_repair_is_done_under_optunas_lock(tmp_path, recorded):
    """A writer holding the journal's lock (mid-append) is waited for, never raced."""
    path = tmp_path / "study.journal"
    path.write_bytes(recorded + b'{"op_code":2')
    lock = optuna.storages.journal.JournalFileSymlinkLock(str(path))
    assert lock.acquire()
    code = ("import sys; from orchestrator.study.storage import journal; print('repairing', flush=True); "
            "journal.repair(sys.argv[1])")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout.readline() == "repairing\n"
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=1.5)  # blocked on the lock
        assert path.read_bytes().endswith(b'{"op_code":2')
        with open(path, "ab") as fh:
            fh.write(b',"worker_id":"w","study_id":0,"user_attr":{"y":2}}\n')  # the holder finishes its record
    finally:
        lock.release()
    assert child.wait(timeout=60) == 0
    assert path.read_bytes() == recorded + b'{"op_code":2,"worker_id":"w","study_id":0,"user_attr":{"y":2}}\n'
    assert side_files(path) == []


