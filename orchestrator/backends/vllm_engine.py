"""vLLM as ncclsweep reads it: the start-up phases and durations its log names, what it says it
turned off, where it logs its regimes, its torch.compile cache, its /metrics names, and where its
custom all-reduce runs (``core.engines``). Captured from real vLLM 0.26.0 and 0.33.0 logs and
/metrics (tests/fixtures/vllm/, read in tests/node/test_startup.py and tests/core/test_prometheus.py).
"""

from __future__ import annotations

import re

from orchestrator.core.engines import CompileCache, Engine, PrefixCounters, Reported, SpecCounters, pattern
from orchestrator.core.measurement import BATCH, GRAPHS, KV_CACHE

# the speculative-decoding counters (summed over their ``engine``/``model_name`` labels)
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
# the prefix cache's counters, bare names (exposed with ``_total``)
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"

ENGINE = Engine(
    name="vllm",
    detect=pattern(r"^\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\w*) pid=\d+\)|vLLM API server version"),
    markers=(
        ("engine init", pattern(r"Initializing a V1 LLM engine|Initializing an LLM engine")),
        ("NCCL init", pattern(r"NCCL INFO|distributed_init_method|world_size=\d+ rank=\d+")),
        ("weights", pattern(r"Loading model from scratch|Starting to load model|Loading safetensors|Loading weights")),
        ("torch.compile", pattern(r"Using cache directory: .*torch\.compile|Dynamo bytecode transform|"
                                  r"Compiling a graph|Directly load the compiled")),
        ("profile and KV cache", pattern(r"Initial profiling/warmup run|Available KV cache memory|GPU KV cache size")),
        ("graph capture", pattern(r"Capturing CUDA graphs")),
        ("warm-up", pattern(r"Graph capturing finished")),
        ("API server start", pattern(r"init engine \(profile")),
        ("ready", pattern(r"Application startup complete")),
    ),
    reported=(
        Reported("weights_s", pattern(r"Loading weights took ([\d.]+) s")),
        Reported("model_load_s", pattern(r"Model loading took [\d.]+ \w+(?: memory)? and ([\d.]+) s")),
        Reported("compile_s", pattern(r"torch\.compile took ([\d.]+) s in total")),
        Reported("graph_capture_s", pattern(r"Graph capturing finished in ([\d.]+) s")),
        Reported("init_engine_s", pattern(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")),
    ),
    segments=(
        ("weights", ("model_load_s", "weights_s"), ()),  # the whole load (weights_s is a part of it)
        ("torch.compile", ("compile_s",), ()),
        ("graph capture", ("graph_capture_s",), ()),
        # init engine contains the compile and the capture
        ("profile, KV cache, warm-up", ("init_engine_s",), ("compile_s", "graph_capture_s")),
    ),
    process=re.compile(r"^\((\w+ pid=\d+)\)"),
    notices=(  # real vLLM 0.26.0 with n-gram or draft-model speculation (tests/fixtures/vllm/), besides
        # any engine's "<X> is disabled because <reason>" (its custom all-reduce, its weight prefetch)
        pattern(r"Model Runner V\d+ does not (?:yet )?support .*; using the V\d+ model runner instead"),
        pattern(r"Async scheduling not supported with .* and will be disabled"),
    ),
    # its process, then its level and time: ``(EngineCore pid=2) WARNING 12-01 20:58:24 [core.py:1] ``
    line_prefixes=(re.compile(r"^\(\w+ pid=\d+\)\s*"), re.compile(r"^(?:WARNING|INFO)\s+[\d-]+ [\d:]+ \[[^\]]*\]\s*")),
    compile_cache=CompileCache(hit=pattern(r"Directly load the compiled graph|Directly load AOT compilation"),
                               miss=pattern(r"Compiling a graph for"),
                               directory=pattern(r"Using cache directory: (\S*?torch_compile_cache/[0-9a-f]+)")),
    # the values it runs with, after its defaults: its engine config ('max_cudagraph_capture_size': 512, 0
    # when eager; 'max_capture_size' before 0.11), its non-default args ('max_num_seqs': 64), and
    # "GPU KV cache size: 1,339,776 tokens"
    regime_lines=((GRAPHS, pattern(r"'max_cudagraph_capture_size': (\d+)")),
                  (GRAPHS, pattern(r"'max_capture_size': (\d+)")),
                  (BATCH, pattern(r"'max_num_seqs': (\d+)")),
                  (KV_CACHE, pattern(r"GPU KV cache size: ([\d,]+) tokens"))),
    speculation=SpecCounters(drafts=DRAFTS, draft_tokens=DRAFT_TOKENS, accepted=ACCEPTED, source="vllm counters"),
    prefix_cache=PrefixCounters(queries=PREFIX_QUERIES, hits=PREFIX_HITS),
    custom_allreduce_world_sizes=(2, 4, 6, 8),  # custom_all_reduce.py's _SUPPORTED_WORLD_SIZES
)
