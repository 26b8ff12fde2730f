"""The all-reduce probe: one setting timed in fresh processes (NCCL reads its environment once
per process), launched and read by the driver (``measure_setting``).

The probe runs the collective the decode step repeats, an all-reduce of each message size, on the
setting's TP size with its environment, inside a CUDA graph as real servers run it (eager on
CPU/gloo); with ``--custom``, torch's symmetric-memory one-shot all-reduce instead of NCCL, the kind
of kernel the engines' custom all-reduce is. ``python -m orchestrator.driver.allreduce_probe --world
N --device cuda --bytes B[,B...] [--custom]`` prints one JSON line from rank 0 (per size: median
microseconds per all-reduce and every sample; the first size's also at the top level). On CUDA,
NCCL's own choice of algorithm and protocol at each size is read from its TUNING lines (gloo has
none).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from orchestrator.core import nccl
from orchestrator.core.prescreened import Point, Probed
from orchestrator.node import proctree
from orchestrator.node.server import free_port
from orchestrator.refserver.procs import die_with_parent

PARENT_ENV = "NCCLSWEEP_PRESCREEN_PARENT"


# ---- the probe (runs in its own processes) ---------------------------------------------------

def _probe(args: argparse.Namespace) -> None:
    import torch  # heavy: imported only where a measurement runs on the device
    import torch.distributed as dist  # heavy: imported only where a measurement runs on the device

    rank, world = args.rank, args.world
    children = []
    if rank == 0:
        for r in range(1, world):
            env = {**os.environ, PARENT_ENV: str(os.getpid())}
            children.append(subprocess.Popen([sys.executable, "-m", "orchestrator.driver.allreduce_probe",
                                              *sys.argv[1:], "--rank", str(r)], env=env))
    else:
        die_with_parent(PARENT_ENV)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{args.master_port}",
                            rank=rank, world_size=world)
    dtype = torch.bfloat16 if cuda else torch.float32
    size = 2 if cuda else 4
    sweep = []
    for i, nbytes in enumerate(int(b) for b in str(args.bytes).split(",")):
        iters = args.iters if i < args.full else args.sweep_iters
        n = max(1, nbytes // size)
        reduce = _custom_reduce(n, dtype, rank) if args.custom else None
        if reduce is None:
            x = torch.ones(n, dtype=dtype, device="cuda" if cuda else "cpu")

            def reduce(x=x):
                dist.all_reduce(x)
        samples = _time(reduce, cuda=cuda, graph=cuda and args.graph, iters=iters, per_graph=args.per_graph)
        sweep.append({"bytes": n * size, "latency_us": statistics.median(samples), "samples_us": samples})
    if rank == 0:
        print(json.dumps({"latency_us": sweep[0]["latency_us"], "samples_us": sweep[0]["samples_us"], "world": world,
                          "bytes": sweep[0]["bytes"], "graph": bool(cuda and args.graph), "sweep": sweep}), flush=True)
    dist.barrier()
    os._exit(0)  # processes that used NCCL may hang in teardown: never wait for it


def _custom_reduce(n: int, dtype, rank: int):
    """torch's symmetric-memory one-shot all-reduce of ``n`` elements (CUDA with P2P only; it
    raises where it cannot run, and the caller reports why)."""
    import torch  # heavy: imported only where a measurement runs on the device
    import torch.distributed as dist  # heavy: imported only where a measurement runs on the device
    import torch.distributed._symmetric_memory as symm_mem  # heavy: as above

    buf = symm_mem.empty(n, dtype=dtype, device=torch.device("cuda", rank))
    world = dist.group.WORLD
    assert world is not None  # the probe initialised the default group
    group = world.group_name
    symm_mem.rendezvous(buf, group)
    buf.fill_(1)

    def reduce() -> None:
        torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group)
    return reduce


def _time(reduce, *, cuda: bool, graph: bool, iters: int, per_graph: int) -> list[float]:
    """Microseconds per all-reduce: ``iters`` samples after a warm-up, inside a CUDA graph of
    ``per_graph`` calls where asked (as the servers replay decode), else one call each."""
    import torch  # heavy: imported only where a measurement runs on the device

    for _ in range(20):
        reduce()
    samples: list[float] = []
    if graph:
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(3):
                reduce()
        torch.cuda.synchronize()
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            for _ in range(per_graph):
                reduce()
        for _ in range(3):
            cuda_graph.replay()
        torch.cuda.synchronize()
        for _ in range(max(1, iters // per_graph)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            cuda_graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / per_graph)
        return samples
    for _ in range(iters):
        t0 = time.perf_counter()
        reduce()
        if cuda:
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples


def probe_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m orchestrator.driver.allreduce_probe")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--bytes", required=True, help="message sizes, comma-separated")
    p.add_argument("--custom", action="store_true", help="torch's symmetric-memory one-shot all-reduce, not NCCL")
    p.add_argument("--iters", type=int, default=400, help="samples of each of the first --full sizes")
    p.add_argument("--full", type=int, default=1, help="how many leading sizes (the decode sizes) get --iters")
    p.add_argument("--sweep-iters", type=int, default=50, help="samples of every other size")
    p.add_argument("--per-graph", type=int, default=50)
    p.add_argument("--graph", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--master-port", type=int, default=0)
    p.add_argument("--rank", type=int, default=0)
    _probe(p.parse_args(argv))


# ---- its launch (runs in the driver) ----------------------------------------------------------

def measure_setting(setting: dict[str, Any], *, device: str, message_bytes: int | list[int], env: dict[str, str],
                    timeout_s: float = 120.0, iters: int = 400, custom: bool = False, full: int = 1) -> Probed:
    """One fresh probe for one setting over ``message_bytes`` (one size or a sweep; the first
    is the row's ``latency_us``; the first ``full`` sizes, the decode sizes, take ``iters``
    samples, the others ``sweep_iters(iters)``); a failure is data (kind + reason), not an exception. On CUDA
    NCCL logs its per-call choice (TUNING), read into each size's ``algo``/``proto``.
    ``custom``: torch's symmetric-memory one-shot all-reduce instead of NCCL."""
    sizes = [message_bytes] if isinstance(message_bytes, int) else list(message_bytes)
    env_delta = {**env, **{k[4:]: str(v) for k, v in setting.items() if k.startswith("env.")},
                 **nccl.debug_env(tuning=device == "cuda" and not custom)}
    argv = [sys.executable, "-m", "orchestrator.driver.allreduce_probe", "--world", str(setting["tp_size"]),
            "--device", device, "--bytes", ",".join(map(str, sizes)), "--iters", str(iters), "--full", str(full),
            "--sweep-iters", str(sweep_iters(iters)),
            "--master-port", str(free_port()), *(["--custom"] if custom else [])]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env_delta}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return _failed(setting, custom, "timeout", f"no answer in {timeout_s:.0f}s", time.monotonic() - t0)
    _kill_group(proc)
    seconds = time.monotonic() - t0
    parsed = nccl.parse_log(err)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        kind = nccl.classify_failure(err) or "error"
        tail = (err.strip().splitlines() or ["no output"])[-1][:200]
        return _failed(setting, custom, kind, tail, seconds)
    result = json.loads(lines[-1])
    requested = {k[4:]: str(v) for k, v in setting.items() if k.startswith("env.")}
    warnings = nccl.verify_applied(requested, parsed) if parsed.get("version") else []
    chosen = {nbytes: (algo, proto) for coll, nbytes, algo, proto in parsed.get("per_call") or []
              if coll == "AllReduce"}
    sweep = tuple(Point(point["bytes"], point["latency_us"], ci_us=median_interval(point["samples_us"]),
                        algo=chosen[point["bytes"]][0] if point["bytes"] in chosen else None,
                        proto=chosen[point["bytes"]][1] if point["bytes"] in chosen else None)
                  for point in sorted(result.get("sweep") or [], key=lambda point: point["bytes"]))
    return Probed(tp_size=int(setting["tp_size"]), env=_env_of(setting), ok=True, latency_us=result["latency_us"],
                  samples_us=tuple(result["samples_us"]), graph=result["graph"], nbytes=result["bytes"],
                  seconds=seconds, sweep=sweep, nccl_version=parsed.get("version"),
                  transports=tuple(parsed.get("transports") or ()), warnings=tuple(warnings), custom=custom)


