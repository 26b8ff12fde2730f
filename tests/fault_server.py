"""tests/fake_openai_server.py under the reference server's name for a fault that its own flags have:
a study that tunes ``backend.fault`` through the command backend, of servers that start in a tenth of
a second (the reference server's start imports torch).

    python tests/fault_server.py --fault garbage --port P [any flag of tests/fake_openai_server.py]

- ``none``: a healthy server;
- ``garbage``: wrong output, as the reference server's ``garbage`` fault gives: every token after
  the first is another word (the fake server's ``--wrong-text``), so its greedy text differs from a
  healthy server's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai_server import main as serve

FAULTS = {"none": [], "garbage": ["--wrong-text"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fault", choices=sorted(FAULTS), default="none")
    a, rest = p.parse_known_args(argv)
    return serve([*rest, *FAULTS[a.fault]])


if __name__ == "__main__":
    sys.exit(main())
