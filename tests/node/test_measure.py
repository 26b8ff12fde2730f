"""What a trial measures, against a real HTTP server (tests/fake_openai_server.py, which
streams like vLLM and, with --spec-tokens, speculates like it): every level over the prompt
set in rounds, level N from its steady state, latency percentiles per level, tokens counted
from usage (never chunks), acceptance read from /metrics, every level to a precision, the
one early-stop rule across levels, a limit set by the server's own pace, and prompts the
server's prefix cache has not seen (with --prefix-cache it caches like vLLM)."""

from __future__ import annotations

import statistics
import time

import fake_openai_server as fake  # the stand-in's own rules, for expectations
import pytest
from starved_loop import starved, starved_on_cue

from conftest import start_fake_openai
from orchestrator.core import client_bound
from orchestrator.core.capacity import CONFIRM_STINTS
from orchestrator.core.measurement import Measurement
from orchestrator.core.slo import Slo, Targets
from orchestrator.node import client
from orchestrator.node.measure import PACE_FACTOR, Prefixes, measure
from orchestrator.node.spec import BenchPlan

MODEL = "fake"
NATURAL = " ".join(["the harbor town woke slowly on the first cold morning of the year"] * 14)  # 182 words
SHORT = "Hello"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path, request):
    sp = start_fake_openai(tmp_path, *getattr(request, "param", ("--token-delay", "0.004")))
    try:
        yield sp.spec
    finally:
        sp.stop(grace_s=1.0)


def plan(**kw) -> BenchPlan:
    base = dict(prompts=("one two three", "a somewhat longer second prompt", "third"), output_tokens=12, warmup=1,
                repeats=2, timeout_s=30)
    return BenchPlan(**{**base, **kw})


def test_every_level_over_the_prompts_in_rounds(server):
    got = measure(server.base_url, MODEL, plan(levels=(4, 1)), deadline=time.monotonic() + 60)
    m = got.measurement
    assert got.ok and m.rounds == 2 and not got.pruned
    one, four = m.levels[1], m.levels[4]
    assert len(one.samples) == 2 * 3 and len(four.samples) == 2  # a sample per request; per window at 4
    assert list(m.levels) == [1, 4] and one.requests == 6 and four.requests == 2 * 4 * 3  # 3 waves of 4 streams
    assert one.unit == "decode tok/s" and four.unit == "total tok/s"
    # 4 streams at once move more tokens per second than one
    assert four.value > one.value
    assert one.acceptance_rate is None  # no speculation: nothing recorded, and no error
    # stored and read back: the same record (what every reader of the study gets)
    back = Measurement.from_record(m.to_record())
    assert back == m
    stored = m.to_record()
    assert stored["decode_samples"] == list(one.samples) and stored["repeats"] == 2 and stored["prompts"] == 3


def test_a_level_above_one_alone(server):
    got = measure(server.base_url, MODEL, plan(levels=(8,)), deadline=time.monotonic() + 60)
    m = got.measurement
    assert got.ok and 1 not in m.levels and len(m.levels[8].samples) == 2
    assert "decode_tok_s" not in m.to_record() and got.value == m.levels[8].value


def test_the_decode_rate_and_latencies_are_the_servers(tmp_path):
    """50 tokens, one every 10 ms: 100 decode tok/s; a first token 150 ms late is in TTFT and
    end-to-end latency, never in the decode rate."""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.01", "--ttft-delay", "0.15")
    try:
        got = measure(sp.spec.base_url, MODEL, plan(output_tokens=50, repeats=1), deadline=time.monotonic() + 60)
    finally:
        sp.stop(grace_s=1.0)
    one = got.measurement.levels[1]
    assert got.ok and one.value == pytest.approx(100, rel=0.3)
    assert one.ttft.p50 >= 0.15 and one.ttft.n == 3
    assert one.tpot.p50 == pytest.approx(0.01, rel=0.3) and one.itl.p50 == pytest.approx(0.01, rel=0.3)
    assert one.e2e.p50 >= 0.15 + 49 * 0.01 * 0.9
    assert one.e2e_tok_s < one.value  # TTFT is inside end-to-end
    for lat in (one.ttft, one.tpot, one.itl, one.e2e):
        assert lat.p50 <= lat.p90 <= lat.p99