def _env_of(setting: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in setting.items() if k.startswith("env.")}


def _failed(setting: dict[str, Any], custom: bool, kind: str, reason: str, seconds: float) -> Probed:
    """A probe that gave no answer: the failure is the row (kind + reason), not an exception."""
    return Probed(tp_size=int(setting["tp_size"]), env=_env_of(setting), kind=kind, reason=reason, seconds=seconds,
                  custom=custom)


def median_interval(samples: list[float]) -> tuple[float, float]:
    """A 95% interval of the median of ``samples`` from their order statistics (distribution-free):
    the ranks n/2 -+ 0.98 sqrt(n); the whole range for fewer than 6 samples."""
    ordered = sorted(samples)
    n = len(ordered)
    if n < 6:
        return (ordered[0], ordered[-1]) if ordered else (0.0, 0.0)
    half = 0.98 * math.sqrt(n)
    return ordered[max(0, int(n / 2 - half))], ordered[min(n - 1, math.ceil(n / 2 + half))]


def sweep_iters(iters: int) -> int:
    """Samples of a size that no objective level uses: enough for a median (the crossovers
    are read where latencies differ by more than the noise), an eighth of the decode sizes'."""
    return max(10, iters // 8)


def _kill_group(proc: subprocess.Popen) -> None:
    """End the probe's ranks at once (NCCL processes often hang at exit): its tree and its
    process group (it runs in a session of its own)."""
    proctree.end(proctree.tree(proc.pid), 0.0, pgid=proc.pid, kill_wait_s=5.0)


if __name__ == "__main__":
    probe_main()
