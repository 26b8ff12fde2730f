"""StopSignals: every stop signal (SIGINT, SIGTERM, SIGHUP) gets the study's handler while a
run loops, the second one kills the running trial, and the previous handlers come back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from orchestrator.driver.signals import StopSignals

pytestmark = pytest.mark.slow


def test_sigterm_and_sighup_are_handled_like_ctrl_c():
    """Every stop signal gets the study's handler (tests/e2e/test_stop_signals.py sends SIGINT and
    SIGHUP to a real `ncclsweep run`)."""
    said = []
    with StopSignals(said.append) as signals:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            assert signal.getsignal(sig) == signals._handle
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)
    assert signals.count == 2 and "SIGTERM: stopping" in said[0] and "SIGHUP: killing" in said[1]
    assert signal.getsignal(signal.SIGTERM) != signals._handle  # restored


# Two SIGINTs, 0.3 s apart, arrive while the main thread is in C code that never returns to Python
# (as it is while it waits in Ray, or is given no CPU on a busy host): Python runs the handler
# once for both. Another process sends them (a thread of this one would wait for the GIL).
TWICE_WHILE_AWAY = """
import os, signal, subprocess, sys
from orchestrator.driver.signals import StopSignals

SEND = "import os, sys, time; p = int(sys.argv[1]); time.sleep(0.5); os.kill(p, 2); time.sleep(0.3); os.kill(p, 2)"
said = []
with StopSignals(said.append) as signals:
    sender = subprocess.Popen([sys.executable, "-c", SEND, str(os.getpid())])
    while sender.poll() is None:
        sum(range(300_000_000))  # C code for seconds: no handler runs until it returns
    print(signals.count, signals.kill_now, said, flush=True)
"""


def test_two_signals_that_arrive_while_python_is_away_count_twice():
    got = subprocess.run([sys.executable, "-c", TWICE_WHILE_AWAY], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    count, kill_now, said = got.stdout.split(" ", 2)
    assert (count, kill_now) == ("2", "True"), got.stdout  # Ctrl-C twice kills the running trial
    assert "SIGINT: stopping after the running trial" in said and "SIGINT: killing the running trial now" in said
