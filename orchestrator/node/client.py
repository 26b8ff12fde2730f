"""OpenAI-compatible streaming client and the decode metrics computed from it.

Definitions (comparable with ``vllm bench serve``):

- A request is streamed (``/v1/completions``, ``stream: true``, ``stream_options.
  include_usage: true``), greedy (``temperature 0``) and of fixed length
  (``ignore_eos``). Each chunk that carries a token (non-empty ``choices[0].text`` or
  ``token_ids``) gets a ``time.monotonic()`` stamp.
- ``n_tokens`` = ``usage.completion_tokens``, never the number of chunks: a chunk may
  carry several tokens (a speculative config streamed 128 tokens in 55 chunks); a stream
  without usage fails (``NO_USAGE``).
- TTFT = first token stamp - request start; latency = end of stream ([DONE]) - start.
- decode tok/s = (n_tokens - 1) / (t_last_token - t_first_token), i.e. 1 / TPOT of
  vLLM's benchmark (TPOT = (latency_to_last_token - TTFT) / (n - 1)).
- End-to-end tok/s = n_tokens / latency.

A failed request (refused, HTTP error, timeout, malformed chunk, stream ended without
``[DONE]``) is data: ``RequestResult(ok=False, error="one line")``, never an exception.
Every request has an overall deadline (``timeout_s``), so a server that stops streaming
mid-request yields ``error="timeout"`` within ``timeout_s`` plus a little slack; with a
stall limit (``stall_s``, the job's ``timeouts.stall``) a read that waits longer than it,
before the deadline, ends the request as ``stalled`` (``RequestResult.stalled``): the
stream stopped, and the trial says ``hang`` instead of waiting out its deadline.

HTTP is aiohttp's, the library ``vllm bench serve`` sends its requests with; this module only
splits the body into SSE ``data:`` lines (``_sse_payload``, as vLLM's benchmark does) and parses
them (``_Stream``). Every request runs on an asyncio event loop of the calling thread (which must
not be running one): ``run_streams`` (and ``measure_concurrency``, its summary) runs all its
streams on one loop, through one pool of keep-alive connections (a stream's next request reuses
its connection where the server keeps it open), so one thread stamps all token times at any
concurrency, where a thread per stream had hundreds of threads contending for the GIL
(docs/benchmarks.md, "The concurrency client"); ``stream_completion`` runs one request on a loop
of its own, and ``greedy_outputs`` its prompts on one. The deadlines are this module's
(``asyncio.wait_for`` around a request, ``_within`` around each read), not aiohttp's timeouts,
whose defaults are switched off.

What is measured with these requests (levels, rounds, windows, percentiles) is
``node.measure``'s, the one producer of a measurement; ``median_ci`` and ``relative_ci`` are
re-exported from ``core.measurement``.
"""

from __future__ import annotations

import asyncio
import errno
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from orchestrator.core.measurement import median_ci, relative_ci
from orchestrator.node.looplag import LoopLag

__all__ = [
    "RequestResult",
    "RequestFailed",
    "stream_completion",
    "run_streams",
    "run_open_loop",
    "measure_concurrency",
    "greedy_outputs",
    "score_continuation",
    "median_ci",
    "relative_ci",
]

TIMEOUT = "timeout"  # the error string of a request that ran past its deadline
STALLED = "stalled"  # how the error of a request whose stream went silent for the stall limit begins
# A stream that ends without ``usage.completion_tokens``: its tokens cannot be counted. A chunk
# may carry several tokens (speculative decoding: 128 tokens in 55 chunks), so counting chunks
# would overstate TPOT by the mean accepted length; the request fails instead.
NO_USAGE = ("the stream ended without usage.completion_tokens (the tokens cannot be counted: a chunk may carry "
            "several); the server must honour stream_options.include_usage")
# After [DONE], how long the rest of the body (its last chunk) may take to arrive: read, it lets the
# connection go back to the pool for the stream's next request; a body that does not end by then
# closes its connection instead (the next request opens one). The request's figures end at [DONE].
DRAIN_S = 0.25


