"""core.drift: a trend over time in the launches of one config, fitted within each config launched more
than once; said only beyond its noise (99.9%), in words with its rate, its interval and what it fitted."""

from __future__ import annotations

import math
import random

import pytest

from orchestrator.core.drift import CONFIDENCE, Drift, trend

MINUTE = 60.0


def launches(speed_per_minute: float, noise: float = 0.005, seed: int = 1) -> list[list[tuple[float, float]]]:
    """Two configs 6% apart relaunched in turn every minute for 12 minutes, on a box whose every launch
    is ``speed_per_minute`` slower a minute (figures with a small noise of their own)."""
    rng = random.Random(seed)
    groups: list[list[tuple[float, float]]] = [[], []]
    for i in range(12):
        t = 1_700_000_000.0 + i * MINUTE
        base = (100.0, 106.0)[i % 2]
        groups[i % 2].append((t, base * (1 - speed_per_minute) ** i * (1 + rng.gauss(0, noise))))
    return groups


def test_a_box_two_percent_slower_a_minute_is_said_to_drift():
    drift = trend(launches(0.02))
    assert drift.drifted and drift.configs == 2 and drift.launches == 12 and drift.df == 9
    rel, unit = drift.rate()
    assert unit == "minute" and rel == pytest.approx(-0.02, abs=0.004)
    assert drift.span_s == 11 * MINUTE
    text = drift.text()
    assert text.startswith("the box drifted: launches of one config measured 2.") and "% slower per minute" in text
    assert "12 launches of 2 config(s) over 11 min" in text and "will not repeat it" in text
    # read at one time: the figure of a launch 10 minutes on is moved back by the slope times 10 minutes
    assert drift.shift(10 * MINUTE) == pytest.approx(10 * math.log(0.98), rel=0.2)
    assert drift.to_dict()["drifted"] and drift.to_dict()["per"] == "minute"


def test_a_quiet_box_is_never_said_to_drift():
    for seed in range(20):
        drift = trend(launches(0.0, noise=0.02, seed=seed))
        assert not drift.drifted and drift.text() == "" and drift.shift(600.0) == 0.0
    # over hours, a drift is said per hour
    slow = Drift(slope=math.log(0.9), se=0.001, df=10, configs=2, launches=13, span_s=3 * 3600.0)
    assert slow.drifted and slow.rate()[1] == "hour" and "10.0% slower per hour" in slow.text()


def test_what_says_nothing_of_time_is_left_out():
    # one launch per config, or every launch at one time: no slope, nothing said
    assert not trend([[(0.0, 100.0)], [(60.0, 90.0)]]).drifted
    assert trend([[(0.0, 100.0), (0.0, 90.0), (0.0, 95.0)]]).slope is None
    # too few degrees of freedom (``verdict.MIN_NOISE_DF``) for so strong a claim
    few = trend([[(0.0, 100.0), (60.0, 98.0), (120.0, 96.0)], [(30.0, 105.0), (90.0, 103.0)]])
    assert few.df == 2 and not few.drifted
    assert CONFIDENCE == 0.999
