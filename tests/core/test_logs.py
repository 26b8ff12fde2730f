"""The run's lines (core/logs.py): a driver.log that cannot be written (a full disk: /dev/full)
prints no traceback and stops the run once, with one line naming the folder; the status line
of a terminal, and lines that fit: shortened at a clause or a word, their figures kept."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios

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


# The run's lines (issue 39): in a terminal a status line stays below every line printed and the
# phase changes it shows are not printed again; elsewhere there is no status line, the phase
# changes are plain lines, and no line is wider than 120 characters (driver.log: after its stamp).
def _in_terminal(monkeypatch, columns: int):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    monkeypatch.setattr(sys, "stderr", os.fdopen(slave, "w"))
    return master


def _read(master: int) -> str:
    out = b""
    while select.select([master], [], [], 0.2)[0]:
        out += os.read(master, 65536)
    return out.decode().replace("\r\n", "\n")  # the terminal's own newline translation


def test_in_a_terminal_the_status_line_stays_below_what_is_printed(monkeypatch):
    master = _in_terminal(monkeypatch, 60)
    state = logs.configure()
    try:
        logs.status("#0 warming up (3s)")
        logs.progress.info("  #0 -> 100.0 tok/s")
        logs.progress.info("  #0 measuring level 1: 0/16 requests", extra={logs.EVENT: True})
        logs.status("#0 measuring level 1: 2/16 requests (9s) | ~40s to go and a status longer than the screen")
        logs.progress.info("word " * 30)
    finally:
        state.close()
    shown = _read(master)
    erase = "\r\x1b[K"
    assert shown.startswith(f"{erase}#0 warming up (3s)")
    assert f"{erase}  #0 -> 100.0 tok/s\n{erase}#0 warming up (3s)" in shown  # printed above, the status redrawn
    assert "0/16 requests" not in shown  # an event: the status line shows it instead
    assert f"{erase}#0 measuring level 1: 2/16 requests (9s) | ~40s to go ...\r" in shown  # 59: at a word
    printed = [line.split(erase)[-1] for line in shown.split("\n")]
    assert all(len(line) <= 60 for line in printed) and printed[-3].startswith("    word")  # wrapped, indented
    assert shown.endswith(erase)  # closed: the status line erased


def test_in_a_log_the_phase_changes_are_lines_and_none_is_wider_than_120(tmp_path, capsys):
    state = logs.configure()
    try:
        state.log_to_file(tmp_path / "driver.log")
        logs.status("#0 warming up (3s)")  # no terminal: nothing drawn
        logs.progress.info("  #0 measuring level 1: 0/16 requests (9s into the trial)", extra={logs.EVENT: True})
        logs.progress.info("  #0 -> FAIL bench-error: " + "a long reason " * 20)
    finally:
        state.close()
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err and "warming up" not in err
    lines = err.splitlines()
    assert lines[0] == "  #0 measuring level 1: 0/16 requests (9s into the trial)"
    assert len(lines) == 4 and all(len(line) <= 120 for line in lines) and lines[2].startswith("      ")
    logged = (tmp_path / "driver.log").read_text().splitlines()
    assert logged[0].endswith(lines[0]) and logged[0][:2] == "20"  # the stamp, then the same line
    assert all(len(line) <= 120 for line in logged[2:]) and len(logged) == 4


# Lines shortened to fit (``logs.clip``: a status line, a trial's line between its number and the
# best so far): at a clause or a word boundary, parenthesised clauses first, never a figure.
GOODPUT = ("holds the SLO up to 128 stream(s) (the most asked, objective.goodput.max_concurrency 128) at 12949.5 "
           "total tok/s (1.94x baseline)")


def test_a_long_line_loses_its_clause_before_its_figures():
    assert logs.clip(GOODPUT, 80) == "holds the SLO up to 128 stream(s) at 12949.5 total tok/s (1.94x baseline)"
    tighter = logs.clip(GOODPUT, 70)
    assert tighter == "holds the ... 128 stream(s) ... 12949.5 total tok/s (1.94x baseline)"
    for width in range(20, len(GOODPUT)):
        got = logs.clip(GOODPUT, width)
        assert len(got) <= width
        words = got.split()
        assert all(w in GOODPUT.split() or w in ("...", "stream(s)") for w in words), (width, got)  # no word cut
        if width >= 50:  # room for the figures: every one kept
            assert "128" in words and "12949.5" in words and "tok/s" in words, (width, got)


def test_a_plan_line_keeps_every_levels_figure_and_a_word_too_long_is_the_only_cut():
    plan = "1: 433.9 decode tok/s (4.58x baseline), 10: 692.0 total tok/s (0.88x), 64: 3600.0 total tok/s (0.80x)"
    assert logs.clip(plan, 90) == ("1: 433.9 decode tok/s (4.58x baseline), 10: 692.0 total tok/s, 64: 3600.0 total "
                                   "tok/s")
    reason = ("bench-error: HTTP 400: This model's maximum context length is 4096 tokens. However, your request has "
              "7500 input tokens. Please reduce the length of the input messages.")
    got = logs.clip(reason, 80)
    assert len(got) <= 80 and "4096 tokens." in got and "7500 input tokens." in got and got.startswith("bench-error:")
    assert logs.clip("x" * 500, 20) == "x" * 17 + "..."  # one word wider than the line: cut inside it
    assert logs.clip("a short line", 80) == "a short line"
