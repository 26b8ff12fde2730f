"""A small OpenAI-compatible completions server for the tests of server.py and bench.py.

It stands in ONLY where a real inference server is not needed: testing the HTTP
client, the streaming parser, timing arithmetic and process handling. It does no
inference; its "model" emits deterministic words derived from the prompt, at a
configurable per-token delay, in the chunk shape vLLM streams::

    data: {"id":..., "object":"text_completion", "choices":[{"index":0, "text":" w12",
           "logprobs":null, "finish_reason":null, "stop_reason":null}], "usage":null}
    ...  (the last token carries finish_reason "length")
    data: {"id":..., "choices":[], "usage":{"prompt_tokens":P, "completion_tokens":N, ...}}
    data: [DONE]

over HTTP/1.1 chunked transfer encoding. Tokens are scheduled at absolute times
(first token + i * delay), so a client measures the configured rate.

Endpoints: ``GET /health`` (503 until ``--ready-after`` seconds passed, then 200),
``GET /v1/models``, ``POST /v1/completions`` (stream or not; ``ignore_eos``; ``echo``
with ``logprobs`` returning ``tokens``/``token_logprobs``/``text_offset`` like vLLM;
``return_token_ids``). An unknown model gets vLLM's 404 error body.

Speculative decoding, like vLLM's (flags): ``--spec-tokens K`` drafts K tokens per step;
how many are accepted depends on the prompt the way an n-gram drafter's does: on natural
text of 150 words or more all K, on a one-word prompt none (``accepted_per_step``). A step
takes ``token_delay x (1 + spec-overhead x K)`` and streams its 1 + accepted tokens as ONE
chunk (a real speculative server's multi-token chunks), and ``GET /metrics`` counts drafts,
draft tokens and accepted tokens under vLLM 0.26.0's counter names. Without it ``/metrics``
has no speculative-decoding counters. ``--spec-corrupt`` (with ``--spec-tokens``) is a broken
verifier: every token after the first is a draft the target would not have chosen, so the
greedy text (streamed or not) differs from the same server without speculation.

Load (flags): ``--ttft-delay S`` (every stream's first token S late), ``--stream-cost S``
(each token of a stream takes S more per other stream in flight, as a batch slows each of its
sequences: total tok/s at N streams is N / (delay + S x (N - 1))), ``--overflow N:S`` (with
more than N streams in flight each token takes S more: a batch past its KV cache's room, its
sequences preempted and recomputed: a knee in TPOT at N, which a loaded client's own delays
cannot move as they move a crossing on ``--stream-cost``'s slope; both are set by the streams in
flight as the server counts them and paced by sleeping to absolute times), ``--slow-after N:F`` (the
streamed requests after the N-th are F times slower: a server that degrades mid-benchmark),
``--capture-sizes 1,2,..,64 --eager-factor F`` (with more streams in flight than the largest
captured size each token takes F times as long: the batch runs without its CUDA graphs, as vLLM's
does, and the total tok/s falls off a cliff above it; the log's first lines say what was captured),
``--slots K`` (at most K streams decode at once; a stream beyond them waits, first come first served,
for one to end before its first token: an engine with K sequences' room and a queue, so past the rate K
over a request's duration requests queue and their TTFT grows without bound; a stream's slot time is
scheduled, not woken: it starts when its request came or when its slot's last holder was due to end,
whichever is later, so a busy host's late thread wake-ups do not add up along the queue),
``--fail-above N`` (a stream that would make more than N in flight is answered HTTP 500: a
config that breaks under load), ``--context-cost S`` (each token of a request takes S more per
1000 words of its prompt, as attention over a long context slows every decode step, and its
first token ``PREFILL_FACTOR`` times that: the prefill reads the whole prompt).

Prefill and its cache (flags): ``--prefill-cost S`` (a streamed request's first token S later per
1000 prompt tokens that it computes), ``--prefix-cache`` (a streamed prompt's leading blocks of
``BLOCK`` tokens that an earlier one of this process began with, the block and everything before it the
same, are not computed: what vLLM's prefix caching does; ``/metrics`` counts the prompt tokens
looked up and found under vLLM 0.26.0's names, ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total``), ``--max-model-len N`` (a prompt longer than N tokens, or with
``max_tokens`` more than N, is answered HTTP 400 with vLLM 0.26.0's message, streamed or not).

Launch noise (flags): ``--launch-noise F`` makes the whole launch fast or slow by F, decided at
start and kept for its life (every token delay divided by 1 + F or by 1 - F): what a relaunch of
a real engine can do (clocks, where the workers land, fresh or warm caches). Each launch is fast
or slow at random, or, with ``--launch-noise-seed S --launch-noise-counter FILE``, as the n-th draw
of a sequence seeded by S (the counter file counts the launches that share it), so a study of
such launches is the same study again. The log's first line says which (``launch: fast``).
``--speed-file PATH``: where that file exists at start, the launch's speed is multiplied by the
number it holds (a machine that changed between a study and a later ``compare``). ``--drift F
--drift-start FILE``: a box that drifts, every launch slower by F a minute (its speed times (1 - F)
to the power of the minutes since FILE's time, which the first launch sharing it writes): a box
warming up, or a neighbour ramping its load, under every config alike.

Start-up behaviours (flags): ``--crash-on-start CODE`` (print and exit at once),
``--exit-after N`` (exit 0 as request N + 1 arrives: N answered, then gone),
``--crash-above N`` (exit 1 when more than N completions are in flight: a config that
crashes only under load), ``--ready-after S``, ``--warming S`` (``/health`` 200 at once, but completions answered
``503`` with ``Retry-After: 1`` for S seconds: a server warming up behind a healthy health
check, or a proxy in front of one; ``--warming-status 502`` or ``504`` answers as a proxy
whose engine behind it is not up yet), ``--ignore-term`` (SIGTERM ignored), ``--graceful-term S``
(on SIGTERM, exit 0 S seconds later, as an engine's graceful shutdown does), ``--no-logprobs`` (echo /
logprobs answered with 400, like a server that does not support them), ``--wrong-text``
(every token after the first is another word: greedy text that differs from the same server
without it, like a collective that corrupts data).

A process tree like a real engine's (flags): ``--workers N`` starts N worker processes
(Python, in the server's process group, no parent-death signal, ``FAKE::Worker_N`` in
their command lines: like vLLM's workers, they outlive a front killed with SIGKILL), each
writing its pid into ``--pid-dir``;
``--worker-dies-after S`` makes worker 0 exit with code 1 after S seconds while the
front keeps running; ``--workers-setsid`` puts the workers in sessions of their own
(they leave the process group); ``--say-after S:TEXT`` prints TEXT (e.g. an engine's
fatal line) after S seconds; ``--helper-after S:SECONDS`` runs a short-lived Python
helper (command line contains ``fake-helper``) for SECONDS, at S seconds.

Per-request behaviours, from an optional ``"fake"`` object in the request body (test
knobs, ignored by real servers' clients): ``token_delay`` (s), ``ttft_delay`` (s),
``hang_after`` (stop streaming after N tokens and keep the connection open),
``drop_after`` (end the stream cleanly after N tokens, without ``[DONE]``),
``malformed_after`` (send a broken ``data:`` line after N tokens), ``bos`` (prepend a
"<s>" token to echoed prompts, as tokenizers with a BOS token do), ``status`` (answer
with this HTTP status and an OpenAI-style error body instead), ``stamp`` (append
"@" and the server's ``time.monotonic()`` when it sends each token to the token's text:
on one host a client's arrival stamp minus it is the client's own delay), ``no_usage``
(never send the usage chunk, even when asked).

    python tests/fake_openai_server.py --port 8000 --token-delay 0.01
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def say(text: str) -> None:
    """One line of the server's log in one write: lines that two threads print at once never mix
    (``print`` writes the text and its newline apart)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


