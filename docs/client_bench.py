"""The benchmark client side by side: the hand-written HTTP/1.1 client (``node/client.py`` before
issue 50, read from git) against the aiohttp one (``node/client.py`` now), on one launch of one
server (docs/benchmarks.md, "The concurrency client").

    python docs/client_bench.py --server refserver --rounds 7
    python docs/client_bench.py --server fake --rounds 7

``refserver`` is ``python -m orchestrator.refserver --model tiny --device cpu`` (a real engine);
``fake`` is tests/fake_openai_server.py, the command stand-in, which sends each stream's tokens
on a fixed schedule (``--token-delay``). The server is started once, as the tool starts one
(``ServerProcess``), and warmed up by both clients; then each round runs both clients back to
back, alternating which goes first, and each client in its turn measures what a trial measures:

- level 1: ``--prompts`` requests one after another through ``stream_completion`` (as
  ``node.measure``'s level 1); the round's sample is the median of their decode tok/s
  (1 / TPOT);
- level 64 (``--streams``): ``run_streams`` with that many streams, two requests each, back to
  back (``node.measure``'s sustained level, ``bench.waves`` 2); the sample is the total tok/s of
  the steady-state window (``core.measurement.steady_window``);
- the client's own cost: this process's CPU time (``getrusage(RUSAGE_SELF)``: the client only,
  the server is another process) per request at each level, and the round trip of a one-token
  request (``--probes`` of them, one after another; the median), whose server work is the same
  for both clients; against the fake server also each token's stamp delay (its ``stamp`` knob
  writes the server's ``time.monotonic()`` at sending into the token: one clock on one host, so
  the client's arrival stamp minus it is the client's own delay; the median over the round's
  tokens).

Each figure is compared as ``compare`` compares configs: the per-round pairs through
``core.verdict.ratio_interval(paired=True)`` (aiohttp / hand-written, 95%), "within noise" unless
the whole interval is on one side of 1.0; beside it, each client's own spread over the rounds
(the within-launch noise: the coefficient of variation of its round samples). ``--json`` keeps
every round.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.core.launch import LaunchSpec  # noqa: E402
from orchestrator.core.measurement import StreamedRequest, steady_window  # noqa: E402
from orchestrator.core.verdict import WITHIN_NOISE, ratio_interval, verdict  # noqa: E402
from orchestrator.node import client as new_client  # noqa: E402
from orchestrator.node.server import ServerProcess, free_port  # noqa: E402

# the last commit whose node/client.py frames HTTP/1.1 by hand (asyncio streams, http.client)
HAND_WRITTEN = "88ce0616b65bc1abb5d198665414aa056f9737f7"
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 2,
    "Once upon a time, in a land far away, there lived",
    "Explain how a transformer computes attention, step by step:",
    "List the first ten prime numbers and say why each is prime:",
]


def load_old(rev: str) -> types.ModuleType:
    """``orchestrator/node/client.py`` as it was at ``rev``, as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:orchestrator/node/client.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("hand_written_client")
    module.__file__ = f"{rev}:orchestrator/node/client.py"
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # the project's own history
    return module


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _lag_ms(results: list) -> float | None:
    """The median of arrival stamp - the fake server's send time over every token (None: no stamps)."""
    lags = [t - float(s) for r in results if r.ok
            for t, s in zip(r.token_times, re.findall(r"@([0-9.]+)", r.text))]
    return 1e3 * statistics.median(lags) if lags else None


def level_one(c: Any, url: str, model: str, tokens: int, n: int, timeout_s: float, extra: dict | None) -> dict:
    cpu0, rates, failed, got = _cpu(), [], [], []
    for i in range(n):
        r = c.stream_completion(url, model, PROMPTS[i % len(PROMPTS)], tokens, timeout_s, extra=extra)
        got.append(r)
        if r.ok and r.decode_tok_s:
            rates.append(r.decode_tok_s)
        else:
            failed.append(r.error or f"decode rate not measurable ({len(r.token_times)} chunks)")
    return {"decode_tok_s": statistics.median(rates) if rates else None,
            "cpu_ms_per_request": 1e3 * (_cpu() - cpu0) / n, "lag_ms": _lag_ms(got), "failures": failed}


def level_n(c: Any, url: str, model: str, tokens: int, streams: int, timeout_s: float, extra: dict | None) -> dict:
    cpu0 = _cpu()
    got, wall = c.run_streams(url, model, PROMPTS, tokens, streams, 2 * streams, timeout_s=timeout_s, extra=extra)
    cpu = _cpu() - cpu0
    good = [(s, r) for s, r in got if r.ok]
    window = steady_window([StreamedRequest(s, r.t_start, r.t_start + (r.latency_s or 0.0), tuple(r.token_times),
                                            r.n_tokens) for s, r in good])
    total = window[0] / window[1] if window and window[1] > 0 else sum(r.n_tokens for _, r in good) / wall
    return {"total_tok_s": total if len(good) == len(got) else None, "cpu_ms_per_request": 1e3 * cpu / len(got),
            "lag_ms": _lag_ms([r for _, r in got]), "failures": [r.error for _, r in got if not r.ok][:3]}


def probes(c: Any, url: str, model: str, n: int, timeout_s: float) -> dict:
    times = []
    for i in range(n):
        t0 = time.monotonic()
        r = c.stream_completion(url, model, PROMPTS[i % len(PROMPTS)], 1, timeout_s)
        if r.ok:
            times.append(time.monotonic() - t0)
    return {"one_token_ms": 1e3 * statistics.median(times) if times else None}


