"""A vLLM-compatible stand-in for tests that drive the vLLM backend end to end without GPUs.

It answers the command line ``vllm serve MODEL --host H --port P [--served-model-name N]
[any other vLLM flag]`` (and ``vllm --version``) by serving ``fake_openai_server`` (its
deterministic "model", vLLM's chunk shape, ``/health``, echo + logprobs) on that address
under that model name. Every other flag is accepted and ignored: what the tests check is
what the tuner launched (the argv and environment are in the trial log), not inference.

``--speculative-config JSON`` (or ``-sc``) speculates the way the fake server does
(``--spec-tokens`` = its ``num_speculative_tokens``: multi-token chunks, vLLM's /metrics
counters). A method named in ``FAKE_VLLM_WRONG_METHODS`` (comma-separated, from the server's
environment) has a broken verifier (``--spec-corrupt``): its greedy text differs from the same
server without speculation.

    fake_vllm.py serve /models/x --tensor-parallel-size 8 --host 127.0.0.1 --port 8000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_openai_server

VERSION = "0.33.0"
TOKEN_DELAY_S = 0.002


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    p = argparse.ArgumentParser(prog="vllm")
    p.add_argument("command", choices=["serve"])
    p.add_argument("model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--speculative-config", "-sc", type=json.loads, default=None)
    args, _ignored = p.parse_known_args(argv)
    print(f"fake vLLM {VERSION}: serving {args.model} as {args.served_model_name or args.model}", flush=True)
    spec: list[str] = []
    if args.speculative_config:
        method = args.speculative_config.get("method")
        spec = ["--spec-tokens", str(int(args.speculative_config.get("num_speculative_tokens") or 0))]
        if method in os.environ.get("FAKE_VLLM_WRONG_METHODS", "").split(","):
            spec.append("--spec-corrupt")
        print(f"fake vLLM: speculative decoding {args.speculative_config}", flush=True)
    return fake_openai_server.main(["--host", args.host, "--port", str(args.port), "--token-delay",
                                    str(TOKEN_DELAY_S), "--model", args.served_model_name or args.model, *spec])


if __name__ == "__main__":
    sys.exit(main())
