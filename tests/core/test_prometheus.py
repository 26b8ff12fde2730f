"""Speculative decoding's acceptance, read from real /metrics captures of vLLM 0.26.0 (an
ngram server before and after 10 prompts x 2 greedy streams, and a server without
speculation), and from SGLang's gauges; the prefix cache's share of the prompt tokens, from
the same captures (each prompt sent twice: about half its tokens found). The metric names are the
engines' (backends/vllm_engine.py, sglang_engine.py), read through the registry they fill."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends import vllm_engine
from orchestrator.core import prometheus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
BEFORE = (FIXTURES / "vllm-0.26.0-metrics-ngram-before.txt").read_text()
AFTER = (FIXTURES / "vllm-0.26.0-metrics-ngram-after.txt").read_text()
NO_SPEC = (FIXTURES / "vllm-0.26.0-metrics-no-spec.txt").read_text()


def _counter(text: str, name: str) -> float:
    """The fixture's own line for ``name`` (read apart from the parser under test)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])


def test_the_real_ngram_capture():
    got = prometheus.acceptance(prometheus.snapshot(BEFORE), prometheus.snapshot(AFTER))
    drafts = _counter(AFTER, vllm_engine.DRAFTS) - _counter(BEFORE, vllm_engine.DRAFTS)
    tokens = _counter(AFTER, vllm_engine.DRAFT_TOKENS) - _counter(BEFORE, vllm_engine.DRAFT_TOKENS)
    accepted = _counter(AFTER, vllm_engine.ACCEPTED) - _counter(BEFORE, vllm_engine.ACCEPTED)
    assert (drafts, tokens, accepted) == (707.0, 2503.0, 1538.0)  # what the capture's server counted
    assert got["acceptance_rate"] == pytest.approx(accepted / tokens)
    assert got["mean_accepted_length"] == pytest.approx(1 + accepted / drafts)
    assert 0 < got["acceptance_rate"] < 1 and got["mean_accepted_length"] > 1


def test_a_server_without_speculation_records_nothing():
    assert prometheus.acceptance(None, prometheus.snapshot(NO_SPEC)) is None
    assert prometheus.snapshot("") is None and prometheus.snapshot(None) is None
    # nothing drafted between the snapshots: nothing to say either
    after = prometheus.snapshot(AFTER)
    assert prometheus.acceptance(after, after) is None


def test_sglang_gauges():
    text = ('# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 3.25\n'
            '# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name="m"} 0.56\n')
    got = prometheus.acceptance(None, prometheus.snapshot(text))
    assert got["mean_accepted_length"] == 3.25 and got["acceptance_rate"] == 0.56


def test_malformed_lines_are_skipped():
    text = "vllm:spec_decode_num_drafts_total{engine=\"0\"} nan\nnot a metric line\nfoo 1 2 3\n"
    assert prometheus.snapshot(text) is None


def test_the_prefix_caches_share_of_the_prompt_tokens_from_the_real_counters():
    queries = _counter(AFTER, "vllm:prefix_cache_queries_total") - _counter(BEFORE, "vllm:prefix_cache_queries_total")
    hits = _counter(AFTER, "vllm:prefix_cache_hits_total") - _counter(BEFORE, "vllm:prefix_cache_hits_total")
    assert (queries, hits) == (17630.0, 8704.0)  # what the capture's server counted: each prompt sent twice
    assert prometheus.prefix_cache(prometheus.snapshot(BEFORE), prometheus.snapshot(AFTER)) == (queries, hits)
    # the counters of a server without speculation read the same; the external (KV connector) ones are not its own
    assert prometheus.prefix_cache(None, prometheus.snapshot(NO_SPEC)) == (17630.0, 8704.0)
    after = prometheus.snapshot(AFTER)
    assert prometheus.prefix_cache(after, after) is None  # nothing looked up in between: no share
    assert prometheus.prefix_cache(None, prometheus.snapshot(BEFORE)) is None  # nothing looked up yet
    text = 'sglang:cache_hit_rate{model_name="m"} 0.5\n'  # a recent-window gauge: not a level's own figure
    assert prometheus.prefix_cache(None, prometheus.snapshot(text)) is None
