"""The measurement record: the steady-state window of a level, latency percentiles, the
host's load, and records of every version read back the same."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from orchestrator.core.measurement import (
    GRAPHS,
    ClientLag,
    Distribution,
    GoodputResult,
    HostLoad,
    Latency,
    Lengths,
    LevelResult,
    Measurement,
    RateProbe,
    RateResult,
    RegimeMark,
    StreamedRequest,
    level_text,
    outcome_metrics,
    percentile,
    relative_ci,
    steady_window,
)


def streams(n: int, waves: int, *, token_s: float, tokens: int, ramp: float = 0.0) -> list[StreamedRequest]:
    """``n`` streams each sending ``waves`` requests back to back; stream k starts ``k x ramp`` late."""
    out = []
    for k in range(n):
        t = k * ramp
        for _ in range(waves):
            chunks = tuple(t + 0.05 + i * token_s for i in range(tokens))
            out.append(StreamedRequest(k, t, chunks[-1] + 0.001, chunks, tokens))
            t = chunks[-1] + 0.001
    return out


def test_the_window_counts_what_arrived_while_every_stream_was_in_flight():
    """4 streams, each a request of 20 tokens every 0.241 s (50 ms to the first token, 10 ms a
    token): 4 x 20 / 0.241 = 332 tok/s in the steady state, whatever the ramp; the whole span's
    tokens over its wall time are fewer because stream 3 starts 0.3 s late."""
    reqs = streams(4, 3, token_s=0.01, tokens=20, ramp=0.1)
    tokens, seconds = steady_window(reqs)
    assert tokens / seconds == pytest.approx(4 * 20 / 0.241, rel=0.05)
    span = max(r.t_end for r in reqs) - min(r.t_start for r in reqs)
    assert sum(r.n_tokens for r in reqs) / span < 0.95 * tokens / seconds


def test_a_chunk_carries_its_share_of_the_tokens():
    """A speculative stream's chunk carries several tokens: 40 tokens in 8 chunks count 5 a chunk."""
    chunks = tuple(0.1 + 0.02 * i for i in range(8))
    reqs = [StreamedRequest(0, 0.0, 0.3, chunks, 40), StreamedRequest(1, 0.0, 0.3, chunks, 40)]
    tokens, seconds = steady_window(reqs)
    assert seconds == pytest.approx(0.3 - 0.1)
    assert tokens == pytest.approx(2 * 7 * 5)  # each stream's 7 chunks after the first


def test_no_window_without_a_steady_state():
    assert steady_window([]) is None
    one = streams(1, 1, token_s=0.01, tokens=5)
    silent = [StreamedRequest(1, 0.0, 1.0, (), 0)]
    assert steady_window(one + silent) is None  # a stream that returned nothing: never all in flight


def test_percentiles_as_vllm_bench_reports_them():
    xs = [float(i) for i in range(1, 101)]
    assert percentile(xs, 50) == pytest.approx(50.5) and percentile(xs, 99) == pytest.approx(99.01)
    lat = Latency.of([0.3, 0.1, 0.2, float("nan")])
    assert (lat.p50, lat.n) == (0.2, 3) and lat.p50 <= lat.p90 <= lat.p99 and lat.at(90) == lat.p90
    assert lat.mean == pytest.approx(0.2) and Latency.from_record(lat.to_record()) == lat  # the mean is kept
    assert Latency.of([]) is None
    earlier = Latency.from_record({"p50": 0.2, "p90": 0.3, "p99": 0.3, "n": 3})  # recorded before the mean was
    assert earlier.mean is None and "mean" not in earlier.to_record()


def test_a_level_is_its_median_with_its_precision_and_latencies():
    got = LevelResult(10, samples=(900.0, 1000.0, 1100.0), tpot=Latency(0.01, 0.012, 0.02, 30), requests=30,
                      window_s=2.5)
    assert got.value == 1000.0 and got.unit == "total tok/s" and got.rel_ci == relative_ci(got.samples)
    text = level_text(got)
    assert text.startswith("10: 1000.0 total tok/s +-10.0% (median of 3 window(s) of 2.5s)")
    assert "TPOT 10.0/12.0/20.0" in text
    assert LevelResult.from_record(10, got.to_record()) == got