def test_a_level_above_one_is_its_steady_state(tmp_path, monkeypatch):
    """A server whose streams slow each other (each token 2 ms more per other stream): at 4
    streams the steady state is 4 / (10 + 3 x 2 ms) = 250 tok/s. The window keeps the ramp and
    the tail out: each round's own tokens over its own wall time (the very requests its sample
    was cut from, so a busy machine slows both alike) is lower."""
    rounds: list[tuple[list, float]] = []  # what each of the level's rounds streamed, as measure got it
    streams = client.run_streams

    def recorded(*args, **kwargs):
        got = streams(*args, **kwargs)
        rounds.append(got)
        return got

    monkeypatch.setattr(client, "run_streams", recorded)
    sp = start_fake_openai(tmp_path, "--token-delay", "0.01", "--stream-cost", "0.002", "--ttft-delay", "0.05")
    try:
        got = measure(sp.spec.base_url, MODEL, plan(levels=(4,), output_tokens=30, repeats=2),
                      deadline=time.monotonic() + 60)
    finally:
        sp.stop(grace_s=1.0)
    four = got.measurement.levels[4]
    assert got.ok and four.value == pytest.approx(4 / 0.016, rel=0.15)
    assert len(rounds) == len(four.samples) == 2
    for sample, (streamed, wall) in zip(four.samples, rounds):
        assert len(streamed) == 12 and all(r.ok for _, r in streamed)
        whole_round = sum(r.n_tokens for _, r in streamed) / wall
        assert sample > whole_round
    walls = [wall for _, wall in rounds]
    assert four.window_s is not None and four.window_s < statistics.median(walls)  # each window inside its round
    assert four.tpot.p50 == pytest.approx(0.016, rel=0.2)  # each stream's own pace among 3 others
    assert four.ttft.p50 >= 0.05 and four.requests == 2 * 12


def test_every_level_is_measured_to_the_target_precision(server):
    """More rounds of each level (not level 1 alone) while its interval is wider than the target;
    an unreachable target stops at max_repeats with a warning per level."""
    never = measure(server.base_url, MODEL, plan(levels=(1, 4), repeats=2, max_repeats=4, target_rel_ci=1e-9),
                    deadline=time.monotonic() + 60)
    m = never.measurement
    assert never.ok and len(m.levels[4].samples) == 4 and len(m.levels[1].samples) == 4 * 3
    assert sum("above the target" in w for w in never.warnings) == 2
    at_once = measure(server.base_url, MODEL, plan(levels=(1, 4), repeats=2, max_repeats=4, target_rel_ci=10.0),
                      deadline=time.monotonic() + 60)
    assert at_once.ok and len(at_once.measurement.levels[4].samples) == 2  # reached at once


def test_a_failure_at_one_level_keeps_what_the_others_measured(tmp_path):
    """A server that refuses more than 2 streams at once (a config that breaks under load): level 1
    was measured first and stays on the record; the failure names the level."""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.002", "--fail-above", "2")
    try:
        broken = measure(sp.spec.base_url, MODEL, plan(levels=(1, 4), repeats=1), deadline=time.monotonic() + 60)
    finally:
        sp.stop(grace_s=1.0)
    assert not broken.ok and broken.failed_level == 4 and not broken.timed_out
    assert broken.error.startswith("concurrency 4:") and "HTTP 500" in broken.error
    assert set(broken.measurement.levels) == {1} and len(broken.measurement.levels[1].samples) == 3


