"""The one rule that says a level's figures are the measuring client's: how much shorter than the
server's the median request's span was stamped (the client's loop late at the first token less at
the last), less the ticker's granularity, against that stamped span; over 5% either way is
client-bound, with the notice a trial carries."""

from __future__ import annotations

import math

import pytest

from orchestrator.core import client_bound
from orchestrator.core.client_bound import RESOLUTION_MS, THRESHOLD, decode_span_ms, judge, overstatement
from orchestrator.core.measurement import ClientLag, Distribution, Latency, LevelResult


def level(short_ms: float | None, tpot_ms: float = 10.0, tokens: int = 24, p99_ms: float = 40.0,
          n_level: int = 1) -> LevelResult:
    """A level of ``tokens``-token requests at ``tpot_ms`` whose median span was stamped ``short_ms``
    short (None: no lateness recorded at all)."""
    lag = None if short_ms is None else ClientLag(p50_ms=0.5, p99_ms=p99_ms, max_ms=p99_ms + 5, n=500,
                                                  span_short_ms=short_ms)
    tpot = Latency(tpot_ms / 1000, tpot_ms / 1000, tpot_ms / 1000, 10)
    return LevelResult(n_level, samples=(1000 / tpot_ms,), tpot=tpot, output_length=Distribution.of([tokens] * 10),
                       client_lag=lag)


# (median span stamped short ms, TPOT ms, tokens, client-bound?, why)
TABLE = [
    (0.5, 2.0, 16, False, "an idle loop's ticker, even on a 30 ms span"),
    (-6.0, 1.0, 16, False, "exactly the ticker's resolution, either way: nothing it can tell"),
    (6.0, 5.0, 8, False, "a busy box's random stalls on a 35 ms span (8 tokens): within the resolution"),
    (17.0, 10.0, 24, False, "11 ms over the resolution on a 230 ms span: 4.8%, within the threshold"),
    (18.0, 10.0, 24, True, "12 ms on a 230 ms span: 5.2%, beyond it"),
    (8.0, 2.0, 16, True, "2 ms on a short 30 ms span: 6.7%: a short request is the easiest to distort"),
    (80.0, 10.0, 24, True, "a loop blocked as every request's first tokens come in: 32% overstated"),
    (-40.0, 10.0, 24, True, "a client falling further behind to each request's end: 15% understated"),
    (80.0, 50.0, 400, False, "the same block on a 20 s request: 0.4%"),
]


@pytest.mark.parametrize("short_ms, tpot_ms, tokens, bound, why", TABLE, ids=[row[-1] for row in TABLE])
def test_the_rule_table(short_ms, tpot_ms, tokens, bound, why):
    got = level(short_ms, tpot_ms, tokens)
    span = tpot_ms * (tokens - 1)
    assert decode_span_ms(got) == pytest.approx(span)
    assert (judge(got) is not None) is bound
    off = math.copysign(max(0.0, abs(short_ms) - RESOLUTION_MS), short_ms) / span
    assert overstatement(short_ms, span) == pytest.approx(off)
    assert (abs(overstatement(short_ms, span)) > THRESHOLD) is bound


def test_unknown_is_never_client_bound():
    """A level recorded before the client watched its loop, one without first tokens watched, or one
    without a span to weigh against: not judged."""
    assert judge(level(None)) is None
    blind = level(80.0)
    assert judge(LevelResult(1, samples=blind.samples, tpot=blind.tpot, output_length=blind.output_length,
                             client_lag=ClientLag(0.5, 90.0, 95.0, 10))) is None  # no request's both ends seen
    assert judge(LevelResult(1, samples=(100.0,), client_lag=blind.client_lag)) is None
    one_token = level(80.0, tokens=1)
    assert decode_span_ms(one_token) is None and judge(one_token) is None


def test_the_notice_says_how_far_behind_and_by_how_much_the_figures_may_be_overstated():
    got = judge(level(86.0, tpot_ms=10.0, tokens=21, p99_ms=83.9, n_level=64))
    assert got is not None and got.overstated == pytest.approx(0.40)
    assert got.notice() == ("client notice: the measuring client fell behind by 83.9 ms (p99) at 64 streams: its "
                            "decode figures may be overstated by up to 40% (the median request's span was stamped "
                            "86.0 ms shorter than the server sent it)")
    assert got.notice().startswith(client_bound.NOTICE)
    assert " at 1 stream: " in judge(level(81.0)).notice()
    behind = judge(level(-46.0, tpot_ms=10.0, tokens=21))
    assert behind.overstated == pytest.approx(-0.2) and "may be understated by up to 20% (the median request's " \
        "span was stamped 46.0 ms longer than the server sent it)" in behind.notice()
    assert overstatement(10.0, 0.0) == math.inf and overstatement(-10.0, 0.0) == -math.inf
    assert overstatement(0.0, 0.0) == 0.0
