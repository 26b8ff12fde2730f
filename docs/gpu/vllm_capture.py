"""Raw captures from real vLLM launches, for parser fixtures and the speculative-decoding figures.

    python3 docs/gpu/vllm_capture.py --model /tmp/models/refserver-1b --out $OUT/capture \
        --draft /tmp/models/refserver-1b-l2 --configs base,base-nccl,ngram,draft

Each config is one `vllm serve` launch (TP=1, CUDA graphs, its own process group, ended with
TERM then KILL): its whole log, the seconds to /health 200, the Prometheus /metrics text before
and after each prompt, and per prompt one greedy 128-token stream (chunks, usage tokens, decode
tok/s from the project's own client). `base` and `base-nccl` differ only in NCCL variables (the
compile cache should hit on the second); `ngram` and `draft` add a --speculative-config.
Writes <out>/<config>.log, <config>.json and <config>-metrics-{before,after}.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from orchestrator.node import client

OLD_DEFAULT = ("Write a detailed, step-by-step explanation of how a ring all-reduce works across "
               "eight GPUs, then summarize its cost in one sentence.")
PROMPTS = Path(__file__).resolve().parents[2] / "orchestrator" / "config" / "decode_prompts.jsonl"


def configs(draft: str | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    out = {
        "base": ([], {}),
        "base-nccl": ([], {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}),
        "ngram": (["--speculative-config", json.dumps(ngram)], {}),
        "eager": (["--enforce-eager"], {}),
    }
    if draft:
        spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": 3}
        out["draft"] = (["--speculative-config", json.dumps(spec)], {})
    return out


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - a capture script: report and go on
        return 0, str(exc)


def serve_argv(model: str, port: int, extra: list[str]) -> list[str]:
    """The `vllm serve` command line every capture launches (TP=1, served as "m"), with ``extra``."""
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", "m", "--max-model-len", "2048",
            "--gpu-memory-utilization", "0.5", "--max-num-seqs", "64", *extra]


def end_group(proc: subprocess.Popen) -> None:
    """End a server started in its own session: TERM to its group, 20 s, then KILL; reap it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def launch_only(name: str, model: str, extra: list[str], out: Path, port: int, limit_s: float, probe) -> dict:
    """One launch like ``launch``'s, with ``probe(base_url)`` as its only work (its answer in ``result``)."""
    argv = serve_argv(model, port, extra)
    log = open(out / f"{name}.log", "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    rec: dict = {"config": name, "argv": argv}
    try:
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() - t0 < limit_s and proc.poll() is None:
            if get(base + "/health", 2)[0] == 200:
                rec["ready_s"] = round(time.monotonic() - t0, 1)
                rec["result"] = probe(base)
                break
            time.sleep(0.5)
        return rec
    finally:
        end_group(proc)
        log.close()


def launch(name: str, model: str, extra: list[str], env_extra: dict[str, str], out: Path, port: int,
           limit_s: float) -> dict:
    argv = serve_argv(model, port, extra)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", **env_extra}
    log = open(out / f"{name}.log", "w")
    log.write("# " + " ".join(argv) + "\n# env: " + json.dumps(env_extra) + "\n")
    log.flush()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    rec: dict = {"config": name, "argv": argv, "env": env_extra}
    try:
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() - t0 < limit_s:
            if proc.poll() is not None:
                rec["exited"] = proc.returncode
                return rec
            if get(base + "/health", 2)[0] == 200:
                break
            time.sleep(0.5)
        else:
            rec["timeout"] = True
            return rec
        rec["ready_s"] = round(time.monotonic() - t0, 1)
        (out / f"{name}-metrics-before.txt").write_text(get(base + "/metrics")[1])
        prompts = [json.loads(x) for x in PROMPTS.read_text().splitlines() if x.strip()]
        cases = [(p["kind"], p["prompt"]) for p in prompts] + [("hello", "Hello"), ("old-default", OLD_DEFAULT)]
        client.stream_completion(base, "m", "warm up", 16, 60)
        rec["prompts"] = []
        for kind, prompt in cases:
            row: dict = {"kind": kind}
            for _ in range(2):
                res = client.stream_completion(base, "m", prompt, 128, 60)
                row.setdefault("decode_tok_s", []).append(res.decode_tok_s)
                row["chunks"], row["usage_tokens"], row["ok"] = len(res.token_times), res.n_tokens, res.ok
                row["text_head"] = res.text[:80]
            row["metrics_after"] = {k: v for k, v in parse_counts(get(base + "/metrics")[1]).items()
                                    if "spec_decode" in k}
            rec["prompts"].append(row)
        (out / f"{name}-metrics-after.txt").write_text(get(base + "/metrics")[1])
        return rec
    finally:
        end_group(proc)
        log.close()
        rec["total_s"] = round(time.monotonic() - t0, 1)


def parse_counts(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--configs", default="base,base-nccl,ngram,draft")
    ap.add_argument("--limit", type=float, default=400)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    table = configs(a.draft)
    for i, name in enumerate(a.configs.split(",")):
        extra, env = table[name]
        rec = launch(name, a.model, extra, env, a.out, 18200 + i, a.limit)
        (a.out / f"{name}.json").write_text(json.dumps(rec, indent=1))
        short = {k: rec.get(k) for k in ("config", "ready_s", "total_s", "exited", "timeout")}
        print(json.dumps(short), flush=True)
        for row in rec.get("prompts", []):
            print("  ", row["kind"], [round(x or 0, 1) for x in row["decode_tok_s"]], "chunks", row["chunks"],
                  "tokens", row["usage_tokens"], {k.split(":")[-1][:40]: v for k, v in row["metrics_after"].items()
                                                 if "per_pos" not in k}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