def test_the_prefix_caches_share_is_shown_beside_the_ttft_where_counted():
    got = LevelResult(64, samples=(900.0,), ttft=Latency(0.3, 0.4, 0.5, 64), tpot=Latency(0.01, 0.01, 0.01, 64),
                      prefix_cache_hit_rate=0.0)
    assert "TTFT 300.0/400.0/500.0 (prefix-cache hits 0%), TPOT 10.0/10.0/10.0" in level_text(got)
    assert LevelResult.from_record(64, got.to_record()) == got and got.to_record()["prefix_cache_hit_rate"] == 0.0
    uncounted = LevelResult(64, samples=(900.0,), ttft=Latency(0.3, 0.4, 0.5, 64))
    assert "prefix-cache" not in level_text(uncounted) and "prefix_cache_hit_rate" not in uncounted.to_record()
    assert LevelResult.from_record(64, {"value": 900.0}).prefix_cache_hit_rate is None  # an earlier record


def test_every_version_of_a_stored_record_reads_back():
    """A record from before levels (level 1's decode samples), one with per-level records, the
    outcome constraints' one-shot totals of old, and the outcome's own keys kept apart."""
    old = {"decode_tok_s": 74.6, "decode_samples": [74.6, 63.5, 98.7], "ttft_s": 0.063, "e2e_tok_s": 64.6,
           "repeats": 3, "output_tokens": 24, "concurrency": {"4": 192.4}, "decode_tok_s_ignored": 74.6}
    m = Measurement.from_record(old)
    assert m.levels[1].samples == (74.6, 63.5, 98.7) and m.value == 74.6 and m.levels[1].ttft.p50 == 0.063
    assert m.value_at(4) == 192.4 and m.rounds == 3
    assert outcome_metrics(old) == {"decode_tok_s_ignored": 74.6}
    levels = {"levels": {"1": {"value": 400.0, "samples": [400.0]}, "64": 14000.0}}
    assert Measurement.from_record(levels).values() == {1: 400.0, 64: 14000.0}
    assert Measurement.from_record({}) is None and Measurement.from_record({"constraint_violations": ["x"]}) is None
    assert Measurement.from_record({}, value=5.0).value == 5.0  # a record of only its value


def test_a_record_survives_storage_as_json():
    host = HostLoad(load_start=1.0, load_end=2.0, cpus=2, wall_s=10.0, host_cpu_s=15.0, server_cpu_s=9.0,
                    client_cpu_s=1.0)
    m = Measurement(levels={64: LevelResult(64, samples=(1.0, 2.0)), 1: LevelResult(1, samples=(3.0,))},
                    rounds=2, prompts=8, output_tokens=128, host=host)
    back = Measurement.from_record(json.loads(json.dumps(m.to_record())))
    assert back == m and list(back.levels) == [1, 64] and back.headline.level == 1
    assert back.host.others_cpus == pytest.approx(0.5) and not back.host.busy
    assert "other work took 0.5 of 2 CPUs (load 2.0)" == back.host.describe()