class RequestFailed(Exception):
    """Raised only by ``score_continuation`` when the server could not be asked at all
    (connection, timeout, 5xx); an unsupported feature returns None instead."""


# --------------------------------------------------------------------------------------
# HTTP through aiohttp, with this module's deadlines
# --------------------------------------------------------------------------------------
def _one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


# identity: a compressed stream would be held back by the compressor, and no engine compresses one
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json",
            "Accept-Encoding": "identity"}


@dataclass(frozen=True)
class _Request:
    """A JSON POST, encoded once: where it goes and its body."""

    url: str
    body: bytes


def _request(base_url: str, path: str, body: dict[str, Any]) -> _Request:
    """The POST of ``body`` to ``path`` under ``base_url`` (a path in it is kept: a proxy's prefix)."""
    base = base_url if "://" in base_url else f"http://{base_url}"
    return _Request(base.rstrip("/") + path, json.dumps(body).encode())


def _session() -> aiohttp.ClientSession:
    """A pool of keep-alive connections, unbounded (the callers bound what is in flight: a pool limit
    would queue a request in the client, inside its TTFT), no proxy from the environment (a server
    is reached directly, as before), and no timeout of aiohttp's: the deadlines are this module's."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=_HEADERS,
                                 timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)


def _http_error(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    msg = text
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error", data)
            if isinstance(err, dict):
                msg = err.get("message") or err.get("detail") or text
            elif isinstance(err, str):
                msg = err
    except ValueError:
        pass
    return _one_line(f"HTTP {status}: {msg}")


def _stalled_error(stall_s: float | None) -> str:
    return f"{STALLED}: no data for {stall_s:g}s (timeouts.stall)"


def _refused(exc: aiohttp.ClientConnectorError) -> bool:
    err = exc.os_error
    return isinstance(err, ConnectionRefusedError) or getattr(err, "errno", None) == errno.ECONNREFUSED


def _classify(exc: BaseException, timed_out: bool) -> str:
    """One line for a failed request's exception (``timed_out``: its deadline passed)."""
    if timed_out or isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return TIMEOUT
    if isinstance(exc, aiohttp.ClientConnectorError) and _refused(exc):
        return "connection refused"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "stream ended without [DONE] (connection closed mid-chunk)"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server closed the connection without a response"
    return _one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


class _Stalled(Exception):
    """A read of a stream waited longer than the stall limit (its deadline still ahead)."""


_T = TypeVar("_T")


async def _within(awaitable: Awaitable[_T], stall_s: float | None) -> _T:
    """``await awaitable``, but at most ``stall_s`` (None: as long as it takes)."""
    if not stall_s:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, stall_s)
    except asyncio.TimeoutError:
        raise _Stalled() from None


