"""Traffic shaped like the user's: ``bench.traffic: FILE``, requests with their own prompt and
output length, instead of the bundled prompts at one fixed length.

The config that is best on one trace can be twice as slow on another (long prompts and short
answers load a server differently from chat), so a study can measure the user's own mix. The
file is JSON Lines, one request per line, in either shape (mixed freely):

- ``{"prompt": "...", "output_tokens": 128}``: the prompt and how many tokens to generate
  (without ``output_tokens``: ``bench.output_tokens``); other keys are ignored;
- a ShareGPT conversation, ``{"conversations": [{"from": "human", "value": "..."},
  {"from": "gpt", "value": "..."}, ...]}`` (or ``role``/``content`` turns): the first user
  turn is the prompt, the reply after it sets the output length (its characters / 4, the
  usual estimate of tokens: the tuner has no tokenizer of the served model). A conversation
  without a user turn followed by a reply is skipped (and counted), as ``vllm bench serve``
  skips it.

A request may carry ``"timestamp"``: when it arrived, in seconds (any origin; a trace's own clock).
Then every request must carry one, and the file is a trace that an open-loop load replays at its
own pace (``objective.goodput``'s rate search, ``core.arrivals.replay``: each rate the trace's own
gaps scaled, ``max_speed: 2.0`` halves them): its sample is not drawn by length but is the first
``bench.traffic_sample`` requests in time order, a window that keeps the trace's bursts, in that order.

A file that is one JSON array of such objects (ShareGPT as it is distributed) reads the same.
Every request asks for at least 2 tokens (decode tok/s needs two). ``bench.traffic_sample``
requests are drawn from the file, deterministically for the study (seeded by its name): every
run and every resume of a study measures the same requests, in the same order. The draw is
stratified by length (``request_tokens``: the prompt's estimated tokens plus the output's): the
file's requests in order of length, cut into as many equal shares as the sample has requests,
one request from each share, and from the longest share its longest request. A trace's tail (the
long prompts that decide TTFT and the server's limit) is in every study's sample at its weight,
and its longest request always; a plain random draw kept neither of two long prompts of 200
lines for most study names. ``describe`` says how the sample was drawn and which request is the
longest (its line).

A line that is not JSON, not an object, or neither shape is one ``BadInput`` naming the file
and the line (exit 2).
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.prompts import estimated_tokens
from orchestrator.core.errors import BadInput

MAX_FILE_BYTES = 64 << 20  # read whole at every job load: cut a larger trace first
MAX_SAMPLE = 256  # each sampled request is timed in every round of level 1
DEFAULT_SAMPLE = 64  # enough to see a trace's spread of lengths, few enough to time every round
CHARS_PER_TOKEN = 4  # a reply's length in tokens, estimated from its characters
MIN_OUTPUT = 2  # decode tok/s needs two tokens
USER_ROLES = ("human", "user")
REPLY_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")


@dataclass(frozen=True)
class Request:
    """One request of the file: its prompt, the output tokens it asks for, and where it is (``line 12``,
    or ``item 3`` of a JSON array)."""

    prompt: str
    output_tokens: int
    at: str
    time: float | None = None  # its ``timestamp`` (seconds), where the file is a trace

    @property
    def tokens(self) -> int:
        """``request_tokens`` of this request."""
        return request_tokens(self.prompt, self.output_tokens)


def request_tokens(prompt: str, output_tokens: int) -> int:
    """A request's length as a server's limit counts it: the prompt's estimated tokens
    (``config.prompts.estimated_tokens``: the tuner has no tokenizer of the served model) plus the
    output it asks for."""
    return estimated_tokens(prompt) + output_tokens


@dataclass(frozen=True)
class Traffic:
    """The requests a study measures: prompts and their output lengths, in order, and where each is
    in the file (``lines``)."""

    source: str  # the file as the user reads it
    prompts: tuple[str, ...]
    output_tokens: tuple[int, ...]
    in_file: int  # usable requests in the file
    skipped: int = 0  # conversations without a reply
    lines: tuple[str, ...] = ()  # where each request is in the file ("line 12")
    times: tuple[float, ...] | None = None  # a trace's timestamps (seconds), in order; None: no timestamps

    def describe(self) -> str:
        """'traffic.jsonl: 64 of 200 requests, one from each 1/64 of the lengths (asked output tokens 8-96;
        the longest, line 17, about 7564 tokens, kept)'."""
        low, high = min(self.output_tokens), max(self.output_tokens)
        skipped = f", {self.skipped} conversation(s) without a reply skipped" if self.skipped else ""
        drawn = f", one from each 1/{len(self.prompts)} of the lengths" if len(self.prompts) < self.in_file else ""
        longest = ""
        if self.lines and len(self.prompts) < self.in_file:
            k = max(range(len(self.prompts)), key=lambda i: request_tokens(self.prompts[i], self.output_tokens[i]))
            longest = (f"; the longest, {self.lines[k]}, about {request_tokens(self.prompts[k], self.output_tokens[k])}"
                       " tokens, kept")
        if self.times is not None:
            drawn, longest = ", the first in time order", ""
            span = max(self.times) - min(self.times)
            if span > 0:
                longest = f"; timestamps over {span:.3g} s, {(len(self.times) - 1) / span:.3g} req/s"
        return (f"{self.source}: {len(self.prompts)} of {self.in_file} requests{drawn} (asked output tokens "
                f"{low}-{high}{skipped}{longest})")


