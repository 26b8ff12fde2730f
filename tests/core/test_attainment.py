"""SLO attainment (core/attainment.py): a request counts when it succeeded and met every per-request
target at once; the attainment is good requests over all sent, failed ones included."""

from __future__ import annotations

from orchestrator.core.attainment import Attainment, Timing, attainment, met, misses
from orchestrator.core.slo import RequestSlo

TTFT, TPOT = RequestSlo("ttft", 0.2), RequestSlo("tpot", 0.01)


def test_a_request_counts_only_when_it_meets_every_target_at_once():
    assert met(Timing(True, ttft=0.1, tpot=0.009, e2e=3.0), [TTFT, TPOT])
    assert misses(Timing(True, ttft=0.3, tpot=0.009), [TTFT, TPOT]) == ["ttft"]
    assert misses(Timing(True, ttft=0.3, tpot=0.02), [TTFT, TPOT]) == ["ttft", "tpot"]
    assert misses(Timing(False, ttft=0.1, tpot=0.005), [TTFT, TPOT]) == ["failed"]  # failed: served within nothing
    assert met(Timing(True, ttft=0.1, tpot=None), [TTFT, TPOT])  # a one-token answer has no TPOT to hold against it
    assert met(Timing(True, ttft=0.2), [TTFT])  # at the target is within it


def test_attainment_is_good_requests_over_all_sent():
    timings = [Timing(True, ttft=0.1, tpot=0.005)] * 96 + [Timing(True, ttft=0.5, tpot=0.005)] * 2 + \
        [Timing(True, ttft=0.1, tpot=0.05), Timing(False)]
    got = attainment(timings, [TTFT, TPOT])
    assert (got.good, got.total, got.share) == (96, 100, 0.96)
    assert got.missed == {"ttft": 2, "tpot": 1, "failed": 1}
    assert got.holds(0.95) and not got.holds(0.99) and not got.holds(None)  # None: every request
    assert got.to_record() == {"good": 96, "total": 100, "missed": {"ttft": 2, "tpot": 1, "failed": 1}}


def test_no_request_attains_nothing():
    got = attainment([], [TTFT])
    assert got == Attainment(0, 0) and got.share is None and not got.holds(0.5)
    assert Attainment(99, 100).holds(0.99) and not Attainment(98, 100).holds(0.99)
