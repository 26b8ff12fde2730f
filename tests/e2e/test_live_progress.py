"""Issue 39's acceptance, end to end: a trial of a slow server (20 s to start, about 20 s to
measure: tests/fake_openai_server.py's --ready-after and --token-delay, through the command
backend) is followed as it runs. Under a pseudo-terminal one status line, redrawn in place,
names the phase the trial is in, in the trial's order, and the study's time to go, never wider
than the terminal, while the run's driver.log says every phase; piped to a file, each phase the
trial entered is one plain line, once, in order (a short one between two of the driver's looks
included), and no line is wider than 120 characters. The real CLI, real Ray, a real server process."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from conftest import FAKE_OPENAI, study_servers, write_job

pytestmark = pytest.mark.slow

COLUMNS = 100
# every phase of the slow trial, in order (the fake server's log names no start-up phase: "starting")
EVERY_PHASE = ["launching", "starting", "warming up", "measuring level 1", "correctness check", "stopping"]
PHASE = (r"(launching|starting(: [^()]+)?|warming up|measuring level \d+(: \d+/\d+ requests)?|correctness check"
         r"|stopping)")


def slow_job(tmp_path):
    argv = [sys.executable, str(FAKE_OPENAI), "--host", "{host}", "--port", "{port}", "--model", "fake",
            "--ready-after", "20", "--token-delay", "0.25"]  # 5 requests of 16 tokens: 20 s of measuring
    return write_job(tmp_path, study="slow", space_text="params:\n  env.KNOB: {choices: [a, b]}\n",
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline={"env.KNOB": "a"}, budget={"trials": 1},
                     bench={"prompt": "Hello there", "output_tokens": 16, "warmup": 1, "repeats": 4,
                            "max_repeats": 4},
                     timeouts={"startup": "60s", "bench": "120s", "teardown": "5s"},
                     correctness={"check_tokens": 4, "prompts": ["The quick brown fox"], "logprobs": False})


def run_in_terminal(argv: list[str], cwd) -> tuple[int, str]:
    """``argv`` in a pseudo-terminal COLUMNS wide: (exit code, everything it wrote)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdout and stderr are the terminal
        os.chdir(cwd)
        os.execv(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
    out = b""
    deadline = time.monotonic() + 300  # a guard against a hang, not a timing assertion
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_a_slow_trial_is_followed_live_in_a_terminal_and_line_by_line_in_a_log(tmp_path, no_leftover_servers):
    (tmp_path / "term").mkdir()
    (tmp_path / "log").mkdir()
    in_terminal, in_file = slow_job(tmp_path / "term"), slow_job(tmp_path / "log")
    log = tmp_path / "run.log"
    with open(log, "w") as out:  # the same run with its output into a file, alongside
        piped = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(in_file)], stdout=out,
                                 stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            code, shown = run_in_terminal([sys.executable, "-m", "orchestrator", "run", str(in_terminal)], tmp_path)
            piped_code = piped.wait(300)
        finally:
            if piped.poll() is None:
                piped.kill()
                piped.wait()
    assert code == 0, shown
    # what the status line said, each time it was drawn: "\r\x1b[K" then the text, no newline (a line
    # printed above it comes after the same erase, with its newline)
    drawn = [part for part in shown.split("\r\x1b[K")[1:] if part and "\n" not in part]
    assert drawn and all(len(text) < COLUMNS for text in drawn), drawn
    phases = []
    for text in drawn:
        m = re.match(rf"#0 {PHASE} \(", text)
        assert m, text
        if not phases or phases[-1] != m.group(1).split(":")[0]:
            phases.append(m.group(1).split(":")[0])
    # the line shows the phase of the moment it is drawn, in the trial's order; a phase shorter than the
    # half second between two draws may go unseen there (launching: the fake's first line comes within
    # 0.2 s; the check: 1 s), never in the run's log: driver.log says every one (below)
    assert phases == [p for p in EVERY_PHASE if p in phases], phases
    assert {"starting", "warming up", "measuring level 1"} <= set(phases), phases
    (driver_log,) = (tmp_path / "term").rglob("driver.log")
    said = [m.group(1) for ln in driver_log.read_text().splitlines()
            if (m := re.search(r"  #0 ([a-z][a-z0-9 ]+?)(?:: [^()]+)? \((?:\d+m)?\d+s into the trial\)", ln))]
    assert said == EVERY_PHASE, said
    assert any(re.search(r"\| ~(\d+m)?\d+s to go", text) for text in drawn), drawn  # the study's time to go
    lines = shown.replace("\r\x1b[K", "\r").split("\r\n")
    assert all(len(line.split("\r")[-1]) <= COLUMNS for line in lines)
    assert not [ln for ln in shown.splitlines() if re.match(rf"\s+#0 {PHASE} \(\d", ln)]  # shown live, not printed

    # into a file: plain lines, one per event, none wider than 120
    text = log.read_text()
    assert piped_code == 0, text
    assert "\r" not in text and "\x1b" not in text
    assert all(len(line) <= 120 for line in text.splitlines()), max(text.splitlines(), key=len)
    events = [ln for ln in text.splitlines() if re.match(r"  #0 [a-z]", ln) and not ln.startswith("  #0 config:")]
    assert all(re.fullmatch(rf"  #0 {PHASE} \((\d+m)?\d+s into the trial\)", ln) for ln in events), events
    assert [ln.split(" (")[0].split(":")[0][5:] for ln in events] == EVERY_PHASE, events  # each one, once
    assert not study_servers(tmp_path / "term" / "reports") and not study_servers(tmp_path / "log" / "reports")
