"""All-reduce pre-screen: seconds per NCCL setting instead of minutes per server launch.

A 744B model takes minutes to load; an NCCL setting can be judged in seconds by the
latency of the collective the decode step repeats: an all-reduce of the decode message
(hidden size x dtype bytes at batch 1), on the trial's TP size, with the setting's
environment, inside a CUDA graph as real servers run it (eager on CPU/gloo). Every
setting runs in fresh processes (NCCL reads its environment once per process).

``run_prescreen(job)`` measures each distinct (tp_size, NCCL env) of the job's space,
predicts decode tok/s where a measured trial gives "the rest" of a step
(1 / (all-reduces per step x latency + rest)), and writes ``prescreen.json`` into the
report folder. ``dropped_settings`` names those to skip before any server launch: failed,
or slower than ``keep_within`` x the fastest at the same TP (default 4: ``config.job``). ``late_settings``
is a prior for the ones kept: a setting ``LATE_RATIO`` (2) x slower than the fastest at its TP
or more is tried late, not dropped (the search policy leaves it out of its own start-up and
fill choices while others remain), so with the defaults the settings from 2x to 4x are.

The probe itself: ``python -m orchestrator.driver.prescreen --world N --device cuda --bytes B``
prints one JSON line from rank 0 (median microseconds per all-reduce, every sample).
"""

from __future__ import annotations

import argparse
import json
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

PARENT_ENV = "NCCLSWEEP_PRESCREEN_PARENT"
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
    n = max(1, args.bytes // (2 if cuda else 4))
    x = torch.ones(n, dtype=dtype, device="cuda" if cuda else "cpu")
    for _ in range(20):
        dist.all_reduce(x)
    samples: list[float] = []
    if cuda and args.graph:
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(args.per_graph):
                dist.all_reduce(x)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        for _ in range(max(1, args.iters // args.per_graph)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / args.per_graph)
    else:
        for _ in range(args.iters):
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if cuda:
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e6)
    if rank == 0:
        print(json.dumps({"latency_us": statistics.median(samples), "samples_us": samples,
                          "world": world, "bytes": n * x.element_size(), "graph": bool(cuda and args.graph)}),
              flush=True)
    dist.barrier()
    os._exit(0)  # processes that used NCCL may hang in teardown: never wait for it


def probe_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m orchestrator.driver.prescreen")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--iters", type=int, default=400)
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


def measure_setting(setting: dict[str, Any], *, device: str, message_bytes: int, env: dict[str, str],
                    timeout_s: float = 120.0, iters: int = 400) -> dict[str, Any]:
    """One fresh probe for one setting; a failure is data (kind + reason), not an exception."""
    env_delta = {**env, **{k[4:]: str(v) for k, v in setting.items() if k.startswith("env.")},
                 **nccl.debug_env()}
    argv = [sys.executable, "-m", "orchestrator.driver.prescreen", "--world", str(setting["tp_size"]),
            "--device", device, "--bytes", str(message_bytes), "--iters", str(iters),
            "--master-port", str(free_port())]
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
    return {**setting, "ok": True, "latency_us": result["latency_us"], "samples_us": result["samples_us"],
            "graph": result["graph"], "bytes": result["bytes"], "seconds": seconds,
            "nccl_version": parsed.get("version"), "transports": parsed.get("transports"), "warnings": warnings}


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
                  say=print) -> dict[str, Any]:
    """Measure every setting of the job's space; predict decode tok/s where possible.

    ``measured`` maps tp_size -> (a measured config, its decode tok/s): the step time left
    after its all-reduces is "the rest" the prediction adds to the others' latencies.
    """
    backend = job.backend_obj()
    require_device(job, backend.device())
    facts = backend.model_facts()
    message = int(facts.get("hidden_size", 4096)) * int(facts.get("dtype_bytes", 2))
    per_step = int(facts.get("allreduces_per_step", 0))
    rows = []
    for setting in settings_of(job):
        row = measure_setting(setting, device=backend.device(), message_bytes=message, env=dict(job.env),
                              timeout_s=job.timeouts.startup_s, iters=iters)
        rows.append(row)
        label = " ".join(f"{k}={v}" for k, v in setting.items())
        say(f"prescreen {label}: " + (f"{row['latency_us']:.1f} us per all-reduce" if row["ok"]
                                       else f"{row['kind']}: {row['reason']}"))
    for tp, (config, tok_s) in (measured or {}).items():
        same = [r for r in rows if r["ok"] and r["tp_size"] == tp
                and all(r.get(k) == v for k, v in config.items() if k.startswith("env.NCCL_"))]
        if not same or not per_step or not tok_s:
            continue
        rest = 1.0 / tok_s - per_step * same[0]["latency_us"] * 1e-6
        for r in rows:
            if r["ok"] and r["tp_size"] == tp:
                r["predicted_tok_s"] = 1.0 / (per_step * r["latency_us"] * 1e-6 + rest)
    data = {"message_bytes": message, "allreduces_per_step": per_step, "device": backend.device(), "rows": rows}
    files.write_whole(job.dir.prescreen, json.dumps(data, indent=2))
    return data


def dropped_settings(data: dict[str, Any], keep_within: float) -> dict[str, str]:
    """config_key(setting) -> why, for settings the study should not launch."""
    dropped: dict[str, str] = {}
    best: dict[int, float] = {}
    for r in data["rows"]:
        if r["ok"]:
            best[r["tp_size"]] = min(best.get(r["tp_size"], float("inf")), r["latency_us"])
    for r in data["rows"]:
        setting = {k: v for k, v in r.items() if k == "tp_size" or k.startswith("env.NCCL_")}
        if not r["ok"]:
            dropped[config_key(setting)] = f"pre-screen all-reduce failed ({r['kind']}: {r['reason']})"
        elif r["latency_us"] > keep_within * best[r["tp_size"]]:
            dropped[config_key(setting)] = (f"pre-screen all-reduce {r['latency_us']:.1f} us > {keep_within:g} x "
                                            f"the fastest {best[r['tp_size']]:.1f} us at TP={r['tp_size']}")
    return dropped


def late_settings(data: dict[str, Any], ratio: float = LATE_RATIO) -> set[str]:
    """config_key(setting) of the measured settings ``ratio`` x slower than the fastest at the
    same TP, or more: tried late by the search, not dropped."""
    best: dict[int, float] = {}
    for r in data["rows"]:
        if r["ok"]:
            best[r["tp_size"]] = min(best.get(r["tp_size"], float("inf")), r["latency_us"])
    return {config_key({k: v for k, v in r.items() if k == "tp_size" or k.startswith("env.NCCL_")})
            for r in data["rows"] if r["ok"] and r["latency_us"] >= ratio * best[r["tp_size"]]}


def setting_key(config: dict[str, Any]) -> str | None:
    """The pre-screen setting a (normalized) config belongs to; None at TP=1."""
    tp = int(config.get("tp_size", 1))
    if tp < 2:
        return None
    return config_key({"tp_size": tp, **{k: v for k, v in sorted(config.items()) if k.startswith("env.NCCL_")}})


def format_prescreen(data: dict[str, Any]) -> str:
    lines = [f"All-reduce of {data['message_bytes']} bytes (decode message at batch 1), "
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
    return "\n".join(lines)


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
