"""The circuit breaker on real trial results: environment failures in a row stop the run (no
config is banned), counted failures in a row stop it at the job's limit, a measured launch
resets the count, blameless failures count nothing, and a failed write or unusable GPUs stop it
at once with their own line."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from orchestrator.core.errors import CircuitOpen, StorageWriteError
from orchestrator.core.outcome import Final
from orchestrator.core.records import COMPLETE, FailureKind, Signals, TrialResult
from orchestrator.driver.breaker import ENV_BREAKER, Breaker

CONFIG = {"tp_size": 1}


def final(result: TrialResult, *, counted: bool = True, blameless: bool = False) -> Final:
    return Final(result, counted=counted, blameless=blameless, requeue=False)


def crashed() -> Final:
    return final(TrialResult.failed(CONFIG, FailureKind.START_CRASH, "server exited with code 1"))


def measured() -> Final:
    return final(TrialResult(outcome=COMPLETE, config=CONFIG, value=10.0))


def env_failure() -> Final:
    return final(TrialResult.failed(CONFIG, FailureKind.ENV_ERROR, "port already in use"), counted=False,
                 blameless=True)


def breaker(limit: int) -> Breaker:
    return Breaker(limit, Path("/study/logs"), "job.yaml")


def test_counted_failures_in_a_row_stop_the_run_at_the_jobs_limit():
    b = breaker(2)
    b.check(crashed())
    with pytest.raises(CircuitOpen, match="2 consecutive failed trials") as stop:
        b.check(crashed())
    assert "start-crash" in str(stop.value) and "/study/logs" in str(stop.value)


def test_a_measured_launch_between_failures_resets_the_count():
    b = breaker(2)
    for f in (crashed(), measured(), crashed(), measured(), crashed()):
        b.check(f)
    assert b.consecutive_failures == 1


def test_no_limit_never_stops_on_config_failures():
    b = breaker(0)
    for _ in range(10):
        b.check(crashed())
    assert b.consecutive_failures == 10


def test_environment_failures_in_a_row_stop_the_run_and_ban_nothing():
    b = breaker(0)
    for _ in range(ENV_BREAKER - 1):
        b.check(env_failure())
    with pytest.raises(CircuitOpen, match=f"{ENV_BREAKER} trials in a row failed for a reason outside") as stop:
        b.check(env_failure())
    assert "no config was banned" in str(stop.value)


def test_a_config_failure_between_environment_failures_breaks_the_environment_run():
    b = breaker(0)
    for _ in range(3):
        b.check(env_failure())  # ENV_BREAKER is 2: would stop without the crash between
        b.check(crashed())


def test_a_blameless_failure_does_not_count_toward_the_limit():
    b = breaker(2)
    b.check(crashed())
    timed_out = TrialResult.failed(CONFIG, FailureKind.START_TIMEOUT, "first timeout")
    b.check(final(timed_out, counted=False, blameless=True))
    assert b.consecutive_failures == 1


def test_unusable_gpus_stop_the_run_at_once():
    result = TrialResult(outcome=COMPLETE, config=CONFIG, value=10.0, warnings=["GPU 0 still holds 3 GiB"],
                         signals=Signals(gpus_usable=False))
    with pytest.raises(CircuitOpen, match="GPUs were not usable after a teardown .GPU 0 still holds 3 GiB"):
        breaker(0).check(final(result))


def test_a_failed_write_stops_the_run_with_the_write_failure():
    failure = StorageWriteError("/study", OSError(errno.ENOSPC, "No space left on device")).to_dict()
    result = TrialResult.failed(CONFIG, FailureKind.ENV_ERROR, "write failed", signals=Signals(write_failed=failure))
    with pytest.raises(StorageWriteError, match="/study"):
        breaker(0).check(final(result))