@pytest.mark.parametrize("server", [("--token-delay", "0.004", "--spec-tokens", "4")], indirect=True)
def test_speculative_chunks_counted_from_usage_and_acceptance_from_metrics(server):
    natural = BenchPlan(prompts=(NATURAL,), output_tokens=40, warmup=0, repeats=2, timeout_s=30)
    got = measure(server.base_url, MODEL, natural, deadline=time.monotonic() + 60, metrics_url=server.metrics_url)
    assert got.ok
    req = client.stream_completion(server.base_url, MODEL, NATURAL, 40, 30)
    assert req.n_tokens == 40 and len(req.token_times) == 8  # 40 tokens in 8 chunks of 1 + 4
    # tok/s from tokens: 5 tokens a step; a chunk count would give a fifth of it
    step = 0.004 * (1 + 0.1 * 4)
    one = got.measurement.levels[1]
    assert one.value == pytest.approx(5 / step, rel=0.35)
    assert one.acceptance_rate == pytest.approx(fake.accepted_per_step(NATURAL, 4) / 4)
    assert one.mean_accepted_length == pytest.approx(1 + fake.accepted_per_step(NATURAL, 4), rel=0.05)
    assert got.measurement.to_record()["acceptance_rate"] == one.acceptance_rate  # where readers found it


@pytest.mark.parametrize("server", [("--token-delay", "0.004", "--spec-tokens", "4")], indirect=True)
def test_the_prompt_decides_what_speculation_is_worth(server):
    """The same speculative server: a gain on natural text, a loss on one word (the job's
    single prompt of old would have ranked it by that prompt alone)."""
    def on(prompt: str):
        p = BenchPlan(prompts=(prompt,), output_tokens=40, warmup=0, repeats=3, timeout_s=30)
        return measure(server.base_url, MODEL, p, deadline=time.monotonic() + 60, metrics_url=server.metrics_url)
    natural, short = on(NATURAL).measurement.levels[1], on(SHORT).measurement.levels[1]
    plain = 1 / 0.004  # the same server without speculation: one token a step of 4 ms
    assert natural.value > 2 * plain and short.value < plain
    assert natural.acceptance_rate > 0.9
    assert not short.acceptance_rate


def test_a_stream_without_usage_fails_the_measurement(server):
    req = client.stream_completion(server.base_url, MODEL, "x", 8, 10, extra={"fake": {"no_usage": True}})
    assert not req.ok and req.error == client.NO_USAGE and req.n_tokens == 0


def test_early_stop_needs_every_level_below_its_threshold(server):
    fast = measure(server.base_url, MODEL, plan(levels=(1, 4)), deadline=time.monotonic() + 60).measurement
    v1, v4 = fast.levels[1].value, fast.levels[4].value
    below_both = measure(server.base_url, MODEL, plan(levels=(1, 4), constraint_levels=(2,)),
                         deadline=time.monotonic() + 60, prune_below={1: 10 * v1, 4: 10 * v4})
    m = below_both.measurement
    assert below_both.pruned and m.rounds == 1 and len(m.levels[1].samples) == 3
    assert 2 not in m.levels  # the outcome constraints' level waits for a trial that goes on
    best_at_four = measure(server.base_url, MODEL, plan(levels=(1, 4), constraint_levels=(2,)),
                           deadline=time.monotonic() + 60, prune_below={1: 10 * v1, 4: v4 / 10})
    assert not best_at_four.pruned and best_at_four.measurement.rounds == 2
    assert len(best_at_four.measurement.levels[2].samples) == 2  # measured like the others


def test_a_slow_server_is_judged_by_its_own_pace(tmp_path):
    """A uniformly slow server finishes past the fixed limit (its warm-up set the pace); one that
    becomes 30x slower mid-benchmark is a timeout, with the limit it ran out of."""
    slow = start_fake_openai(tmp_path, "--token-delay", "0.01")
    degrading = start_fake_openai(tmp_path, "--token-delay", "0.002", "--slow-after", "3:30")
    try:
        steady = measure(slow.spec.base_url, MODEL, plan(output_tokens=20, repeats=3),
                         deadline=time.monotonic() + 0.5)  # 9 requests of 0.2 s: past the 0.5 s floor
        worse = measure(degrading.spec.base_url, MODEL, plan(output_tokens=20, repeats=3),
                        deadline=time.monotonic() + 0.5)
    finally:
        slow.stop(grace_s=1.0)
        degrading.stop(grace_s=1.0)
    assert steady.ok, steady.error
    assert steady.measurement.bench_s > 0.5
    assert not worse.ok and worse.timed_out and worse.limit_s is not None
    # its limit is the warm-up's pace x PACE_FACTOR (9 requests), not what the slowed server took
    warm = worse.measurement.warmup_s
    assert worse.limit_s == pytest.approx(max(0.5, PACE_FACTOR * warm * 9), rel=0.3)


