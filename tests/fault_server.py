"""tests/fake_openai_server.py under the reference server's name for a fault that its own flags have:
a study that tunes ``backend.fault`` through the command backend, of servers that start in a tenth of
a second (the reference server's start imports torch).

    python tests/fault_server.py --fault NAME[:N] --port P [any flag of tests/fake_openai_server.py]

The reference server's ``--fault`` values, each as the fake server's flags for it (``FAULTS``, the
one map: ``tests/wrapped_server.py``'s scripts run this file too):

- ``none``: a healthy server;
- ``garbage``: wrong output, as the reference server's ``garbage`` fault gives: every token after
  the first is another word (the fake server's ``--wrong-text``), so its greedy text differs from a
  healthy server's;
- ``crash-on-start``: exits before it is ready; ``hang-on-start``: never ready;
- ``crash-after:N``: gone as request N + 1 comes; ``slow-start:S``: ready S seconds later.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai_server import main as serve

# a fault's name -> the fake server's flags for it; a fault with ``:N`` gets N as the last flag's value
FAULTS = {"none": [], "garbage": ["--wrong-text"], "crash-on-start": ["--crash-on-start", "1"],
          "hang-on-start": ["--ready-after", "100000"], "crash-after": ["--exit-after"],
          "slow-start": ["--ready-after"]}


def fault_flags(fault: str) -> list[str]:
    """The fake server's flags for ``fault`` (NAME or NAME:N); an unknown name is argparse's error."""
    name, _, n = fault.partition(":")
    if name not in FAULTS:
        raise argparse.ArgumentTypeError(f"unknown fault {name!r} (one of {', '.join(sorted(FAULTS))})")
    return FAULTS[name] + ([n] if n else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fault", type=fault_flags, default=[], metavar="NAME[:N]")
    a, rest = p.parse_known_args(argv)
    return serve([*rest, *a.fault])


if __name__ == "__main__":
    sys.exit(main())
