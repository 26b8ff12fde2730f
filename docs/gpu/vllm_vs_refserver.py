"""The reference server and a real vLLM on the same weights, side by side (run on a GPU node).

    python docs/gpu/vllm_vs_refserver.py --model-dir /tmp/models/refserver-1b --preset 1b --out vs.json

The checkpoint is the reference server's preset exported with
``python -m orchestrator.refserver.export_hf --model 1b --out DIR --device cuda``, so both
servers compute the same function (bf16; they sum in different orders). Both start (with
CUDA graphs) through the project's own ServerProcess; then, one server at a time:

- greedy agreement: 8 prompts x 32 tokens, each generated token with its runner-up; a text
  that differs is explained as a near-tie or not (``correctness.near_tie_margin``), and the
  log-probability drift of the reference server's text scored by vLLM is reported;
- single-request decode tok/s (the study's own measurement: median of 5 after 2 warm-ups).

Writes one JSON file and prints a short table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.backends import get_backend_class
from orchestrator.core import correctness
from orchestrator.core.launch import LaunchSpec
from orchestrator.node import client
from orchestrator.node.server import ServerProcess, free_port

# cuda on a GPU node; cpu (no graphs) only to try the script here against a vLLM stand-in
DEVICE = os.environ.get("VS_DEVICE", "cuda")

PROMPTS = [
    "The capital of France is",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Translate to German: The weather is nice today and we are going for a walk.",
    "Once upon a time",
    "The quick brown fox",
    "1, 2, 3, 4,",
    "Tensor parallel decode, step by step:",
    "a",
]


def _servers(args, logs: Path) -> dict[str, ServerProcess]:
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1", "HF_HUB_OFFLINE": "1"}
    p1, p2 = free_port(), free_port()
    ref = LaunchSpec(argv=[sys.executable, "-m", "orchestrator.refserver", "--model", args.preset, "--tp", "1",
                           "--device", DEVICE, *(["--graph-capture"] if DEVICE == "cuda" else []),
                           "--served-model-name", "ref",
                           "--host", "127.0.0.1", "--port", str(p1)], port=p1, model_name="ref")
    vllm = LaunchSpec(argv=[sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", args.model_dir,
                            "--served-model-name", "vllm", "--host", "127.0.0.1", "--port", str(p2),
                            "--max-model-len", "2048", "--gpu-memory-utilization", "0.5"], port=p2, model_name="vllm")
    # each engine's own tree rules (vLLM's model-inspection subprocess exits by design)
    rules = {kind: get_backend_class(kind)(settings).watch_rules()
             for kind, settings in (("refserver", {"model": args.preset, "device": DEVICE}),
                                    ("vllm", {"model": args.model_dir, "version": "0.26.0"}))}
    return {"refserver": ServerProcess(ref, logs / "refserver.log", base_env=env, watch=rules["refserver"]),
            "vllm": ServerProcess(vllm, logs / "vllm.log", base_env=env, watch=rules["vllm"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--preset", default="1b")
    ap.add_argument("--out", required=True)
    ap.add_argument("--logs", default="/tmp/vs-logs")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    servers = _servers(args, logs)
    result: dict = {"prompts": PROMPTS}
    try:
        for sp in servers.values():
            sp.start()
        for name, sp in servers.items():
            result[f"{name}_ready_s"] = round(sp.wait_ready(900), 1)
        outs = {}
        for name, sp in servers.items():
            outs[name] = client.greedy_outputs(sp.spec.base_url, sp.spec.model_name, PROMPTS, args.tokens, 60,
                                              top_logprobs=2)
        ref, other = outs["refserver"], outs["vllm"]
        rows = []
        for i, (a, b) in enumerate(zip(ref, other)):
            same = a["text"] == b["text"]
            margin = None if same else correctness.near_tie_margin(a.get("tokens"), b.get("tokens"), b.get("top"))
            first = next((k for k, (x, y) in enumerate(zip(a.get("tokens") or [], b.get("tokens") or [])) if x != y),
                         None)
            ref_lp = client.score_continuation(servers["refserver"].spec.base_url, "ref", PROMPTS[i], a["text"], 60)
            vllm_lp = client.score_continuation(servers["vllm"].spec.base_url, "vllm", PROMPTS[i], a["text"], 60)
            rows.append({"prompt": i, "same_text": same, "first_differing_token": first, "near_tie_margin": margin,
                         "refserver": a["text"], "vllm": b["text"],
                         "drift_nats_per_token": correctness.mean_abs_drift(ref_lp, vllm_lp)})
        result["agreement"] = rows
        for name, sp in servers.items():
            d = client.measure_decode(sp.spec.base_url, sp.spec.model_name, PROMPTS[0], 256, warmup=2, repeats=5,
                                     timeout_s=120)
            result[f"{name}_decode"] = d.to_metrics() if d.ok else {"error": d.error}
    finally:
        for sp in servers.values():
            sp.stop(10)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    same = sum(r["same_text"] for r in result.get("agreement", []))
    print(f"greedy agreement: {same}/{len(PROMPTS)} identical texts of {args.tokens} tokens")
    for r in result.get("agreement", []):
        if not r["same_text"]:
            print(f"  prompt {r['prompt']}: parts at token {r['first_differing_token']}, near-tie margin "
                  f"{r['near_tie_margin']}, drift {r['drift_nats_per_token']}")
    for name in servers:
        d = result.get(f"{name}_decode", {})
        print(f"{name}: decode {d.get('decode_tok_s')} tok/s (samples {d.get('decode_samples')}), "
              f"ready after {result.get(f'{name}_ready_s')} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
