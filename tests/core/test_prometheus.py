"""Speculative decoding's acceptance, read from real /metrics captures of vLLM 0.26.0 (an
ngram server before and after 10 prompts x 2 greedy streams, and a server without
speculation), and from SGLang's gauges."""

from __future__ import annotations

from pathlib import Path

import pytest

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
    got = prometheus.acceptance(prometheus.spec_decode(BEFORE), prometheus.spec_decode(AFTER))
    drafts = _counter(AFTER, prometheus.VLLM_DRAFTS) - _counter(BEFORE, prometheus.VLLM_DRAFTS)
    tokens = _counter(AFTER, prometheus.VLLM_DRAFT_TOKENS) - _counter(BEFORE, prometheus.VLLM_DRAFT_TOKENS)
    accepted = _counter(AFTER, prometheus.VLLM_ACCEPTED) - _counter(BEFORE, prometheus.VLLM_ACCEPTED)
    assert (drafts, tokens, accepted) == (707.0, 2503.0, 1538.0)  # what the capture's server counted
    assert got["acceptance_rate"] == pytest.approx(accepted / tokens)
    assert got["mean_accepted_length"] == pytest.approx(1 + accepted / drafts)
    assert 0 < got["acceptance_rate"] < 1 and got["mean_accepted_length"] > 1


def test_a_server_without_speculation_records_nothing():
    assert prometheus.spec_decode(NO_SPEC) is None
    assert prometheus.acceptance(None, prometheus.spec_decode(NO_SPEC)) is None
    assert prometheus.spec_decode("") is None and prometheus.spec_decode(None) is None
    # nothing drafted between the snapshots: nothing to say either
    after = prometheus.spec_decode(AFTER)
    assert prometheus.acceptance(after, after) is None


def test_sglang_gauges():
    text = ('# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 3.25\n'
            '# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name="m"} 0.56\n')
    got = prometheus.acceptance(None, prometheus.spec_decode(text))
    assert got["mean_accepted_length"] == 3.25 and got["acceptance_rate"] == 0.56


def test_malformed_lines_are_skipped():
    text = "vllm:spec_decode_num_drafts_total{engine=\"0\"} nan\nnot a metric line\nfoo 1 2 3\n"
    assert prometheus.spec_decode(text) is None
