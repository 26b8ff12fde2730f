"""A notify command for the tests (driver/notify.py): appends one JSON line to the file named
by its first argument: its other arguments, the summary it read on stdin and its NCCLSWEEP_*
variables. Each line is one notification.

    python tests/notify_recorder.py OUT.jsonl [ARG ...]
"""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    record = {"argv": sys.argv[2:], "stdin": json.loads(sys.stdin.read()),
              "env": {k: v for k, v in os.environ.items() if k.startswith("NCCLSWEEP_")}}
    with open(sys.argv[1], "a") as out:
        out.write(json.dumps(record) + "\n")
