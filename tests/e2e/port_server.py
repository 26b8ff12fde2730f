"""A server and the process that answers on its port (issue 38's port squatter).

The node picks a free port and the server binds it later (minutes later for a real engine):

    child  the launched process starts the real server (tests/e2e/load_server.py) as its own
           child on the port and waits for it, as a wrapper script or an engine whose API
           server is a descendant does: the port is the server's tree's (legitimate);
    late   the launched process writes the port into ``--handoff DIR/PORT`` (where a test's
           squatter, outside the tree, picks it up), "loads a model" for ``--load-s``
           seconds, then becomes the real server on the port (``exec``): if something took it
           meanwhile, it dies with ``OSError: [Errno 98] Address already in use``, as any server.

    python tests/e2e/port_server.py --mode child --port 8000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

LOAD_SERVER = str(Path(__file__).resolve().parent / "load_server.py")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("child", "late"), required=True)
    p.add_argument("--port", required=True)
    p.add_argument("--model", default="load")
    p.add_argument("--handoff", type=Path)
    p.add_argument("--load-s", type=float, default=5.0)
    a = p.parse_args()
    serve = [sys.executable, LOAD_SERVER, "--port", a.port, "--model", a.model]
    if a.mode == "child":
        print(f"port server: the API server is my child, pid {os.getpid()}", flush=True)
        return subprocess.call(serve)
    if a.handoff is not None:
        (a.handoff / a.port).write_text(str(os.getpid()))
    print(f"port server: loading for {a.load_s:g}s before binding {a.port}", flush=True)
    time.sleep(a.load_s)
    os.execv(sys.executable, serve)
    return 1


if __name__ == "__main__":
    sys.exit(main())
