"""The concurrency client side by side: a thread per stream (``measure_concurrency``
before issue 18) against one asyncio event loop (``measure_concurrency`` now), on the
same server process (docs/benchmarks.md, "The concurrency client").

    python docs/client_bench.py --server fake --token-delay 0.02 --tokens 50 --repeats 5
    python docs/client_bench.py --server refserver --tokens 32 --repeats 3

``fake`` is tests/fake_openai_server.py, which schedules each stream's tokens at a fixed
delay, so every request's true decode rate is 1 / delay; ``refserver`` is
``python -m orchestrator.refserver --model tiny --device cpu`` (a real engine). The server
is started once, as the tool starts one (``ServerProcess``), warmed up, then at each
concurrency level each repeat runs both clients back to back, alternating which goes
first. Each run is ``2 x level`` requests (``measure_concurrency``'s default) and
reports its summary plus the client process's CPU seconds and context switches
(``getrusage(RUSAGE_SELF)``: every thread) and its most threads (/proc, sampled every
50 ms). Against the fake server each token's text also carries the server's
``time.monotonic()`` at sending (its ``stamp`` knob; one clock on one host), so the
client's stamping delay (its arrival stamp minus that) is measured per token (median and
99th percentile over a run's tokens), and the client's per-stream decode rate is set
against the one the server really sent at (1 / median of (last send - first send) /
(n - 1)): the median and the worst relative error over the repeats. The asyncio
client's one thread also records how long it waited for a CPU
(/proc/thread-self/schedstat; in the JSON). The table shows medians over the repeats;
``--json`` keeps every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.core.launch import LaunchSpec  # noqa: E402
from orchestrator.node import client  # noqa: E402
from orchestrator.node.server import ServerProcess, free_port  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. " * 2


def threaded(url: str, model: str, tokens: int, width: int, n: int, timeout_s: float, extra: dict | None):
    """``measure_concurrency`` before issue 18: one thread per stream, each request a
    ``stream_completion`` (whose watchdog is a timer thread): (results, wall seconds)."""
    results: list[client.RequestResult] = []
    lock = threading.Lock()
    next_index = [0]

    def worker() -> None:
        while True:
            with lock:
                if next_index[0] >= n:
                    return
                next_index[0] += 1
            r = client.stream_completion(url, model, PROMPT, tokens, timeout_s, extra=extra)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(width, n))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.monotonic() - t0


def asyncio_loop(url: str, model: str, tokens: int, width: int, n: int, timeout_s: float, extra: dict | None):
    """``measure_concurrency`` now, up to its summary: (results, wall seconds)."""
    body = client._completion_body(model, PROMPT, tokens, 0.0, True, extra)
    target = client._request_bytes(url, "/v1/completions", body)
    return asyncio.run(client._streams(target, timeout_s, width, n))


CLIENTS = {"threads": threaded, "asyncio": asyncio_loop}


def _threads_now() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))


def _pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return xs[round(q * (len(xs) - 1))] if xs else None


def _run_queue_wait() -> float:
    """Seconds this thread has waited on a run queue for a CPU."""
    with open("/proc/thread-self/schedstat") as fh:
        return int(fh.read().split()[1]) / 1e9


def one_run(client: str, url: str, model: str, tokens: int, level: int, timeout_s: float, fake: bool) -> dict:
    n = max(level, min(2 * level, level + 256))
    peak = [_threads_now()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], _threads_now())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    before, wait0 = resource.getrusage(resource.RUSAGE_SELF), _run_queue_wait()
    extra = {"fake": {"stamp": True}} if fake else None
    results, wall = CLIENTS[client](url, model, tokens, level, n, timeout_s, extra)
    after, wait1 = resource.getrusage(resource.RUSAGE_SELF), _run_queue_wait()
    stop.set()
    sampler.join()
    out = client._summary(results, level, n, wall)
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["context_switches"] = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    out["peak_threads"] = peak[0] - 1  # less the sampler
    out["main_thread_run_queue_wait_s"] = wait1 - wait0  # the asyncio client's only thread
    good = [r for r in results if r.ok]
    sent = [[float(x) for x in re.findall(r"@([0-9.]+)", r.text)] for r in good]
    lags = [t - s for r, ss in zip(good, sent) for t, s in zip(r.token_times, ss)]
    out["lag_p50_s"], out["lag_p99_s"] = _pct(lags, 0.5), _pct(lags, 0.99)
    tpots = [(ss[-1] - ss[0]) / (len(ss) - 1) for ss in sent if len(ss) > 1]
    out["server_decode_tok_s"] = 1.0 / statistics.median(tpots) if tpots and statistics.median(tpots) > 0 else None
    return out


def server(kind: str, token_delay: float, log_dir: str) -> ServerProcess:
    """The server, not started yet (``with`` starts and stops it)."""
    port = free_port()
    if kind == "fake":
        argv = [sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--port", str(port),
                "--model", "fake", "--token-delay", str(token_delay)]
    else:
        argv = [sys.executable, "-m", "orchestrator.refserver", "--port", str(port), "--model", "tiny",
                "--device", "cpu"]
    spec = LaunchSpec(argv=argv, host="127.0.0.1", port=port, model_name="fake" if kind == "fake" else "tiny")
    return ServerProcess(spec, Path(log_dir) / f"{kind}-{port}.log")


def _med(rows: list[dict], key: str, scale: float = 1.0) -> float | None:
    vals = [r[key] * scale for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def table(runs: dict, levels: list[int]) -> str:
    def f(x, spec=".0f"):
        return "-" if x is None else format(x, spec)

    lines = ["| c | client | total tok/s | decode tok/s per stream | vs the server's: median (worst) | TTFT ms | "
             "stamp delay ms: median / p99 | client CPU s | context switches | "
             "threads | failures |", "|---" * 11 + "|"]
    for c in levels:
        for kind in CLIENTS:
            rows = runs[str(c)][kind]
            errs = [r["decode_tok_s"] / r["server_decode_tok_s"] - 1 for r in rows
                    if r.get("server_decode_tok_s") and r.get("decode_tok_s")]
            err = (f"{statistics.median(errs):+.1%} ({max(errs, key=abs):+.1%})" if errs else "-")
            lag50, lag99 = _med(rows, "lag_p50_s", 1e3), _med(rows, "lag_p99_s", 1e3)
            lag = "-" if lag50 is None else f"{lag50:.2f} / {lag99:.1f}"
            lines.append(f"| {c} | {kind} | {f(_med(rows, 'total_tok_s'))} | "
                         f"{f(_med(rows, 'decode_tok_s'), '.1f')} | "
                         f"{err} | {f(_med(rows, 'ttft_s', 1e3), '.1f')} | "
                         f"{lag} | {f(_med(rows, 'cpu_s'), '.2f')} | {f(_med(rows, 'context_switches'))} | "
                         f"{max(r['peak_threads'] for r in rows)} | {sum(r['failures'] for r in rows)} |")
        old, new = runs[str(c)]["threads"], runs[str(c)]["asyncio"]
        pairs = [(o, n) for o, n in zip(old, new) if o["total_tok_s"] and n["total_tok_s"] and o["cpu_s"] > 0]
        if pairs:
            tok = statistics.median(n["total_tok_s"] / o["total_tok_s"] for o, n in pairs)
            cpu = statistics.median(n["cpu_s"] / o["cpu_s"] for o, n in pairs)
            lines.append(f"| {c} | asyncio / threads | {tok:.2f}x | | | | | {cpu:.2f}x | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", choices=["fake", "refserver"], default="fake")
    p.add_argument("--token-delay", type=float, default=0.02, help="fake server: seconds per token")
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--levels", default="1,10,64,256")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    p.add_argument("--json", help="write every run here")
    a = p.parse_args(argv)
    levels = [int(x) for x in a.levels.split(",") if x]
    with tempfile.TemporaryDirectory() as log_dir, server(a.server, a.token_delay, log_dir) as sp:
        sp.wait_ready(120, poll_s=0.1)
        url, model, fake = sp.spec.base_url, sp.spec.model_name, a.server == "fake"
        for client in CLIENTS:  # warm-up: the server's first requests, both code paths
            one_run(client, url, model, a.tokens, 2, a.timeout, fake)
        runs: dict = {str(c): {k: [] for k in CLIENTS} for c in levels}
        for c in levels:
            for i in range(a.repeats):
                for client in list(CLIENTS) if i % 2 == 0 else list(CLIENTS)[::-1]:
                    r = one_run(client, url, model, a.tokens, c, a.timeout, fake)
                    runs[str(c)][client].append(r)
                    print(f"c={c} #{i + 1} {client}: {r['total_tok_s'] or 0:.0f} tok/s, decode "
                          f"{r['decode_tok_s'] or 0:.1f}, cpu {r['cpu_s']:.2f} s, {r['peak_threads']} threads, "
                          f"{r['failures']} failed {r['errors'][:1]}", file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": runs}, indent=1))
    print(table(runs, levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