PREFILL_FACTOR = 10  # ``--context-cost``: the first token's share of a long prompt, against a later token's
BLOCK = 16  # ``--prefix-cache``: tokens per cached block (vLLM's default block size)
_TOKEN_RE = re.compile(r"\s*\S+|\s+")


def tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.sha1("\x00".join(map(str, parts)).encode()).digest()[:4], "big")


def generate(prompt: str, n: int) -> list[tuple[str, int]]:
    """Deterministic (text, token id) pairs for a prompt: the fake 'greedy' output."""
    return [(f" w{_h(prompt, i) % 1000}", _h(prompt, i) % 32000) for i in range(n)]


def corrupted(gen: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """What a broken speculative verifier returns: the first token, then drafts the target
    would not have chosen (other words, other ids)."""
    return gen[:1] + [(f" d{_h('draft', text) % 1000}", (tok + 1) % 32000) for text, tok in gen[1:]]


def accepted_per_step(prompt: str, k: int) -> int:
    """Draft tokens accepted per step: all K on natural text of 150+ words, fewer on shorter
    prompts, none on one word (an n-gram drafter finds nothing to copy there)."""
    words = len(prompt.split())
    return 0 if words <= 1 else min(k, round(k * min(1.0, words / 150)))


class PrefixCache:
    """``--prefix-cache``: the blocks of ``BLOCK`` tokens computed so far, each keyed by itself and
    everything before it (a prompt that begins otherwise shares none), and vLLM's two counters."""

    def __init__(self) -> None:
        self.blocks: set[bytes] = set()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # of them, found
        self.lock = threading.Lock()

    def lookup(self, tokens: list[str]) -> int:
        """How many leading tokens of a prompt are cached (whole blocks, its last token always
        computed); its blocks are cached from now on."""
        keys, key = [], b""
        for end in range(BLOCK, len(tokens) + 1, BLOCK):
            key = hashlib.sha1(key + "\x00".join(tokens[end - BLOCK:end]).encode()).digest()
            keys.append(key)
        with self.lock:
            found = next((i for i, k in enumerate(keys) if k not in self.blocks), len(keys))
            hits = min(found * BLOCK, max(0, (len(tokens) - 1) // BLOCK * BLOCK))
            self.blocks.update(keys)
            self.queries += len(tokens)
            self.hits += hits
        return hits


def metrics_text(model: str, spec: dict | None, cache: PrefixCache | None = None) -> str:
    """``/metrics`` in Prometheus text format (vLLM 0.26.0's names)."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge",
             f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 0.0']
    counters = []
    if spec is not None:
        counters += [("vllm:spec_decode_num_drafts_total", spec["drafts"]),
                     ("vllm:spec_decode_num_draft_tokens_total", spec["draft_tokens"]),
                     ("vllm:spec_decode_num_accepted_tokens_total", spec["accepted"])]
    if cache is not None:
        counters += [("vllm:prefix_cache_queries_total", cache.queries), ("vllm:prefix_cache_hits_total", cache.hits)]
    for name, value in counters:
        lines += [f"# TYPE {name} counter", f'{name}{{engine="0",model_name="{model}"}} {float(value)}']
    return "\n".join(lines) + "\n"


def too_long(limit: int | None, prompt_tokens: int, max_tokens: int) -> str | None:
    """vLLM 0.26.0's refusal of a request longer than ``--max-model-len`` (None: it fits)."""
    if limit is None:
        return None
    if prompt_tokens > limit:
        return (f"This model's maximum context length is {limit} tokens. However, your request has {prompt_tokens} "
                "input tokens. Please reduce the length of the input messages.")
    if prompt_tokens + max_tokens > limit:
        return (f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
                f"length is {limit} tokens and your request has {prompt_tokens} input tokens ({max_tokens} > {limit} "
                f"- {prompt_tokens}).")
    return None


def logprob(prev: str, tok: str) -> float:
    return -round((_h(prev, tok) % 1000) / 200.0, 4)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1"

    def log_message(self, fmt: str, *args: object) -> None:  # quiet; errors still go to stderr
        pass

    def parse_request(self) -> bool:  # a request arrived (its line was read; not a closing keep-alive read)
        server = self.server
        with server.lock:  # type: ignore[attr-defined]
            server.requests += 1  # type: ignore[attr-defined]
            last = server.requests == server.exit_at  # type: ignore[attr-defined]
        if last:  # --exit-after: a clean exit 0 as this request arrives (its connection closes unanswered)
            say(f"fake server: exiting (0) at request {server.requests}")  # type: ignore[attr-defined]
            import os

            os._exit(0)
        return super().parse_request()

    # ---- helpers ----------------------------------------------------------------------
    def _json(self, status: int, obj: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj: object) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        self._chunk(f"data: {payload}\n\n".encode())

    def _ready(self) -> bool:
        return time.monotonic() >= self.server.ready_at  # type: ignore[attr-defined]

    # ---- endpoints --------------------------------------------------------------------
    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200 if self._ready() else 503, {} if self._ready() else {"status": "loading"})
        elif self.path == "/metrics":
            spec = self.server.spec if self.server.spec_tokens else None  # type: ignore[attr-defined]
            data = metrics_text(self.server.model, spec, self.server.prefix_cache).encode()  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})  # type: ignore[attr-defined]
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.active += 1  # type: ignore[attr-defined]
            crowd = self.server.active  # type: ignore[attr-defined]
        try:
            if self.server.crash_above and crowd > self.server.crash_above:  # type: ignore[attr-defined]
                say(f"fake server: {crowd} requests at once: crashing")
                import os

                os._exit(1)
            self._post()
        finally:
            with self.server.lock:  # type: ignore[attr-defined]
                self.server.active -= 1  # type: ignore[attr-defined]

    def _post(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "invalid JSON body", "type": "BadRequestError", "code": 400}})
            return
        if self.path != "/v1/completions":
            self._json(404, {"detail": "Not Found"})
            return
        if not self._ready():
            self._json(503, {"error": {"message": "server is starting", "code": 503}})
            return
        if time.monotonic() < self.server.serving_at:  # type: ignore[attr-defined]
            status = self.server.warming_status  # type: ignore[attr-defined]
            self._json(status, {"error": {"message": "warming up", "code": status}}, {"Retry-After": "1"})
            return
        model = body.get("model")
        if model != self.server.model:  # type: ignore[attr-defined]
            self._json(404, {"error": {"message": f"The model `{model}` does not exist.",
                                       "type": "NotFoundError", "code": 404}})
            return
        status = (body.get("fake") or {}).get("status")
        if status:
            self._json(int(status), {"error": {"message": f"fake failure {status}", "code": int(status)}})
            return
        if (body.get("echo") or body.get("logprobs") is not None) and self.server.no_logprobs:  # type: ignore[attr-defined]
            self._json(400, {"error": {"message": "echo/logprobs not supported", "code": 400}})
            return
        refused = too_long(self.server.max_model_len, len(tokenize(str(body.get("prompt", "")))),  # type: ignore[attr-defined]
                           int(body.get("max_tokens") or 16))
        if refused:
            self._json(400, {"error": {"message": refused, "type": "BadRequestError", "param": None, "code": 400}})
            return
        try:
            if body.get("stream"):
                self._stream(body)
            else:
                self._complete(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _generate(self, prompt: str, n: int) -> list[tuple[str, int]]:
        gen = generate(prompt, n)
        wrong = self.server.wrong_text or (self.server.spec_tokens and self.server.spec_corrupt)  # type: ignore[attr-defined]
        return corrupted(gen) if wrong else gen

    def _n_tokens(self, body: dict) -> int:
        n = int(body.get("max_tokens") or 16)
        if not body.get("ignore_eos", False):
            n = min(n, 8)  # the fake model "emits EOS" after 8 tokens
        return n

    def _complete(self, body: dict) -> None:
        prompt = str(body.get("prompt", ""))
        n = self._n_tokens(body)
        gen = self._generate(prompt, n)
        text = "".join(t for t, _ in gen)
        choice: dict = {"index": 0, "text": text, "logprobs": None,
                        "finish_reason": "length" if n == body.get("max_tokens") else "stop"}
        if body.get("return_token_ids"):
            choice["token_ids"] = [i for _, i in gen]
        if body.get("logprobs") is not None:
            toks = [t for t, _ in gen]
            offsets, pos = [], 0
            base = len(prompt) if body.get("echo") else 0
            if body.get("echo"):
                ptoks = tokenize(prompt)
                if (body.get("fake") or {}).get("bos"):
                    ptoks = ["<s>", *ptoks]
                toks = ptoks + toks
                base = 0
            pos = base
            for t in toks:
                offsets.append(pos)
                pos += len(t)
            lps = [None if (i == 0 and body.get("echo")) else logprob(toks[i - 1] if i else "", t)
                   for i, t in enumerate(toks)]
            choice["logprobs"] = {"tokens": toks, "token_logprobs": lps, "text_offset": offsets,
                                  "top_logprobs": [None if lp is None else {t: lp} for t, lp in zip(toks, lps)]}
            if body.get("echo"):
                choice["text"] = prompt + text
        elif body.get("echo"):
            choice["text"] = prompt + text
        ptok = len(tokenize(prompt))
        self._json(200, {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()),
                         "model": body["model"], "choices": [choice],
                         "usage": {"prompt_tokens": ptok, "completion_tokens": n, "total_tokens": ptok + n}})

    def _stream(self, body: dict) -> None:
        arrived = time.monotonic()
        fake = body.get("fake") or {}
        srv = self.server
        delay = float(fake.get("token_delay", srv.token_delay))  # type: ignore[attr-defined]
        ttft = float(fake.get("ttft_delay", srv.ttft_delay))  # type: ignore[attr-defined]
        prompt_tokens = tokenize(str(body.get("prompt", "")))
        longer = srv.context_cost * len(prompt_tokens) / 1000  # type: ignore[attr-defined]
        delay, ttft = delay + longer, ttft + PREFILL_FACTOR * longer
        cached = srv.prefix_cache.lookup(prompt_tokens) if srv.prefix_cache is not None else 0  # type: ignore[attr-defined]
        ttft += srv.prefill_cost * (len(prompt_tokens) - cached) / 1000  # type: ignore[attr-defined]
        with srv.lock:  # type: ignore[attr-defined]
            limit = srv.fail_above  # type: ignore[attr-defined]
            if limit is not None and srv.in_flight >= limit:  # type: ignore[attr-defined]
                refused = True
            else:
                refused = False
                srv.streamed += 1  # type: ignore[attr-defined]
            slow_n, slow_f = srv.slow_after  # type: ignore[attr-defined]
            if slow_n is not None and srv.streamed > slow_n:  # type: ignore[attr-defined]
                delay *= slow_f
            if not refused:
                srv.in_flight += 1  # type: ignore[attr-defined]
        if refused:
            self._json(500, {"error": {"message": f"more than {limit} streams at once", "code": 500}})
            return
        slots = srv.slots  # type: ignore[attr-defined]
        slot, start, end = None, None, None
        try:
            if slots is not None:
                slot, start = slots.acquire(arrived)
            end = self._stream_tokens(body, fake, delay, ttft, start)
        finally:
            if slot is not None:
                slots.release(slot, end)
            with srv.lock:  # type: ignore[attr-defined]
                srv.in_flight -= 1  # type: ignore[attr-defined]

    def _token_delay(self, delay: float) -> float:
        """One token's delay now: the base, plus ``--stream-cost`` per other stream in flight, plus
        ``--overflow``'s cost past its room, all ``--eager-factor`` times as long past the largest
        captured batch."""
        srv = self.server
        crowd = srv.in_flight  # type: ignore[attr-defined]
        room, over = srv.overflow  # type: ignore[attr-defined]
        graphs = srv.graphs_up_to  # type: ignore[attr-defined]
        eager = srv.eager_factor if graphs is not None and crowd > graphs else 1.0  # type: ignore[attr-defined]
        return eager * (delay + srv.stream_cost * max(0, crowd - 1)  # type: ignore[attr-defined]
                        + (over if room is not None and crowd > room else 0.0))

    def _stream_tokens(self, body: dict, fake: dict, delay: float, ttft: float, start: float | None = None) -> float:
        """The stream, its tokens due from ``start`` (now if None); returns when its last token was due."""
        hang_after = fake.get("hang_after")
        drop_after = fake.get("drop_after")
        malformed_after = fake.get("malformed_after")
        stamp = bool(fake.get("stamp"))
        prompt = str(body.get("prompt", ""))
        n = self._n_tokens(body)
        gen = self._generate(prompt, n)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()), "model": body["model"]}
        t_first = (time.monotonic() if start is None else start) + ttft
        due = t_first
        k = self.server.spec_tokens  # type: ignore[attr-defined]
        if k and hang_after is None and drop_after is None and malformed_after is None and not stamp:
            return self._stream_speculative(body, base, gen, n, k, delay, t_first, prompt)
        for i, (text, tok_id) in enumerate(gen):
            if hang_after is not None and i >= int(hang_after):
                time.sleep(3600)  # keep the connection open, send nothing
            if drop_after is not None and i >= int(drop_after):
                self._chunk(b"")  # clean end of the HTTP body, but no [DONE]
                return due
            if malformed_after is not None and i >= int(malformed_after):
                self._chunk(b'data: {"choices": [\n\n')
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                return due
            if self.server.stream_cost or self.server.overflow[0] is not None \
                    or self.server.graphs_up_to is not None:  # type: ignore[attr-defined]
                due = t_first if i == 0 else due + self._token_delay(delay)
            else:
                due = t_first + i * delay
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            last = i == n - 1
            if stamp:
                text = f"{text}@{time.monotonic():.6f}"
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": ("length" if n == body.get("max_tokens") else "stop") if last else None,
                      "stop_reason": None}
            if body.get("return_token_ids"):
                choice["token_ids"] = [tok_id]
            self._event({**base, "choices": [choice], "usage": None})
        self._finish_stream(body, base, prompt, n)
        return due

    def _finish_stream(self, body: dict, base: dict, prompt: str, n: int) -> None:
        if (body.get("stream_options") or {}).get("include_usage") and not (body.get("fake") or {}).get("no_usage"):
            ptok = len(tokenize(prompt))
            self._event({**base, "choices": [],
                         "usage": {"prompt_tokens": ptok, "completion_tokens": n, "total_tokens": ptok + n}})
        self._event("[DONE]")
        self._chunk(b"")

    def _stream_speculative(self, body: dict, base: dict, gen: list, n: int, k: int, delay: float, t_first: float,
                            prompt: str) -> float:
        """Steps of 1 + accepted tokens, each one chunk; the drafts counted for /metrics. Returns when the
        last step was due."""
        accept = accepted_per_step(prompt, k)
        step = delay * (1 + self.server.spec_overhead * k)  # type: ignore[attr-defined]
        i, steps = 0, 0
        while i < n:
            wait = t_first + steps * step - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            take = gen[i:i + 1 + accept]
            i += len(take)
            steps += 1
            with self.server.lock:  # type: ignore[attr-defined]
                spec = self.server.spec  # type: ignore[attr-defined]
                spec["drafts"] += 1
                spec["draft_tokens"] += k
                spec["accepted"] += len(take) - 1
            choice = {"index": 0, "text": "".join(t for t, _ in take), "logprobs": None,
                      "finish_reason": "length" if i >= n else None, "stop_reason": None}
            if body.get("return_token_ids"):
                choice["token_ids"] = [tok for _, tok in take]
            self._event({**base, "choices": [choice], "usage": None})
        self._finish_stream(body, base, prompt, n)
        return t_first + (steps - 1) * step


