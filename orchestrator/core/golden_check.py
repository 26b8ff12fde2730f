"""Is the golden reference usable? Checked before any trial is compared with it.

Every "wrong output" verdict of the study is relative to the reference, so a reference
that is itself broken would fail every correct config (or pass every broken one). Two
checks:

- ``unusable(golden, allow_repetitive)``: the reference on its own, right after its two
  captures agreed (``correctness.calibrate``). It must decode to text and not be
  degenerate. Calibrated on real outputs (tests/test_reference.py): random-weight models
  (the reference server's presets, vLLM ``--load-format dummy``) legitimately repeat
  words (' pekuge pekuge pekuge pekuge pekuge dofo'), so repetition *inside* an output
  is fine; what is refused is

  * the same output for every prompt (the input does not matter: a broken model);
  * for at least half of the prompts: an empty output, text dominated by replacement
    characters or byte tokens (``\\ufffd``, ``<0xAB>``: more than half of it), or no
    letter or digit at all ('\\n\\n\\n\\n', '........');
  * for at least half of the prompts, a *cycle*: the whole output is one unit of at most
    two tokens (or one word) repeated ('ssssssss', ' FAILer FAILer FAILer'). A model with
    random weights can do that; so can a broken one, and the two cannot be told apart
    from the text. Refused unless the job says ``correctness: {allow_repetitive_reference:
    true}`` (then kept, with a warning);
  * a log-probability that is not a finite number.

- ``outvoted(...)``: a broken reference that still looks like text (a shard-order bug in
  the baseline, the reference server's ``garbage`` fault) cannot be told from a correct
  random-weight model by its text. It shows when the first configs compared with it,
  *different configs that agree with each other*, all differ from it: two such trials
  before any trial passed the gate stop the study (the reference is the odd one out),
  unless their agreement may be a setting's doing: ``shared_departure``, the one rule for
  that (a value both set that neither the baseline nor the backend's defaults have;
  returning to a default, the healthy ``backend.fault: none`` or ``tp_size: 1``, is not a
  departure, nor is leaving out a setting the baseline has).

And over the study's rows (``history`` rows), for every reader:

- ``vindicated(rows)``: a config other than the reference's own passed the gate, so the
  reference agrees with an independent config and its verdicts stand (the driver holds
  gate failures until then; ``bans`` learns from wrong output only then);
- ``disputed(rows)``: why the reference's own correctness is in question (it was
  outvoted, or configs failed the gate on their text and none passed): no config is then
  called best (``outcome.tainted_keys``), and ``export`` refuses with that line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.core.correctness import text_differs
from orchestrator.core.records import FailureKind

# A prompt's output is a cycle when it is one unit of at most this many tokens repeated
# over at least MIN_CYCLE_UNITS units.
MAX_CYCLE_TOKENS = 2
MIN_CYCLE_UNITS = 4
# Share of an output's characters that may be replacement characters / byte tokens.
MAX_UNDECODABLE_SHARE = 0.5
# Distinct configs that agree with each other and all differ from the reference.
OUTVOTE_TRIALS = 2

_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_WORDS = re.compile(r"\s*\S+|\s+")


def _undecodable_share(text: str) -> float:
    """Share of ``text``'s characters that are not decoded text: replacement characters, and
    raw bytes (a server that renders them as ``<0xAB>`` tokens: one character each)."""
    raw = len(_BYTE_TOKEN.findall(text))
    chars = len(text) - 5 * raw
    return (raw + text.count("\ufffd")) / chars if chars > 0 else 0.0


def cycle_unit(text: str, tokens: list[str] | None = None) -> str | None:
    """The unit the whole output repeats ('s', ' FAILer'), or None when it does not.

    By generated tokens when the server returned them (a unit of at most
    ``MAX_CYCLE_TOKENS``), else by words, else by characters (a unit of at most 2)."""
    for units, width in ((tokens, MAX_CYCLE_TOKENS), (_WORDS.findall(text), 1), (list(text), 2)):
        if not units or len(units) < MIN_CYCLE_UNITS:
            continue
        for p in range(1, width + 1):
            if len(units) >= MIN_CYCLE_UNITS * p and all(units[i] == units[i % p] for i in range(len(units))):
                return "".join(units[:p])
    return None


def prompt_problem(text: str, tokens: list[str] | None = None) -> tuple[str, str] | None:
    """(severity, why) for one prompt's output: severity "broken" or "repetitive"; None: fine."""
    if not text:
        return "broken", "empty output"
    if not text.strip():
        return "broken", "only whitespace"
    share = _undecodable_share(text)
    if share > MAX_UNDECODABLE_SHARE:
        return "broken", f"{share:.0%} of it is replacement characters or raw bytes"
    if not any(ch.isalnum() for ch in _BYTE_TOKEN.sub("", text)):
        return "broken", "no letter or digit in it"
    unit = cycle_unit(text, tokens)
    if unit is not None:
        return "repetitive", f"it repeats {unit!r} over its whole length"
    return None


