"""A vLLM-compatible stand-in for tests that drive the vLLM backend end to end without GPUs.

It answers the command line ``vllm serve MODEL --host H --port P [--served-model-name N]
[any other vLLM flag]`` (and ``vllm --version``) by serving ``fake_openai_server`` (its
deterministic "model", vLLM's chunk shape, ``/health``, echo + logprobs) on that address
under that model name. Every other flag is accepted and ignored: what the tests check is
what the tuner launched (the argv and environment are in the trial log), not inference.

As vLLM's, its prefix cache is on unless ``--no-enable-prefix-caching`` (the fake server's
``--prefix-cache``: its counters in ``/metrics``), and ``--max-model-len N`` refuses a longer
request with vLLM's HTTP 400.

``--speculative-config JSON`` (or ``-sc``) speculates the way the fake server does
(``--spec-tokens`` = its ``num_speculative_tokens``: multi-token chunks, vLLM's /metrics
counters). A method named in ``FAKE_VLLM_WRONG_METHODS`` (comma-separated, from the server's
environment) has a broken verifier (``--spec-corrupt``): its greedy text differs from the same
server without speculation.

    fake_vllm.py serve /models/x --tensor-parallel-size 8 --host 127.0.0.1 --port 8000

At ``--tensor-parallel-size`` above 1 it logs the all-reduce lines vLLM 0.33.0 logs on a PCIe-only
box (their text from 0.33.0's ``custom_all_reduce.py``, ``symm_mem.py`` and
``cuda_communicator.py``, in the format of the real worker lines in tests/fixtures/vllm/): the
custom kernel turned off above two GPUs, symmetric memory without multicast, and the
``Using [...] all-reduce backends`` line of the tensor-parallel group, from the command line
(``--disable-custom-all-reduce``) and ``VLLM_ALLREDUCE_USE_*`` as vLLM reads them.
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
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--max-model-len", type=int, default=None)
    args, _ignored = p.parse_known_args(argv)
    print(f"fake vLLM {VERSION}: serving {args.model} as {args.served_model_name or args.model}", flush=True)
    if args.tensor_parallel_size > 1:
        print(all_reduce_lines(args.tensor_parallel_size, not args.disable_custom_all_reduce, os.environ), flush=True)
    spec: list[str] = []
    if args.speculative_config:
        method = args.speculative_config.get("method")
        spec = ["--spec-tokens", str(int(args.speculative_config.get("num_speculative_tokens") or 0))]
        if method in os.environ.get("FAKE_VLLM_WRONG_METHODS", "").split(","):
            spec.append("--spec-corrupt")
        print(f"fake vLLM: speculative decoding {args.speculative_config}", flush=True)
    served = [*(["--prefix-cache"] if args.enable_prefix_caching else []),
              *(["--max-model-len", str(args.max_model_len)] if args.max_model_len is not None else [])]
    return fake_openai_server.main(["--host", args.host, "--port", str(args.port), "--token-delay", str(TOKEN_DELAY_S),
                                    "--model", args.served_model_name or args.model, *spec, *served])


PREFIX = "(Worker_TP0 pid=4242) {level} 12-03 10:00:00 [{where}] "
POTENTIAL = ["FLASHINFER_PCIE_IPC", "FLASHINFER", "NCCL_SYMM_MEM", "QUICK_REDUCE", "AITER_CUSTOM", "CUSTOM", "SYMM_MEM",
             "PYNCCL"]


def all_reduce_lines(tp: int, custom: bool, env) -> str:
    """What vLLM 0.33.0's tensor-parallel group logs about its all-reduce on PCIe-only GPUs."""
    lines, enabled = [], []
    if env.get("VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC") == "1":
        enabled.append("FLASHINFER_PCIE_IPC")
    if env.get("VLLM_ALLREDUCE_USE_SYMM_MEM", "1") != "0":
        lines.append(PREFIX.format(level="WARNING", where="symm_mem.py:107")
                     + "SymmMemCommunicator: symmetric memory multicast operations are not supported.")
    if custom and tp > 2:
        lines.append(PREFIX.format(level="WARNING", where="custom_all_reduce.py:268")
                     + "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
                       "To silence this warning, specify disable_custom_all_reduce=True explicitly.")
    elif custom:
        enabled.append("CUSTOM")
    enabled.append("PYNCCL")
    listed = "[" + ", ".join(f"'{b}'" for b in enabled) + "]"
    every = "[" + ", ".join(f"'{b}'" for b in POTENTIAL) + "]"
    lines.append(PREFIX.format(level="INFO", where="cuda_communicator.py:353")
                 + f"Using {listed} all-reduce backends (in dispatch order) for group 'tp:0' out of potential "
                   f"backends: {every}.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