def test_the_clients_lateness_is_kept_per_level_and_an_older_level_reads_it_as_unknown():
    """How late the measuring client's loop ran (p50, p99, max over its wake-ups; the median at a first
    token; how many times the level was measured) survives storage; a level stored before it was
    watched has none (unknown, never zero)."""
    lag = ClientLag.of([0.0005, 0.001, 0.002, 0.080], span_short=[0.079, 0.081, -0.0004], attempts=2)
    assert (lag.p50_ms, lag.max_ms, lag.span_short_ms, lag.n, lag.attempts) == pytest.approx((1.5, 80.0, 79.0, 4, 2))
    assert lag.p99_ms == pytest.approx(77.66)  # linear between the two highest, as every percentile here
    m = Measurement(levels={1: LevelResult(1, samples=(100.0,), client_lag=lag)}, rounds=1)
    back = Measurement.from_record(json.loads(json.dumps(m.to_record())))
    assert back == m and back.levels[1].client_lag == lag
    said = lag.describe()
    assert "p99 77.7" in said and "spans stamped 79.0 short" in said and "measured twice" in said
    older = {"levels": {"1": {"value": 100.0, "samples": [100.0]}}}
    assert Measurement.from_record(older).levels[1].client_lag is None
    assert ClientLag.from_record({"p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0, "n": 9}) == ClientLag(1.0, 2.0, 3.0, 9)
    assert ClientLag.of([]) is None and ClientLag.from_record({"p50_ms": 1.0}) is None


def test_a_goodput_measurement_is_worth_its_total_where_every_slo_last_held():
    """The bisection's probes are levels of the record; the value is the total tok/s at the
    highest concurrency that held (0.0 where none did), and both read back from storage."""
    probes = {1: LevelResult(1, samples=(700.0,)), 16: LevelResult(16, samples=(858.0, 860.0)),
              17: LevelResult(17, samples=(862.0,)), 64: LevelResult(64, samples=(870.0,))}
    m = Measurement(levels=probes, goodput=GoodputResult(64, (1, 64, 16, 17), holds=16, breaks=17))
    assert m.headline.level == 16 and m.value == pytest.approx(859.0)
    back = Measurement.from_record(json.loads(json.dumps(m.to_record())))
    assert back.goodput == m.goodput and back.value == m.value and set(back.levels) == {1, 16, 17, 64}
    assert m.goodput.describe() == "holds the SLO up to 16 stream(s) (breaks at 17)"
    none = Measurement(levels={1: LevelResult(1, samples=(700.0,))}, goodput=GoodputResult(64, (1,), None, 1))
    assert none.value == 0.0 and none.headline.level == 1
    assert "breaks the SLO at 1 stream(s) already" in none.goodput.describe()


def test_a_capacity_search_keeps_each_probes_verdict_and_the_regimes_and_a_bisections_record_reads_as_it_was():
    """Issue 47: the capacity point is the most tok/s within the SLO (64), not the most streams that held
    it (128); the record keeps every probe's verdict, the engine's regime marks and the targets' names."""
    levels = {n: LevelResult(n, samples=(v,), whole_run_tok_s=0.8 * v) for n, v in
              {1: 190.0, 4: 700.0, 16: 2600.0, 64: 19037.0, 65: 7923.0, 128: 12743.0}.items()}
    found = GoodputResult(128, (1, 4, 16, 64, 65, 128), holds=64, breaks=None, held=(True,) * 6,
                          marks=(RegimeMark(64, GRAPHS, "capture_sizes"),), targets=("tpot_p99",))
    m = Measurement(levels=levels, goodput=found)
    back = Measurement.from_record(json.loads(json.dumps(m.to_record())))
    assert back.goodput == found and back.value == 19037.0 and not found.bisection and found.highest_held == 128
    assert found.describe(19037.0) == ("serves the most within the SLO at 64 stream(s): 19037.0 total tok/s (holds "
                                       "it up to 128)")
    assert found.marks[0].describe() == "CUDA graphs captured up to 64 (capture_sizes)"
    assert found.marks[0].above == "its graphs end"
    old = {"max_concurrency": 128, "probes": [1, 128], "holds": 128, "breaks": None}  # the bisection's record
    was = GoodputResult.from_record(old)
    assert was.bisection and was.held is None and was.marks == () and was.highest_held == 128
    assert was.describe() == "holds the SLO up to 128 stream(s) (the most asked, objective.goodput.max_concurrency 128)"
    assert was.to_record() == old  # written back as it was read
    assert "whole run 15229.6 tok/s" in level_text(levels[64]) and "whole run" not in level_text(levels[1])


def test_measured_lengths_read_back_and_a_record_without_them_reads_as_before():
    lengths = Lengths(input=Distribution.of([10, 20, 30, 400]), output=Distribution.of([8, 16, 96]), mismatched=1)
    assert lengths.output.low == 8 and lengths.output.high == 96 and lengths.input.n == 4
    m = Measurement(levels={1: LevelResult(1, samples=(5.0,))}, lengths=lengths)
    back = Measurement.from_record(json.loads(json.dumps(m.to_record())))
    assert back.lengths == lengths
    assert "output tokens min 8, p50 16" in lengths.describe() and "1 request(s) returned" in lengths.describe()
    plain = Measurement(levels={1: LevelResult(1, samples=(5.0,))})
    assert "goodput" not in plain.to_record() and "lengths" not in plain.to_record()  # as before
    assert Measurement.from_record(plain.to_record()).goodput is None


def test_a_search_by_request_rate_is_stored_and_read_back_whole_and_is_worth_its_capacitys_tok_s():
    lat = Latency(0.05, 0.08, 0.3, 100, mean=0.06)
    probes = (RateProbe(10, 100, 100, True, tok_s=400.0, sent_rate=10.0, ttft=lat, e2e=lat),
              RateProbe(20, 100, 62, False, tok_s=610.0, failed=1, unfinished=3, missed={"ttft": 38}, ttft=lat),
              RateProbe(15, 100, 99, True, tok_s=590.0))
    searched = RateResult(20, 10, probes, holds=15, breaks=20, attainment=0.99, targets=("ttft",), burstiness=2.0,
                          seed=4)
    m = Measurement(rate=searched)
    assert m.value == 590.0 and m.by_capacity and not m.levels and m.headline is None
    stored = m.to_record()
    assert stored["rate"]["probes"][1] == {**stored["rate"]["probes"][1], "rate": 20, "attainment": 0.62,
                                           "held": False, "missed": {"ttft": 38}, "unfinished": 3}
    back = Measurement.from_record(stored, 590.0)
    assert back.rate == searched and not back.levels  # no level 1 made up from the value
    assert [p.rate for p in back.rate.curve()] == [10, 15, 20]
    assert searched.describe(590.0) == ("serves the most within the SLO at 15 req/s: 590.0 tok/s (attainment 99.0%; "
                                        "breaks at 20 req/s: attainment 62.0%)")
    assert Measurement.from_record({"levels": {}}) is None  # records of every earlier version still read as before


def test_either_capacity_search_is_the_measurements_one_capacity_record_and_its_stored_form_is_unchanged():
    """Issue 46: readers ask ``Measurement.capacity`` (its figure, the level it is read at, holds and
    breaks, its lines) instead of checking which search ran; each record stays under its own key."""
    levels = {1: LevelResult(1, samples=(700.0,)), 16: LevelResult(16, samples=(858.0,)),
              17: LevelResult(17, samples=(862.0,))}
    load = GoodputResult(32, (1, 32, 16, 17), holds=16, breaks=17, held=(True, False, True, False),
                         marks=(RegimeMark(16, GRAPHS),))
    by_load = Measurement(levels=levels, goodput=load)
    assert by_load.capacity is load and by_load.capacity.level(levels).level == 16
    assert load.figure(levels) == 858.0 and load.rate_probes == ()
    assert load.notes() == ["regime: " + RegimeMark(16, GRAPHS).describe()]
    assert load.answer(858.0) == f"{load.describe(858.0)} (probed 1, 32, 16, 17)"
    bisected = GoodputResult(32, (1, 32, 16), holds=16, breaks=None)
    assert bisected.answer(None) == f"{bisected.describe()}, 0.0 total tok/s there (probed 1, 32, 16)"
    assert bisected.notes() == []
    assert GoodputResult(32, (1,), None, 1).figure(levels) == 0.0  # none held: worth nothing
    assert GoodputResult(32, (1, 64), 64, None).figure(levels) is None  # its level missing: the headline's
    probes = (RateProbe(10, 100, 100, True, tok_s=400.0), RateProbe(20, 100, 62, False, tok_s=610.0))
    rate = RateResult(20, 10, probes, holds=10, breaks=20)
    by_rate = Measurement(rate=rate)
    assert by_rate.capacity is rate and rate.level(levels) is None and rate.figure(levels) == 400.0
    assert rate.rate_probes == probes and rate.notes() == [] and rate.answer(400.0) == rate.describe(400.0)
    assert Measurement(levels=levels).capacity is None
    assert set(by_load.to_record()) >= {"goodput"} and "rate" not in by_load.to_record()
    assert by_rate.to_record()["rate"] == rate.to_record() and "goodput" not in by_rate.to_record()


def test_either_capacity_record_says_how_far_from_holding_it_was_where_none_held():
    """``core.slo.judge`` asks the record (``Capacity.unheld``) instead of checking which search ran: the
    concurrency search reads the lowest probe's breaches, the rate search its own lowest probe."""

    @dataclass(frozen=True)
    class Broke:
        excess: float
        text: str

        def describe(self) -> str:
            return self.text

    load = GoodputResult(32, (4, 1), holds=None, breaks=1)
    found = {1: [Broke(0.5, "TPOT p99 30 ms > 20 ms"), Broke(0.8, "TTFT")], 4: [Broke(2.0, "worse")]}
    assert load.unheld(found) == (0.8, f"{load.describe()}: TPOT p99 30 ms > 20 ms")
    assert load.unheld({}) == (0.0, load.describe())  # the lowest probe's breaches not measured
    probes = (RateProbe(20, 100, 62, False), RateProbe(10, 100, 90, False))
    rate = RateResult(20, 10, probes, holds=None, breaks=10, attainment=0.99)
    assert rate.unheld(found) == (pytest.approx(0.09), rate.describe())  # its own probes, not levels