# ---- goodput's capacity search and a traffic file's lengths (issues 35, 47) -----------------------------
def test_goodput_finds_the_capacity_of_a_server_that_slows_with_its_streams(tmp_path):
    """Each token 32 ms, plus 8 ms per other stream in flight: TPOT(n) = 32 + 8(n - 1) ms, within a 68
    ms target up to 5 streams (64 ms), over it at 6 (72 ms); total tok/s rises with the streams, so the
    capacity is the crossing. Every probe's verdict is in the record, and the whole run's tok/s beside
    the steady state's at each level."""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.032", "--stream-cost", "0.008")
    targets = Targets(every=(Slo.named("tpot_p99", 0.068),))
    try:
        got = measure(sp.spec.base_url, MODEL, plan(goodput=8, slo=targets, waves=2, repeats=1, output_tokens=8,
                                                    levels=(99,)), deadline=time.monotonic() + 60)
    finally:
        sp.stop(grace_s=1.0)
    g = got.measurement.goodput
    assert got.ok and g.probes[:3] == (1, 4, 8) and 99 not in got.measurement.levels  # the sweep, not the levels
    assert abs(g.holds - 5) <= 1 and g.breaks == g.holds + 1 and len(g.probes) <= 12  # within one step of 5
    assert dict(zip(g.probes, g.held)) == {p: p <= g.holds for p in g.probes} and g.targets == ("tpot_p99",)
    assert set(got.measurement.levels) == set(g.probes)  # every probe is a level of the record
    assert got.value == got.measurement.levels[g.holds].value  # the total tok/s at the capacity point
    assert all(got.measurement.levels[p].whole_run_tok_s for p in g.probes if p > 1)


def test_a_confirmation_the_client_starved_is_measured_again_in_full(tmp_path):
    """The capacity search measures a load it would rest its answer on once more per ``CONFIRM_STINTS``
    before it believes it. When those rounds are client-bound, the load is measured again, and again in
    full: its first measurement and the confirmation's, not one round in place of three. The client
    is starved from the moment a load comes back to be confirmed (the first load measured a second
    time: the search never comes back otherwise). One wave a round, so every request's first tokens
    come inside the block."""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.032", "--stream-cost", "0.008", "--ttft-delay", "0.06")
    targets = Targets(every=(Slo.named("tpot_p99", 0.068),))
    seen: list[int] = []
    cue: list[int] = []
    try:
        with starved_on_cue() as start:
            def progress(level, done, total):
                if done == 0 and not cue and seen and level in seen and seen[-1] != level:
                    cue.append(level)
                    start()
                if done == 0 and (not seen or seen[-1] != level):
                    seen.append(level)

            got = measure(sp.spec.base_url, MODEL, plan(goodput=8, slo=targets, waves=1, repeats=1, output_tokens=8,
                                                        levels=(99,)), deadline=time.monotonic() + 90,
                          progress=progress)
    finally:
        sp.stop(grace_s=1.0)
    assert got.ok and cue, seen
    confirmed = got.measurement.levels[cue[0]]
    assert confirmed.client_lag is not None and confirmed.client_lag.attempts == 2  # measured again
    assert len(confirmed.samples) == 1 + CONFIRM_STINTS  # in full: one sample a round, three rounds
    assert any(w.startswith(client_bound.NOTICE) and f"at {cue[0]} streams" in w for w in got.warnings)


