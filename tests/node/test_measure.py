"""What a trial measures, against a real HTTP server (tests/fake_openai_server.py, which
streams like vLLM and, with --spec-tokens, speculates like it): every level over the prompt
set in rounds, tokens counted from usage (never chunks), acceptance read from /metrics, and
the one early-stop rule across levels."""

from __future__ import annotations

import time

import fake_openai_server as fake  # the stand-in's own rules, for expectations
import pytest

from conftest import start_fake_openai
from orchestrator.node import client
from orchestrator.node.measure import measure
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
    assert got.ok and got.rounds == 2 and not got.pruned
    one, four = got.levels[1], got.levels[4]
    assert len(one.samples) == 2 * 3 and len(four.samples) == 2  # a sample per request; per round at 4
    assert list(got.levels) == [1, 4]  # the cheapest level first
    assert all(c == 12 for c in one.token_counts)
    metrics = got.to_metrics()
    assert metrics["decode_samples"] == one.samples and metrics["repeats"] == 2 and metrics["prompts"] == 3
    assert metrics["levels"]["4"]["samples"] == four.samples and metrics["levels"]["4"]["unit"] == "total tok/s"
    # 4 streams at once move more tokens per second than one
    assert four.value > one.value
    assert "acceptance_rate" not in metrics  # no speculation: nothing recorded, and no error


def test_a_level_above_one_alone(server):
    got = measure(server.base_url, MODEL, plan(levels=(8,)), deadline=time.monotonic() + 60)
    metrics = got.to_metrics()
    assert got.ok and "decode_tok_s" not in metrics and len(metrics["levels"]["8"]["samples"]) == 2
    assert got.value == got.levels[8].value


@pytest.mark.parametrize("server", [("--token-delay", "0.004", "--spec-tokens", "4")], indirect=True)
def test_speculative_chunks_counted_from_usage_and_acceptance_from_metrics(server):
    natural = BenchPlan(prompts=(NATURAL,), output_tokens=40, warmup=0, repeats=2, timeout_s=30)
    got = measure(server.base_url, MODEL, natural, deadline=time.monotonic() + 60, metrics_url=server.metrics_url)
    assert got.ok
    req = client.stream_completion(server.base_url, MODEL, NATURAL, 40, 30)
    assert req.n_tokens == 40 and len(req.token_times) == 8  # 40 tokens in 8 chunks of 1 + 4
    # tok/s from tokens: 5 tokens a step; a chunk count would give a fifth of it
    step = 0.004 * (1 + 0.1 * 4)
    assert got.levels[1].value == pytest.approx(5 / step, rel=0.35)
    metrics = got.to_metrics()
    assert metrics["acceptance_rate"] == pytest.approx(fake.accepted_per_step(NATURAL, 4) / 4)
    assert metrics["mean_accepted_length"] == pytest.approx(1 + fake.accepted_per_step(NATURAL, 4), rel=0.05)


@pytest.mark.parametrize("server", [("--token-delay", "0.004", "--spec-tokens", "4")], indirect=True)
def test_the_prompt_decides_what_speculation_is_worth(server):
    """The same speculative server: a gain on natural text, a loss on one word (the job's
    single prompt of old would have ranked it by that prompt alone)."""
    def on(prompt: str):
        p = BenchPlan(prompts=(prompt,), output_tokens=40, warmup=0, repeats=3, timeout_s=30)
        return measure(server.base_url, MODEL, p, deadline=time.monotonic() + 60, metrics_url=server.metrics_url)
    natural, short = on(NATURAL), on(SHORT)
    plain = 1 / 0.004  # the same server without speculation: one token a step of 4 ms
    assert natural.levels[1].value > 2 * plain and short.levels[1].value < plain
    assert natural.to_metrics()["acceptance_rate"] > 0.9
    assert "acceptance_rate" not in short.to_metrics() or short.to_metrics()["acceptance_rate"] == 0.0


def test_a_stream_without_usage_fails_the_measurement(server):
    req = client.stream_completion(server.base_url, MODEL, "x", 8, 10, extra={"fake": {"no_usage": True}})
    assert not req.ok and req.error == client.NO_USAGE and req.n_tokens == 0


def test_early_stop_needs_every_level_below_its_threshold(server):
    fast = measure(server.base_url, MODEL, plan(levels=(1, 4)), deadline=time.monotonic() + 60)
    v1, v4 = fast.levels[1].value, fast.levels[4].value
    below_both = measure(server.base_url, MODEL, plan(levels=(1, 4)), deadline=time.monotonic() + 60,
                         prune_below={1: 10 * v1, 4: 10 * v4})
    assert below_both.pruned and below_both.rounds == 1 and len(below_both.levels[1].samples) == 3
    best_at_four = measure(server.base_url, MODEL, plan(levels=(1, 4)), deadline=time.monotonic() + 60,
                           prune_below={1: 10 * v1, 4: v4 / 10})
    assert not best_at_four.pruned and best_at_four.rounds == 2


def test_the_deadline_fails_the_measurement_as_a_timeout(server):
    got = measure(server.base_url, MODEL, plan(output_tokens=200, repeats=5), deadline=time.monotonic() + 1.0)
    error = got.error or ""
    assert not got.ok and got.timed_out and ("deadline" in error or "timeout" in error)
