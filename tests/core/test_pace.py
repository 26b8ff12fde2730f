"""A long command's time to go (core/pace.py): the mean step so far times the steps left, less
how far the current step is; nothing claimed before a step has ended."""

from __future__ import annotations

import pytest

from orchestrator.core import pace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(pace.time, "monotonic", c)
    return c


def test_the_time_to_go_is_the_mean_step_times_the_steps_left(clock):
    p = pace.Pace(4)
    clock.now += 30
    assert p.to_go() is None and "after the first" in p.said()  # nothing to go by yet
    p.step_done()
    assert p.to_go() == 90  # 3 steps of 30 s left
    clock.now += 50
    p.step_done()  # steps of 30 and 50 s: 40 s each on average
    assert p.to_go() == 80 and p.said() == "~1m20s to go"
    clock.now += 15  # 15 s into the third step
    assert p.to_go() == 65
    p.step_done()
    p.step_done()
    assert p.to_go() == 0 and p.said() == "the last step"


@pytest.mark.parametrize("seconds, said", [(41, "41s"), (200, "3m20s"), (7500, "2h05m"), (0.4, "0s")])
def test_a_clock_for_people(seconds, said):
    assert pace.fmt_s(seconds) == said
