"""The streaming client and decode metrics against a real HTTP server process
(tests/fake_openai_server.py, started with ServerProcess and torn down in finally)."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import sys
import threading
import time
import warnings

import pytest

from conftest import TESTS, start_fake_openai
from orchestrator.node import client
from orchestrator.node.client import (
    RequestFailed,
    greedy_outputs,
    measure_concurrency,
    median_ci,
    relative_ci,
    score_continuation,
    stream_completion,
)
from orchestrator.node.looplag import INTERVAL_S, LoopLag
from orchestrator.node.server import free_port

sys.path.insert(0, str(TESTS))
import fake_openai_server as fake_model  # its deterministic "model", for expectations
from starved_loop import starved

pytestmark = pytest.mark.timeout(60)

MODEL = "fake"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    sp = start_fake_openai(tmp_path_factory.mktemp("fake"), "--token-delay", "0.01")
    try:
        yield sp.spec.base_url
    finally:
        sp.stop(grace_s=1.0)


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# --------------------------------------------------------------------------------------
def test_stream_parses_vllm_chunks(url):
    r = stream_completion(url, MODEL, "Hello there", 20, 10, extra={"fake": {"token_delay": 0.002}})
    assert r.ok and r.error is None
    assert r.n_tokens == 20 and len(r.token_times) == 20
    assert r.text == "".join(t for t, _ in fake_model.generate("Hello there", 20))
    assert r.finish_reason == "length" and r.prompt_tokens == 2
    assert r.token_times == sorted(r.token_times) and r.t_start <= r.token_times[0]
    assert r.ttft_s == pytest.approx(r.token_times[0] - r.t_start)
    assert r.latency_s >= r.token_times[-1] - r.t_start
    # the formula, exactly
    assert r.decode_tok_s == pytest.approx(19 / (r.token_times[-1] - r.token_times[0]))
    assert r.tpot_s == pytest.approx(1 / r.decode_tok_s)
    assert r.e2e_tok_s == pytest.approx(20 / r.latency_s)


def test_hanging_stream_times_out_within_the_deadline(url):
    deadline = 1.0
    t0 = time.monotonic()
    r = stream_completion(url, MODEL, "hang", 50, deadline, extra={"fake": {"hang_after": 5, "token_delay": 0.001}})
    elapsed = time.monotonic() - t0
    assert not r.ok and r.error == "timeout" and r.timed_out
    assert elapsed >= deadline  # the deadline ended it (the server never would: it hangs)
    # a stream that trickles (each token well within the deadline) is cut at the deadline too:
    # the deadline is the whole request's, not one read's
    tokens, delay = 50, 0.1
    t0 = time.monotonic()
    slow = stream_completion(url, MODEL, "slow", tokens, deadline, extra={"fake": {"token_delay": delay}})
    assert not slow.ok and slow.timed_out
    assert time.monotonic() - t0 < tokens * delay  # before the stream would have ended
    assert len(r.token_times) == 5  # what did arrive is kept


@pytest.mark.parametrize(
    "model, knobs, expect",
    [
        ("nope", {}, "HTTP 404: The model `nope` does not exist."),
        (MODEL, {"drop_after": 3}, "stream ended without [DONE]"),
        (MODEL, {"malformed_after": 2}, "malformed chunk"),
    ],
)
def test_failed_requests_are_data(url, model, knobs, expect):
    r = stream_completion(url, model, "x", 10, 5, extra={"fake": {**knobs, "token_delay": 0.001}})
    assert not r.ok and expect in r.error and "\n" not in r.error
    assert not r.timed_out


def test_connection_refused_is_data():
    r = stream_completion(_dead_url(), MODEL, "x", 10, 5)
    assert not r.ok and r.error == "connection refused"


def test_concurrency_totals(url):
    # 40 ms a token: a busy box's ~10 ms a token (client and server both in Python) stays small beside it
    out = measure_concurrency(url, MODEL, "c", 20, concurrency=4, n_requests=8, timeout_s=10,
                              extra={"fake": {"token_delay": 0.04}})
    assert out["failures"] == 0 and out["ok_requests"] == 8 and out["n_requests"] == 8
    assert out["total_tokens"] == 160
    assert out["total_tok_s"] == pytest.approx(160 / out["wall_s"])
    # 4 streams at ~25 tok/s each: clearly more than one stream could do
    assert out["total_tok_s"] > 1.5 * 25
    assert out["decode_tok_s"] == pytest.approx(25, rel=0.4)
    assert out["tpot_s"] == pytest.approx(1 / out["decode_tok_s"])
    assert out["ttft_s"] is not None
    bad = measure_concurrency(url, "nope", "c", 5, concurrency=2, timeout_s=5)
    assert bad["n_requests"] == 4 and bad["failures"] == 4 and bad["total_tokens"] == 0
    assert bad["errors"] and "HTTP 404" in bad["errors"][0]


# --------------------------------------------------------------------------------------
# measure_concurrency: every stream on one asyncio event loop
def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile (the fake server's tree watch reads /proc)
            pass
    return n


@pytest.fixture
def leaves_nothing():
    """The test leaves no thread or socket open, and no ResourceWarning."""
    gc.collect()
    before = threading.active_count(), _sockets()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    assert (threading.active_count(), _sockets()) == before
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_asyncio_stream_parses_like_the_sync_client(url, leaves_nothing):
    extra = {"fake": {"token_delay": 0.002}, "return_token_ids": True}
    sync = stream_completion(url, MODEL, "Hello there", 12, 10, extra=extra)
    body = client._completion_body(MODEL, "Hello there", 12, 0.0, True, extra)
    r = asyncio.run(client._astream(client._request(url, "/v1/completions", body), 10))
    assert r.ok and sync.ok and r.error is None
    # 12 tokens: ignore_eos was sent (the fake stops at 8 without); prompt_tokens comes only
    # from the usage chunk, sent only for stream_options.include_usage
    assert r.n_tokens == 12 and r.prompt_tokens == 2
    assert (r.text, r.n_tokens, r.finish_reason, r.prompt_tokens) == (sync.text, sync.n_tokens,
                                                                       sync.finish_reason, sync.prompt_tokens)
    assert len(r.token_times) == 12 and r.token_times == sorted(r.token_times) and r.t_start <= r.token_times[0]
    assert r.decode_tok_s == pytest.approx(11 / (r.token_times[-1] - r.token_times[0]))
    assert r.ttft_s == pytest.approx(r.token_times[0] - r.t_start) and r.latency_s >= r.token_times[-1] - r.t_start


def test_concurrency_64_streams_match_the_token_delay(url, leaves_nothing):
    base = threading.active_count()
    peak, stop = [base], threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], threading.active_count())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        out = measure_concurrency(url, MODEL, "c64", 50, concurrency=64, n_requests=64, timeout_s=30,
                                  extra={"fake": {"token_delay": 0.02}})
    finally:
        stop.set()
        sampler.join()
    assert peak[0] == base + 1  # the sampler: the 64 streams ran on this thread
    assert out["failures"] == 0 and out["ok_requests"] == 64 and out["errors"] == []
    assert out["total_tokens"] == 64 * 50
    assert out["tpot_s"] == pytest.approx(0.02, rel=0.2) and out["decode_tok_s"] == pytest.approx(50, rel=0.2)
    assert out["total_tok_s"] == pytest.approx(3200 / out["wall_s"])
    # one wave: each stream's 50 tokens take >= 49 x 20 ms, so at most 3200 / 0.98 s
    assert 1600 < out["total_tok_s"] <= 3200 / 0.98
    stream_s = 50 * 0.02  # one stream's 50 tokens at the fake's 20 ms
    assert 0 < out["ttft_s"] < stream_s  # the first token, not a whole stream


@pytest.mark.parametrize("knobs, expect", [
    ({"status": 500}, "HTTP 500: fake failure 500"),
    ({"malformed_after": 2}, "malformed chunk"),
    ({"drop_after": 3}, "stream ended without [DONE]"),
])
def test_concurrency_failures_are_data(url, leaves_nothing, knobs, expect):
    extra = {"fake": {**knobs, "token_delay": 0.001}}
    out = measure_concurrency(url, MODEL, "f", 10, concurrency=16, timeout_s=5, extra=extra)
    assert out["n_requests"] == 32 and out["failures"] == 32 and out["ok_requests"] == 0
    assert out["timeouts"] == 0 and out["total_tokens"] == 0 and out["total_tok_s"] == 0
    assert out["tpot_s"] is None and out["decode_tok_s"] is None and out["ttft_s"] is None
    # the same one line as the synchronous client's
    assert out["errors"] == [stream_completion(url, MODEL, "f", 10, 5, extra=extra).error]
    assert expect in out["errors"][0] and "\n" not in out["errors"][0]


def test_concurrency_hanging_streams_time_out(url, leaves_nothing):
    n, deadline = 64, 1.0
    t0 = time.monotonic()
    out = measure_concurrency(url, MODEL, "h", 50, concurrency=n, n_requests=n, timeout_s=deadline,
                              extra={"fake": {"hang_after": 3, "token_delay": 0.001}})
    # the 64 deadlines ran at once: far less than one after another
    assert time.monotonic() - t0 < n * deadline / 4
    assert out["failures"] == 64 and out["timeouts"] == 64 and out["errors"] == ["timeout"]


def test_concurrency_server_gone(tmp_path, leaves_nothing):
    out = measure_concurrency(_dead_url(), MODEL, "x", 10, concurrency=64, timeout_s=5)
    assert out["n_requests"] == 128 and out["failures"] == 128 and out["errors"] == ["connection refused"]
    # killed while 16 streams of ~1 s are in flight: those and the 32 after them fail
    sp = start_fake_openai(tmp_path, "--token-delay", "0.02")
    killer = threading.Timer(0.5, sp.stop, kwargs={"grace_s": 0.0})
    killer.start()
    deadline = 5
    try:
        t0 = time.monotonic()
        out = measure_concurrency(sp.spec.base_url, MODEL, "x", 50, concurrency=16, n_requests=48, timeout_s=deadline)
        elapsed = time.monotonic() - t0
    finally:
        killer.join()
        sp.stop(grace_s=0.0)
    # failed as the server went, not timed out: before the requests' deadline
    assert out["failures"] == 48 and out["ok_requests"] == 0 and out["timeouts"] == 0 and elapsed < deadline
    assert 2 <= len(out["errors"]) <= 5 and "connection refused" in out["errors"]
    assert all("\n" not in e for e in out["errors"])


def test_greedy_outputs(url):
    prompts = ["one", "two two"]
    outs = greedy_outputs(url, MODEL, prompts, 6, 10, extra={"return_token_ids": True})
    assert [o["ok"] for o in outs] == [True, True]
    for o, p in zip(outs, prompts):
        gen = fake_model.generate(p, 6)
        assert o["prompt"] == p and o["text"] == "".join(t for t, _ in gen)
        assert o["token_ids"] == [i for _, i in gen] and o["n_tokens"] == 6
        assert o["finish_reason"] == "length"
    plain = greedy_outputs(url, MODEL, prompts, 6, 10)
    assert [o["text"] for o in plain] == [o["text"] for o in outs]
    assert all(o["token_ids"] is None for o in plain)
    failed = greedy_outputs(_dead_url(), MODEL, ["x"], 4, 5)
    assert failed[0]["ok"] is False and failed[0]["error"] == "connection refused"


@pytest.mark.parametrize("bos", [False, True])
def test_score_continuation(url, bos):
    prompt, cont = "The capital of France is", " Paris, of course"
    lps = score_continuation(url, MODEL, prompt, cont, 10, extra={"fake": {"bos": bos}})
    toks = fake_model.tokenize(prompt + cont)
    expected = [fake_model.logprob(toks[i - 1], toks[i]) for i in range(len(fake_model.tokenize(prompt)), len(toks))]
    assert len(expected) == 3 and lps == pytest.approx(expected)


def test_score_continuation_unsupported_or_unreachable(tmp_path):
    sp = start_fake_openai(tmp_path, "--no-logprobs")
    try:
        assert score_continuation(sp.spec.base_url, MODEL, "a", " b", 10) is None
    finally:
        sp.stop(grace_s=1.0)
    with pytest.raises(RequestFailed):
        score_continuation(_dead_url(), MODEL, "a", " b", 5)


def test_median_ci_order_statistics():
    assert median_ci([3.0]) is None and relative_ci([3.0]) is None
    assert median_ci([5, 1, 3, 2, 4]) == (1, 5)  # n < 6: min..max
    assert median_ci(list(range(1, 10))) == (2, 8)  # n = 9: x(2)..x(8), 96.1 %
    assert median_ci(list(range(1, 21))) == (6, 15)  # n = 20: x(6)..x(15), 95.9 %
    assert relative_ci([10.0] * 8) == 0.0
    assert relative_ci([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert client.TIMEOUT == "timeout"


# ---- a stalled stream ends in the stall limit, not the request's whole deadline ----
def test_a_stream_that_stops_is_stalled_before_its_deadline(url):
    deadline_s = 30.0
    r = stream_completion(url, MODEL, "hang", 50, deadline_s, stall_s=0.5,
                          extra={"fake": {"hang_after": 3, "token_delay": 0.001}})
    assert not r.ok and r.stalled and not r.timed_out
    assert r.error.startswith("stalled: no data for 0.5s")
    assert len(r.token_times) == 3  # what came before the stop was read
    assert r.latency_s < deadline_s / 10  # ended by the stall limit, far before the deadline


def test_a_slow_but_steady_stream_is_not_stalled(url):
    """Each token arrives within the stall limit: slow is not stalled."""
    r = stream_completion(url, MODEL, "steady", 10, 30.0, stall_s=0.5, extra={"fake": {"token_delay": 0.1}})
    assert r.ok and r.n_tokens == 10


def test_concurrent_streams_that_stop_are_counted_as_stalls(url, leaves_nothing):
    deadline_s = 30.0
    got = measure_concurrency(url, MODEL, "hang", 20, 3, n_requests=3, timeout_s=deadline_s, stall_s=0.5,
                              extra={"fake": {"hang_after": 2, "token_delay": 0.001}})
    assert got["failures"] == 3 and got["stalls"] == 3 and got["timeouts"] == 0
    assert got["wall_s"] < deadline_s / 10
    assert got["errors"][0].startswith("stalled")


def _sent_at(res) -> list[float]:
    """Each token's send time on the server (its ``stamp`` knob: ``time.monotonic()`` in the text)."""
    return [float(t) for t in re.findall(r"@([0-9.]+)", res.text)]