def test_the_whole_runs_tok_s_counts_the_ramp_the_steady_state_leaves_out(tmp_path):
    """``vllm bench serve`` counts output tokens over the whole run; the steady state only while every
    stream is in flight. With each first token 0.6 s late, the first wave's wait is in the whole run:
    4 streams x 2 waves of 12 tokens take ~1.3 s, of which ~0.7 s are the steady window (0.57-0.59x
    beside five busy loops). (At 0.2 s a box kept busy by other work streamed the tokens five times
    slower than asked, and the first wait was too small a share of the run to tell: 179 tok/s over the
    run against 191 steady. With 3 waves the wait's share was 0.72-0.78x beside five loops, and a
    quiet run of the suite in 4 processes read 0.92x once.)"""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.004", "--ttft-delay", "0.6")
    try:
        got = measure(sp.spec.base_url, MODEL, plan(levels=(4,), repeats=1, waves=2), deadline=time.monotonic() + 60)
    finally:
        sp.stop(grace_s=1.0)
    four = got.measurement.levels[4]
    assert got.ok and four.whole_run_tok_s < 0.9 * four.value
    assert Measurement.from_record(got.measurement.to_record()).levels[4].whole_run_tok_s == four.whole_run_tok_s


def test_each_request_asks_its_own_length_and_the_lengths_are_measured(server):
    prompts = ("one", "two words", "three words here", "four words are here")
    got = measure(server.base_url, MODEL, plan(prompts=prompts, output_lengths=(2, 5, 9, 30), levels=(1, 3)),
                  deadline=time.monotonic() + 60)
    lengths = got.measurement.lengths
    assert got.ok and lengths.mismatched == 0 and not got.warnings
    assert (lengths.output.low, lengths.output.high) == (2, 30)
    # the server's own count of each prompt: its words, and the line each request begins with (one word here)
    assert (lengths.input.low, lengths.input.high) == (1 + 1, 4 + 1)
    assert lengths.output.n == got.measurement.levels[1].requests + got.measurement.levels[3].requests
    for level in (1, 3):  # each level's own requests, as the server counted them
        got_level = got.measurement.levels[level]
        assert got_level.output_length.n == got_level.requests and got_level.output_length.high <= 30
    plain = measure(server.base_url, MODEL, plan(levels=(1,)), deadline=time.monotonic() + 60).measurement
    assert plain.lengths is None  # without a traffic file, as before
    one = plain.levels[1]  # but each level keeps its requests' lengths (the benchmark report's)
    assert one.input_length.n == one.output_length.n == one.requests and one.input_length.low >= 1
    assert Measurement.from_record(plain.to_record()).levels[1].input_length == one.input_length
    built = plan(prompts=tuple(" ".join(["word"] * n) for n in (300, 320)), levels=(1,), context=300)
    long = measure(server.base_url, MODEL, built, deadline=time.monotonic() + 60).measurement.lengths
    assert (long.input.low, long.input.high) == (301, 321)  # long prompts: the lengths the server counted


SYSTEM = " ".join(["You are a careful assistant who answers every question in full sentences."] * 4)  # 48 words


def test_no_request_is_answered_from_the_prefix_cache_unless_the_job_shares_prefixes(tmp_path):
    """A server that caches prefixes (vLLM's is on by default) answers a prompt it has seen without
    most of its prefill; the rounds send the same prompts again and again. Every request begins
    with a line of its own: the cache answers none of it at any level (its counters say 0%), and
    TTFT is a whole prefill. With ``prefix_reuse`` the requests share what their prompts share
    (here a system prompt of three blocks), never a request's own earlier sending."""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.002", "--prefix-cache", "--prefill-cost", "2")
    prompts = tuple(f"{SYSTEM} Question {i}: what is {i} plus {i}?" for i in range(3))
    tokens = len(fake.tokenize(prompts[0])) + 1  # the server's count of a request: its line, then the prompt
    try:
        fresh, shared = (measure(sp.spec.base_url, MODEL, plan(prompts=prompts, levels=(1, 4), prefix_reuse=reuse),
                                 deadline=time.monotonic() + 60, metrics_url=sp.spec.metrics_url)
                         for reuse in (False, True))
    finally:
        sp.stop(grace_s=1.0)
    assert fresh.ok and shared.ok
    for level, got in fresh.measurement.levels.items():
        assert got.prefix_cache_hit_rate == 0.0, level  # every request a prefill of its own
        assert got.ttft.p50 >= 0.9 * 2 * tokens / 1000, level  # the whole prompt's prefill
    # per pass through the three prompts: the first computes the line and the system prompt, the other two find
    # its whole blocks (the line and the system prompt's first 47 words); a pass never finds an earlier pass's
    found = (1 + 47) // fake.BLOCK * fake.BLOCK
    for level, got in shared.measurement.levels.items():
        assert got.prefix_cache_hit_rate == pytest.approx(2 * found / (3 * tokens)), level
    back = Measurement.from_record(fresh.measurement.to_record())  # stored and read back
    assert back.levels[4].prefix_cache_hit_rate == 0.0
    assert Measurement.from_record({"levels": {"1": {"value": 5.0, "samples": [5.0]}}}).levels[1] \
        .prefix_cache_hit_rate is None  # a record of an earlier version: not counted, not 0


