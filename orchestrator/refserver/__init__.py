"""The embedded reference decode server: a small, real tensor-parallel LLM server.

``python -m orchestrator.refserver --model tiny --tp 2 --port 8000`` serves a Llama-style
decoder with deterministic random weights over an OpenAI-compatible HTTP API, on CPU
(gloo) or CUDA (NCCL, optional CUDA graphs), with injectable faults for testing the tuner.

Modules: ``presets`` (model dimensions, no torch), ``tokenizer`` (byte-level), ``model``
(sharded decoder, KV cache, CUDA graphs), ``engine`` (continuous batching on rank 0, step
broadcast to the other ranks), ``api`` (HTTP), ``procs`` (rank processes), ``cli`` (flags,
start-up), ``benchmark`` (the numbers in docs/benchmarks.md).
"""