class Slots:
    """``--slots K``: at most K holders at once, the others served in the order they came. Each slot
    keeps when its last holder was due to end, so a holder's time is scheduled: it starts at
    max(its arrival, that time), however late its thread woke, and a queue of N waiting requests is
    N service times long, not N service times plus N wake-ups."""

    def __init__(self, k: int):
        self.due_free: list[float | None] = [0.0] * k  # None: held
        self.queue: list[object] = []
        self.cond = threading.Condition()

    def acquire(self, arrived: float) -> tuple[int, float]:
        """Wait for a free slot, first come first served: (its index, when this holder's time starts)."""
        me = object()
        with self.cond:
            self.queue.append(me)
            while self.queue[0] is not me or all(d is None for d in self.due_free):
                self.cond.wait()
            self.queue.pop(0)
            slot = min((i for i, d in enumerate(self.due_free) if d is not None), key=lambda i: self.due_free[i])
            start = max(arrived, self.due_free[slot])
            self.due_free[slot] = None
            self.cond.notify_all()
            return slot, start

    def release(self, slot: int, due_end: float | None) -> None:
        """Give the slot back; its next holder starts from ``due_end`` (now when the stream failed)."""
        with self.cond:
            self.due_free[slot] = time.monotonic() if due_end is None else due_end
            self.cond.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # (socketserver's 5 drops SYNs at 64+ simultaneous connects: 1-3 s retries)


