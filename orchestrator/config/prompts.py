"""Decode prompts: the bundled set, or the user's own traffic from ``bench.prompts: FILE``.

Speculative decoding accepts drafts only where the text gives it something to predict: on
one short instruction an n-gram drafter accepted 4% of its tokens and ran at 0.41x, on a
natural paragraph 45% and 1.06x (real vLLM 0.26.0, docs/benchmarks.md). One fixed prompt
would rank speculative configs by that prompt alone, so decode is measured over a set of
prompts of realistic length: the bundled ``decode_prompts.jsonl`` (eight texts written
for this project, 165-250 words: prose, code, questions with context, a summarization
request, an explanation, a dialogue, instructions, a technical review), or a file of the
user's own: JSONL with a ``prompt`` field per line, or plain text with one prompt per line.

The correctness gate keeps its own fixed prompts (``correctness.prompts``): what decode is
timed on and what the reference is compared on are independent.

A figure means something only with the texts it was measured on: ``fingerprint`` (content
hash, count, length distribution) is part of a study's identity (a changed set is refused on
resume), recorded with every trial and in an export's provenance; ``degenerate`` says when a
set would flatter a config (repeated prompts, repetitive text a drafter predicts), before
anything is launched.

Long context (``bench.context: N``): the context length moves the optimum (a speculative
config's best draft length depends on it), so every prompt can be made about N tokens long
(``with_context``): the texts of the set itself, then the bundled texts, in turn, before each
prompt, until its characters / 4 (the usual estimate of tokens; the tuner has no tokenizer of
the served model) reach N. The lengths the server counted are recorded with each trial.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path
from typing import Any

from orchestrator.core.errors import BadInput

BUNDLED = Path(__file__).with_name("decode_prompts.jsonl")
MAX_FILE_BYTES = 1 << 20  # a prompt file is read whole: bounded like every input file
MAX_PROMPTS = 256
CHARS_PER_TOKEN = 4  # a text's length in tokens, estimated from its characters
MAX_CONTEXT = 262144  # tokens: about 1 MB of text per prompt, shipped with every trial


def bundled() -> tuple[str, ...]:
    """The project's own decode prompt set."""
    return load(BUNDLED, file=str(BUNDLED), key="bench.prompts")


def load(path: str | os.PathLike, *, file: str | None, key: str = "bench.prompts") -> tuple[str, ...]:
    """The prompts of ``path``: JSONL (every non-blank line an object with a non-empty
    string ``prompt``) when its first non-blank line starts with ``{``, else plain text,
    one prompt per non-blank line.

    Raises:
        BadInput: one line naming the file (``file`` is the job that names it), the line
            and the rule: missing, not a file, larger than 1 MB, not UTF-8, a line that
            is not such an object, no prompt at all, more than 256 prompts.
    """
    p = Path(path)
    where = f"{key} ({p})"
    if not p.is_file():
        raise BadInput(f"{where}: {'is a directory' if p.is_dir() else 'not found'}; give a JSONL file with a "
                       "'prompt' field per line, or a text file with one prompt per line", file=file, key=key)
    if p.stat().st_size > MAX_FILE_BYTES:
        raise BadInput(f"{where}: larger than {MAX_FILE_BYTES >> 20} MB; decode needs a few prompts of "
                       "realistic length, not a corpus", file=file, key=key)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where}: not UTF-8 text (byte {exc.start})", file=file, key=key) from None
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise BadInput(f"{where}: holds no prompt", file=file, key=key)
    jsonl = lines[0][1].lstrip().startswith("{")
    prompts = [_json_prompt(n, line, where, file, key) for n, line in lines] if jsonl else [ln for _, ln in lines]
    if len(prompts) > MAX_PROMPTS:
        raise BadInput(f"{where}: {len(prompts)} prompts; at most {MAX_PROMPTS} (each is timed in every "
                       "repeat)", file=file, key=key)
    return tuple(prompts)