def unusable(golden, allow_repetitive: bool = False) -> tuple[str | None, list[str]]:
    """(reason the reference cannot be used, or None; warnings) for a calibrated ``Golden``."""
    texts = list(golden.texts or [])
    warnings: list[str] = []
    if not texts:
        return "it has no outputs", warnings
    if len(texts) > 1 and len(set(texts)) == 1:
        return f"every prompt gave the same output {texts[0][:40]!r}: the input does not matter", warnings
    for i, lps in enumerate(golden.logprobs or []):
        bad = [x for x in (lps or []) if x is None or not isinstance(x, (int, float)) or not math.isfinite(x)]
        if bad:
            return f"its log-probabilities on prompt {i} are not finite numbers ({bad[0]!r})", warnings
    problems = {}
    tokens = list(golden.tokens or [])
    for i, text in enumerate(texts):
        got = prompt_problem(text, tokens[i] if i < len(tokens) else None)
        if got:
            problems[i] = got
    half = (len(texts) + 1) // 2
    broken = {i: why for i, (sev, why) in problems.items() if sev == "broken"}
    if len(broken) >= half:
        i = min(broken)
        return (f"its output is not text on {len(broken)} of {len(texts)} prompts (prompt {i}: {broken[i]}: "
                f"{texts[i][:40]!r})"), warnings
    if len(problems) >= half:
        i = min(problems)
        what = (f"{len(problems)} of {len(texts)} prompts give one short unit repeated over the whole output "
                f"(prompt {i}: {problems[i][1]})")
        if not allow_repetitive:
            return (f"{what}: degenerate, or a model with random weights; if the model's own output is like "
                    "that, set correctness: {allow_repetitive_reference: true} in the job"), warnings
        warnings.append(f"the golden reference is repetitive ({what}); kept because the job sets "
                        "allow_repetitive_reference")
    return None, warnings


_NONE = object()


def shared_departure(a: dict[str, Any], b: dict[str, Any], base: dict[str, Any],
                     defaults: dict[str, Any]) -> str | None:
    """The parameter two (normalized) configs both set to one value that is neither the
    baseline's nor the backend's default (``Backend.default_values``), or None.

    Their agreement may then be that setting's doing, so it is no vote against the
    reference. A value that is the server's own default is not a departure even where the
    baseline sets another one (the baseline departs there, not they), nor is a parameter
    both leave out (its default, e.g. NCCL settings dropped at TP 1)."""
    for name in sorted(set(a) & set(b)):
        value = a[name]
        if b[name] == value and base.get(name, _NONE) != value and defaults.get(name, _NONE) != value:
            return name
    return None


def outvoted(reference_texts: list[str], failed: list[tuple[int, str, list[str] | None]],
             related: Callable[[int, int], bool] | None = None) -> str | None:
    """Why the reference looks wrong, or None.

    ``failed``: (trial number, config key, greedy texts) of the trials compared with the
    reference so far, all of which failed the gate on their greedy text (the caller stops
    collecting once one passes). ``OUTVOTE_TRIALS`` distinct configs with the same texts,
    which differ from the reference's, outvote it; ``related(n, m)`` (trial numbers) says
    that two of them may agree for a shared reason (``shared_departure``): such a pair is
    no vote."""
    by_texts: dict[tuple[str, ...], dict[str, int]] = {}
    for number, key, texts in failed:
        if texts and len(texts) == len(reference_texts) and list(texts) != list(reference_texts):
            by_texts.setdefault(tuple(texts), {}).setdefault(key, number)
    for shared, configs in by_texts.items():
        numbers = sorted(configs.values())
        voters = sorted({n for x in numbers for y in numbers
                         if x < y and not (related and related(x, y)) for n in (x, y)})
        if len(voters) >= OUTVOTE_TRIALS:
            i = next(j for j, (a, b) in enumerate(zip(shared, reference_texts)) if a != b)
            return (f"trials {', '.join(map(str, voters))} (different configs) agree with each other and all differ "
                    f"from the reference on prompt {i} ({shared[i][:24]!r} vs {reference_texts[i][:24]!r}): the "
                    "reference is the odd one out")
    return None


# ---- the reference's standing, read from the study's rows ---------------------------------------

def references(rows: Iterable[Any]) -> list[Any]:
    """The launches that captured a golden reference (oldest first)."""
    return [r for r in rows if (r.correctness or {}).get("reference") and r.cached_from is None]


def vindicated(rows: Iterable[Any]) -> bool:
    """A config other than the reference's own passed the correctness gate."""
    rows = list(rows)
    own = {r.config_key for r in references(rows)}
    return any((r.correctness or {}).get("ok") is True and not (r.correctness or {}).get("reference")
               and r.config_key not in own for r in rows)


def gate_failures(rows: Iterable[Any]) -> list[Any]:
    """Launched, counted trials whose greedy text differed from the reference's."""
    return [r for r in rows if r.counted and r.cached_from is None and r.failure_kind == FailureKind.WRONG_OUTPUT
            and not (r.correctness or {}).get("reference") and text_differs(r.correctness or {})]


def disputed(rows: Iterable[Any]) -> str | None:
    """Why the golden reference's own correctness is in question, or None (module docstring)."""
    rows = list(rows)
    refs = references(rows)
    latest = refs[-1] if refs else None
    if latest is not None and (latest.correctness or {}).get("outvoted"):
        voters = [r.number for r in rows if (r.correctness or {}).get("outvoted_reference")]
        by = f" by trials {', '.join(map(str, voters))}" if voters else ""
        return (f"the golden reference (trial {latest.number}) was outvoted{by}: different configs agree with each "
                "other and not with it, so its own output looks wrong")
    if vindicated(rows):
        return None
    failed = [r.number for r in gate_failures(rows)]
    if not failed:
        return None
    which = f"trial {latest.number}" if latest is not None else "correctness.reference"
    return (f"trial{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} failed the correctness gate and no "
            f"other config passed it: either {'they are' if len(failed) > 1 else 'it is'} wrong or the golden "
            f"reference ({which}) is")