def load(path: str | os.PathLike, *, file: str | None, study: str, sample: int, default_output: int,
         key: str = "bench.traffic", source: str | None = None) -> Traffic:
    """The study's sample of the traffic in ``path`` (module docstring); ``BadInput`` naming the
    file (``file`` is the job that names it) and the line for anything it cannot read."""
    p = Path(path)
    where = source or str(p)
    if not p.is_file():
        raise BadInput(f"{where}: {'is a directory' if p.is_dir() else 'not found'}; give a JSON Lines file with "
                       "one request per line: {\"prompt\": ..., \"output_tokens\": N} or a ShareGPT conversation",
                       file=file, key=key)
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise BadInput(f"{where}: {size >> 20} MB; at most {MAX_FILE_BYTES >> 20} MB (the job reads it whole; "
                       f"{sample} requests are sampled from it): cut it first, e.g. `head -n 20000`", file=file,
                       key=key)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where}: not UTF-8 text (byte {exc.start})", file=file, key=key) from None
    requests, skipped = _parse(text, where, file, key, default_output)
    if not requests:
        why = f" ({skipped} conversation(s) without a reply)" if skipped else ""
        raise BadInput(f"{where}: holds no request{why}", file=file, key=key)
    timed = _timed(requests, where, file, key)
    picked = first_in_time(requests, sample) if timed else sample_requests(requests, sample, study)
    return Traffic(source=source or str(p), prompts=tuple(r.prompt for r in picked),
                   output_tokens=tuple(r.output_tokens for r in picked), in_file=len(requests), skipped=skipped,
                   lines=tuple(r.at for r in picked),
                   times=tuple(r.time for r in picked) if timed else None)  # type: ignore[misc]


def _timed(requests: list[Request], where: str, file: str | None, key: str) -> bool:
    """Whether the file is a trace: every request has a timestamp (one without, where others have
    one, is refused by its line)."""
    without = [r for r in requests if r.time is None]
    if len(without) == len(requests):
        return False
    if without:
        raise BadInput(f"{where}: {without[0].at} has no 'timestamp' where other requests have one; a trace "
                       "needs one on every request (seconds)", file=file, key=key)
    return True


def first_in_time(requests: list[Request], sample: int) -> list[Request]:
    """A trace's first ``sample`` requests in time order (the file's order among equal times)."""
    return sorted(requests, key=lambda r: r.time)[:sample]  # type: ignore[arg-type, return-value]


