"""What a trial's node is: hostname, the GPUs it was given, their model, driver and links
(``node_info``, the provenance every export carries), and the memory bandwidth the decode
ceiling is computed from (``memory_bandwidth``, with the machine's load when it was measured).

The bandwidth is measured in a child process (``python -m orchestrator.node.hwprobe cuda``) so the trial worker
never holds a CUDA context (and its memory) while a server runs on the same GPUs.
Bandwidth = bytes read + bytes written by a large device-to-device copy / time,
median of several copies after a warm-up.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np  # the CPU probe's copies (numpy comes with optuna, pandas and torch)

from orchestrator.node import nvidia_smi


def _measure(device: str) -> float:
    if device == "cpu":
        return _measure_cpu()
    import torch  # heavy: imported only where a measurement runs on the device

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


def _measure_cpu(n_bytes: int = 256 << 20) -> float:
    """The host's copy bandwidth as torch's parallel CPU copy gets it (one slice of the array per
    thread, torch's intra-op threads), with numpy: importing torch costs a probe 2 CPU-seconds,
    more than the copies, on every node where a study starts."""
    threads = max(1, len(os.sched_getaffinity(0)))
    src = np.ones(n_bytes // 4, dtype=np.float32)  # written, so every page is real (zeros would share one)
    dst = np.empty_like(src)
    bounds = np.linspace(0, src.size, threads + 1, dtype=np.int64)
    parts = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    times = []
    with ThreadPoolExecutor(threads) as pool:  # numpy copies without the interpreter lock
        for i in range(8):
            t0 = time.perf_counter()
            list(pool.map(lambda part: np.copyto(dst[part], src[part]), parts))
            if i >= 2:  # warm-up copies excluded
                times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * n_bytes / times[len(times) // 2]


def node_info() -> dict[str, Any]:
    """Which node and GPUs this trial ran on: hostname, the GPUs it was given
    (CUDA_VISIBLE_DEVICES) and their count, model, driver and links, and inside Ray the
    node id and IP."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    info: dict[str, Any] = {"hostname": socket.gethostname(), "gpus": visible}
    try:
        import ray  # optional here: a process outside Ray has no node id

        if ray.is_initialized():
            info["node_id"] = ray.get_runtime_context().get_node_id()
            info["node_ip"] = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray there is no node id
        pass
    if visible:
        ids = [g.strip() for g in visible.split(",") if g.strip()]
        info["gpu_count"] = len(ids)
        info["gpu_model"] = nvidia_smi.gpu_name(ids[0] if ids else None)
        driver, links = nvidia_smi.driver_version(), nvidia_smi.topology(ids)
        if driver:
            info["driver_version"] = driver
        if links:
            info["topology"] = links
    return info


@lru_cache(maxsize=4)
def memory_bandwidth(device: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Copy bandwidth of this node's ``device`` (cpu or cuda): ``bytes_s`` (None if it failed)
    and ``load``, the machine's 1-minute load average and CPU count as it was measured (a
    copy on a busy machine measures the other work too: the report says so)."""
    load = {"load1": round(os.getloadavg()[0], 2), "cpus": os.cpu_count() or 1}
    try:
        out = subprocess.run([sys.executable, "-m", "orchestrator.node.hwprobe", device],
                             capture_output=True, text=True, timeout=timeout_s)
        return {"bytes_s": float(json.loads(out.stdout.strip().splitlines()[-1])["bandwidth_bytes_s"]),
                "load": load}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError):
        return {"bytes_s": None, "load": load}


if __name__ == "__main__":
    print(json.dumps({"device": sys.argv[1], "bandwidth_bytes_s": _measure(sys.argv[1])}))
