"""A server's supervisor: the server's whole tree dies with the process that launched it.

A parent-death signal reaches only the server's first process; a real engine's workers
(vLLM's ``VLLM::Worker_TP0``...) are its grandchildren: when the launching Ray actor or
driver is killed with SIGKILL they are re-parented to init and keep their GPU memory.
So every server gets a supervisor, a small process in its own session that

- holds the read end of a pipe whose write end only the owner (the process that
  launched the server) holds: the kernel closes it when the owner dies, however it dies,
  and the owner closes it when it is done with the server;
- every ``POLL_S`` remembers the server's tree (the root's descendants, and the members
  of its process group; each look is one pass over the process table), writing the list
  next to the server's registry record so ``ncclsweep cleanup`` can end descendants that
  left the group;
- on end of file ends every remembered process still alive (start times matched) and
  the process group: TERM, a grace period, KILL; then exits. It also exits once the
  root and everything it remembered are gone.

    python -m orchestrator.node.supervise --pid P --start T --pgid G [--members FILE] [--grace S]

(stdin is the pipe). ``launch(...)`` starts one, not as a child of the owner (see
``_STARTER``), and returns its pid and the write end the owner keeps.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
from pathlib import Path

from orchestrator.core import files
from orchestrator.node import proctree

POLL_S = 1.0


# Starts the supervisor in a session of its own and exits at once, printing its pid: the
# supervisor must not be a child of the owner. Ray ends the direct children of a worker
# process that exits, so a child supervisor would die with the very process it guards
# against; re-parented to init it outlives the owner.
_STARTER = ("import subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdin=0, stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True); print(p.pid)")


def launch(pid: int, start: float, pgid: int, members_file: Path | None, grace_s: float = 5.0) -> tuple[int, int]:
    """Start the supervisor of one server; returns its pid and the pipe's write end (keep
    it open while the server is ours; close it to hand the leftovers to the supervisor)."""
    read_fd, write_fd = os.pipe()  # both non-inheritable: no later child of ours gets them
    cmd = [sys.executable, "-m", "orchestrator.node.supervise", "--pid", str(pid), "--start", repr(start),
           "--pgid", str(pgid), "--grace", str(grace_s)]
    if members_file is not None:
        cmd += ["--members", str(members_file)]
    try:
        out = subprocess.run([sys.executable, "-c", _STARTER, *cmd], stdin=read_fd, capture_output=True, text=True,
                             timeout=60, check=True)
        return int(out.stdout.strip()), write_fd
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        os.close(write_fd)
        raise OSError("the supervisor could not be started") from exc
    finally:
        os.close(read_fd)


def _write_members(path: Path, members: dict[tuple[int, float], proctree.Member]) -> None:
    files.write_text(path, json.dumps([m.to_dict() for m in members.values()]))


def supervise(pid: int, start: float, pgid: int, members_file: Path | None, grace_s: float,
              owner_fd: int = 0) -> int:
    seen: dict[tuple[int, float], proctree.Member] = {}
    written = 0
    while True:
        for m in proctree.tree(pid, start) + proctree.group(pgid):
            seen.setdefault((m.pid, m.start), m)
        if members_file is not None and len(seen) != written:
            try:
                _write_members(members_file, seen)
                written = len(seen)
            except OSError:
                pass
        live = [m for m in seen.values() if proctree.alive(m.pid, m.start)]
        if not live and not proctree.alive(pid, start):
            return 0  # the server is gone: nothing to guard
        ready, _, _ = select.select([owner_fd], [], [], POLL_S)
        if ready and not os.read(owner_fd, 4096):  # end of file: the owner is gone or done
            left = proctree.end(live, grace_s, pgid=pgid)
            return 1 if left else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.node.supervise", description=__doc__.splitlines()[0])
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--start", type=float, required=True)
    p.add_argument("--pgid", type=int, required=True)
    p.add_argument("--members", type=Path)
    p.add_argument("--grace", type=float, default=5.0)
    a = p.parse_args(argv)
    try:
        return supervise(a.pid, a.start, a.pgid, a.members, a.grace)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