def _worker(index: int, pid_dir: str | None, die_after: float | None) -> int:
    if pid_dir:
        import os

        with open(f"{pid_dir}/worker-{index}.pid", "w") as fh:
            fh.write(str(os.getpid()))
    say(f"fake worker {index} up")
    if die_after is not None and die_after >= 0:
        time.sleep(die_after)
        say(f"fake worker {index}: exiting with code 1 as asked")
        return 1
    while True:
        time.sleep(3600)


def _start_tree(a: argparse.Namespace) -> None:
    import subprocess

    for i in range(a.workers):
        die = a.worker_dies_after if i == 0 else None
        cmd = [sys.executable, __file__, "--port", "0", "--worker", str(i), "--title", f"FAKE::Worker_{i}"]
        if a.pid_dir:
            cmd += ["--pid-dir", a.pid_dir]
        if die is not None:
            cmd += ["--worker-dies-after", str(die)]
        subprocess.Popen(cmd, start_new_session=a.workers_setsid)
    for spec in a.say_after:
        after, _, text = spec.partition(":")
        threading.Timer(float(after), lambda t=text: say(t)).start()
    for spec in a.helper_after:
        after, _, seconds = spec.partition(":")
        helper = [sys.executable, "-c", f"import time; time.sleep({float(seconds)})", "fake-helper"]
        threading.Timer(float(after), lambda h=helper: subprocess.run(h)).start()


