"""OpenAI-compatible HTTP front end of rank 0 (standard library only).

``GET /health`` (503 until the weights are built and a warm-up step ran, then 200),
``GET /v1/models``, ``GET /info`` (this server's settings and engine counters) and
``POST /v1/completions`` with vLLM's response shapes: a ``text_completion`` object, or
with ``stream: true`` one ``data: {...}`` line per token and ``data: [DONE]``. A bad
request is answered 400 ``{"error": {"message", "type", "code"}}`` and nothing else
changes. ``echo`` + ``logprobs`` with ``max_tokens`` 0 scores a text (OpenAI format).

Request fields: ``model``, ``prompt`` (text, which gets a BOS token, or a list of token
ids, used as given), ``max_tokens`` (default 16), ``temperature`` (default 1.0 as in
OpenAI; 0 is greedy), ``seed``, ``ignore_eos``, ``stream``, ``stream_options.include_usage``,
``echo``, ``logprobs`` (0-20). ``top_p``/``top_k`` are type-checked and ignored; ``n`` > 1
and ``stop`` are refused with 400; other unknown fields are ignored. With ``echo`` and
``stream`` the prompt comes as one extra first chunk.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from orchestrator.refserver.request import LogprobEntry, Request
from orchestrator.refserver.tokenizer import ByteTokenizer

if TYPE_CHECKING:  # engine imports torch; the HTTP socket is bound before that
    from orchestrator.refserver.engine import Engine

MAX_BODY = 16 * 1024 * 1024
MAX_LOGPROBS = 20


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "BadRequestError"):
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_


class App:
    """What the handlers need: the engine, the tokenizer, names, limits, fault hooks."""

    def __init__(self, *, model_name: str, vocab: int, max_len: int, info: dict[str, Any],
                 crash_after: int | None = None, on_crash=None):
        self.model_name = model_name
        self.vocab = vocab
        self.max_len = max_len
        self.info = info
        self.tokenizer = ByteTokenizer(vocab)
        self.engine: Engine | None = None
        self.created = int(time.time())
        self.crash_after = crash_after
        self.on_crash = on_crash
        self._served = 0
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.engine.ready.is_set()

    def served_one(self) -> None:
        with self._lock:
            self._served += 1
            n = self._served
        if self.crash_after is not None and n >= self.crash_after and self.on_crash:
            self.on_crash(f"fault crash-after: served {n} requests, exiting")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, host: str, port: int, app: App):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.app = app
        super().__init__((host, port), Handler)

    def handle_error(self, request, client_address) -> None:
        """A client that went away is normal; anything else is one line on stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        sys.stderr.write(f"[refserver rank0] error serving {client_address}: {exc!r}\n")


# ---- request validation -----------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _get(body: dict, key: str, check, what: str, default=None):
    value = body.get(key)
    if value is None:
        return default
    if not check(value):
        raise ApiError(400, f"{key} must be {what}, got {json.dumps(value)[:80]}")
    return value


