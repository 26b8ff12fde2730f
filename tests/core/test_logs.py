"""The driver's log (core/logs.py): a driver.log that cannot be written (a full disk:
/dev/full) prints no traceback and stops the run once, with one line naming the folder."""

from __future__ import annotations

import pytest

from orchestrator.core import logs
from orchestrator.core.errors import StorageWriteError


def test_a_driver_log_that_cannot_be_written_prints_no_traceback_and_stops_the_run_once(tmp_path, capsys):
    """/dev/full refuses every write with ENOSPC, as a full disk does."""
    state = logs.configure()
    try:
        state.log_to_file("/dev/full")
        logs.progress.info("a progress line")
        with pytest.raises(StorageWriteError, match=r"cannot write to /dev: No space left on device \(writing full\)"):
            logs.check_driver_log()
        logs.check_driver_log()  # said once: the run is stopping already
        state.error_line("ncclsweep: error: the final line")
    finally:
        state.close()
    err = capsys.readouterr().err
    assert "a progress line" in err and "Logging error" not in err and "Traceback" not in err