# --------------------------------------------------------------------------------------
# One streamed request
# --------------------------------------------------------------------------------------
@dataclass
class RequestResult:
    """One streamed completion. Times are ``time.monotonic()`` seconds."""

    ok: bool
    error: str | None = None
    text: str = ""
    n_tokens: int = 0
    token_times: list[float] = field(default_factory=list)
    t_start: float = 0.0
    ttft_s: float | None = None
    latency_s: float | None = None
    decode_tok_s: float | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    max_tokens: int | None = None  # the output tokens it asked for

    @property
    def timed_out(self) -> bool:
        return not self.ok and self.error == TIMEOUT

    @property
    def stalled(self) -> bool:
        """The stream went silent for the stall limit before its deadline."""
        return not self.ok and (self.error or "").startswith(STALLED)

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (vLLM's TPOT)."""
        if self.n_tokens < 2 or len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (self.n_tokens - 1)

    @property
    def e2e_tok_s(self) -> float | None:
        if not self.latency_s or self.n_tokens <= 0:
            return None
        return self.n_tokens / self.latency_s


def _sse_payload(line: bytes) -> bytes | None:
    """The payload of an SSE ``data:`` line; None for blank lines, keep-alive comments and
    ``event:``/``id:`` lines."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    return line[5:].strip()


def _completion_body(model: str, prompt: str, max_tokens: int, temperature: float, ignore_eos: bool,
                     extra: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": int(max_tokens),
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    body.update(extra or {})
    return body


class _Stream:
    """What one streamed completion has delivered so far, fed the payloads of its
    ``data:`` lines with their arrival times. No I/O and no clock: what a chunk means is
    decided here, apart from how it was read."""

    def __init__(self, t_start: float):
        self.res = RequestResult(ok=False, t_start=t_start)
        self.pieces: list[str] = []
        self.usage_tokens: int | None = None
        self.done = False

    def feed(self, now: float, payload: bytes) -> bool:
        """Take one payload that arrived at ``now``; True when the stream is over
        (``[DONE]``, or an error recorded in ``res.error``)."""
        res = self.res
        if payload == b"[DONE]":
            self.done = True
            res.latency_s = now - res.t_start
            return True
        try:
            chunk = json.loads(payload)
            if not isinstance(chunk, dict):
                raise ValueError("not an object")
        except ValueError:
            res.error = _one_line(f"malformed chunk: {payload[:120].decode('utf-8', 'replace')}")
            return True
        if "error" in chunk or chunk.get("object") == "error":
            err = chunk.get("error", chunk)
            msg = err.get("message", err) if isinstance(err, dict) else err
            res.error = _one_line(f"server error in stream: {msg}")
            return True
        choices = chunk.get("choices") or []
        if choices and isinstance(choices[0], dict):
            c = choices[0]
            text = c.get("text") or ""
            if text or c.get("token_ids"):
                res.token_times.append(now)
                self.pieces.append(text)
            if c.get("finish_reason"):
                res.finish_reason = c["finish_reason"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if usage.get("completion_tokens") is not None:
                self.usage_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                res.prompt_tokens = int(usage["prompt_tokens"])
        return False

    def ended(self, timed_out: bool) -> None:
        """The body ended (EOF) before ``feed`` said the stream was over."""
        if self.res.error is None and not self.done:
            self.res.error = TIMEOUT if timed_out else "stream ended without [DONE]"

    def result(self, expired: bool) -> RequestResult:
        """The finished ``RequestResult`` (``expired``: the request's deadline passed)."""
        res = self.res
        if res.error is None and expired and not self.done:
            res.error = TIMEOUT
        res.text = "".join(self.pieces)
        res.n_tokens = self.usage_tokens if self.usage_tokens is not None else 0
        if res.error is None and self.done and self.usage_tokens is None and res.token_times:
            res.error = NO_USAGE
        if res.token_times:
            res.ttft_s = res.token_times[0] - res.t_start
        if res.latency_s is None:
            res.latency_s = time.monotonic() - res.t_start
        if res.n_tokens >= 2 and len(res.token_times) >= 2:
            span = res.token_times[-1] - res.token_times[0]
            if span > 0:
                res.decode_tok_s = (res.n_tokens - 1) / span
        res.ok = res.error is None
        return res


async def _drain(resp: aiohttp.ClientResponse) -> None:
    """Read what is left of a body after [DONE] (``DRAIN_S`` module constant), so that its
    connection goes back to the pool; one that does not end in time is closed on release."""
    try:
        await asyncio.wait_for(resp.content.read(), DRAIN_S)
    except (asyncio.TimeoutError, aiohttp.ClientError):
        pass


async def _exchange(session: aiohttp.ClientSession, req: _Request, st: _Stream, stall_s: float | None) -> None:
    """Send the request, feed ``st`` each ``data:`` line, stamped as it is taken (as vLLM's
    benchmark stamps each message: lines that came in one read get stamps of their own, in order,
    so a client that fell behind still sees a span, never a whole stream at one instant); a read
    (the response's head, or a piece of its body) that waits longer than ``stall_s`` raises
    ``_Stalled``."""
    async with await _within(session.post(req.url, data=req.body), stall_s) as resp:
        if resp.status != 200:
            raw = b""
            while len(raw) < 4096 and (piece := await resp.content.read(4096 - len(raw))):
                raw += piece
            st.res.error = _http_error(resp.status, raw)
            return
        tail = b""
        while piece := await _within(resp.content.readany(), stall_s):
            *lines, tail = (tail + piece).split(b"\n")
            for line in lines:
                payload = _sse_payload(line)
                if payload is not None and st.feed(time.monotonic(), payload):
                    if st.done:
                        await _drain(resp)
                    return
        payload = _sse_payload(tail)  # a last line without its newline
        if payload is None or not st.feed(time.monotonic(), payload):
            st.ended(False)


async def _astream(req: _Request, timeout_s: float, stall_s: float | None = None,
                   session: aiohttp.ClientSession | None = None) -> RequestResult:
    """One streamed completion on the running loop, through ``session`` (None: a session of its
    own); its deadline cancels it where it waits."""
    if session is None:
        async with _session() as own:
            return await _astream(req, timeout_s, stall_s, own)
    st = _Stream(time.monotonic())
    expired = False
    try:
        await asyncio.wait_for(_exchange(session, req, st, stall_s), max(0.0, timeout_s))
    except asyncio.TimeoutError:
        expired = True
    except _Stalled:
        st.res.error = _stalled_error(stall_s)
    except Exception as exc:  # noqa: BLE001 - a failed request is data
        st.res.error = _classify(exc, False)
    return st.result(expired)


def stream_completion(
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    timeout_s: float,
    *,
    temperature: float = 0.0,
    ignore_eos: bool = True,
    extra: dict[str, Any] | None = None,
    stall_s: float | None = None,
    lag: LoopLag | None = None,
) -> RequestResult:
    """Stream one completion and time its tokens; never raises for a failed request.
    ``stall_s``: a read that waits longer ends it as stalled (module docstring). It runs on an
    event loop of its own: the calling thread must not be running one. ``lag``: records how late
    that loop ran meanwhile (``node.looplag``)."""
    req = _request(base_url, "/v1/completions",
                   _completion_body(model, prompt, max_tokens, temperature, ignore_eos, extra))
    work = _astream(req, timeout_s, stall_s)
    res = asyncio.run(lag.watching(work) if lag is not None else work)
    res.max_tokens = int(max_tokens)
    return res


# --------------------------------------------------------------------------------------
# Concurrency: every stream on one asyncio event loop
# --------------------------------------------------------------------------------------
async def _streams(requests: Sequence[_Request], timeout_s: float, width: int,
                   n_requests: int, stall_s: float | None = None,
                   on_done: Callable[[RequestResult], None] | None = None, asked: Sequence[int] = (),
                   ) -> tuple[list[tuple[int, RequestResult]], float]:
    """``n_requests`` requests, ``width`` streams at a time, each stream sending its next request
    as soon as its last one ended (a closed loop, as ``vllm bench serve --max-concurrency``), all
    through one session; the i-th request is ``requests[i % len]`` (asking ``asked[i % len]``
    tokens): ([(stream, result)], wall seconds)."""
    results: list[tuple[int, RequestResult]] = []
    todo = iter(range(n_requests))

    async def worker(stream: int, session: aiohttp.ClientSession) -> None:
        for i in todo:
            res = await _astream(requests[i % len(requests)], timeout_s, stall_s, session)
            res.max_tokens = asked[i % len(asked)] if asked else None
            results.append((stream, res))
            if on_done is not None:
                on_done(res)

    async with _session() as session:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(k, session) for k in range(min(width, n_requests))))
        wall = time.monotonic() - t0
    return results, wall