def one_turn(c: Any, url: str, model: str, a: argparse.Namespace) -> dict:
    extra = {"fake": {"stamp": True}} if a.server == "fake" else None
    out = level_one(c, url, model, a.tokens, a.prompts, a.timeout, extra)
    many = level_n(c, url, model, a.tokens, a.streams, a.timeout, extra)
    return {"decode_tok_s": out["decode_tok_s"], "cpu_ms_1": out["cpu_ms_per_request"], "lag_ms_1": out["lag_ms"],
            "total_tok_s": many["total_tok_s"], "cpu_ms_n": many["cpu_ms_per_request"], "lag_ms_n": many["lag_ms"],
            **probes(c, url, model, a.probes, a.timeout), "failures": out["failures"] + many["failures"]}


def server(kind: str, token_delay: float, log_dir: str) -> ServerProcess:
    """The server, not started yet (``with`` starts and stops it)."""
    port = free_port()
    if kind == "fake":
        argv = [sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--port", str(port),
                "--model", "fake", "--token-delay", str(token_delay)]
    else:
        argv = [sys.executable, "-m", "orchestrator.refserver", "--port", str(port), "--model", "tiny",
                "--device", "cpu", "--max-batch", "64"]
    spec = LaunchSpec(argv=argv, host="127.0.0.1", port=port, model_name="fake" if kind == "fake" else "tiny")
    return ServerProcess(spec, Path(log_dir) / f"{kind}-{port}.log")


def _cv(xs: list[float]) -> float | None:
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else None


FIGURES = [("decode tok/s, 1 stream", "decode_tok_s", ".1f"), ("total tok/s, {n} streams", "total_tok_s", ".0f"),
           ("client CPU ms / request, 1 stream", "cpu_ms_1", ".2f"),
           ("client CPU ms / request, {n} streams", "cpu_ms_n", ".2f"),
           ("stamp delay ms (median), 1 stream", "lag_ms_1", ".3f"),
           ("stamp delay ms (median), {n} streams", "lag_ms_n", ".3f"),
           ("1-token round trip ms", "one_token_ms", ".2f")]


def table(rounds: list[dict], streams: int) -> str:
    lines = ["| figure | hand-written: median (spread) | aiohttp: median (spread) | aiohttp / hand-written, "
             "paired over rounds |", "|---|---|---|---|"]
    for label, key, spec in FIGURES:
        old = [r["hand-written"][key] for r in rounds]
        new = [r["aiohttp"][key] for r in rounds]
        if all(x is None for x in old + new):
            continue  # stamp delays: the fake server's only
        cells = []
        for xs in (old, new):
            xs = [x for x in xs if x is not None]
            cv = _cv(xs)
            spread = "-" if cv is None else f"{cv:.1%}" if cv >= 0.001 else f"{cv:.2%}"
            cells.append(f"{format(statistics.median(xs), spec)} ({spread})" if xs else "-")
        iv = ratio_interval(old, new, paired=True)
        side = "within noise" if verdict(iv) == WITHIN_NOISE else "beyond noise"
        digits = 4 if iv.bounded and iv.hi - iv.lo < 0.02 else 2  # type: ignore[operator]
        ci = f"95% CI {iv.lo:.{digits}f}-{iv.hi:.{digits}f}x" if iv.bounded else "no interval"
        lines.append(f"| {label.format(n=streams)} | {cells[0]} | {cells[1]} | "
                     f"{iv.ratio or 0:.{digits}f}x ({ci}), {side} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", choices=["fake", "refserver"], default="refserver")
    p.add_argument("--token-delay", type=float, default=0.02, help="fake server: seconds per token")
    p.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    p.add_argument("--prompts", type=int, default=8, help="level 1: requests per round")
    p.add_argument("--streams", type=int, default=64, help="the sustained level")
    p.add_argument("--probes", type=int, default=20, help="one-token requests per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    p.add_argument("--old", default=HAND_WRITTEN, help="the git revision of the hand-written client")
    p.add_argument("--json", help="write every round here")
    a = p.parse_args(argv)
    clients = {"hand-written": load_old(a.old), "aiohttp": new_client}
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as log_dir, server(a.server, a.token_delay, log_dir) as sp:
        sp.wait_ready(120, poll_s=0.1)
        url, model = sp.spec.base_url, sp.spec.model_name
        for c in clients.values():  # warm-up: the server's first requests, both clients
            level_one(c, url, model, a.tokens, 2, a.timeout, None)
            c.run_streams(url, model, PROMPTS, a.tokens, 8, 8, timeout_s=a.timeout)
        for i in range(a.rounds):
            got: dict = {}
            for name in list(clients) if i % 2 == 0 else list(clients)[::-1]:
                got[name] = one_turn(clients[name], url, model, a)
                r = got[name]
                print(f"round {i + 1} {name}: decode {r['decode_tok_s'] or 0:.1f} tok/s, total "
                      f"{r['total_tok_s'] or 0:.0f} tok/s, cpu {r['cpu_ms_1']:.2f} / {r['cpu_ms_n']:.2f} ms per "
                      f"request, 1-token "
                      f"{r['one_token_ms'] or 0:.2f} ms, {len(r['failures'])} failed {r['failures'][:1]}",
                      file=sys.stderr, flush=True)
            rounds.append(got)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rounds": rounds}, indent=1))
    print(table(rounds, a.streams))
    return 0


if __name__ == "__main__":
    sys.exit(main())
