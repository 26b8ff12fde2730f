"""One driver per study: refuse a live owner, take over from a dead one."""

import json
import subprocess
import sys

import pytest

from orchestrator.core.errors import StudyLocked
from orchestrator.driver.lock import DriverLock


def test_second_driver_is_refused_while_the_first_lives(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys,time; from orchestrator.driver.lock import DriverLock; "
        f"l=DriverLock(__import__('pathlib').Path({str(tmp_path / 'driver.lock')!r})); l.acquire(); "
        "print('locked', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StudyLocked, match=f"pid {holder.pid}"):
            DriverLock(tmp_path / "driver.lock").acquire()
    finally:
        holder.kill()
        holder.wait()
    # owner dead now: the lock is taken over
    lock = DriverLock(tmp_path / "driver.lock")
    lock.acquire()
    assert json.loads((tmp_path / "driver.lock").read_text())["pid"] != holder.pid
    lock.release()
    assert not (tmp_path / "driver.lock").exists()


def test_a_reused_pid_with_another_start_time_is_not_an_owner(tmp_path):
    import os
    import socket

    (tmp_path / "driver.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                                       "start_time": 1.0}))
    with DriverLock(tmp_path / "driver.lock"):
        pass


def test_a_driver_killed_with_sigkill_frees_the_lock_at_once(tmp_path):
    """The kernel releases the OS lock of a dead holder: no stale file to outwit."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from orchestrator.driver.lock import DriverLock; "
        f"DriverLock(Path({str(tmp_path / 'driver.lock')!r})).acquire(); print('locked', flush=True); "
        "time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    assert json.loads((tmp_path / "driver.lock").read_text())["pid"] == holder.pid  # the file stayed
    with DriverLock(tmp_path / "driver.lock") as lock:
        assert lock.held
    assert not (tmp_path / "driver.lock").exists()


def test_a_full_disk_refuses_the_lock_in_one_line_and_leaves_no_lock_file(tmp_path):
    """The owner line cannot be written (a full tmpfs): the one line every refused write gives,
    and no empty lock file naming nobody is left behind."""
    from conftest import fill_disk, mounted_tmpfs
    from orchestrator.core.errors import StorageWriteError

    with mounted_tmpfs(tmp_path / "disk", "64k") as disk:
        (disk / "study").mkdir()
        fill_disk(disk)
        with pytest.raises(StorageWriteError) as info:
            DriverLock(disk / "study" / "driver.lock").acquire()
        assert str(info.value).startswith(f"cannot write to {disk / 'study'}: No space left on device "
                                          "(writing driver.lock); free space there")
        assert list((disk / "study").iterdir()) == []


def test_status_says_when_a_running_trial_has_no_driver(tmp_path, capsys):
    """Between a killed driver and the next run, `status` shows its trial RUNNING and says that
    no driver runs it (naming the dead one from the lock file); while a driver holds the lock,
    it says nothing."""
    import socket

    import recorded_study as fx

    from conftest import write_job
    from orchestrator.cli import main

    fx.build_study(tmp_path)  # study "demo": trial 11 RUNNING
    job = write_job(tmp_path, study="demo")
    lock = tmp_path / "reports" / "demo" / "driver.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from orchestrator.driver.lock import DriverLock; "
        f"DriverLock(Path({str(lock)!r})).acquire(); print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["status", str(job)]) == 0
        assert "no driver runs the study" not in capsys.readouterr().out  # a live driver runs it
    finally:
        holder.kill()  # as kill -9: its lock file stays, its lock goes with it
        holder.wait()
    assert main(["status", str(job)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (f"note: #11 is RUNNING, but no driver runs the study (its driver, pid {holder.pid} on "
                    f"{socket.gethostname()}, is gone): it was stopped before it recorded how it ended; "
                    f"`ncclsweep run {job}` records it as interrupted and measures its config again")
    assert main(["status", str(job), "--json"]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["trials"] and got.err.strip() == last  # the records stay JSON; the note goes to stderr
    assert lock.exists()  # status only read it
