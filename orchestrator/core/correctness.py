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
(TP=2 vs TP=1, another NCCL protocol) moves log-probabilities by rounding only; a
shard-order bug changes them by orders of magnitude.

Rounding can still flip a greedy token where two candidates are nearly tied (bf16
models flip such near-ties across TP sizes: seen on a 32-layer bf16 model at TP=1/2 vs
4, where every other config "failed"). Greedy texts are captured with each generated
token's top candidates, so a text that differs from the reference passes when, at the
first token where the two part, the reference's token is among the trial's candidates
within ``NEAR_TIE_NATS`` of the trial's own pick (a wrong model ranks it far lower or
not at all) and the log-probability drift over the reference text stays within
tolerance. Without candidates (a server that returns none), a differing text fails.

A server's scoring pass can be wrong while its model is right: vLLM 0.26.0 with a draft
model returns the reference's greedy text token for token, yet echo log-probabilities 26-27
nats/token away from its own model's (docs/benchmarks.md, "Speculative decoding"). The
generation pass says so: the log-probability the server gives each token it generates
(``generated_logprobs``) comes from the model that picked it. So a drift beyond tolerance is
excused on a prompt only when the server *disowns its own scores* there
(``disowned_scores``): its greedy text is the reference's, token for token, and the
log-probabilities it gave those tokens as it generated them agree with the reference's within
tolerance: the model computes what the reference's computes, so the scores that differ did
not come from it. Such a trial passes with a warning (``warning``: a client that scores text
with this config gets wrong numbers); any other drift fails as before, and a broken model
fails on both channels. Without the generation's log-probabilities (a server that returns no
candidates) there is nothing to excuse a drift with.
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
# A differing greedy token is a rounding near-tie when the trial ranks the reference's
# token at most this far (in nats) below its own pick: e^-1, i.e. "nearly as likely".
NEAR_TIE_NATS = 1.0
# How a verdict that failed on the greedy text begins (``text_differs``).
TEXT_DIFFERS = "greedy output differs from the reference"


@dataclass
class Golden:
    """What every trial is compared with."""

    prompts: list[str]
    texts: list[str]
    logprobs: list[list[float] | None] = field(default_factory=list)
    tolerance: float = DEFAULT_LOGPROB_FLOOR
    source: str = "baseline"  # baseline, config, or a file path
    self_drift: float = 0.0  # mean |delta logprob| between two captures of the reference
    tokens: list[list[str] | None] = field(default_factory=list)  # the reference's generated pieces
    generated: list[list[float | None] | None] = field(default_factory=list)  # their log-probabilities as generated

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


def generated_logprobs(tokens: list[list[str] | None] | None,
                       top: list[list[dict[str, float] | None] | None] | None) -> list[list[float | None] | None]:
    """Per prompt, the log-probability the server gave each token it generated, from the
    generation pass itself: the token's own entry among its candidates, else the best one
    (a greedy pick is the best); None for a prompt (or token) without candidates."""
    out: list[list[float | None] | None] = []
    for i in range(len(tokens or [])):
        pieces, cands = _at(tokens, i), _at(top, i)
        if not pieces or not cands:
            out.append(None)
            continue
        row: list[float | None] = []
        for piece, options in zip(pieces, cands):
            row.append(None if not options else float(options.get(piece, max(options.values()))))
        out.append(row)
    return out


def calibrate(prompts: list[str], first: dict[str, Any], second: dict[str, Any],
              floor: float = DEFAULT_LOGPROB_FLOOR, source: str = "baseline") -> tuple[Golden | None, str | None]:
    """Build the golden reference from two captures of the reference config.

    Returns (golden, None), or (None, reason) when the reference disagrees with itself
    in greedy text (a non-deterministic reference cannot gate anything).
    """
    if first["texts"] != second["texts"]:
        idx = next(i for i, (x, y) in enumerate(zip(first["texts"], second["texts"])) if x != y)
        return None, f"the reference is not deterministic: prompt {idx} gave two different greedy texts"
    generated = [generated_logprobs(c.get("tokens"), c.get("top")) for c in (first, second)]
    pairs = [*zip(first.get("logprobs") or [], second.get("logprobs") or []), *zip(*generated)]
    drifts = [d for d in (mean_abs_drift(a, b) for a, b in pairs) if d is not None]
    self_drift = max(drifts) if drifts else 0.0  # the noisier channel of the two
    tolerance = max(floor, NOISE_MULTIPLIER * self_drift)
    return Golden(prompts=list(prompts), texts=list(first["texts"]), logprobs=list(first.get("logprobs") or []),
                  tolerance=tolerance, source=source, self_drift=self_drift,
                  tokens=list(first.get("tokens") or []), generated=generated[0]), None