async def _open_loop(requests: Sequence[_Request], offsets: Sequence[float], deadline_s: float,
                     stall_s: float | None, asked: Sequence[int], on_done: Callable[[RequestResult], None] | None,
                     ) -> tuple[list[tuple[float, RequestResult]], float]:
    """Each request sent at its offset after the start, whatever the earlier ones are doing; each ends
    by ``deadline_s`` after the start at the latest: ([(the time it was due, result)], wall seconds)."""
    results: list[tuple[float, RequestResult]] = []

    async def one(i: int, t0: float, session: aiohttp.ClientSession) -> None:
        due = t0 + offsets[i]
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        res = await _astream(requests[i], t0 + deadline_s - time.monotonic(), stall_s, session)
        res.max_tokens = asked[i]
        results.append((due, res))
        if on_done is not None:
            on_done(res)

    async with _session() as session:
        t0 = time.monotonic()
        await asyncio.gather(*(one(i, t0, session) for i in range(len(requests))))
        wall = time.monotonic() - t0
    return results, wall


def run_open_loop(base_url: str, model: str, prompts: Sequence[str], output_tokens: Sequence[int],
                  offsets: Sequence[float], *, deadline_s: float, stall_s: float | None = None,
                  extra: dict[str, Any] | None = None, on_done: Callable[[RequestResult], None] | None = None,
                  lag: LoopLag | None = None) -> tuple[list[tuple[float, RequestResult]], float]:
    """An open-loop load: the i-th of ``prompts`` (asking ``output_tokens[i]``) sent ``offsets[i]``
    seconds after the start whether or not earlier requests have finished (a server slower than the
    rate queues them, as production traffic does), all on one asyncio event loop of the calling
    thread through one session, timed as ``stream_completion`` times a request; a request not done
    ``deadline_s`` after the start ends as a timeout. ([(monotonic time it was due, RequestResult)]
    in the order they ended, wall seconds); a result's ``t_start`` minus its due time is how late the
    client sent it. ``lag``: records how late that loop ran meanwhile (``node.looplag``)."""
    if not (len(prompts) == len(output_tokens) == len(offsets)):
        raise ValueError("one output length and one offset per prompt")
    requests = [_request(base_url, "/v1/completions", _completion_body(model, p, int(n), 0.0, True, extra))
                for p, n in zip(prompts, output_tokens)]
    work = _open_loop(requests, offsets, deadline_s, stall_s, [int(n) for n in output_tokens], on_done)
    return asyncio.run(lag.watching(work) if lag is not None else work)


