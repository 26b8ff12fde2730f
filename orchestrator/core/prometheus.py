"""The Prometheus text a server's ``/metrics`` answers: the speculative-decoding counters in it, and
the prefix cache's.

A speculative config's speed depends on how many drafted tokens the target model accepts,
which the server counts; decode tok/s alone cannot tell a good draft from a lucky prompt.
``snapshot(text)`` reads the counters of one snapshot; ``acceptance(before, after)`` turns
two snapshots (taken around a benchmark) into what the trial records:

- vLLM (0.26.0, captured: tests/fixtures/vllm/vllm-0.26.0-metrics-ngram-*.txt): counters
  ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total`` (summed over their ``engine``/``model_name`` labels):
  acceptance rate = accepted / drafted tokens, mean accepted length = 1 + accepted / drafts
  (the token the target model always contributes, plus the accepted drafts per step);
- SGLang: gauges of the recent window, ``sglang:spec_accept_length`` (mean accepted length)
  and, where the release has it, ``sglang:spec_accept_rate``; read after the benchmark.

A prefix cache answers the part of a prompt it has seen before: the first token of a prompt sent
twice comes without most of its prefill. ``prefix_cache(before, after)`` is the share of the
prompt tokens between two snapshots that the cache answered:

- vLLM (0.26.0, captured: tests/fixtures/vllm/vllm-0.26.0-metrics-no-spec.txt): counters
  ``vllm:prefix_cache_queries`` (prompt tokens looked up) and ``vllm:prefix_cache_hits`` (tokens
  found), exposed with Prometheus's ``_total`` suffix, summed over their ``engine``/``model_name``
  labels: hits / queries.

An engine without these counters (or a gauge only, as SGLang's recent-window ``cache_hit_rate``:
not a level's own figure) records no share.

A server without any of these (no speculation, or no ``/metrics``) records nothing, and that
is no error. Pure functions of the text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries"
VLLM_PREFIX_HITS = "vllm:prefix_cache_hits"
# a counter's exposed name (``_total``: Prometheus's suffix for counters) and the bare name, as the snapshot keys it
_COUNTERS = {f"{name}_total": name for name in (VLLM_PREFIX_QUERIES, VLLM_PREFIX_HITS)}
_WANTED = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE,
           VLLM_PREFIX_QUERIES, VLLM_PREFIX_HITS)


def samples(text: str) -> dict[str, float]:
    """Every sample of ``text`` summed by metric name (labels dropped), comments skipped;
    a value that is not a finite number is left out."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def snapshot(text: str | None) -> dict[str, float] | None:
    """The metrics of one ``/metrics`` snapshot this module reads (speculative decoding, the prefix
    cache; a counter under its bare name), or None when it has none."""
    if not text:
        return None
    got: dict[str, float] = {}
    for name, value in samples(text).items():
        name = _COUNTERS.get(name, name)
        if name in _WANTED:
            got[name] = got.get(name, 0.0) + value
    return got or None


def prefix_cache(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> tuple[float, float] | None:
    """(prompt tokens looked up, tokens the prefix cache answered) between two snapshots (module
    docstring); None when the server has no such counters or looked nothing up in between."""
    if not after or VLLM_PREFIX_QUERIES not in after:
        return None
    before = before or {}
    queries = after[VLLM_PREFIX_QUERIES] - before.get(VLLM_PREFIX_QUERIES, 0.0)
    hits = after.get(VLLM_PREFIX_HITS, 0.0) - before.get(VLLM_PREFIX_HITS, 0.0)
    if queries <= 0:
        return None
    return queries, min(max(hits, 0.0), queries)


def acceptance(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> dict[str, Any] | None:
    """What speculation did between two snapshots: ``acceptance_rate`` (accepted / drafted
    tokens), ``mean_accepted_length`` (tokens per target-model step), and the raw counts;
    None when the server reports no speculation or drafted nothing in between."""
    if not after:
        return None
    before = before or {}
    if VLLM_DRAFTS in after:
        drafts = after.get(VLLM_DRAFTS, 0.0) - before.get(VLLM_DRAFTS, 0.0)
        tokens = after.get(VLLM_DRAFT_TOKENS, 0.0) - before.get(VLLM_DRAFT_TOKENS, 0.0)
        accepted = after.get(VLLM_ACCEPTED, 0.0) - before.get(VLLM_ACCEPTED, 0.0)
        if drafts <= 0 or tokens <= 0:
            return None
        return {"acceptance_rate": accepted / tokens, "mean_accepted_length": 1.0 + accepted / drafts,
                "drafts": drafts, "draft_tokens": tokens, "accepted_tokens": accepted, "source": "vllm counters"}
    if SGLANG_ACCEPT_LENGTH in after:
        length = after[SGLANG_ACCEPT_LENGTH]
        if not length > 0:
            return None
        out: dict[str, Any] = {"mean_accepted_length": length, "source": "sglang gauges (recent window)"}
        if SGLANG_ACCEPT_RATE in after:
            out["acceptance_rate"] = after[SGLANG_ACCEPT_RATE]
        return out
    return None
