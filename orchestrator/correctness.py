"""The correctness gate: a fast config that produces garbage must never win.

A *golden* reference is captured from the reference config (by default the baseline):
greedy outputs on fixed prompts, and the log-probabilities the reference server
assigns to its own greedy text. Capturing twice calibrates how much the reference
disagrees with itself (the noise floor). Every later trial produces the same kind of
outputs (its greedy text, and its log-probabilities of the *reference* text) and is
compared here: a differing greedy text or a log-probability drift beyond tolerance
fails the trial as ``wrong-output``.

Why both: greedy text alone misses a subtly broken model whose argmax survives;
log-probabilities alone are unavailable on some servers. A summation-order change
(TP=2 vs TP=1) moves log-probabilities by rounding only and keeps greedy tokens; a
shard-order bug changes both by orders of magnitude.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Smallest tolerance (mean |delta logprob| in nats per token) we ever apply: bf16 GEMMs
# with a different reduction order move per-token logprobs by up to a few 0.01 nats.
DEFAULT_LOGPROB_FLOOR = 0.05
# A calibrated tolerance is this many times the reference's own disagreement.
NOISE_MULTIPLIER = 5.0


@dataclass
class Golden:
    """What every trial is compared with."""

    prompts: list[str]
    texts: list[str]
    logprobs: list[list[float] | None] = field(default_factory=list)
    tolerance: float = DEFAULT_LOGPROB_FLOOR
    source: str = "baseline"  # baseline, config, or a file path
    self_drift: float = 0.0  # mean |delta logprob| between two captures of the reference

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Golden":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @classmethod
    def from_file(cls, path: str | Path) -> "Golden":
        data = json.loads(Path(path).read_text())
        data.setdefault("source", str(path))
        return cls.from_dict(data)


def mean_abs_drift(a: list[float] | None, b: list[float] | None) -> float | None:
    """Mean |a_i - b_i| over positions both have; None when either is missing."""
    if not a or not b:
        return None
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if not pairs:
        return None
    return statistics.fmean(abs(x - y) for x, y in pairs)


def calibrate(prompts: list[str], first: dict[str, Any], second: dict[str, Any],
              floor: float = DEFAULT_LOGPROB_FLOOR, source: str = "baseline") -> tuple[Golden | None, str | None]:
    """Build the golden reference from two captures of the reference config.

    Returns (golden, None), or (None, reason) when the reference disagrees with itself
    in greedy text (a non-deterministic reference cannot gate anything).
    """
    if first["texts"] != second["texts"]:
        idx = next(i for i, (x, y) in enumerate(zip(first["texts"], second["texts"])) if x != y)
        return None, f"the reference is not deterministic: prompt {idx} gave two different greedy texts"
    drifts = [d for d in (mean_abs_drift(a, b) for a, b in zip(first.get("logprobs") or [], second.get("logprobs") or []))
              if d is not None]
    self_drift = max(drifts) if drifts else 0.0
    tolerance = max(floor, NOISE_MULTIPLIER * self_drift)
    return Golden(prompts=list(prompts), texts=list(first["texts"]), logprobs=list(first.get("logprobs") or []),
                  tolerance=tolerance, source=source, self_drift=self_drift), None


def compare(golden: Golden, outputs: dict[str, Any]) -> dict[str, Any]:
    """Compare one trial's outputs with the golden reference.

    ``outputs`` has ``texts`` (greedy text per prompt) and optionally ``logprobs``
    (the trial's log-probabilities of the golden texts). Returns a dict with ``ok``,
    ``reason`` (one line when not ok), ``text_matches`` and ``max_drift``.
    """
    texts = outputs.get("texts") or []
    result: dict[str, Any] = {"ok": True, "reason": None, "tolerance": golden.tolerance}
    matches = [t == g for t, g in zip(texts, golden.texts)]
    result["text_matches"] = f"{sum(matches)}/{len(golden.texts)}"
    if len(texts) != len(golden.texts) or not all(matches):
        bad = next((i for i, m in enumerate(matches) if not m), len(texts))
        got = texts[bad] if bad < len(texts) else "<missing>"
        want = golden.texts[bad]
        pos = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        result.update(ok=False, reason=(
            f"greedy output differs from the reference on prompt {bad} at character {pos}: "
            f"got {got[pos:pos + 24]!r}, expected {want[pos:pos + 24]!r}"))
    drifts = [d for d in (mean_abs_drift(a, b) for a, b in zip(golden.logprobs, outputs.get("logprobs") or []))
              if d is not None]
    result["max_drift"] = max(drifts) if drifts else None
    if drifts and max(drifts) > golden.tolerance and result["ok"]:
        worst = max(range(len(drifts)), key=drifts.__getitem__)
        result.update(ok=False, reason=(
            f"log-probabilities of the reference text drift by {drifts[worst]:.3g} nats/token on prompt "
            f"{worst} (tolerance {golden.tolerance:.3g}, calibrated from the reference)"))
    return result


def judge(golden: Golden, result):
    """``result`` (a ``TrialResult``) after the gate: a COMPLETE or PRUNED trial whose outputs
    differ from ``golden`` becomes FAIL ``wrong-output`` (its tok/s kept aside as
    ``decode_tok_s_ignored``: measured, never ranked). The verdict goes in ``correctness``."""
    from orchestrator.records import COMPLETE, PRUNED, TrialResult

    outputs = result.outputs or {}
    if result.outcome not in (COMPLETE, PRUNED) or not outputs:
        return result
    verdict = compare(golden, outputs)
    result.correctness = verdict
    if verdict["ok"]:
        return result
    failed = TrialResult.failed(result.config, "wrong-output", verdict["reason"], metrics=result.metrics,
                                timing=result.timing, started_at=result.started_at, ended_at=result.ended_at,
                                node=result.node, nccl=result.nccl, warnings=result.warnings,
                                correctness=verdict, server=result.server, log_tail=result.log_tail)
    failed.metrics["decode_tok_s_ignored"] = result.value
    return failed