def _median(samples: list[float]) -> float | None:
    return statistics.median(samples) if samples else None


def _summary(results: list[RequestResult], concurrency: int, n_requests: int, wall: float) -> dict[str, Any]:
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    total = sum(r.n_tokens for r in good)
    tpots = [r.tpot_s for r in good if r.tpot_s]
    errors: list[str] = []
    for r in bad:
        if r.error not in errors and len(errors) < 5:
            errors.append(r.error or "?")
    return {
        "concurrency": concurrency,
        "n_requests": n_requests,
        "ok_requests": len(good),
        "failures": len(bad),
        "timeouts": sum(1 for r in bad if r.timed_out),
        "stalls": sum(1 for r in bad if r.stalled),
        "errors": errors,
        "total_tokens": total,
        "wall_s": wall,
        "total_tok_s": total / wall if wall > 0 else None,
        "tpot_s": _median(tpots),
        "decode_tok_s": (1.0 / tpot) if (tpot := _median(tpots)) is not None else None,
        "ttft_s": _median([r.ttft_s for r in good if r.ttft_s is not None]),
    }


def run_streams(base_url: str, model: str, prompts: Sequence[str], output_tokens: int | Sequence[int],
                concurrency: int, n_requests: int, *, timeout_s: float, stall_s: float | None = None,
                extra: dict[str, Any] | None = None,
                on_done: Callable[[RequestResult], None] | None = None, lag: LoopLag | None = None,
                ) -> tuple[list[tuple[int, RequestResult]], float]:
    """``n_requests`` streamed completions, ``concurrency`` streams at a time in a closed loop, all
    on one asyncio event loop of the calling thread (which must not be running one), through
    ``prompts`` in turn, each asking ``output_tokens`` (one length, or one per prompt): ([(stream
    index, RequestResult)], wall seconds). ``on_done`` is called with each finished request (on
    that loop: keep it quick). ``lag``: records how late that loop ran meanwhile (``node.looplag``)."""
    lengths = [int(output_tokens)] * len(prompts) if isinstance(output_tokens, int) else [int(n) for n in output_tokens]
    requests = [_request(base_url, "/v1/completions", _completion_body(model, p, lengths[i % len(lengths)], 0.0,
                                                                       True, extra))
                for i, p in enumerate(prompts)]
    work = _streams(requests, timeout_s, max(1, int(concurrency)), max(1, int(n_requests)), stall_s, on_done,
                    [lengths[i % len(lengths)] for i in range(len(prompts))])
    return asyncio.run(lag.watching(work) if lag is not None else work)


