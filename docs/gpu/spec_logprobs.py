"""What a real vLLM returns as log-probabilities when speculative decoding is on (issue 25).

    python3 docs/gpu/spec_logprobs.py --model /tmp/models/refserver-1b \
        --draft /tmp/models/refserver-1b-l2 --out $OUT/spec-logprobs --configs base,draft,ngram

Each config is one `vllm serve` launch (docs/gpu/vllm_capture.py's launcher). Per correctness prompt
(the gate's default prompts): the greedy 32-token text with each generated token's top-2 candidates
(log-probabilities from the sampler's own pass), and the echo score (`echo: true, logprobs: 1`) of
the *base* config's greedy text (prompt log-probabilities, the channel the gate compares). Writes
<out>/<config>-logprobs.json; a speculative config whose text equals base's but whose echo score
does not shows which channel the speculative path changes. (Its first run, 2026-12-02, got no answer:
the base server never turned healthy within the 250 s the call allowed; see docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_capture import launch_only

from orchestrator.config.job import DEFAULT_CHECK_PROMPTS
from orchestrator.node import client
from orchestrator.node.trial import NEAR_TIE_CANDIDATES


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", default="base,draft")
    args = ap.parse_args()
    # a `timeout` around this script sends TERM: end through the launcher's finally, which ends the server's
    # process group (a first run without this left a vLLM holding 72 GB of the GPU)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = {
        "base": [],
        "ngram": ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 4,
                                                       "prompt_lookup_max": 4, "prompt_lookup_min": 2})],
        "draft": ["--speculative-config", json.dumps({"method": "draft_model", "model": args.draft,
                                                       "num_speculative_tokens": 4})],
    }
    reference: list[str] | None = None
    for name in args.configs.split(","):
        def probe(base: str) -> dict:
            nonlocal reference
            prompts = list(DEFAULT_CHECK_PROMPTS)
            captures = []
            for _ in range(2 if reference is None else 1):  # the gate's capture (node.trial.capture_outputs)
                gen = client.greedy_outputs(base, "m", prompts, 32, 60, top_logprobs=NEAR_TIE_CANDIDATES)
                own = [g["text"] or "" for g in gen]
                captures.append({
                    "texts": own, "tokens": [g.get("tokens") for g in gen], "top": [g.get("top") for g in gen],
                    "logprobs": [client.score_continuation(base, "m", p, t, 60)
                                 for p, t in zip(prompts, reference or own)],
                    "own_text_logprobs": [client.score_continuation(base, "m", p, t, 60)
                                          for p, t in zip(prompts, own)]})
            if reference is None:
                reference = captures[0]["texts"]
            return {"prompts": prompts, "captures": captures, "generated": gen,
                    "echo_score_of_base_text": captures[-1]["logprobs"]}
        rec = launch_only(name, args.model, specs[name], out, 29000, 400, probe)
        (out / f"{name}-logprobs.json").write_text(json.dumps(rec, indent=1))
        res = rec.get("result") or {}
        gen = res.get("generated") or []
        same = sum(1 for g, r in zip(gen, reference or []) if g.get("text") == r)
        print(name, "ready", rec.get("ready_s"), "s; text as base:", same, "of", len(gen))
        for g, s in zip(gen, res.get("echo_score_of_base_text") or []):
            chosen = [max(t.values()) if t else None for t in (g.get("top") or [])][:6]
            print("  generated top-1 logprobs", [round(x, 3) if x is not None else None for x in chosen],
                  "| echo score of base text", [round(x, 3) for x in (s or [])[:6]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