def _launch_speed(a: argparse.Namespace) -> float:
    """This launch's speed for its whole life (module docstring, "Launch noise"): 1 + F or 1 - F,
    times the speed file's factor."""
    factor = 1.0
    if a.speed_file and os.path.exists(a.speed_file):
        with open(a.speed_file) as f:
            factor = float(f.read().strip())
        say(f"launch: speed x{factor:g} (from {a.speed_file})")
    return factor * _noise_speed(a) * _drift_speed(a)


def _drift_speed(a: argparse.Namespace) -> float:
    """(1 - F) ** minutes since the drift's start file (module docstring, "Launch noise")."""
    if not a.drift or not a.drift_start:
        return 1.0
    try:
        fd = os.open(a.drift_start, os.O_WRONLY | os.O_CREAT | os.O_EXCL)  # the first launch: the start
        os.write(fd, repr(time.time()).encode())
        os.close(fd)
    except FileExistsError:
        pass
    start = None
    for _ in range(100):  # the first launch may be writing it
        with open(a.drift_start) as f:
            text = f.read().strip()
        if text:
            start = float(text)
            break
        time.sleep(0.01)
    minutes = (time.time() - (start or time.time())) / 60.0
    speed = (1.0 - a.drift) ** minutes
    say(f"launch: drifted x{speed:.3f} ({minutes:.2f} min after the start)")
    return speed


