"""A stand-in for the motivating space (docs/tables/motivating-space.csv) on CPU: the OpenAI test
server (tests/fake_openai_server.py) decoding at a speed that is a product of per-value factors,
as the motivating table's model has it, with its failures.

    python tests/standin_server.py --port P --layout tp8 --graphs full --capture small \\
        --proto LL --algo Ring --p2p direct

- layout tp8 x1.0, tp4pp2 x0.978 (the near-optimal runner-up), tp2pp4 x0.85; graphs full x1.0
  (either capture list: the two optimal configs), eager x0.468; proto LL x1.0, Simple x0.749;
  algo Ring x1.0, Tree x0.96; p2p direct x1.0, host (through host memory) x0.92;
- algo NVLS or PAT: the start fails at once, the log naming the algorithm (as NCCL refuses it);
- proto LL128: the server starts and decodes at full speed, with wrong text (``--wrong-text``);
- ``--interaction``: the optimum is an interaction (issue 49): Tree, slow alone (x0.96 with Simple),
  is the fastest algorithm with LL (x1.08: a tree's fewer steps pay once the protocol is low-latency),
  so the optimum is tp8, full graphs, LL, Tree, direct, 8% above the additive shape's best.

At the optimum a token takes ``--best-delay`` seconds (default 4 ms); nothing else is slower than
the fake server itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai_server import main as serve

FACTORS = {
    "layout": {"tp8": 1.0, "tp4pp2": 0.978, "tp2pp4": 0.85},
    "graphs": {"full": 1.0, "eager": 0.468},
    "proto": {"LL": 1.0, "Simple": 0.749, "LL128": 1.0},
    "algo": {"Ring": 1.0, "Tree": 0.96},
    "p2p": {"direct": 1.0, "host": 0.92},
}


TREE_WITH_LL = 1.08  # --interaction: Tree with LL, against Ring (Tree alone: FACTORS' x0.96)


def speed(values: dict[str, str], interaction: bool = False) -> float:
    """Decode speed relative to the additive shape's best (1.0)."""
    out = 1.0
    for name, value in values.items():
        out *= FACTORS[name][value]
    if interaction and values.get("algo") == "Tree" and values.get("proto") == "LL":
        out *= TREE_WITH_LL / FACTORS["algo"]["Tree"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", required=True)
    p.add_argument("--model", default="fake")
    p.add_argument("--best-delay", type=float, default=0.004)
    p.add_argument("--capture", default="")  # the capture list: no effect on decode at one request
    p.add_argument("--interaction", action="store_true", help="Tree with LL is the fastest (module docstring)")
    for name, values in FACTORS.items():
        p.add_argument(f"--{name}", required=True, choices=[*values, *(["NVLS", "PAT"] if name == "algo" else [])])
    a = p.parse_args(argv)
    if a.algo in ("NVLS", "PAT"):
        print(f"NCCL WARN Error : algorithm {a.algo} is not supported on this platform", file=sys.stderr, flush=True)
        return 1
    delay = a.best_delay / speed({name: getattr(a, name) for name in FACTORS}, a.interaction)
    return serve(["--host", a.host, "--port", str(a.port), "--model", a.model, "--token-delay", f"{delay:.6f}",
                  *(["--wrong-text"] if a.proto == "LL128" else [])])


if __name__ == "__main__":
    sys.exit(main())
