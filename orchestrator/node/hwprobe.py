"""Measure the memory bandwidth the decode ceiling is computed from.

Run in a child process (``python -m orchestrator.node.hwprobe cuda``) so the trial worker
never holds a CUDA context (and its memory) while a server runs on the same GPUs.
Bandwidth = bytes read + bytes written by a large device-to-device copy / time,
median of several copies after a warm-up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache


def _measure(device: str) -> float:
    import time

    import torch

    n_bytes = (1 << 30) if device == "cuda" else (256 << 20)
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    times = []
    for i in range(8):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            torch.cuda.synchronize()
            elapsed = start.elapsed_time(end) / 1000.0
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            elapsed = time.perf_counter() - t0
        if i >= 2:  # warm-up copies excluded
            times.append(elapsed)
    times.sort()
    return 2 * n_bytes / times[len(times) // 2]


@lru_cache(maxsize=4)
def memory_bandwidth(device: str, timeout_s: float = 120.0) -> float | None:
    """Copy bandwidth in bytes/s of this node's ``device`` (cpu or cuda), None if it failed."""
    try:
        out = subprocess.run([sys.executable, "-m", "orchestrator.node.hwprobe", device],
                             capture_output=True, text=True, timeout=timeout_s)
        return float(json.loads(out.stdout.strip().splitlines()[-1])["bandwidth_bytes_s"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError):
        return None


if __name__ == "__main__":
    print(json.dumps({"device": sys.argv[1], "bandwidth_bytes_s": _measure(sys.argv[1])}))
