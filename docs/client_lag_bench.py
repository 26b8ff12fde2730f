"""A starved measuring client, measured: decode tok/s of a server at a fixed, known token pace as
``node.measure`` measures level 1, with the client unstarved and starved in two ways, with what the
loop-lag monitor recorded and whether the level was flagged (docs/benchmarks.md, "A starved
measuring client").

    python docs/client_lag_bench.py --runs 3

The server is tests/fake_openai_server.py (``--token-delay`` 5 ms: 200 tok/s, the first token 60 ms
after the request: ``--ttft-delay``), started once, as the tool starts one (``ServerProcess``).
Each run is one ``measure`` of level 1 (``--prompts`` requests a round, 2 rounds, ``--tokens``
tokens each) under one of:

- ``none``: nothing else in this process;
- ``loop``: every event loop the client makes (one per request at level 1) blocked once, in a
  ``time.sleep`` of 100 ms that begins 40 ms after the loop was made, as the request's first
  tokens come in (tests/starved_loop.py): late at the first tokens, caught up by the last;
- ``gil``: ``--threads`` threads of pure-Python work in this process, contending for the GIL with
  the client's thread (several studies sharing one process).

For each: the decode tok/s (the level's median) against the server's 200, the client's lateness
(``ClientLag``: p50/p99 over the ticker's wake-ups, the median request's span stamped short: the
loop's lateness at its first token less at its last), how many times
the level was measured (2: the first was client-bound) and whether it was kept with the notice
(``core.client_bound``); the medians over ``--runs`` runs. ``--json`` keeps every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from starved_loop import starved  # noqa: E402

from orchestrator.core import client_bound  # noqa: E402
from orchestrator.core.launch import LaunchSpec  # noqa: E402
from orchestrator.node.measure import measure  # noqa: E402
from orchestrator.node.server import ServerProcess, free_port  # noqa: E402
from orchestrator.node.spec import BenchPlan  # noqa: E402

PROMPTS = ("The quick brown fox jumps over the lazy dog.", "Once upon a time, in a land far away,",
           "Explain how attention works:", "List the first ten primes:")


@contextmanager
def gil_hogs(threads: int) -> Iterator[None]:
    """``threads`` threads of pure-Python work until the block ends."""
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    hogs = [threading.Thread(target=spin, daemon=True) for _ in range(threads)]
    for t in hogs:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in hogs:
            t.join()


def one_run(url: str, mode: str, a: argparse.Namespace) -> dict[str, Any]:
    plan = BenchPlan(prompts=PROMPTS[:a.prompts], output_tokens=a.tokens, warmup=1, repeats=2, timeout_s=120,
                     levels=(1,))
    hog = starved() if mode == "loop" else gil_hogs(a.threads) if mode == "gil" else nullcontext()
    with hog:
        got = measure(url, "fake", plan, deadline=time.monotonic() + 120)
    one = got.measurement.levels.get(1)
    lag = one.client_lag if one is not None else None
    return {"ok": got.ok, "decode_tok_s": one.value if one is not None else None,
            "p50_ms": lag.p50_ms if lag else None, "p99_ms": lag.p99_ms if lag else None,
            "span_short_ms": lag.span_short_ms if lag else None, "attempts": lag.attempts if lag else None,
            "flagged": any(w.startswith(client_bound.NOTICE) for w in got.warnings),
            "notice": next((w for w in got.warnings if w.startswith(client_bound.NOTICE)), None)}


def _med(xs: list[Any]) -> Any:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--token-delay", type=float, default=0.005, help="the server's seconds per token")
    p.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    p.add_argument("--prompts", type=int, default=3, help="level 1: requests per round (at most 4)")
    p.add_argument("--threads", type=int, default=1, help="gil: pure-Python threads")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", default="none,loop,gil")
    p.add_argument("--json", help="write every run here")
    a = p.parse_args(argv)
    port = free_port()
    spec = LaunchSpec(argv=[sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--port", str(port),
                            "--model", "fake", "--token-delay", str(a.token_delay), "--ttft-delay", "0.06"],
                      host="127.0.0.1", port=port, model_name="fake")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in a.modes.split(",")}
    with tempfile.TemporaryDirectory() as log_dir, ServerProcess(spec, Path(log_dir) / "fake.log") as sp:
        sp.wait_ready(60, poll_s=0.05)
        for _ in range(a.runs):
            for mode in runs:  # the modes interleaved: a box that drifts moves them alike
                runs[mode].append(one_run(sp.spec.base_url, mode, a))
    print(f"server pace {1 / a.token_delay:.0f} tok/s, {a.tokens} tokens a request; medians of {a.runs} runs")
    print("| client | decode tok/s | vs the pace | loop late p50 / p99 ms | span stamped short ms | measured "
          "| flagged |")
    print("|---|---|---|---|---|---|---|")
    for mode, got in runs.items():
        tok = _med([r["decode_tok_s"] for r in got])
        name = f"gil ({a.threads} thread{'s' if a.threads != 1 else ''})" if mode == "gil" else mode
        vs = f"{tok * a.token_delay - 1:+.1%}" if tok else "-"
        print(f"| {name} | {tok:.1f} | {vs} | {_med([r['p50_ms'] for r in got]):.1f} / "
              f"{_med([r['p99_ms'] for r in got]):.1f} | {_med([r['span_short_ms'] for r in got]):.1f} | "
              f"{'/'.join(str(r['attempts']) for r in got)} | {sum(r['flagged'] for r in got)} of {len(got)} |")
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
