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
is no error. Pure functions of the text and the engines registered.

The metric names are each engine's (``core.engines``: ``Engine.speculation``, counters or gauges,
and ``Engine.prefix_cache``), declared with its backend (``backends/vllm_engine.py``,
``sglang_engine.py``); the engines are asked in their registration order, the first whose metric
the snapshot has answers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from orchestrator.core.engines import Engine, SpecCounters, SpecGauges, registered

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")



def _wanted(engines: tuple[Engine, ...]) -> tuple[set[str], dict[str, str]]:
    """(the names a snapshot keeps, every engine's; the prefix cache's counters: exposed name, with
    Prometheus's ``_total`` suffix for counters, -> the bare name the snapshot keys it by)."""
    wanted: set[str] = set()
    counters: dict[str, str] = {}
    for engine in engines:
        spec = engine.speculation
        if isinstance(spec, SpecCounters):
            wanted.update((spec.drafts, spec.draft_tokens, spec.accepted))
        elif isinstance(spec, SpecGauges):
            wanted.update(name for name in (spec.accept_length, spec.accept_rate) if name)
        if engine.prefix_cache is not None:
            for name in (engine.prefix_cache.queries, engine.prefix_cache.hits):
                wanted.add(name)
                counters[f"{name}_total"] = name
    return wanted, counters


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
    wanted, counters = _wanted(registered())
    got: dict[str, float] = {}
    for name, value in samples(text).items():
        name = counters.get(name, name)
        if name in wanted:
            got[name] = got.get(name, 0.0) + value
    return got or None


def prefix_cache(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> tuple[float, float] | None:
    """(prompt tokens looked up, tokens the prefix cache answered) between two snapshots (module
    docstring); None when the server has no such counters or looked nothing up in between."""
    if not after:
        return None
    names = next((e.prefix_cache for e in registered() if e.prefix_cache and e.prefix_cache.queries in after), None)
    if names is None:
        return None
    before = before or {}
    queries = after[names.queries] - before.get(names.queries, 0.0)
    hits = after.get(names.hits, 0.0) - before.get(names.hits, 0.0)
    if queries <= 0:
        return None
    return queries, min(max(hits, 0.0), queries)


def acceptance(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> dict[str, Any] | None:
    """What speculation did between two snapshots: ``acceptance_rate`` (accepted / drafted
    tokens), ``mean_accepted_length`` (tokens per target-model step), and the raw counts;
    None when the server reports no speculation or drafted nothing in between."""
    if not after:
        return None
    for engine in registered():
        spec = engine.speculation
        if isinstance(spec, SpecCounters) and spec.drafts in after:
            return _counted(spec, before or {}, after)
        if isinstance(spec, SpecGauges) and spec.accept_length in after:
            return _gauged(spec, after)
    return None


def _counted(spec: SpecCounters, before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any] | None:
    """``acceptance`` from counters since the server started: the difference of two snapshots."""
    drafts = after.get(spec.drafts, 0.0) - before.get(spec.drafts, 0.0)
    tokens = after.get(spec.draft_tokens, 0.0) - before.get(spec.draft_tokens, 0.0)
    accepted = after.get(spec.accepted, 0.0) - before.get(spec.accepted, 0.0)
    if drafts <= 0 or tokens <= 0:
        return None
    return {"acceptance_rate": accepted / tokens, "mean_accepted_length": 1.0 + accepted / drafts,
            "drafts": drafts, "draft_tokens": tokens, "accepted_tokens": accepted, "source": spec.source}


def _gauged(spec: SpecGauges, after: Mapping[str, float]) -> dict[str, Any] | None:
    """``acceptance`` from gauges of a recent window: what the snapshot after says."""
    length = after[spec.accept_length]
    if not length > 0:
        return None
    out: dict[str, Any] = {"mean_accepted_length": length, "source": spec.source}
    if spec.accept_rate and spec.accept_rate in after:
        out["acceptance_rate"] = after[spec.accept_rate]
    return out