def test_the_loops_lateness_at_a_first_token_is_how_late_it_was_stamped(url, leaves_nothing):
    """A request whose loop is blocked for 100 ms just as its first tokens come in
    (tests/starved_loop.py): the server's own send times (one clock on one host) say the first token
    was stamped 40+ ms late and the last on time, so the decode rate is above the server's pace;
    the ticker, on the same loop, saw that lateness at the first token's stamp."""
    extra = {"fake": {"token_delay": 0.01, "ttft_delay": 0.06, "stamp": True}}
    lag = LoopLag()
    with starved():
        res = stream_completion(url, MODEL, "Hello there", 24, 30, extra=extra, lag=lag)
    assert res.ok and res.n_tokens == 24 and len(lag.late) > 0
    sent = _sent_at(res)
    first_late, last_late = res.token_times[0] - sent[0], res.token_times[-1] - sent[-1]
    assert first_late >= 0.04 and last_late < first_late
    assert res.decode_tok_s > 23 / (sent[-1] - sent[0])  # the span shortened: the figure overstated
    assert lag.at(res.token_times[0]) >= first_late - 2 * INTERVAL_S


def test_every_stream_of_a_level_is_watched_on_its_one_loop(url, leaves_nothing):
    """``run_streams`` with a ``LoopLag``: the ticker ran on the streams' loop for the whole round, so
    every request's first and last token have a lateness beside them."""
    lag = LoopLag()
    got, _ = client.run_streams(url, MODEL, ["a", "b"], 12, 4, 8, timeout_s=30, lag=lag,
                                extra={"fake": {"token_delay": 0.005}})
    assert len(got) == 8 and all(r.ok for _, r in got)
    assert all(lag.at(r.token_times[0]) is not None and lag.at(r.token_times[-1]) is not None for _, r in got)