def _noise_speed(a: argparse.Namespace) -> float:
    if not a.launch_noise:
        return 1.0
    if a.launch_noise_seed is not None and a.launch_noise_counter:
        import fcntl
        import random

        with open(a.launch_noise_counter, "a+") as f:  # the n-th launch sharing the counter, under a lock
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            n = len(f.read())
            f.write(".")
        fast = random.Random(a.launch_noise_seed * 1_000_003 + n).random() < 0.5
    else:
        fast = int.from_bytes(os.urandom(1), "big") < 128
    say(f"launch: {'fast' if fast else 'slow'} (x{1 + a.launch_noise if fast else 1 - a.launch_noise:.2f})")
    return 1.0 + a.launch_noise if fast else 1.0 - a.launch_noise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="fake")
    p.add_argument("--token-delay", type=float, default=0.01)
    p.add_argument("--ready-after", type=float, default=0.0)
    p.add_argument("--warming", type=float, default=0.0)
    p.add_argument("--warming-status", type=int, default=503)
    p.add_argument("--exit-after", type=int, default=0, metavar="N")
    p.add_argument("--crash-above", type=int, default=0, metavar="N")
    p.add_argument("--crash-on-start", type=int, default=None, metavar="CODE")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--graceful-term", type=float, default=None, metavar="S")
    p.add_argument("--no-logprobs", action="store_true")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # run as worker N
    p.add_argument("--title", help=argparse.SUPPRESS)  # a worker's name in its command line (as vLLM retitles)
    p.add_argument("--pid-dir")
    p.add_argument("--worker-dies-after", type=float, default=None)
    p.add_argument("--workers-setsid", action="store_true")
    p.add_argument("--say-after", action="append", default=[], metavar="S:TEXT")
    p.add_argument("--spec-tokens", type=int, default=0, metavar="K")
    p.add_argument("--spec-overhead", type=float, default=0.1)
    p.add_argument("--spec-corrupt", action="store_true")
    p.add_argument("--helper-after", action="append", default=[], metavar="S:SECONDS")
    p.add_argument("--wrong-text", action="store_true")
    p.add_argument("--ttft-delay", type=float, default=0.0)
    p.add_argument("--stream-cost", type=float, default=0.0)
    p.add_argument("--overflow", default=None, metavar="N:S")
    p.add_argument("--context-cost", type=float, default=0.0)
    p.add_argument("--prefill-cost", type=float, default=0.0, metavar="S")
    p.add_argument("--prefix-cache", action="store_true")
    p.add_argument("--max-model-len", type=int, default=None, metavar="N")
    p.add_argument("--slow-after", default=None, metavar="N:F")
    p.add_argument("--capture-sizes", default=None, metavar="N,N,...")
    p.add_argument("--eager-factor", type=float, default=1.0, metavar="F")
    p.add_argument("--fail-above", type=int, default=None, metavar="N")
    p.add_argument("--slots", type=int, default=None, metavar="K")
    p.add_argument("--launch-noise", type=float, default=0.0, metavar="F")
    p.add_argument("--launch-noise-seed", type=int, default=None, metavar="S")
    p.add_argument("--launch-noise-counter", default=None, metavar="FILE")
    p.add_argument("--speed-file", default=None, metavar="PATH")
    p.add_argument("--drift", type=float, default=0.0, metavar="F")
    p.add_argument("--drift-start", default=None, metavar="FILE")
    a = p.parse_args(argv)
    if a.worker is not None:
        return _worker(a.worker, a.pid_dir, a.worker_dies_after)
    if a.crash_on_start is not None:
        print("fake server: crashing on start as asked", file=sys.stderr, flush=True)
        return a.crash_on_start
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.graceful_term is not None:
        def shut_down(signum, frame) -> None:
            say("fake server: shutting down (SIGTERM)")
            threading.Timer(a.graceful_term, os._exit, args=(0,)).start()

        signal.signal(signal.SIGTERM, shut_down)
    _start_tree(a)
    httpd = _Server((a.host, a.port), Handler)
    httpd.model = a.model  # type: ignore[attr-defined]
    httpd.token_delay = a.token_delay / _launch_speed(a)  # type: ignore[attr-defined]
    httpd.no_logprobs = a.no_logprobs  # type: ignore[attr-defined]
    httpd.ready_at = time.monotonic() + a.ready_after  # type: ignore[attr-defined]
    httpd.serving_at = time.monotonic() + a.warming  # type: ignore[attr-defined]
    httpd.warming_status = a.warming_status  # type: ignore[attr-defined]
    httpd.requests, httpd.exit_at = 0, a.exit_after + 1 if a.exit_after else 0  # type: ignore[attr-defined]
    httpd.active, httpd.crash_above = 0, a.crash_above  # type: ignore[attr-defined]
    httpd.spec_tokens = a.spec_tokens  # type: ignore[attr-defined]
    httpd.spec_overhead = a.spec_overhead  # type: ignore[attr-defined]
    httpd.spec_corrupt = a.spec_corrupt  # type: ignore[attr-defined]
    httpd.wrong_text = a.wrong_text  # type: ignore[attr-defined]
    httpd.spec = {"drafts": 0, "draft_tokens": 0, "accepted": 0}  # type: ignore[attr-defined]
    httpd.lock = threading.Lock()  # type: ignore[attr-defined]
    httpd.ttft_delay = a.ttft_delay  # type: ignore[attr-defined]
    httpd.stream_cost = a.stream_cost  # type: ignore[attr-defined]
    httpd.context_cost = a.context_cost  # type: ignore[attr-defined]
    httpd.prefill_cost = a.prefill_cost  # type: ignore[attr-defined]
    httpd.prefix_cache = PrefixCache() if a.prefix_cache else None  # type: ignore[attr-defined]
    httpd.max_model_len = a.max_model_len  # type: ignore[attr-defined]
    httpd.in_flight = 0  # type: ignore[attr-defined]
    httpd.fail_above = a.fail_above  # type: ignore[attr-defined]
    httpd.slots = Slots(a.slots) if a.slots else None  # type: ignore[attr-defined]
    httpd.streamed = 0  # type: ignore[attr-defined]
    n, _, f = (a.slow_after or ":").partition(":")
    httpd.slow_after = (int(n), float(f)) if n else (None, 1.0)  # type: ignore[attr-defined]
    room, _, over = (a.overflow or ":").partition(":")
    httpd.overflow = (int(room), float(over)) if room else (None, 0.0)  # type: ignore[attr-defined]
    sizes = [int(x) for x in (a.capture_sizes or "").split(",") if x.strip()]
    httpd.graphs_up_to = max(sizes) if sizes else None  # type: ignore[attr-defined]
    httpd.eager_factor = a.eager_factor  # type: ignore[attr-defined]
    if sizes:
        say(f"fake server: CUDA graphs captured for batches of {','.join(map(str, sizes))}; eager above "
            f"({a.eager_factor:g}x a token)")
    say(f"fake server listening on {a.host}:{a.port}")
    threading.current_thread().name = "fake-openai"
    try:
        httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
