"""A test server whose speed depends on how many requests are in flight, and on a knob.

The shape issue 24 measured on a real vLLM (graphs captured up to 8 win for one request
and are no faster than eager at 10): with ``LOAD_MODE=solo`` the server runs one decode
lane that every stream shares (fast for one request, the same total tok/s however many are
in flight); with ``LOAD_MODE=batch`` it batches the streams in flight into each step (a
slower step for one request, far more total tok/s with several). ``LOAD_OVERHEAD_MS`` adds
that much to every step (slower at every level). Both come from the environment, as the
command backend passes a config's ``env.*`` parameters.

    solo:   every stream's next token after step_ms x (streams in flight)
    batch:  every stream's next token after 2 x step_ms x (1 + 0.05 x (streams in flight - 1))
    (plus LOAD_OVERHEAD_MS in both)

It speaks the part of the OpenAI completions API the tuner uses: ``GET /health``, ``POST
/v1/completions`` streamed (one token per chunk, the usage chunk when asked, ``[DONE]``) and
not streamed (deterministic greedy text, the same in every mode: the correctness gate
passes), fixed length with ``ignore_eos``.

    LOAD_MODE=batch python tests/e2e/load_server.py --port 8000 --step-ms 4
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def word(prompt: str, i: int) -> str:
    """The i-th generated token of a prompt: deterministic, the same in every mode."""
    h = int.from_bytes(hashlib.sha1(f"{prompt}\x00{i}".encode()).digest()[:4], "big")
    return f" w{h % 1000}"


class Load:
    """The streams in flight and the step time they make (module docstring)."""

    def __init__(self, mode: str, step_s: float, overhead_s: float):
        self.mode, self.step_s, self.overhead_s = mode, step_s, overhead_s
        self.active = 0
        self.lock = threading.Lock()

    def step(self) -> float:
        with self.lock:
            n = max(1, self.active)
        if self.mode == "solo":
            return self.step_s * n + self.overhead_s
        return 2 * self.step_s * (1 + 0.05 * (n - 1)) + self.overhead_s


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def _json(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})  # type: ignore[attr-defined]
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "invalid JSON body"}})
            return
        if self.path != "/v1/completions" or body.get("model") != self.server.model:  # type: ignore[attr-defined]
            self._json(404, {"error": {"message": "not found"}})
            return
        prompt, n = str(body.get("prompt", "")), int(body.get("max_tokens") or 16)
        if not body.get("ignore_eos"):
            n = min(n, 8)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n,
                 "total_tokens": len(prompt.split()) + n}
        if not body.get("stream"):
            text = "".join(word(prompt, i) for i in range(n))
            self._json(200, {"id": "cmpl-load", "object": "text_completion", "model": body["model"],
                             "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
                             "usage": usage})
            return
        try:
            self._stream(body, prompt, n, usage)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _stream(self, body: dict, prompt: str, n: int, usage: dict) -> None:
        load: Load = self.server.load  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": "cmpl-load", "object": "text_completion", "model": body["model"]}
        with load.lock:
            load.active += 1
        try:
            due = time.monotonic()
            for i in range(n):
                due += load.step()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                choice = {"index": 0, "text": word(prompt, i), "logprobs": None,
                          "finish_reason": "length" if i == n - 1 else None}
                self._chunk(f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode())
        finally:
            with load.lock:
                load.active -= 1
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk(f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="load")
    p.add_argument("--step-ms", type=float, default=4.0)
    a = p.parse_args(argv)
    mode = os.environ.get("LOAD_MODE", "solo")
    if mode not in ("solo", "batch"):
        print(f"load server: LOAD_MODE must be solo or batch, not {mode!r}", file=sys.stderr)
        return 2
    httpd = _Server((a.host, a.port), Handler)
    httpd.model = a.model  # type: ignore[attr-defined]
    httpd.load = Load(mode, a.step_ms / 1000.0, float(os.environ.get("LOAD_OVERHEAD_MS", "0")) / 1000.0)  # type: ignore[attr-defined]
    print(f"load server ({mode}) listening on {a.host}:{a.port}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
