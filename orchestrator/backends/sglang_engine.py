"""SGLang as ncclsweep reads it: the start-up phases and durations its log names, the prefix of
its lines, where it logs its regimes, its /metrics gauges of speculative decoding, and where its
custom all-reduce runs (``core.engines``). Its "<X> is disabled because <reason>" lines (overlap
scheduler, CUDA graphs, custom all-reduce: tests/fixtures/sglang/) are any engine's notices.
"""

from __future__ import annotations

import re

from orchestrator.core.engines import Engine, Reported, SpecGauges, pattern
from orchestrator.core.measurement import BATCH, GRAPHS, KV_CACHE

# gauges of the recent window: the mean accepted length and, where the release has it, the rate
ACCEPT_LENGTH = "sglang:spec_accept_length"
ACCEPT_RATE = "sglang:spec_accept_rate"

ENGINE = Engine(
    name="sglang",
    detect=pattern(r"sglang|The server is fired up and ready to roll|Load weight begin"),
    markers=(
        ("NCCL init", pattern(r"Init torch distributed begin")),
        ("weights", pattern(r"Load weight begin")),
        ("KV cache", pattern(r"Load weight end|KV Cache is allocated|Memory pool end")),
        ("graph capture", pattern(r"Capture .*cuda graph begin")),
        ("warm-up", pattern(r"Capture .*cuda graph end")),
        ("ready", pattern(r"The server is fired up and ready to roll")),
    ),
    reported=(
        Reported("nccl_init_s", pattern(r"Init torch distributed ends\. elapsed=([\d.]+) s")),
        Reported("weights_s", pattern(r"Load weight end\. elapsed=([\d.]+) s")),
        Reported("graph_capture_s", pattern(r"Capture .*cuda graph end\.? (?:Time elapsed: |elapsed=)([\d.]+) s")),
    ),
    segments=(
        ("NCCL init", ("nccl_init_s",), ()),
        ("weights", ("weights_s",), ()),
        ("graph capture", ("graph_capture_s",), ()),
    ),
    process=re.compile(r"^\[[\d-]+ [\d:]+ ((?:DP\d+ )?(?:PP\d+ )?TP\d+(?: EP\d+)?)\]"),
    line_prefixes=(re.compile(r"^\[[\d-]+ [\d:]+(?: [\w ]+)?\]\s*"),),  # ``[2026-12-03 10:00:01 TP0] ``
    # its server args (cuda_graph_max_bs=160, max_running_requests=128) and "max_total_num_tokens=665690"
    regime_lines=((GRAPHS, pattern(r"\bcuda_graph_max_bs(?:_decode)?=(\d+)")),
                  (BATCH, pattern(r"\bmax_running_requests=(\d+)")),
                  (KV_CACHE, pattern(r"\bmax_total_num_tokens=(\d+)"))),
    speculation=SpecGauges(accept_length=ACCEPT_LENGTH, accept_rate=ACCEPT_RATE,
                           source="sglang gauges (recent window)"),
    custom_allreduce_world_sizes=(2, 4, 6, 8),  # custom_all_reduce.py's _SUPPORTED_WORLD_SIZES
)
