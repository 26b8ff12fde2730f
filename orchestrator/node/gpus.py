"""What the GPUs of a trial's node say before and after a server runs on them (nvidia-smi).

Before a launch, ``foreign_use`` checks that nothing that is not the study's holds the
trial's GPUs: a dead study's workers (vLLM's re-parented ``VLLM::Worker_TP0`` kept
2.4 GiB per GPU until their study's cleanup ran), another user's job. A trial started on
them would measure a crowded GPU, or fail for lack of memory, and blame the config;
instead the trial does not start (an environment failure, never the config's) and the
message names the processes. Memory that frees late after our own teardown is waited
for (``settle_s``). After a teardown, ``usable`` checks that the GPUs still answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from orchestrator.node import nvidia_smi, proctree

# Memory a GPU may show in use with no process of ours on it (driver reservations)
# before it counts as held by someone else.
IDLE_MIB = 1024


@dataclass(frozen=True)
class GpuUse:
    index: str
    uuid: str
    used_mib: int
    apps: tuple[tuple[int, int], ...]  # (pid, MiB) of the compute processes nvidia-smi shows


def read(visible: list[str] | None = None) -> list[GpuUse] | None:
    """Used memory and compute processes of the GPUs in ``visible`` (indices or UUIDs, as in
    CUDA_VISIBLE_DEVICES; None: all); None where nvidia-smi cannot tell."""
    gpus = nvidia_smi.csv_rows(["--query-gpu=index,uuid,memory.used"])
    apps = nvidia_smi.csv_rows(["--query-compute-apps=gpu_uuid,pid,used_memory"])
    if gpus is None:
        return None
    by_uuid: dict[str, list[tuple[int, int]]] = {}
    for row in apps or []:
        try:
            by_uuid.setdefault(row[0], []).append((int(row[1]), int(float(row[2]))))
        except (IndexError, ValueError):
            continue
    out = []
    for row in gpus:
        try:
            index, uuid, used = row[0], row[1], int(float(row[2]))
        except (IndexError, ValueError):
            continue
        if visible and index not in visible and uuid not in visible:
            continue
        out.append(GpuUse(index, uuid, used, tuple(by_uuid.get(uuid, ()))))
    return out


def foreign_use(visible: list[str] | None, own_pids: set[int], settle_s: float = 10.0,
                poll_s: float = 1.0) -> list[str]:
    """Lines naming what holds the trial's GPUs that is not ours (empty: the GPUs are free).

    ``own_pids``: processes of this study on the node (the actor itself, which may hold a
    CUDA context). Waits up to ``settle_s`` for memory that is being released."""
    deadline = time.monotonic() + settle_s
    while True:
        problems = _foreign(read(visible), own_pids)
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(poll_s)


def _foreign(uses: list[GpuUse] | None, own_pids: set[int]) -> list[str]:
    problems = []
    for gpu in uses or []:
        others = [(pid, mib) for pid, mib in gpu.apps if pid not in own_pids]
        ours = sum(mib for pid, mib in gpu.apps if pid in own_pids)
        if others:
            shown = "; ".join(f"pid {pid} ({_cmdline(pid)}) {mib} MiB" for pid, mib in others)
            problems.append(f"GPU {gpu.index}: {gpu.used_mib} MiB in use by processes that are not this study's: "
                            f"{shown}")
        elif gpu.used_mib - ours > IDLE_MIB:
            problems.append(f"GPU {gpu.index}: {gpu.used_mib - ours} MiB in use by processes this node does not show "
                            "(another container or user?)")
    return problems


def _cmdline(pid: int) -> str:
    m = next((m for m in proctree.tree(pid) if m.pid == pid), None)
    return (m.cmdline or m.name)[:100] if m else "gone"


def visible_devices() -> list[str] | None:
    """The GPUs this process was given (CUDA_VISIBLE_DEVICES), None when not restricted."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return None
    return [g.strip() for g in text.split(",") if g.strip()]


# A fresh interpreter importing torch on a loaded host takes tens of seconds (over 30 s seen on
# a 2-core box running three test workers and Ray): the smoke test's own allowance for it, on
# top of the time its CUDA work may take. A GPU that hangs is not told by a slow import.
SMOKE_IMPORT_ALLOWANCE_S = 90.0


def usable(timeout_s: float = 30.0) -> tuple[bool, str]:
    """A quick device check after teardown: do the GPUs still answer (nvidia-smi, ``timeout_s``),
    and is their memory free again? Falls back to a CUDA smoke test where nvidia-smi is missing
    (``timeout_s`` plus ``SMOKE_IMPORT_ALLOWANCE_S`` for its interpreter and torch to start)."""
    if nvidia_smi.available():
        reply = nvidia_smi.call(["--query-gpu=index,memory.used,memory.total", nvidia_smi.CSV], timeout_s)
        if not reply.ok:
            return False, reply.why() + (f" for {timeout_s:.0f}s" if reply.status == "hung" else "")
        return True, reply.stdout.strip().replace("\n", "; ")
    cmd = [sys.executable, "-c", "import torch; [torch.ones(1, device=f'cuda:{i}').sum().item() "
           "for i in range(torch.cuda.device_count())]"]
    limit = timeout_s + SMOKE_IMPORT_ALLOWANCE_S
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return False, f"the CUDA smoke test hung for {limit:.0f}s"
    if out.returncode != 0:
        return False, (out.stderr.strip().splitlines() or ["the CUDA smoke test failed"])[-1]
    return True, out.stdout.strip().replace("\n", "; ")