def measure_concurrency(
    base_url: str,
    model: str,
    prompt: str | Sequence[str],
    output_tokens: int,
    concurrency: int,
    *,
    n_requests: int | None = None,
    timeout_s: float,
    extra: dict[str, Any] | None = None,
    stall_s: float | None = None,
) -> dict[str, Any]:
    """``concurrency`` simultaneous streams until ``n_requests`` are done.

    ``timeout_s`` bounds each request; a read of one that waits longer than ``stall_s`` ends
    it as stalled (counted in ``stalls``). Returns total output tok/s (tokens of successful
    requests / wall time), per-request medians of TPOT, decode tok/s (1/TPOT) and TTFT,
    and the failure count with up to five distinct errors.

    The requests are those of ``stream_completion`` (greedy, ``ignore_eos``, usage
    included, ``extra`` merged in), all on one asyncio event loop of the calling thread
    (which must not be running one): one thread stamps every token, however many streams.
    ``prompt``: one prompt, or a set that the requests go through in turn.
    """
    concurrency = max(1, int(concurrency))
    if n_requests is None:
        n_requests = max(concurrency, min(2 * concurrency, concurrency + 256))
    n_requests = max(1, int(n_requests))
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    streamed, wall = run_streams(base_url, model, prompts, output_tokens, concurrency, n_requests, timeout_s=timeout_s,
                                 stall_s=stall_s, extra=extra)
    return _summary([res for _, res in streamed], concurrency, n_requests, wall)


# --------------------------------------------------------------------------------------
# Outputs for the correctness gate
# --------------------------------------------------------------------------------------
async def _apost_json(session: aiohttp.ClientSession, base_url: str, body: dict[str, Any],
                      timeout_s: float) -> tuple[int, Any]:
    """POST /v1/completions, non-streamed: (status, parsed JSON or raw text); ``RequestFailed`` when
    the server could not be asked (connection, ``timeout_s`` passed)."""
    req = _request(base_url, "/v1/completions", body)

    async def exchange() -> tuple[int, bytes]:
        async with session.post(req.url, data=req.body) as resp:
            return resp.status, await resp.read()

    try:
        status, raw = await asyncio.wait_for(exchange(), max(0.0, timeout_s))
    except asyncio.TimeoutError:
        raise RequestFailed(TIMEOUT) from None
    except Exception as exc:
        raise RequestFailed(_classify(exc, False)) from exc
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


async def _posts_json(base_url: str, bodies: Sequence[dict[str, Any]],
                      timeout_s: float) -> list[tuple[int, Any] | RequestFailed]:
    """Each body POSTed in turn through one session, ``timeout_s`` each: its answer, or why not."""
    out: list[tuple[int, Any] | RequestFailed] = []
    async with _session() as session:
        for body in bodies:
            try:
                out.append(await _apost_json(session, base_url, body, timeout_s))
            except RequestFailed as exc:
                out.append(exc)
    return out


