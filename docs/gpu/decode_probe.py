"""Where a reference-server decode step spends its time on one GPU (issue 8's bandwidth gap).

    PYTHONPATH=. python docs/gpu/decode_probe.py --preset 8b [--kv 512] [--steps 300] [--module M ...]

The server's own model runs its fused Triton glue on CUDA; ``REFSERVER_FUSED=0`` in the
environment measures the torch-ops path instead (docs/gpu/decode-probe/ has both).
For each model module (default: the server's own, ``orchestrator.refserver.model``; pass
another module path, e.g. an older copy, to compare side by side in one run) it builds the
preset at TP=1 in bf16, captures the batch-1 decode graph for one KV bucket, and prints
one JSON line with:

- ``kernels``: GPU kernels one eager decode step launches (the same ones the graph holds);
- ``graph_ms``: median GPU time of one graph replay (back-to-back replays, CUDA events);
- ``step_ms``: one step as the server's loop does it, host-synced: replay, output head,
  argmax, ``.item()``;
- ``graph_tb_s`` / ``step_tb_s``: the weight bytes each reads per step over that time, the
  figures to hold against the copy bandwidth (``copy_tb_s``, measured first);
- ``gemv_ms`` / ``gemv_tb_s``: the layers' four weight GEMVs alone, captured in one graph
  (what the small kernels between them cost is ``graph_ms - gemv_ms``);
- ``top_kernels``: per kernel name, launches per step and GPU microseconds (eager step).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time

import torch

from orchestrator.node.hwprobe import memory_bandwidth
from orchestrator.refserver.presets import PRESETS


def kernel_census(fn) -> tuple[int, list]:
    """(kernels one call of fn launches, [[name, launches, GPU us], ...] by time)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    by_name: dict[str, list] = {}
    for e in events:
        row = by_name.setdefault(e.name[:90], [e.name[:90], 0, 0.0])
        row[1] += 1
        row[2] += e.time_range.elapsed_us()
    top = sorted(by_name.values(), key=lambda r: -r[2])[:14]
    return len(events), [[n, c, round(t, 1)] for n, c, t in top]


def replay_ms(graph, steps: int) -> list[float]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(5):
        start.record()
        for _ in range(steps // 5):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) / (steps // 5))
    return out


def gemv_graph(model):
    """One graph of every layer's qkv, o, gate_up and down GEMV at batch 1 (nothing else)."""
    d = model.dims.hidden
    x = torch.randn(1, d, device=model.device, dtype=model.dtype)
    inputs = {k: torch.randn(1, model.layers[0][k].shape[0], device=model.device,
                             dtype=model.dtype) for k in ("qkv", "o", "gate_up", "down")}
    inputs["qkv"] = inputs["gate_up"] = x
    graph = torch.cuda.CUDAGraph()
    for _ in range(2):
        for layer in model.layers:
            for k, a in inputs.items():
                torch.matmul(a, layer[k])
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for layer in model.layers:
            for k, a in inputs.items():
                torch.matmul(a, layer[k])
    return graph


def greedy(model, n: int = 8) -> list[int]:
    """n greedy tokens after a fixed prompt, eager (the same function in every module)."""
    dev = model.device
    ids = [256, 84, 104, 101, 32, 113, 117, 105]
    out = []
    model.forward(torch.tensor([ids], device=dev), torch.arange(len(ids), device=dev)[None],
                  torch.tensor([0], device=dev), len(ids))
    hidden = None
    for i in range(n):
        pos = len(ids) - 1 + i
        tok = ids[-1] if i == 0 else out[-1]
        hidden = model.forward(torch.tensor([[tok]], device=dev), torch.tensor([[pos]], device=dev),
                               torch.tensor([0], device=dev), pos + 1)
        out.append(int(model.logits(hidden[:, 0]).argmax(-1)))
    return out


def probe(module_name: str, preset: str, kv: int, steps: int) -> dict:
    mod = importlib.import_module(module_name)
    dims = PRESETS[preset]
    dev = torch.device("cuda", 0)
    model = mod.ShardedLlama(dims, tp=1, rank=0, device=dev, dtype=torch.bfloat16, seed=0,
                             max_slots=1, max_len=kv, all_reduce=lambda x: None,
                             with_head=True)
    tokens = torch.tensor([[65]], device=dev)
    positions = torch.tensor([[kv // 2]], device=dev)
    slots = torch.tensor([0], device=dev)
    with torch.inference_mode():
        for _ in range(3):
            model.forward(tokens, positions, slots, kv)
        tokens_greedy = greedy(model)
        n_kernels, top = kernel_census(lambda: model.forward(tokens, positions, slots, kv))
        graphs = mod.GraphRunner(model, [1])
        graphs.capture()
        graph, out = graphs.graphs[(1, graphs.buckets[-1])]
        per_replay = replay_ms(graph, steps)
        gemv = statistics.median(replay_ms(gemv_graph(model), steps))
        per_step = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(steps // 5):
                graph.replay()
                model.logits(out[:, 0]).argmax(dim=-1).item()
            per_step.append((time.perf_counter() - t0) * 1e3 / (steps // 5))
    layer_bytes = dims.layers * dims.layer_params() * 2
    all_bytes = dims.weight_bytes(2)
    graph_ms, step_ms = statistics.median(per_replay), statistics.median(per_step)
    return {"module": module_name, "preset": preset, "kv_bucket": kv, "kernels": n_kernels,
            "graph_ms": round(graph_ms, 4), "step_ms": round(step_ms, 4),
            "tok_s_host_synced": round(1e3 / step_ms, 1),
            "graph_tb_s": round(layer_bytes / graph_ms / 1e9, 3),
            "step_tb_s": round(all_bytes / step_ms / 1e9, 3),
            "gemv_ms": round(gemv, 4), "gemv_tb_s": round(layer_bytes / gemv / 1e9, 3),
            "graph_ms_samples": [round(x, 4) for x in per_replay], "top_kernels": top,
            "greedy": tokens_greedy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="8b", choices=sorted(PRESETS))
    ap.add_argument("--kv", type=int, default=512, help="KV length bucket of the graph")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--module", action="append",
                    help="model module(s) to compare (default: the server's)")
    args = ap.parse_args()
    bw = memory_bandwidth("cuda")
    print(json.dumps({"copy_tb_s": round(bw / 1e12, 3) if bw else None}), flush=True)
    for name in args.module or ["orchestrator.refserver.model"]:
        row = probe(name, args.preset, args.kv, args.steps)
        torch.cuda.empty_cache()
        if bw:
            row["graph_frac_of_copy"] = round(row["graph_tb_s"] * 1e12 / bw, 3)
            row["step_frac_of_copy"] = round(row["step_tb_s"] * 1e12 / bw, 3)
        print(json.dumps(row), flush=True)

if __name__ == "__main__":
    main()
