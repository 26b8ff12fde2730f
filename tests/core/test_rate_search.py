"""The capacity search by request rate (core/rate_search.py): a coarse sweep doubling from the lowest
rate, then bisection between the highest rate that held and the lowest above it that broke, within
the probe budget; nothing assumes attainment falls with the rate, every probe is recorded."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.core.attainment import Attainment
from orchestrator.core.measurement import Latency, RateProbe, RateResult
from orchestrator.core.rate_search import (
    STEP,
    RateAxis,
    coarse,
    holds,
    next_rate,
    probe_line,
    quantile_for,
    result,
    targeted,
)
from orchestrator.core.slo import RequestSlo, Slo, Targets


def search(held_at: Callable[[float], bool], axis: RateAxis) -> tuple[list[float], RateResult]:
    """The rates the search probes on a server whose SLO holds where ``held_at`` says, and its record."""
    probes: list[RateProbe] = []
    nxt = next_rate({}, axis)
    while nxt is not None:
        assert all(p.rate != nxt for p in probes)
        ok = held_at(nxt)
        probes.append(RateProbe(nxt, 100, 100 if ok else 50, ok, tok_s=10 * nxt))
        nxt = next_rate({p.rate: p.held for p in probes}, axis)
    return [p.rate for p in probes], result(axis, probes, Targets(per_request=(RequestSlo("ttft", 0.2),),
                                                                  attainment=0.99))


def test_the_coarse_sweep_doubles_from_the_lowest_rate_to_the_highest():
    assert coarse(RateAxis(40)) == [5, 10, 20, 40]  # from max_rate / 8
    assert coarse(RateAxis(30, min_rate=4)) == [4, 8, 16, 30]
    assert coarse(RateAxis(7, min_rate=7)) == [7]


@pytest.mark.parametrize("truth", [5.5, 13.0, 18.7, 26.0, 39.0])
def test_bisection_finds_the_capacity_within_one_step(truth):
    order, got = search(lambda r: r <= truth, RateAxis(40, max_probes=12))
    assert order[:3] == [5, 10, 20]
    assert got.holds <= truth < got.breaks and got.breaks - got.holds <= STEP * got.holds
    assert got.value == pytest.approx(10 * got.holds)  # the tok/s at the capacity is its figure
    assert [p.rate for p in got.probes] == order  # every probe, in the order measured


def test_the_budget_bounds_the_probes_and_the_answer_is_the_best_so_far():
    order, got = search(lambda r: r <= 13.0, RateAxis(40, max_probes=5))
    assert len(order) == 5 and got.holds <= 13.0 < got.breaks


def test_above_two_broken_rates_in_a_row_the_sweep_goes_no_higher_and_halves_below_it():
    """A max_rate guessed far too high: 10 and 20 broke, so 40 and 80 are never sent (each would only
    queue more); below the sweep, halving finds a rate that held, and bisection the capacity."""
    order, got = search(lambda r: r <= 6.0, RateAxis(80, max_probes=12))
    assert order[:3] == [10, 20, 5] and 40 not in order and 80 not in order
    assert got.holds <= 6.0 < got.breaks and got.breaks - got.holds <= STEP * got.holds


def test_nothing_held():
    order, got = search(lambda r: False, RateAxis(40))
    assert order == [5, 10, 2.5, 1.25, 0.625] and got.holds is None and got.breaks == 0.625 and got.value == 0.0
    assert got.describe() == "breaks the SLO at 0.625 req/s already (attainment 50.0%)"


def test_every_rate_held():
    order, got = search(lambda r: True, RateAxis(40))
    assert order == [5, 10, 20, 40] and got.holds == 40 and got.breaks is None
    assert "(attainment 100.0%; the most asked, objective.goodput.max_rate 40)" in got.describe()


def test_a_lower_rate_that_broke_is_recorded_and_said_not_assumed_away():
    """A dip (a hiccup of the box at 10 req/s): the rates above it held, so the capacity is above it,
    and the answer says a lower rate broke."""
    order, got = search(lambda r: r != 10 and r <= 26.0, RateAxis(40, max_probes=12))
    assert 10 in order and got.holds <= 26.0 < got.breaks and got.holds > 20
    assert "though it broke at 10 req/s below it" in got.describe()


def test_a_probe_holds_by_attainment_and_every_percentile_target():
    targets = Targets(every=(Slo("tpot", 99, 0.02),), per_request=(RequestSlo("ttft", 0.2),), attainment=0.99)
    fast, slow = Latency(0.005, 0.008, 0.01, 100), Latency(0.01, 0.02, 0.05, 100)
    assert holds(Attainment(99, 100), {"tpot": fast}, targets)
    assert not holds(Attainment(98, 100), {"tpot": fast}, targets)  # 98%: below the attainment
    assert not holds(Attainment(100, 100), {"tpot": slow}, targets)  # TPOT p99 50 ms over its 20 ms
    assert holds(Attainment(100, 100), {"tpot": fast}, Targets(every=(Slo("tpot", 99, 0.02),)))  # percentiles only
    assert not holds(Attainment(0, 10, {"failed": 10}), {}, Targets(every=(Slo("tpot", 99, 0.02),)))


def test_a_probe_says_the_percentiles_its_targets_read():
    """A per-request target reads its kind at the attainment's percentile (99% of requests: p99), a
    percentile target its own; ``bench`` and the report say them beside the attainment."""
    probe = RateProbe(15.0, 100, 98, False, tok_s=146.6, ttft=Latency(0.1, 0.2, 0.35, 100),
                      e2e=Latency(0.2, 0.3, 0.4, 100))
    targets = Targets(per_request=(RequestSlo("ttft", 0.3),), attainment=0.99, every=(Slo("e2e", 90, 0.5),))
    assert [(t.label, t.measured_s, t.limit_s) for t in targeted(probe, targets)] == [
        ("TTFT p99", 0.35, 0.3), ("E2E latency p90", 0.3, 0.5)]
    assert quantile_for(0.9) == 90 and quantile_for(0.95) == 99 and quantile_for(None) == 99
    assert probe_line(probe, targets) == ("15 req/s: attainment 98.0% (98 of 100), 146.6 tok/s, TTFT p99 350 ms "
                                          "(target 300 ms), E2E latency p90 300 ms (target 500 ms): breaks")
    assert probe_line(probe, None).endswith("146.6 tok/s: breaks")