def test_each_request_begins_with_a_line_no_other_request_of_the_launch_began_with():
    lines = Prefixes(tag="t")
    sent = lines.requests(("a", "b"), 5) + lines.requests(("a", "b"), 2)
    assert sent == ["[t-1]\na", "[t-2]\nb", "[t-3]\na", "[t-4]\nb", "[t-5]\na", "[t-6]\na", "[t-7]\nb"]
    passes = Prefixes(reuse=True, tag="t")  # one line per pass through the prompts
    assert passes.requests(("a", "b"), 5) == ["[t-1]\na", "[t-1]\nb", "[t-2]\na", "[t-2]\nb", "[t-3]\na"]
    assert Prefixes().tag != Prefixes().tag  # another launch, another tag


def test_a_starved_client_is_measured_again_then_flagged_and_its_figure_was_off(tmp_path):
    """The server sends 24 tokens 10 ms apart, the first 60 ms after the request (100 decode tok/s).
    Unstarved, the client's loop is watched, on time at the first tokens, and nothing is said.
    Starved (every loop the client makes blocked for 100 ms just as the first tokens come in:
    tests/starved_loop.py), the level's lateness is recorded, the level is measured a second time,
    and, still client-bound, kept with the notice; its figure is visibly above the unstarved one (the
    first tokens stamped late, the span shortened): what the notice warns of. The benchmark still
    succeeds: a client-bound level is never the config's failure."""
    sp = start_fake_openai(tmp_path, "--token-delay", "0.01", "--ttft-delay", "0.06")
    bench = plan(levels=(1,), output_tokens=24)
    try:
        calm = measure(sp.spec.base_url, MODEL, bench, deadline=time.monotonic() + 60)
        with starved():
            hungry = measure(sp.spec.base_url, MODEL, bench, deadline=time.monotonic() + 60)
    finally:
        sp.stop(grace_s=1.0)
    assert calm.ok and hungry.ok
    one, off = calm.measurement.levels[1], hungry.measurement.levels[1]
    assert one.client_lag is not None and one.client_lag.n > 0 and one.client_lag.attempts == 1
    assert client_bound.judge(one) is None and not [w for w in calm.warnings if "client" in w]
    lag = off.client_lag
    assert lag is not None and lag.attempts == 2 and len(off.samples) == 2 * 3  # the second measurement's alone
    assert lag.span_short_ms >= 50 and lag.p99_ms >= 50  # blocked 100 ms: the first tokens read 50+ ms late
    flagged = client_bound.judge(off)
    assert flagged is not None and [w for w in hungry.warnings if w.startswith(client_bound.NOTICE)] == [
        flagged.notice()]
    assert "the measuring client fell behind by" in flagged.notice() and "at 1 stream:" in flagged.notice()
    assert off.value > 1.15 * one.value  # the flagged figure overstates the server's pace (about +50%)
    back = Measurement.from_record(hungry.measurement.to_record())
    assert back.levels[1].client_lag == lag  # stored with the trial