def _post_json(base_url: str, body: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
    """One ``_apost_json`` on an event loop of its own."""
    got = asyncio.run(_posts_json(base_url, [body], timeout_s))[0]
    if isinstance(got, RequestFailed):
        raise got
    return got


def greedy_outputs(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    timeout_s: float,
    *,
    extra: dict[str, Any] | None = None,
    top_logprobs: int | None = None,
) -> list[dict[str, Any]]:
    """Greedy, fixed-length, non-streamed completions, one per prompt, in order.

    Each item: ``prompt``, ``ok``, ``error``, ``text``, ``token_ids`` (``choices[0].
    token_ids`` when the server returns them, else None; vLLM needs
    ``extra={"return_token_ids": True}``), ``finish_reason``, ``n_tokens``, and with
    ``top_logprobs=k`` the generated ``tokens`` (text pieces) and, per token, the
    server's ``top`` k candidates ({piece: log-probability}; None where not returned).
    ``timeout_s`` bounds each request; all go through one session, one after another. Failures
    are items with ``ok=False``.
    """
    bodies = []
    for prompt in prompts:
        body: dict[str, Any] = {
            "model": model, "prompt": prompt, "max_tokens": int(max_tokens),
            "temperature": 0.0, "ignore_eos": True, "stream": False,
        }
        if top_logprobs:
            body["logprobs"] = int(top_logprobs)
        body.update(extra or {})
        bodies.append(body)
    out = []
    for prompt, answer in zip(prompts, asyncio.run(_posts_json(base_url, bodies, timeout_s))):
        item: dict[str, Any] = {
            "prompt": prompt, "ok": False, "error": None, "text": None,
            "token_ids": None, "finish_reason": None, "n_tokens": None,
        }
        if isinstance(answer, RequestFailed):
            item["error"] = str(answer)
            out.append(item)
            continue
        status, data = answer
        if status != 200:
            reply = json.dumps(data).encode() if not isinstance(data, str) else data.encode()
            item["error"] = _http_error(status, reply)
        else:
            try:
                choice = data["choices"][0]
                item["text"] = choice.get("text") or ""
                ids = choice.get("token_ids")
                item["token_ids"] = [int(t) for t in ids] if isinstance(ids, list) else None
                item["finish_reason"] = choice.get("finish_reason")
                usage = data.get("usage") or {}
                item["n_tokens"] = usage.get("completion_tokens")
                if top_logprobs:
                    item.update(_generated_tops(choice.get("logprobs")))
                item["ok"] = True
            except (KeyError, IndexError, TypeError, AttributeError, ValueError):
                item["error"] = _one_line(f"malformed response: {str(data)[:200]}")
        out.append(item)
    return out


def _generated_tops(lp: Any) -> dict[str, Any]:
    """``tokens`` and ``top`` of a completion's ``logprobs`` object (empty when absent)."""
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        return {"tokens": None, "top": None}
    tops = lp.get("top_logprobs")
    if not isinstance(tops, list) or len(tops) != len(lp["tokens"]):
        tops = [None] * len(lp["tokens"])
    clean = [{str(k): float(v) for k, v in t.items() if v is not None} if isinstance(t, dict) else None
             for t in tops]
    return {"tokens": [str(t) for t in lp["tokens"]], "top": clean}


def score_continuation(
    base_url: str,
    model: str,
    prompt: str,
    continuation: str,
    timeout_s: float,
    *,
    extra: dict[str, Any] | None = None,
) -> list[float] | None:
    """Log-probabilities the server assigns to the tokens of ``continuation`` after
    ``prompt`` (``echo: true, logprobs: 1, max_tokens: 1``).

    Tokens whose ``text_offset`` lies inside the continuation are returned; offsets are
    aligned on the one generated token (which starts at the end of the echoed text), so
    a BOS string the server prepends does not shift the split. A token that straddles
    the prompt/continuation boundary is left out. Returns None when the server does not
    support echo+logprobs (4xx, or no usable ``logprobs`` in the answer); raises
    ``RequestFailed`` when it could not be asked (connection, timeout, 5xx).
    """
    full = prompt + continuation
    body = {
        "model": model, "prompt": full, "max_tokens": 1, "temperature": 0.0,
        "echo": True, "logprobs": 1, "stream": False, "ignore_eos": True,
    }
    body.update(extra or {})
    status, data = _post_json(base_url, body, timeout_s)
    if status >= 500:
        raise RequestFailed(_one_line(f"HTTP {status}: {str(data)[:200]}"))
    if status != 200 or not isinstance(data, dict):
        return None
    try:
        lp = data["choices"][0]["logprobs"]
        offsets = [int(o) for o in lp["text_offset"]]
        values = lp["token_logprobs"]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if not offsets or len(offsets) != len(values):
        return None
    # The last token is the generated one; it starts where the echoed text ends.
    shift = offsets[-1] - len(full)
    lo, hi = len(prompt) + shift, len(full) + shift
    picked = [values[i] for i in range(len(offsets) - 1) if lo <= offsets[i] < hi]
    if continuation and not picked:
        return None  # no echo: only the generated token came back
    if any(v is None for v in picked):
        return None
    return [float(v) for v in picked]
