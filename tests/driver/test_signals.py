"""StopSignals: every stop signal (SIGINT, SIGTERM, SIGHUP) gets the study's handler while a
run loops, the second one kills the running trial, and the previous handlers come back."""

from __future__ import annotations

import os
import signal
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
