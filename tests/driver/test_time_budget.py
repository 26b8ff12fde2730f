"""The run's wall clock: no timeout is never past; a deadline counts from the run's start, so a
run that started long ago is past it; the time left shrinks as the run goes; a launch expected
to take longer than what is left would end past the deadline, one of unknown length never."""

from __future__ import annotations

import time

from orchestrator.driver.time_budget import TimeBudget


def test_without_a_timeout_there_is_no_deadline():
    budget = TimeBudget(None, time.monotonic() - 10_000)
    assert budget.deadline is None and budget.left() is None
    assert not budget.past() and not budget.ends_past(10_000.0)


def test_a_zero_timeout_is_no_timeout():
    assert TimeBudget(0, time.monotonic()).deadline is None


def test_the_deadline_counts_from_the_start_of_the_run():
    started = time.monotonic() - 600
    budget = TimeBudget(900, started)
    assert budget.deadline == started + 900 and not budget.past()
    assert budget.timeout_s == 900
    left = budget.left()
    assert left is not None and 0 < left <= 300


def test_a_run_started_longer_ago_than_its_timeout_is_past_it():
    budget = TimeBudget(60, time.monotonic() - 61)
    assert budget.past()
    left = budget.left()
    assert left is not None and left < 0


def test_a_launch_longer_than_the_time_left_would_end_past_the_deadline():
    budget = TimeBudget(900, time.monotonic() - 600)  # at most 300 s left
    assert budget.ends_past(301.0)
    assert not budget.ends_past(60.0)
    assert not budget.ends_past(None)  # a launch of unknown length is not held back