def parse_completion(body: Any, app: App) -> tuple[Request, dict[str, Any]]:
    """Validate a /v1/completions body: (engine request, response options) or ApiError."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = _get(body, "model", lambda v: isinstance(v, str), "a string")
    if model is not None and model != app.model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        ids = app.tokenizer.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < app.vocab]
        if bad:
            raise ApiError(400, f"prompt token id {bad[0]} outside the vocab 0..{app.vocab - 1}")
        ids = list(prompt)
    else:
        raise ApiError(400, "prompt must be a string or a non-empty list of token ids "
                            "(one prompt per request)")
    echo = _get(body, "echo", lambda v: isinstance(v, bool), "a boolean", False)
    max_tokens = _get(body, "max_tokens", _is_int, "an integer", 16)
    if max_tokens < (0 if echo else 1):
        raise ApiError(400, f"max_tokens must be >= {0 if echo else 1}"
                            f"{'' if echo else ' (0 only with echo)'}, got {max_tokens}")
    temperature = _get(body, "temperature", lambda v: _is_num(v) and v >= 0,
                       "a number >= 0", 1.0)
    _get(body, "top_p", lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]")
    _get(body, "top_k", _is_int, "an integer")
    seed = _get(body, "seed", _is_int, "an integer")
    n = _get(body, "n", _is_int, "an integer", 1)
    if n != 1:
        raise ApiError(400, f"n must be 1 on the reference server, got {n}")
    stop = body.get("stop")
    if stop not in (None, [], ""):
        raise ApiError(400, "stop is not supported by the reference server; leave it out")
    ignore_eos = _get(body, "ignore_eos", lambda v: isinstance(v, bool), "a boolean", False)
    stream = _get(body, "stream", lambda v: isinstance(v, bool), "a boolean", False)
    opts = _get(body, "stream_options", lambda v: isinstance(v, dict), "an object", {})
    include_usage = _get(opts, "include_usage", lambda v: isinstance(v, bool), "a boolean", False)
    logprobs = _get(body, "logprobs", lambda v: _is_int(v) and 0 <= v <= MAX_LOGPROBS,
                    f"an integer in 0..{MAX_LOGPROBS}")
    total = len(ids) + max_tokens
    if total > app.max_len:
        raise ApiError(400, f"This model's maximum context length is {app.max_len} tokens. "
                            f"However, you requested {total} tokens ({len(ids)} in the "
                            f"prompt, {max_tokens} for the completion).")
    req = Request(prompt=ids, max_tokens=max_tokens, temperature=float(temperature), seed=seed,
                  ignore_eos=ignore_eos, logprobs=logprobs,
                  prompt_logprobs=bool(echo and logprobs is not None))
    options = {"echo": echo, "stream": stream, "include_usage": include_usage,
               "logprobs": logprobs}
    return req, options


# ---- responses ----------------------------------------------------------------------------

class _Logprobs:
    """Accumulates the OpenAI completions ``logprobs`` object."""

    def __init__(self, tokenizer: ByteTokenizer, offset: int = 0):
        self.tok = tokenizer
        self.offset = offset
        self.data: dict[str, list] = {"text_offset": [], "token_logprobs": [], "tokens": [],
                                      "top_logprobs": []}

    def add(self, token: int, entry: LogprobEntry | None) -> None:
        piece = self.tok.piece(token)
        self.data["tokens"].append(piece)
        self.data["text_offset"].append(self.offset)
        self.offset += len(piece)
        if entry is None:
            self.data["token_logprobs"].append(None)
            self.data["top_logprobs"].append(None)
            return
        _, lp, top = entry
        tops = {self.tok.piece(t): v for t, v in top}
        tops.setdefault(piece, lp)
        self.data["token_logprobs"].append(lp)
        self.data["top_logprobs"].append(tops)

    def take(self) -> dict[str, list]:
        out = self.data
        self.data = {k: [] for k in out}
        return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ncclsweep-refserver"
    server: Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet access log
        pass

    # ---- plumbing ---------------------------------------------------------------------
    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, err: ApiError) -> None:
        self._send_json(err.status, {"error": {"message": err.message, "type": err.type,
                                               "code": err.status}})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    # ---- routes -----------------------------------------------------------------------
    def do_GET(self) -> None:
        app = self.server.app
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if app.ready:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._send_error(ApiError(503, "server is starting", "ServiceUnavailable"))
        elif path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{
                "id": app.model_name, "object": "model", "created": app.created,
                "owned_by": "ncclsweep", "root": app.model_name, "parent": None,
                "max_model_len": app.max_len}]})
        elif path == "/info":
            info = dict(app.info)
            if app.engine is not None:
                info["stats"] = dict(app.engine.stats)
            info["ready"] = app.ready
            self._send_json(200, info)
        else:
            self._send_error(ApiError(404, f"no route GET {path}", "NotFoundError"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            body = self._read_json()
            if path != "/v1/completions":
                raise ApiError(404, f"no route POST {path}", "NotFoundError")
            app = self.server.app
            if not app.ready:
                raise ApiError(503, "server is starting", "ServiceUnavailable")
            req, opts = parse_completion(body, app)
        except ApiError as err:
            self._send_error(err)
            return
        assert app.engine is not None  # ready: the engine is up
        app.engine.submit(req)
        try:
            ok = self._stream(req, opts) if opts["stream"] else self._complete(req, opts)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            req.cancelled = True
            self.close_connection = True
            return
        if ok:
            app.served_one()

    def _read_json(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise ApiError(400, "a JSON body with Content-Length is required")
        n = int(length)
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(400, f"body of {n} bytes exceeds {MAX_BODY}")
        raw = self.rfile.read(n)
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"invalid JSON: {exc}") from None

    def _head(self, req_id: str) -> dict[str, Any]:
        app = self.server.app
        return {"id": req_id, "object": "text_completion", "created": int(time.time()),
                "model": app.model_name}

    def _complete(self, req: Request, opts: dict[str, Any]) -> bool:
        tok = self.server.app.tokenizer
        text = tok.decode(req.prompt) if opts["echo"] else ""
        lps = _Logprobs(tok) if opts["logprobs"] is not None else None
        finish, n_gen = None, 0
        while finish is None:
            event = req.out.get()
            kind = event[0]
            if kind == "error":
                self._send_error(ApiError(500, event[1], "InternalServerError"))
                return False
            if kind == "prompt":
                if lps is not None:
                    for token, entry in zip(req.prompt, event[1], strict=True):
                        lps.add(token, entry)
            elif kind == "done":
                finish = event[1]
            else:
                _, token, entry, finish = event
                n_gen += 1
                text += tok.piece(token)
                if lps is not None:
                    lps.add(token, entry)
        usage = {"prompt_tokens": len(req.prompt), "completion_tokens": n_gen,
                 "total_tokens": len(req.prompt) + n_gen}
        body = self._head(f"cmpl-{uuid.uuid4().hex}")
        body["choices"] = [{"index": 0, "text": text,
                            "logprobs": lps.take() if lps is not None else None,
                            "finish_reason": finish, "stop_reason": None}]
        body["usage"] = usage
        self._send_json(200, body)
        return True

    def _stream(self, req: Request, opts: dict[str, Any]) -> bool:
        tok = self.server.app.tokenizer
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        head = self._head(f"cmpl-{uuid.uuid4().hex}")
        lps = _Logprobs(tok) if opts["logprobs"] is not None else None

        def send(text: str, finish: str | None) -> None:
            chunk = dict(head)
            chunk["choices"] = [{"index": 0, "text": text,
                                 "logprobs": lps.take() if lps is not None else None,
                                 "finish_reason": finish, "stop_reason": None}]
            chunk["usage"] = None
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        finish, n_gen = None, 0
        if opts["echo"] and not req.prompt_logprobs:  # else sent with the "prompt" event
            send(tok.decode(req.prompt), None)
        while finish is None:
            event = req.out.get()
            kind = event[0]
            if kind == "error":
                self._chunk(b"data: " + json.dumps({"error": {
                    "message": event[1], "type": "InternalServerError", "code": 500}}).encode()
                    + b"\n\n")
                break
            if kind == "prompt":
                assert lps is not None  # prompt entries come only when logprobs were asked for
                for token, entry in zip(req.prompt, event[1], strict=True):
                    lps.add(token, entry)
                send(tok.decode(req.prompt), None)
            elif kind == "done":
                finish = event[1]
                send("", finish)
            else:
                _, token, entry, finish = event
                n_gen += 1
                if lps is not None:
                    lps.add(token, entry)
                send(tok.piece(token), finish)
        if finish is not None and opts["include_usage"]:
            usage = dict(head)
            usage["choices"] = []
            usage["usage"] = {"prompt_tokens": len(req.prompt), "completion_tokens": n_gen,
                              "total_tokens": len(req.prompt) + n_gen}
            self._chunk(b"data: " + json.dumps(usage).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        return finish is not None
