"""Helpers for the reference-server tests: a server process owned by a test, HTTP calls.

A ``RefServer`` runs in its own session (like the tuner starts servers); ``stop()`` TERMs
the whole group, waits, KILLs and reaps, and is safe to call twice. ``group_alive`` looks
in /proc for live (non-zombie) members of a process group.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = ["--model", "tiny", "--max-model-len", "256"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        state, pg = fields[0], int(fields[2])
        if pg == pgid and state not in ("Z", "X"):
            out.append(int(entry))
    return out


def wait_group_gone(pgid: int, timeout_s: float) -> list[int]:
    """Wait until group ``pgid`` has no live member; returns what is left (empty: gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


class RefServer:
    def __init__(self, args: list[str], log_dir: Path, name: str = "server",
                 env: dict[str, str] | None = None):
        self.port = free_port()
        self.args = args
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_dir / f"{name}-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self._stopped = False

    def start(self) -> RefServer:
        cmd = [sys.executable, "-m", "orchestrator.refserver", "--port", str(self.port),
               *self.args]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     env=self.env)
        return self

    @property
    def pgid(self) -> int:
        return self.proc.pid  # session leader: pgid == pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int | None:
        """HTTP status of /health, None when the port is closed."""
        try:
            status, _ = get(self.port, "/health", timeout=2)
            return status
        except (OSError, http.client.HTTPException):  # closed port, or a server dying mid-answer
            return None

    def wait_healthy(self, timeout_s: float = 45.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}:\n{self.log()}")
            if self.health() == 200:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise AssertionError(f"not healthy after {timeout_s}s:\n{self.log()}")

    def stop(self, grace_s: float = 5.0) -> None:
        """TERM the group, wait, KILL what is left of it, reap. Idempotent."""
        if self.proc is None or self._stopped:
            return
        self._stopped = True
        try:
            os.killpg(self.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.returncode is None or wait_group_gone(self.pgid, 1.0):
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._log.close()


def get(port: int, path: str, timeout: float = 30) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post(port: int, body, timeout: float = 60) -> tuple[int, dict]:
    """POST /v1/completions; ``body`` a dict (sent as JSON) or raw bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def stream(port: int, body: dict, timeout: float = 60) -> list:
    """POST a streamed completion; the parsed ``data:`` payloads ("[DONE]" kept as a str)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        events = []
        for line in resp:
            if line.strip() == b"":
                continue
            assert line.startswith(b"data: "), line
            payload = line[6:].strip()
            events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
        return events
    finally:
        conn.close()


def greedy(port: int, prompt, n: int = 24) -> dict:
    status, body = post(port, {"prompt": prompt, "max_tokens": n, "temperature": 0,
                               "ignore_eos": True})
    assert status == 200, body
    return body


FAULT_BASE = [*TINY, "--max-batch", "4", "--threads", "1"]  # small servers for the fault tests


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


# The CUDA path (skipped without a GPU). float32 is used where outputs are compared: TF32 is
# off for matmuls by default, so a summation-order change (TP, graph padding) keeps every
# greedy token as on CPU. In bf16 greedy text across configurations may part after a dozen
# tokens (see docs/benchmarks.md).
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_PROTO": "Simple",
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


def cuda_devices() -> int:
    torch = pytest.importorskip("torch")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def tp_max() -> int:
    return min(2, cuda_devices())


def on_cuda(test):
    """A test of the server's CUDA path: marked gpu and slow, 240 s, skipped without a CUDA GPU."""
    for mark in (pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240),
                 pytest.mark.skipif(cuda_devices() == 0, reason="needs a CUDA GPU")):
        test = mark(test)
    return test