def _parse(text: str, where: str, file: str | None, key: str,
           default_output: int) -> tuple[list[Request], int]:
    """Every usable request, and the conversations skipped."""
    stripped = text.lstrip()
    if stripped.startswith("["):  # one JSON array (ShareGPT as distributed)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{where}: line {exc.lineno} is not JSON ({exc.msg})", file=file, key=key) from None
        numbered: list[tuple[int | None, Any]] = [(None, item) for item in items]
    else:
        numbered = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise BadInput(f"{where}: line {lineno} is not JSON ({exc.msg}); one request per line: "
                               '{"prompt": "...", "output_tokens": N} or a ShareGPT conversation', file=file,
                               key=key) from None
    out, skipped = [], 0
    for index, (number, item) in enumerate(numbered):
        at = f"line {number}" if number is not None else f"item {index + 1}"
        got = _request(item, f"{where}: {at}", file, key, default_output)
        if got is None:
            skipped += 1
        else:
            out.append(Request(got[0], got[1], at, _timestamp(item, f"{where}: {at}", file, key)))
    return out, skipped


def _timestamp(item: dict[str, Any], where: str, file: str | None, key: str) -> float | None:
    """A request's ``timestamp`` (seconds), None where it has none."""
    value = item.get("timestamp")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInput(f"{where}: 'timestamp' must be a number of seconds, not {value!r}", file=file, key=key)
    return float(value)


def _request(item: Any, where: str, file: str | None, key: str, default_output: int) -> tuple[str, int] | None:
    """One request of the file; None for a conversation without a reply."""
    if not isinstance(item, dict):
        raise BadInput(f"{where} is not a JSON object", file=file, key=key)
    if "prompt" in item:
        prompt, out = item["prompt"], item.get("output_tokens", default_output)
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadInput(f"{where}: 'prompt' must be a non-empty string", file=file, key=key)
        if isinstance(out, bool) or not isinstance(out, int) or out < 1:
            raise BadInput(f"{where}: 'output_tokens' must be an integer >= 1, not {out!r}", file=file, key=key)
        return prompt, max(MIN_OUTPUT, out)
    turns = item.get("conversations", item.get("messages"))
    if not isinstance(turns, list):
        raise BadInput(f"{where} has neither 'prompt' (with 'output_tokens') nor 'conversations' (ShareGPT)",
                       file=file, key=key)
    said = [_turn(t, where, file, key) for t in turns]
    first = next((i for i, (role, text) in enumerate(said) if role in USER_ROLES and text.strip()), None)
    if first is None or first + 1 >= len(said) or said[first + 1][0] not in REPLY_ROLES:
        return None
    reply = said[first + 1][1]
    return said[first][1], max(MIN_OUTPUT, round(len(reply) / CHARS_PER_TOKEN))


def _turn(turn: Any, where: str, file: str | None, key: str) -> tuple[str, str]:
    """(role, text) of one conversation turn."""
    if isinstance(turn, dict):
        role, text = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
        if isinstance(role, str) and isinstance(text, str):
            return role.lower(), text
    raise BadInput(f"{where}: a conversation turn must be {{\"from\": ..., \"value\": \"...\"}} (or role/content)",
                   file=file, key=key)


def sample_requests(requests: list[Request], sample: int, study: str) -> list[Request]:
    """``sample`` requests of the file, the same for every run of the study (seeded by its name),
    stratified by length (module docstring): the requests in order of ``Request.tokens`` (the
    file's order among equals) cut into ``sample`` shares of equal count (the larger ones, where
    the count does not divide, at the short end: the long tail in shares of its own), one drawn
    from each, the longest share's longest; in a shuffled order (the file's order may group
    similar requests: the rounds mix them)."""
    rng = random.Random(f"ncclsweep traffic {study}")
    n = len(requests)
    if n <= sample:
        picked = list(range(n))
    else:
        ranked = sorted(range(n), key=lambda i: requests[i].tokens)
        bounds = [-(-k * n // sample) for k in range(sample + 1)]  # ceil(k n / s): the extras in the low shares
        picked = [ranked[rng.randrange(lo, hi)] for lo, hi in zip(bounds[:-1], bounds[1:-1])] + [ranked[-1]]
    rng.shuffle(picked)
    return [requests[i] for i in picked]