def compare(golden: Golden, outputs: dict[str, Any]) -> dict[str, Any]:
    """Compare one trial's outputs with the golden reference.

    ``outputs`` has ``texts`` (greedy text per prompt) and optionally ``logprobs``
    (the trial's log-probabilities of the golden texts), ``tokens`` and ``top`` (its
    generated pieces and their candidates, for the near-tie rule). Returns a dict with
    ``ok``, ``reason`` (one line when not ok), ``text_matches``, ``max_drift`` and, when
    a differing text was a near-tie, ``near_ties`` (prompt -> margin in nats).
    """
    texts = outputs.get("texts") or []
    result: dict[str, Any] = {"ok": True, "reason": None, "tolerance": golden.tolerance}
    matches = [t == g for t, g in zip(texts, golden.texts)]
    result["text_matches"] = f"{sum(matches)}/{len(golden.texts)}"
    margins = {i: near_tie_margin(_at(golden.tokens, i), _at(outputs.get("tokens"), i), _at(outputs.get("top"), i))
               for i, m in enumerate(matches) if not m}
    ties = [i for i, margin in margins.items() if margin is not None and margin <= NEAR_TIE_NATS]
    if ties:
        result["near_ties"] = {str(i): round(float(margins[i] or 0.0), 4) for i in ties}  # not None: see ties
    if len(texts) != len(golden.texts) or not all(m or i in ties for i, m in enumerate(matches)):
        bad = next((i for i, m in enumerate(matches) if not m and i not in ties), len(texts))
        got = texts[bad] if bad < len(texts) else "<missing>"
        want = golden.texts[bad]
        pos = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        margin = margins.get(bad)
        why = ("" if margin is None else "; no near-tie: the reference's token is not among this config's candidates"
               if margin == float("inf") else f"; no near-tie: the reference's token is {margin:.3g} nats below "
               "this config's pick")
        result.update(ok=False, reason=(
            f"{TEXT_DIFFERS} on prompt {bad} at character {pos}: "
            f"got {got[pos:pos + 24]!r}, expected {want[pos:pos + 24]!r}{why}"))
    per_prompt = [mean_abs_drift(a, b) for a, b in zip(golden.logprobs, outputs.get("logprobs") or [])]
    drifts = [d for d in per_prompt if d is not None]
    result["max_drift"] = max(drifts) if drifts else None
    beyond = [i for i, d in enumerate(per_prompt) if d is not None and d > golden.tolerance]
    if beyond and result["ok"]:
        worst = max(beyond, key=lambda i: per_prompt[i] or 0.0)
        disowned = disowned_scores(golden, outputs, beyond)
        if disowned is None:
            result.update(ok=False, reason=(
                f"log-probabilities of the reference text drift by {per_prompt[worst]:.3g} nats/token on prompt "
                f"{worst} (tolerance {golden.tolerance:.3g}, calibrated from the reference)"))
        else:
            result["disowned_scores"] = disowned
            result["warning"] = (
                f"this config's server scores text with log-probabilities that are not its model's: they drift "
                f"{per_prompt[worst]:.3g} nats/token from the reference's on prompt {worst}, while its greedy text "
                f"and the log-probabilities of the tokens it generated match the reference's (within "
                f"{disowned['generation_drift']:.3g}); a client that scores text (echo, prompt log-probabilities) "
                "with this config gets wrong numbers")
    return result


def disowned_scores(golden: Golden, outputs: dict[str, Any], prompts: list[int]) -> dict[str, Any] | None:
    """Whether, on every prompt in ``prompts`` (those whose scores drift beyond tolerance), the
    trial's server disowns its own scores (module docstring): the same greedy tokens as the
    reference's, generated with log-probabilities within tolerance of the reference's. Returns
    the evidence (``generation_drift``: the largest mean drift of its generation from the
    reference's), or None when that does not hold on one of them."""
    own = generated_logprobs(outputs.get("tokens"), outputs.get("top"))
    gen_drift = 0.0
    for i in prompts:
        ref_gen, my_gen, ref_tokens = _at(golden.generated, i), _at(own, i), _at(golden.tokens, i)
        if _at(outputs.get("texts"), i) != golden.texts[i] or not ref_tokens or not ref_gen or not my_gen:
            return None
        if _at(outputs.get("tokens"), i) != ref_tokens:
            return None
        drift = mean_abs_drift(my_gen, ref_gen) if len(my_gen) == len(ref_gen) else None
        if drift is None or drift > golden.tolerance:
            return None
        gen_drift = max(gen_drift, drift)
    return {"prompts": list(prompts), "generation_drift": gen_drift}


def text_differs(verdict: dict[str, Any]) -> bool:
    """A gate verdict (``compare``) that failed on the greedy text itself, not only on the
    log-probabilities: the kind of failure that can outvote the reference."""
    return verdict.get("ok") is False and str(verdict.get("reason") or "").startswith(TEXT_DIFFERS)


def _at(items: list | None, i: int):
    return items[i] if items and i < len(items) else None


def near_tie_margin(reference: list[str] | None, tokens: list[str] | None,
                    top: list[dict[str, float] | None] | None) -> float | None:
    """At the first generated token where a trial parts from the reference: how far (nats)
    the trial ranks the reference's token below its own pick (inf: not among its
    candidates). None when there is nothing to judge it by (no tokens or candidates, or
    no token where they part)."""
    if not reference or not tokens or not top:
        return None
    k = next((j for j, (a, b) in enumerate(zip(reference, tokens)) if a != b), None)
    if k is None or k >= len(top) or not top[k]:
        return None
    candidates = top[k] or {}
    mine = candidates.get(tokens[k])
    if mine is None:
        mine = max(candidates.values())
    theirs = candidates.get(reference[k])
    return float("inf") if theirs is None else max(0.0, mine - theirs)
