"""All-reduce pre-screen: seconds per NCCL setting instead of minutes per server launch.

A 744B model takes minutes to load; an NCCL setting can be judged in seconds by the
latency of the collective the decode step repeats: an all-reduce of the decode message, on
the trial's TP size, with the setting's environment, inside a CUDA graph as real servers run
it (eager on CPU/gloo). Every setting runs in fresh processes (NCCL reads its environment
once per process).

The sizes decode uses: the message is hidden size x tokens in flight x bytes per element, and
at concurrency N there are N tokens in flight, so each level of the job's objective has its
own size (``decode_sizes``: GLM-5 at 1 and 10 streams: 12 KB and 120 KB). The probe sweeps
``sweep_sizes``: every 16 KB up to 512 KB (4, 8 and 12 KB below 16 KB), 768 KB and 1 MB, and
each decode size, so each all-reduce path is measured where the crossovers on PCIe sit (48-120
KB as reported by others) and the NCCL tuner export (``results.export``) gets one measured point
per 16 KB bin. For each setting, NCCL's own choice of algorithm and protocol at each size is
read from its TUNING lines (CUDA only: gloo has none). Where torch can run it (CUDA, with P2P)
the custom path is swept too: torch's symmetric-memory one-shot all-reduce, the kind of kernel
the engines' custom all-reduce is; elsewhere the table says why not. ``crossovers`` names,
per TP, the sizes where the fastest path changes (the custom path against NCCL's best among
them).

``run_prescreen(job)`` measures each distinct (tp_size, NCCL env) of the job's space in two
rounds, the second in the other order (``merge_rounds``: a size's interval spans both launches,
so a path is clearly faster there only if it was in both: each setting runs in its own launch,
and on a busy host launches drift by more than their own intervals say),
predicts decode tok/s where a measured trial gives "the rest" of a step
(1 / (all-reduces per step x latency + rest)), and writes ``prescreen.json`` (everything) and
``prescreen-sweep.csv`` (the table: one line per setting and size) into the report folder.
``dropped_settings`` names those to skip before any server launch: failed, or slower than
``keep_within`` x the fastest at the same TP (default 4: ``config.job``), judged at the
objective's decode sizes (the geometric mean of a setting's ratio to the fastest at each).
``late_settings`` is a prior for the ones kept: a setting ``LATE_RATIO`` (2) x slower than the
fastest at its TP or more is tried late, not dropped (the search policy leaves it out of its
own start-up and fill choices while others remain), so with the defaults the settings from 2x
to 4x are. The custom path's sweep feeds the table, the crossovers and the tuner export, not
the prior (the prior chooses among NCCL settings).

The probe itself: ``python -m orchestrator.driver.prescreen --world N --device cuda --bytes
B[,B...] [--custom]`` prints one JSON line from rank 0 (per size: median microseconds per
all-reduce and every sample; the first size's also at the top level).
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

from orchestrator.core import files, nccl
from orchestrator.core.errors import BadInput
from orchestrator.core.records import config_key
from orchestrator.node import proctree
from orchestrator.node.server import free_port
from orchestrator.refserver.procs import die_with_parent
from orchestrator.study import objective as objectives

PARENT_ENV = "NCCLSWEEP_PRESCREEN_PARENT"
# A path is clearly faster at a size when its median's interval lies below the other's and it
# is this much faster: each setting runs in its own probe launch, and launches differ by more than
# their in-launch intervals say on a busy host (two gloo launches of one path on the 2-core test
# box: 10-40% apart at some sizes, disjoint intervals)
CLEAR_MARGIN = 1.10
LATE_RATIO = 2.0  # a kept setting this much slower than the fastest all-reduce at its TP, or more, is tried late


# ---- the probe (runs in its own processes) ---------------------------------------------------

def _probe(args: argparse.Namespace) -> None:
    import torch  # heavy: imported only where a measurement runs on the device
    import torch.distributed as dist  # heavy: imported only where a measurement runs on the device

    rank, world = args.rank, args.world
    children = []
    if rank == 0:
        for r in range(1, world):
            env = {**os.environ, PARENT_ENV: str(os.getpid())}
            children.append(subprocess.Popen([sys.executable, "-m", "orchestrator.driver.prescreen", *sys.argv[1:],
                                              "--rank", str(r)], env=env))
    else:
        die_with_parent()
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
    p = argparse.ArgumentParser(prog="python -m orchestrator.driver.prescreen")
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


# ---- the screen (runs in the driver) ---------------------------------------------------------

def settings_of(job) -> list[dict[str, Any]]:
    """Distinct (tp_size, NCCL env) pairs of the space at TP > 1 (NCCL is idle at TP=1)."""
    backend = job.backend_obj()
    seen: dict[str, dict[str, Any]] = {}
    for config in job.space.enumerate() or []:
        full = backend.normalize({**backend.default_config(), **config})
        tp = int(full.get("tp_size", 1))
        if tp < 2:
            continue
        setting = {"tp_size": tp, **{k: v for k, v in sorted(full.items()) if k.startswith("env.NCCL_")}}
        seen.setdefault(config_key(setting), setting)
    return list(seen.values())


KB = 1024
SWEEP_STEP = 16 * KB  # the sweep's step up to SWEEP_FINE_UP_TO: no bin of the tuner export is wider
SWEEP_FINE_UP_TO = 512 * KB
SWEEP_MAX = 64 * 1024 * KB


def decode_sizes(hidden: int, dtype_bytes: int, levels: tuple[int, ...] | list[int]) -> dict[int, int]:
    """{level: bytes of the decode all-reduce there}: hidden size x tokens in flight (one per
    stream at concurrency N) x bytes per element."""
    return {int(level): int(hidden) * int(level) * int(dtype_bytes) for level in sorted(levels)}


def sweep_sizes(decode: dict[int, int] | list[int], element_bytes: int = 1) -> list[int]:
    """The sizes the probe sweeps (module docstring), each a multiple of 16 bytes (the engines'
    custom kernels take no other) and of ``element_bytes``."""
    grid = {4 * KB, 8 * KB, 12 * KB, *range(SWEEP_STEP, SWEEP_FINE_UP_TO + 1, SWEEP_STEP), 768 * KB, 1024 * KB}
    decoded = list(decode.values()) if isinstance(decode, dict) else list(decode)
    size = 2048 * KB
    while decoded and size < max(decoded) and size <= SWEEP_MAX:
        grid.add(size)
        size *= 2
    unit = max(16, int(element_bytes))
    grid |= {max(unit, -(-int(d) // unit) * unit) for d in decoded}
    return sorted(g for g in grid if g <= SWEEP_MAX)


def measure_setting(setting: dict[str, Any], *, device: str, message_bytes: int | list[int], env: dict[str, str],
                    timeout_s: float = 120.0, iters: int = 400, custom: bool = False, full: int = 1) -> dict[str, Any]:
    """One fresh probe for one setting over ``message_bytes`` (one size or a sweep; the first
    is the row's ``latency_us``; the first ``full`` sizes, the decode sizes, take ``iters``
    samples, the others ``sweep_iters(iters)``); a failure is data (kind + reason), not an exception. On CUDA
    NCCL logs its per-call choice (TUNING), read into each size's ``algo``/``proto``.
    ``custom``: torch's symmetric-memory one-shot all-reduce instead of NCCL."""
    sizes = [message_bytes] if isinstance(message_bytes, int) else list(message_bytes)
    env_delta = {**env, **{k[4:]: str(v) for k, v in setting.items() if k.startswith("env.")},
                 **nccl.debug_env(tuning=device == "cuda" and not custom)}
    argv = [sys.executable, "-m", "orchestrator.driver.prescreen", "--world", str(setting["tp_size"]),
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
        return {**setting, "ok": False, "kind": "timeout", "reason": f"no answer in {timeout_s:.0f}s",
                "seconds": time.monotonic() - t0}
    _kill_group(proc)
    seconds = time.monotonic() - t0
    parsed = nccl.parse_log(err)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        kind = nccl.classify_failure(err) or "error"
        tail = (err.strip().splitlines() or ["no output"])[-1][:200]
        return {**setting, "ok": False, "kind": kind, "reason": tail, "seconds": seconds}
    result = json.loads(lines[-1])
    requested = {k[4:]: str(v) for k, v in setting.items() if k.startswith("env.")}
    warnings = nccl.verify_applied(requested, parsed) if parsed.get("version") else []
    chosen = {nbytes: (algo, proto) for coll, nbytes, algo, proto in parsed.get("per_call") or []
              if coll == "AllReduce"}
    sweep = [{"bytes": point["bytes"], "latency_us": point["latency_us"], "ci_us": median_interval(point["samples_us"]),
              **({"algo": chosen[point["bytes"]][0], "proto": chosen[point["bytes"]][1]}
                 if point["bytes"] in chosen else {})}
             for point in sorted(result.get("sweep") or [], key=lambda point: point["bytes"])]
    return {**setting, "ok": True, "latency_us": result["latency_us"], "samples_us": result["samples_us"],
            "graph": result["graph"], "bytes": result["bytes"], "seconds": seconds, "sweep": sweep,
            "nccl_version": parsed.get("version"), "transports": parsed.get("transports"), "warnings": warnings}


def median_interval(samples: list[float]) -> list[float]:
    """A 95% interval of the median of ``samples`` from their order statistics (distribution-free):
    the ranks n/2 -+ 0.98 sqrt(n); the whole range for fewer than 6 samples."""
    ordered = sorted(samples)
    n = len(ordered)
    if n < 6:
        return [ordered[0], ordered[-1]] if ordered else [0.0, 0.0]
    half = 0.98 * math.sqrt(n)
    return [ordered[max(0, int(n / 2 - half))], ordered[min(n - 1, math.ceil(n / 2 + half))]]


def sweep_iters(iters: int) -> int:
    """Samples of a size that no objective level uses: enough for a median (the crossovers
    are read where latencies differ by more than the noise), an eighth of the decode sizes'."""
    return max(10, iters // 8)


def merge_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a setting's probe launches: failed if any failed (the first failure), else
    each size's median the median of the launches' medians and its interval the union of theirs,
    so launches that disagree leave their sizes within the noise; every sample kept."""
    failed = [r for r in runs if not r["ok"]]
    if failed or len(runs) == 1:
        return failed[0] if failed else runs[0]
    by_size: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for point in run["sweep"]:
            by_size.setdefault(point["bytes"], []).append(point)
    sweep = []
    for size, points in sorted(by_size.items()):
        merged = {"bytes": size, "latency_us": statistics.median(p["latency_us"] for p in points),
                  "ci_us": [min(p["ci_us"][0] for p in points), max(p["ci_us"][1] for p in points)],
                  "rounds_us": [p["latency_us"] for p in points]}
        merged.update({k: points[0][k] for k in ("algo", "proto") if k in points[0]})
        sweep.append(merged)
    first = runs[0]
    return {**first, "latency_us": statistics.median(r["latency_us"] for r in runs),
            "samples_us": [x for r in runs for x in r["samples_us"]], "seconds": sum(r["seconds"] for r in runs),
            "rounds": len(runs), "sweep": sweep,
            "warnings": list(dict.fromkeys(w for r in runs for w in r.get("warnings") or []))}


def custom_runnable(device: str) -> str | None:
    """Why torch cannot run the custom path here, or None (CUDA; whether P2P works is the probe's
    to find out: it fails with the reason)."""
    if device != "cuda":
        return (f"torch's symmetric-memory one-shot all-reduce needs CUDA devices with P2P; this job runs on "
                f"{device}: not runnable here")
    return None


def _kill_group(proc: subprocess.Popen) -> None:
    """End the probe's ranks at once (NCCL processes often hang at exit): its tree and its
    process group (it runs in a session of its own)."""
    proctree.end(proctree.tree(proc.pid), 0.0, pgid=proc.pid, kill_wait_s=5.0)


def require_device(job, device: str) -> None:
    """The probes run here, on this machine: a CUDA job needs CUDA here (else every probe
    would fail after a minute of start-ups); BadInput, one line, at once."""
    if device != "cuda":
        return
    try:
        import torch  # heavy: imported only where a measurement runs on the device

        available = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no usable torch is no CUDA
        available = False
    if not available:
        raise BadInput(f"the job runs on CUDA (gpus_per_node: {job.gpus_per_node}) but this machine has no "
                       "CUDA device (torch.cuda.is_available() is false); the pre-screen times NCCL all-reduces "
                       "on the machine it runs on: run it on a GPU node of the job", file=str(job.path))


def run_prescreen(job, *, iters: int = 400, measured: dict[int, tuple[dict, float]] | None = None,
                  say=print, rounds: int | None = None) -> dict[str, Any]:
    """Measure every setting of the job's space over the sweep, ``rounds`` times (default the
    job's ``prescreen.rounds``) in alternating order (``merge_rounds``); predict decode tok/s
    where possible.

    ``measured`` maps tp_size -> (a measured config, its decode tok/s): the step time left
    after its all-reduces is "the rest" the prediction adds to the others' latencies.
    """
    backend = job.backend_obj()
    device = backend.device()
    require_device(job, device)
    facts = backend.model_facts()
    element = 2 if device == "cuda" else 4  # bf16 on GPUs, float32 on CPU (the probe's dtypes)
    hidden = int(facts.get("hidden_size", 4096))
    decode = decode_sizes(hidden, int(facts.get("dtype_bytes", element)), objectives.levels(job.objective))
    leading = list(dict.fromkeys(decode.values()))  # the decode sizes, the objective's first level first
    message = leading[0]
    sizes = [*leading, *(b for b in sweep_sizes(decode, element) if b not in leading)]
    per_step = int(facts.get("allreduces_per_step", 0))
    rounds = rounds or job.prescreen.rounds
    why_not = custom_runnable(device)
    settings = settings_of(job)
    tps = sorted({int(setting["tp_size"]) for setting in settings})
    probes = [(setting, False) for setting in settings] + ([] if why_not else [({"tp_size": tp}, True) for tp in tps])
    results: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(probes))}
    for turn in range(max(1, rounds)):  # each round in the other order: a drift of the host hits every path
        order = range(len(probes)) if turn % 2 == 0 else reversed(range(len(probes)))
        for i in order:
            setting, custom_path = probes[i]
            if results[i] and not results[i][-1]["ok"]:
                continue  # failed once: a failure is the row (a second launch would fail the same)
            row = measure_setting(setting, device=device, message_bytes=sizes, env=dict(job.env),
                                  timeout_s=job.timeouts.startup_s, iters=iters, custom=custom_path, full=len(leading))
            results[i].append(row)
            label = "custom all-reduce at tp_size=" + str(setting["tp_size"]) if custom_path else \
                " ".join(f"{k}={v}" for k, v in setting.items())
            say(f"prescreen {label} (round {turn + 1} of {rounds}): "
                + (f"{row['latency_us']:.1f} us per all-reduce of {message} B, {len(sizes)} sizes" if row["ok"]
                   else f"{row['kind']}: {row['reason']}"))
    rows = [merge_rounds(results[i]) for i, (_, custom_path) in enumerate(probes) if not custom_path]
    custom = [merge_rounds(results[i]) for i, (_, custom_path) in enumerate(probes) if custom_path]
    if why_not:
        custom = [{"tp_size": tp, "ok": False, "kind": "not-runnable", "reason": why_not} for tp in tps]
    for tp, (config, tok_s) in (measured or {}).items():
        same = [r for r in rows if r["ok"] and r["tp_size"] == tp
                and all(r.get(k) == v for k, v in config.items() if k.startswith("env.NCCL_"))]
        if not same or not per_step or not tok_s:
            continue
        rest = 1.0 / tok_s - per_step * same[0]["latency_us"] * 1e-6
        for r in rows:
            if r["ok"] and r["tp_size"] == tp:
                r["predicted_tok_s"] = 1.0 / (per_step * r["latency_us"] * 1e-6 + rest)
    versions = sorted({r["nccl_version"] for r in rows if r.get("nccl_version")})
    data = {"message_bytes": message, "allreduces_per_step": per_step, "device": device, "rows": rows,
            "decode_sizes": {str(level): size for level, size in decode.items()}, "sizes": sizes, "custom": custom,
            "nccl_version": versions[-1] if versions else None}
    data["crossovers"] = crossovers(data)
    files.write_whole(job.dir.prescreen, json.dumps(data, indent=2))
    files.write_whole(job.dir.prescreen_sweep, sweep_csv(data))
    return data


def label_of(row: dict[str, Any]) -> str:
    """A row's setting as the table names it: ``NCCL_PROTO=LL NCCL_ALGO=Ring``, ``custom``, or
    ``NCCL defaults``."""
    if row.get("custom"):
        return "custom"
    parts = [f"{k.removeprefix('env.')}={v}" for k, v in row.items() if k.startswith("env.")]
    return " ".join(parts) or "NCCL defaults"


def _paths(data: dict[str, Any], tp: int) -> list[tuple[str, dict[int, float]]]:
    """(label, {bytes: latency_us}) of every measured path at ``tp``: the NCCL settings, then the
    custom path."""
    return [(label, {b: lat for b, (lat, _, _) in points.items()}) for label, points in _measured(data, tp)]


def _measured(data: dict[str, Any], tp: int) -> list[tuple[str, dict[int, tuple[float, float, float]]]]:
    """(label, {bytes: (median, the median's 95% interval low, high)}) of every path at ``tp``;
    a point without an interval (a file written before) has the median at both ends."""
    def points(row: dict[str, Any]) -> dict[int, tuple[float, float, float]]:
        sweep = row.get("sweep") or [{"bytes": row["bytes"], "latency_us": row["latency_us"]}]
        return {p["bytes"]: (p["latency_us"], *(p.get("ci_us") or (p["latency_us"], p["latency_us"])))
                for p in sweep}
    out = [(label_of(r), points(r)) for r in data.get("rows") or [] if r.get("ok") and r["tp_size"] == tp]
    out += [("custom", points(r)) for r in data.get("custom") or [] if r.get("ok") and r["tp_size"] == tp]
    return out


def winners(data: dict[str, Any], tp: int, *, nccl_only: bool = False) -> list[tuple[int, str, float, bool]]:
    """(bytes, the fastest path's label, its latency, clear) at every size measured at ``tp``;
    ``clear``: it beats every other path there (``_beats``; else they are within the noise of
    each other at that size)."""
    paths = [(label, points) for label, points in _measured(data, tp) if not (nccl_only and label == "custom")]
    out = []
    for size in sorted({b for _, points in paths for b in points}):
        here = sorted((points[size], label) for label, points in paths if size in points)
        (latency, _, hi), label = here[0]
        out.append((size, label, latency, all(_beats(here[0][0], other) for other, _ in here[1:])))
    return out


def crossovers(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the fastest path changes beyond the noise, per TP: between two sizes where
    different paths are clearly fastest (sizes where they are within the noise of each other
    say nothing), ``below`` wins up to ``bytes`` (interpolated where the two latencies meet, on a
    log scale of size), ``above`` past it; and separately the custom path against NCCL's fastest
    at each size (``custom: true``)."""
    out: list[dict[str, Any]] = []
    for tp in sorted({r["tp_size"] for r in data.get("rows") or [] if r.get("ok")}):
        measured = dict(_measured(data, tp))
        paths = {label: {b: p[0] for b, p in points.items()} for label, points in measured.items()}
        series = [("all", [(b, label) for b, label, _, clear in winners(data, tp) if clear])]
        if "custom" in measured:
            custom = measured["custom"]
            won = []
            for b, _, _, _ in winners(data, tp, nccl_only=True):
                best = min((points[b] for label, points in measured.items() if label != "custom" and b in points),
                           default=None)
                if best is None or b not in custom:
                    continue
                if _beats(custom[b], best):
                    won.append((b, "custom"))
                elif _beats(best, custom[b]):
                    won.append((b, "NCCL"))
            series.append(("custom", won))
        for kind, clear in series:
            for (b1, l1), (b2, l2) in zip(clear, clear[1:]):
                if l1 != l2:
                    out.append({"tp_size": tp, "below": l1, "above": l2, "bytes": _meet(paths, kind, l1, l2, b1, b2,
                                                                                        data, tp),
                                "between": [b1, b2], "custom": kind == "custom"})
    return out


def _meet(paths: dict[str, dict[int, float]], kind: str, a: str, b: str, b1: int, b2: int, data, tp: int) -> int:
    """The size between ``b1`` and ``b2`` where path ``a``'s latency meets ``b``'s (linear in
    log size); the geometric middle where the latencies do not say."""
    if kind == "custom":
        best = {s: lat for s, _, lat, _ in winners(data, tp, nccl_only=True)}
        la = {s: paths["custom"][s] for s in (b1, b2)} if a == "custom" else {s: best[s] for s in (b1, b2)}
        lb = {s: paths["custom"][s] for s in (b1, b2)} if b == "custom" else {s: best[s] for s in (b1, b2)}
    else:
        la, lb = paths.get(a, {}), paths.get(b, {})
    try:
        d1, d2 = la[b1] - lb[b1], la[b2] - lb[b2]
    except KeyError:
        d1 = d2 = 0.0
    x1, x2 = math.log(b1), math.log(b2)
    if d1 != d2 and d1 <= 0 <= d2:
        return int(round(math.exp(x1 + (x2 - x1) * (-d1) / (d2 - d1))))
    return int(round(math.sqrt(b1 * b2)))


def _scores(data: dict[str, Any]) -> dict[str, float]:
    """config_key(setting) -> its latency relative to the fastest setting at its TP, the
    geometric mean over the objective's decode sizes (one size: the plain ratio); the sizes a
    row was not measured at fall back to its ``latency_us`` (files written before the sweep)."""
    decode = [int(v) for v in (data.get("decode_sizes") or {}).values()] or [int(data.get("message_bytes") or 0)]
    ok = [r for r in data["rows"] if r["ok"]]

    def at(row: dict[str, Any], size: int) -> float:
        for point in row.get("sweep") or []:
            if point["bytes"] == size:
                return float(point["latency_us"])
        return float(row["latency_us"])

    out: dict[str, float] = {}
    for r in ok:
        same = [o for o in ok if o["tp_size"] == r["tp_size"]]
        ratios = [at(r, size) / min(at(o, size) for o in same) for size in decode]
        out[config_key(_setting(r))] = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return out


def _setting(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k == "tp_size" or k.startswith("env.NCCL_")}


def dropped_settings(data: dict[str, Any], keep_within: float) -> dict[str, str]:
    """config_key(setting) -> why, for settings the study should not launch."""
    dropped: dict[str, str] = {}
    scores = _scores(data)
    best: dict[int, float] = {}
    for r in data["rows"]:
        if r["ok"]:
            best[r["tp_size"]] = min(best.get(r["tp_size"], float("inf")), r["latency_us"])
    for r in data["rows"]:
        key = config_key(_setting(r))
        if not r["ok"]:
            dropped[key] = f"pre-screen all-reduce failed ({r['kind']}: {r['reason']})"
        elif scores[key] > keep_within:
            dropped[key] = (f"pre-screen all-reduce {r['latency_us']:.1f} us, {scores[key]:.2f}x the fastest at "
                            f"TP={r['tp_size']} at the decode sizes (> {keep_within:g}x; fastest "
                            f"{best[r['tp_size']]:.1f} us at {data.get('message_bytes')} B)")
    return dropped


def late_settings(data: dict[str, Any], ratio: float = LATE_RATIO) -> set[str]:
    """config_key(setting) of the measured settings ``ratio`` x slower than the fastest at the
    same TP, or more (at the decode sizes): tried late by the search, not dropped."""
    return {key for key, score in _scores(data).items() if score >= ratio}


def setting_key(config: dict[str, Any]) -> str | None:
    """The pre-screen setting a (normalized) config belongs to; None at TP=1."""
    tp = int(config.get("tp_size", 1))
    if tp < 2:
        return None
    return config_key({"tp_size": tp, **{k: v for k, v in sorted(config.items()) if k.startswith("env.NCCL_")}})


def format_prescreen(data: dict[str, Any]) -> str:
    decode = data.get("decode_sizes") or {}
    levels = ", ".join(f"{size} B at {level} stream{'s' if level != '1' else ''}" for level, size in decode.items())
    lines = [f"All-reduce of {data['message_bytes']} bytes (the decode message at the objective's first level"
             + (f"; decode sizes: {levels}" if levels else "") + f"), "
             f"{data['allreduces_per_step']} per decode step, on {data['device']}:", "",
             "| setting | latency (median) | predicted decode tok/s | probe time | notes |", "|---|---|---|---|---|"]
    for r in data["rows"]:
        label = " ".join(f"{k.removeprefix('env.')}={v}" for k, v in r.items()
                         if k == "tp_size" or k.startswith("env."))
        if r["ok"]:
            pred = f"{r['predicted_tok_s']:.1f}" if r.get("predicted_tok_s") else "-"
            note = "; ".join(r.get("warnings") or []) or ("in a CUDA graph" if r.get("graph") else "eager")
            lines.append(f"| {label} | {r['latency_us']:.1f} us | {pred} | {r['seconds']:.1f}s | {note} |")
        else:
            lines.append(f"| {label} | FAIL {r['kind']} | - | {r['seconds']:.1f}s | {r['reason']} |")
    for r in data.get("custom") or []:
        if r.get("ok"):
            lines.append(f"| tp_size={r['tp_size']} custom all-reduce | {r['latency_us']:.1f} us | - | "
                         f"{r['seconds']:.1f}s | torch's symmetric-memory one-shot all-reduce |")
        else:
            lines.append(f"| tp_size={r['tp_size']} custom all-reduce | {r['kind']} | - | - | {r['reason']} |")
    for tp in sorted({r["tp_size"] for r in data["rows"] if r["ok"]}):
        won = winners(data, tp)
        if len(won) > 1:
            lines += ["", f"Fastest path per size at tp_size={tp} (sweep of {len(won)} sizes; 'within noise': no "
                          f"path clearly fastest):"]
            runs: list[list] = []
            for b, label, _, clear in won:
                name = label if clear else "within noise"
                if runs and runs[-1][2] == name:
                    runs[-1][1] = b
                else:
                    runs.append([b, b, name])
            lines += [f"  {_kb(lo)}{'' if lo == hi else '-' + _kb(hi)}: {name}" for lo, hi, name in runs]
    for c in data.get("crossovers") or []:
        what = "custom all-reduce against NCCL's fastest" if c["custom"] else "crossover"
        lines.append(f"tp_size={c['tp_size']} {what}: {c['below']} up to about {_kb(c['bytes'])}, {c['above']} "
                     f"above (between the measured {_kb(c['between'][0])} and {_kb(c['between'][1])})")
    return "\n".join(lines)


def sweep_csv(data: dict[str, Any]) -> str:
    """The sweep's table: ``tp_size,setting,bytes,latency_us,ci_lo_us,ci_hi_us,algo,proto,fastest``
    (the median's 95% interval; algo and proto as NCCL logged its choice, where it did; fastest:
    ``1`` clearly fastest at that size, ``tie`` within the noise of the fastest, else ``0``)."""
    lines = ["tp_size,setting,bytes,latency_us,ci_lo_us,ci_hi_us,algo,proto,fastest"]
    for row in [*data["rows"], *({**c, "custom": True} for c in data.get("custom") or [])]:
        if not row.get("ok"):
            continue
        label = label_of(row)
        for p in row.get("sweep") or []:
            lo, hi = p.get("ci_us") or (p["latency_us"], p["latency_us"])
            rank = standing(data, row["tp_size"], p["bytes"], label)
            lines.append(f"{row['tp_size']},{label},{p['bytes']},{p['latency_us']:.3f},{lo:.3f},{hi:.3f},"
                         f"{p.get('algo', '')},{p.get('proto', '')},{rank}")
    return "\n".join(lines) + "\n"


def standing(data: dict[str, Any], tp: int, size: int, label: str) -> str:
    """``1``: path ``label`` is clearly fastest at ``size``; ``tie``: within the noise of the
    fastest there (its interval reaches the fastest's); ``0``: slower beyond the noise."""
    measured = {name: points[size] for name, points in _measured(data, tp) if size in points}
    if label not in measured:
        return "0"
    best = min(measured.values())
    mine = measured[label]
    if mine == best:
        return "1" if all(_beats(best, p) for name, p in measured.items() if name != label) else "tie"
    return "0" if _beats(best, mine) else "tie"


def _beats(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether the point (median, low, high) ``a`` is clearly faster than ``b``: intervals apart
    and ``CLEAR_MARGIN`` faster."""
    return a[2] < b[1] and a[0] * CLEAR_MARGIN <= b[0]


def _kb(nbytes: int) -> str:
    return f"{nbytes / KB:g} KB" if nbytes < 1024 * KB else f"{nbytes / (1024 * KB):g} MB"


if __name__ == "__main__":
    probe_main()


class PrescreenedSpace:
    """A search space minus the NCCL settings the pre-screen dropped.

    Delegates to the job's space; ``feasible`` additionally refuses a config whose
    (tp_size, NCCL env) setting was dropped, so the search policy records such a
    proposal as not launched (and never counts it) instead of paying for a server.
    """

    def __init__(self, space, dropped: dict[str, str], normalize):
        self._space, self._dropped, self._normalize = space, dropped, normalize

    def __getattr__(self, name):
        return getattr(self._space, name)

    @property
    def checked_names(self) -> tuple[str, ...]:
        """The parameters a dropped setting is made of (``feasible.FeasibleSampler``)."""
        return tuple(n for n in self._space.names if n == "tp_size" or n.startswith("env.NCCL_"))

    def feasible(self, config: dict[str, Any]) -> str | None:
        reason = self._space.feasible(config)
        if reason is None:
            key = setting_key(self._normalize(dict(config)))
            reason = self._dropped.get(key) if key else None
        return reason
