"""The open-loop arrival schedule (core/arrivals.py): gamma gaps with shape burstiness and mean
1/rate (Poisson at burstiness 1), the same draws for a seed at every rate, and a trace's own
timestamps replayed at its pace or faster."""

from __future__ import annotations

import statistics

import pytest

from orchestrator.core.arrivals import at_rate, own_rate, replay, schedule


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_a_seeded_draw_has_the_rate_asked_and_the_coefficient_of_variation_of_its_burstiness(burstiness):
    times = schedule(20.0, 4001, burstiness, seed=7)
    assert len(times) == 4001 and times[0] == 0.0 and times == sorted(times)
    assert (len(times) - 1) / times[-1] == pytest.approx(20.0)  # the rate asked, over the probe's span
    cv = statistics.pstdev(gaps(times)) / statistics.fmean(gaps(times))
    assert cv == pytest.approx(1 / burstiness ** 0.5, rel=0.08)  # gamma(shape k): CV 1/sqrt(k); Poisson's is 1


def test_poisson_gaps_are_exponential_a_third_of_them_above_1_1_times_the_mean():
    g = gaps(schedule(10.0, 5001, 1.0, seed=3))
    above = sum(1 for x in g if x > 1.1 * statistics.fmean(g)) / len(g)
    assert above == pytest.approx(2.718281828 ** -1.1, abs=0.02)  # P(X > 1.1 mean) of an exponential


def test_the_schedule_is_the_same_for_a_seed_and_the_same_pattern_at_every_rate():
    assert schedule(5.0, 50, 1.0, seed=1) == schedule(5.0, 50, 1.0, seed=1)
    assert schedule(5.0, 50, 1.0, seed=1) != schedule(5.0, 50, 1.0, seed=2)
    slow, fast = schedule(5.0, 50, 2.0, seed=1), schedule(10.0, 50, 2.0, seed=1)
    assert fast == pytest.approx([t / 2 for t in slow])  # twice the rate: the same bursts, twice as fast


def test_a_trace_replays_at_its_own_pace_and_faster():
    times = [1000.0, 1000.5, 1000.5, 1002.0]
    assert replay(times) == [0.0, 0.5, 0.5, 2.0]
    assert replay(times, 2.0) == [0.0, 0.25, 0.25, 1.0]  # speed 2: the gaps halved
    assert own_rate(times) == pytest.approx(1.5) and own_rate([3.0]) is None and own_rate([2.0, 2.0]) is None
    assert at_rate(3.0, 99, trace=times) == pytest.approx([0.0, 0.25, 0.25, 1.0])  # 3 req/s: 2x its own 1.5
    assert len(at_rate(3.0, 4)) == 4  # no trace: drawn


def test_what_it_refuses():
    for bad in (lambda: schedule(0.0, 3), lambda: schedule(1.0, 3, 0.0), lambda: replay([1.0], 0.0),
                lambda: at_rate(1.0, 2, trace=[5.0, 5.0])):
        with pytest.raises(ValueError):
            bad()
    assert schedule(1.0, 0) == [] and schedule(2.0, 1) == [0.0]