# a set whose words are this repetitive is what an n-gram drafter predicts best: 8 identical
# repetitive prompts gave a speculative config 67% accepted drafts and 4.20x, the bundled set 34%, 2.65x
REPETITIVE_BELOW = 0.25  # distinct words / words of the set
MIN_WORDS_TO_JUDGE = 40  # a shorter set says too little to call repetitive


def fingerprint(prompts: tuple[str, ...] | list[str], source: str | None = None) -> dict[str, Any]:
    """What identifies a prompt set: ``sha256`` (of the texts, in order; what identity
    compares), ``count``, ``words`` (min, median, max per prompt) and ``source`` (where they
    came from: shown, not compared)."""
    words = [len(p.split()) for p in prompts]
    digest = hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode()).hexdigest()[:16]
    return {"sha256": digest, "count": len(prompts),
            "words": {"min": min(words, default=0), "median": statistics.median(words) if words else 0,
                      "max": max(words, default=0)},
            "source": source}


def describe(fp: dict[str, Any] | None) -> str:
    """``8 prompts of 165-250 words (the bundled set), sha256 1a2b...``: a fingerprint in a line."""
    if not fp:
        return "unknown (recorded before the prompt set was)"
    words = fp.get("words") or {}
    size = f"{words.get('min')}-{words.get('max')}" if words.get("min") != words.get("max") else f"{words.get('min')}"
    source = f" ({fp['source']})" if fp.get("source") else ""
    return f"{fp.get('count')} prompt(s) of {size} words{source}, sha256 {fp.get('sha256')}"


def degenerate(prompts: tuple[str, ...] | list[str]) -> str | None:
    """Why the set would misrank configs (None: it would not): repeated prompts weigh one text
    several times; repetitive text makes speculative decoding's drafts look far better than on
    real traffic."""
    repeats = len(prompts) - len(set(prompts))
    words = [w.lower() for p in prompts for w in p.split()]
    distinct = len(set(words))
    problems = []
    if repeats:
        problems.append(f"{repeats} of its {len(prompts)} prompts repeat another")
    if len(words) >= MIN_WORDS_TO_JUDGE and distinct < REPETITIVE_BELOW * len(words):
        problems.append(f"its {len(words)} words hold only {distinct} distinct ones (repetitive text: speculative "
                        "decoding accepts far more drafts on it than on real traffic)")
    return "; ".join(problems) or None


def _json_prompt(number: int, line: str, where: str, file: str | None, key: str) -> str:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where}: line {number} is not JSON ({exc.msg}); a JSONL prompt file has one "
                       '{"prompt": "..."} object per line', file=file, key=key) from None
    prompt = item.get("prompt") if isinstance(item, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadInput(f"{where}: line {number} has no non-empty string 'prompt' field", file=file, key=key)
    return prompt


def estimated_tokens(text: str) -> int:
    """A text's length in tokens, estimated from its characters (``CHARS_PER_TOKEN``, rounded up):
    the one estimate of the long-context prompts and of the checks against a server's limit."""
    return -(-len(text) // CHARS_PER_TOKEN)


def with_context(prompts: tuple[str, ...], tokens: int) -> tuple[str, ...]:
    """Each prompt with text before it until it is about ``tokens`` long (module docstring): the
    other prompts of the set and the bundled texts, in turn, each ending at a paragraph break;
    the prompt itself last, whole. A prompt already that long is left as it is."""
    filler = list(prompts) + list(bundled())
    out = []
    for k, prompt in enumerate(prompts):
        want = tokens * CHARS_PER_TOKEN - len(prompt)
        parts: list[str] = []
        size, i = 0, k + 1
        while size < want:
            text = filler[i % len(filler)]
            parts.append(text)
            size += len(text) + 2
            i += 1
        out.append("\n\n".join([*parts, prompt]) if parts else prompt)
    return tuple(out)
