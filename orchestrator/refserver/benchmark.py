"""Benchmark of the reference server on this machine (the numbers in docs/benchmarks.md).

    python -m orchestrator.refserver.benchmark [--repeats 3] [--tokens 128]
    python -m orchestrator.refserver.benchmark --common "--device cuda --model 8b" \
        --config "--tp 1" --config "--tp 1 --graph-capture" --log-dir /tmp/logs

By default the configurations are tiny on CPU at TP=1 with 1 and 2 threads and TP=2
with 1 thread per rank; ``--config`` (repeatable) replaces them with server flags of your
own, ``--common`` adds flags to every one. For each it starts a fresh server ``--repeats`` times and
records startup-to-healthy (spawn until ``/health`` is 200) and single-request decode
tok/s = (output tokens - 1) / (time of last token - time of first token), streamed,
greedy, ``ignore_eos``, after two warm-up requests; it prints every sample and the
medians as a Markdown table. Servers run in their own process group and are always
killed (TERM, then KILL) and reaped.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time

from orchestrator.refserver import procs
from orchestrator.refserver.procs import free_port

PROMPT = "The quick brown fox jumps over the lazy dog. " * 2


def start(args: list[str], port: int, timeout_s: float = 60.0, log_path: str | None = None):
    """Start a server in a new session; (process, seconds until /health is 200)."""
    cmd = [sys.executable, "-m", "orchestrator.refserver", "--port", str(port), *args]
    t0 = time.monotonic()
    if log_path:
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(cmd, start_new_session=True, stdout=out, stderr=out)
    else:
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {' '.join(cmd)}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                return proc, time.monotonic() - t0
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.05)
    stop(proc)
    raise RuntimeError(f"server not healthy after {timeout_s}s")


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """TERM the server's process group (its ranks are in it: started in a session of its own),
    KILL after ``grace_s``, reap."""
    procs.end_group(proc, grace_s)


def stream_times(port: int, max_tokens: int, prompt: str = PROMPT) -> list[float]:
    """Arrival times of each streamed token of one greedy request."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    times = []
    for line in resp:
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            if json.loads(line[6:])["choices"]:
                times.append(time.monotonic())
    conn.close()
    return times


def decode_tok_s(times: list[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0])


def greedy_text(port: int, prompt: str = PROMPT, max_tokens: int = 24) -> str:
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    text = json.loads(conn.getresponse().read())["choices"][0]["text"]
    conn.close()
    return text


def concurrent_tok_s(port: int, concurrency: int, tokens: int) -> float:
    """Total output tok/s of ``concurrency`` simultaneous streamed requests."""
    done: list[int] = []

    def one() -> None:
        done.append(len(stream_times(port, tokens)))

    threads = [threading.Thread(target=one) for _ in range(concurrency)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


def measure(args: list[str], repeats: int, tokens: int, timeout_s: float = 60.0,
            log_path: str | None = None, concurrency: tuple[int, ...] = ()) -> dict:
    startups, rates, texts = [], [], []
    conc: dict[int, float] = {}
    for _ in range(repeats):
        port = free_port()
        proc, startup = start(args, port, timeout_s, log_path)
        try:
            startups.append(startup)
            for _ in range(2):
                stream_times(port, 16)
            for _ in range(3):
                rates.append(decode_tok_s(stream_times(port, tokens)))
            texts.append(greedy_text(port))
            for c in concurrency:
                conc[c] = concurrent_tok_s(port, c, tokens)
        finally:
            stop(proc)
    return {"args": args, "startup_s": startups, "decode_tok_s": rates, "greedy": texts,
            "concurrency_tok_s": conc}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.refserver.benchmark")
    p.add_argument("--model", default="tiny")
    p.add_argument("--repeats", type=int, default=3, help="server starts per configuration")
    p.add_argument("--tokens", type=int, default=128, help="output tokens per request")
    p.add_argument("--config", action="append", default=None,
                   help="server flags of one configuration (repeatable)")
    p.add_argument("--common", default="", help="server flags added to every configuration")
    p.add_argument("--startup-timeout", type=float, default=120.0)
    p.add_argument("--log-dir", default=None, help="keep each configuration's server log here")
    p.add_argument("--concurrency", default="",
                   help="also total output tok/s at these concurrencies, e.g. 1,10,64")
    p.add_argument("--json", default=None, help="also write every sample to this JSON file")
    a = p.parse_args(argv)
    configs = a.config or [f"--model {a.model} --tp 1 --threads 1",
                           f"--model {a.model} --tp 1 --threads 2",
                           f"--model {a.model} --tp 2 --threads 1"]
    print("| server flags | startup to healthy, s (median; samples) | decode tok/s "
          "(median; samples) |\n|---|---|---|", flush=True)
    results = []
    for i, config in enumerate(configs):
        args = [*shlex.split(config), *shlex.split(a.common)]
        log_path = os.path.join(a.log_dir, f"server-{i}.log") if a.log_dir else None
        try:
            conc = tuple(int(c) for c in a.concurrency.split(",") if c)
            r = measure(args, a.repeats, a.tokens, a.startup_timeout, log_path, conc)
        except RuntimeError as exc:
            print(f"| `{shlex.join(args)}` | failed: {exc} | |", flush=True)
            continue
        results.append(r)
        st = ", ".join(f"{x:.2f}" for x in r["startup_s"])
        rt = ", ".join(f"{x:.0f}" for x in r["decode_tok_s"])
        print(f"| `{shlex.join(args)}` | {statistics.median(r['startup_s']):.2f} ({st}) | "
              f"{statistics.median(r['decode_tok_s']):.1f} ({rt}) |", flush=True)
    for r in results:
        print(f"greedy {shlex.join(r['args'])}: {r['greedy'][0]!r}")
        if r["concurrency_tok_s"]:
            print("  total output tok/s by concurrency: " + ", ".join(
                f"{c}: {v:.0f}" for c, v in r["concurrency_tok_s"].items()))
    if a.json:  # whole or absent: a temporary file beside it, flushed, then renamed
        tmp = f"{a.json}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(results, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, a.json)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
