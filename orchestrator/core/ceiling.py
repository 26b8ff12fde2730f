"""How fast single-request decode could possibly be on this hardware: the ceiling.

At batch 1 every decoded token reads the model's weights (and KV cache) once, so the
step time is at least the bytes read divided by memory bandwidth; with tensor parallel
the bytes split across the TP GPUs, which read in parallel. On top of that come the
all-reduces of a step, which on PCIe run one after another with a fixed latency each::

    memory_s = bytes_per_token / tp / bandwidth_bytes_s      (bandwidth of ONE GPU)
    comm_s   = allreduces_per_step * allreduce_latency_s     (0 at tp == 1)
    ceiling  = 1 / (memory_s + comm_s)  tokens/s

The motivating case: 157 all-reduces x 135 us = 21 ms of a 50.5 ms eager step. The
ceiling ignores kernel launch gaps and compute, so real servers stay below it; the
report states the best config's fraction of it.

It is the ceiling of ONE token per step. Speculative decoding verifies several drafted
tokens in one target step, which reads the weights once: a step yields the mean accepted
length L of tokens (1 + accepted drafts per step, the server's own counters), so its ceiling
is L times the one-token ceiling (``speculative_ceiling``; optimistic: the drafting itself
is not counted). A speculative config above the one-token ceiling is explained by L, not an
impossible measurement.
"""

from __future__ import annotations

import math
import re
from typing import Any

from orchestrator.core.errors import brief


def decode_ceiling(bytes_per_token: float, bandwidth_bytes_s: float, allreduces_per_step: int = 0,
                   allreduce_latency_s: float = 0.0, tp: int = 1) -> dict[str, float]:
    """Single-request decode ceiling.

    ``bytes_per_token``: bytes read per decoded token summed over all ranks;
    ``bandwidth_bytes_s``: memory bandwidth of one GPU (declared or measured);
    ``allreduces_per_step`` x ``allreduce_latency_s``: the communication floor (counted
    only when ``tp > 1``). Returns ``ceiling_tok_s``, ``time_per_token_s``, ``memory_s``
    and ``comm_s``.
    """
    for name, value in (("bytes_per_token", bytes_per_token), ("bandwidth_bytes_s", bandwidth_bytes_s)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number, not {brief(value)}")
    if int(tp) < 1:
        raise ValueError(f"tp must be at least 1, not {brief(tp)}")
    if allreduces_per_step < 0 or allreduce_latency_s < 0:
        raise ValueError("allreduces_per_step and allreduce_latency_s must not be negative")
    tp = int(tp)
    memory_s = float(bytes_per_token) / tp / float(bandwidth_bytes_s)
    comm_s = float(allreduces_per_step) * float(allreduce_latency_s) if tp > 1 else 0.0
    total = memory_s + comm_s
    return {"ceiling_tok_s": 1.0 / total, "time_per_token_s": total, "memory_s": memory_s, "comm_s": comm_s}


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_bandwidth(text: Any) -> float:
    """Bytes/s from a number or a string such as ``"3.35 TB/s"``, ``"900GB/s"``, ``"1.2e12"``.

    Raises ValueError naming the rule for anything else.
    """
    if isinstance(text, bool):
        raise ValueError(f"memory bandwidth must be a number of bytes/s or e.g. '900 GB/s', not {brief(text)}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*([kKmMgGtT]i?)?\s*(?:B(?:/s|ps)?)?\s*", str(text))
        if not m:
            raise ValueError(f"memory bandwidth must be a number of bytes/s or e.g. '900 GB/s', not {brief(text)}")
        value = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"memory bandwidth must be positive, not {brief(text)}")
    return value


def ceiling_for(facts: dict[str, Any], bandwidth_bytes_s: float | None, tp: int = 1,
                allreduce_latency_s: float | None = None) -> dict[str, Any] | None:
    """The ceiling from a backend's ``model_facts()``; None when bytes or bandwidth are unknown.

    Adds ``bytes_per_token``, ``bandwidth_bytes_s``, ``tp``, ``allreduces_per_step`` and
    ``comm_known`` (False when the all-reduce latency was not measured: the ceiling is
    then memory-only and optimistic).
    """
    bytes_per_token = (facts or {}).get("bytes_per_token")
    if not bytes_per_token or not bandwidth_bytes_s:
        return None
    allreduces = int((facts or {}).get("allreduces_per_step") or 0) if tp > 1 else 0
    latency = float(allreduce_latency_s or 0.0)
    out: dict[str, Any] = decode_ceiling(bytes_per_token, bandwidth_bytes_s, allreduces, latency, tp)
    out.update(bytes_per_token=bytes_per_token, bandwidth_bytes_s=bandwidth_bytes_s, tp=tp,
               allreduces_per_step=allreduces, allreduce_latency_s=allreduce_latency_s,
               comm_known=tp <= 1 or allreduce_latency_s is not None)
    return out


def speculative_ceiling(ceiling: dict[str, Any], mean_accepted_length: float) -> dict[str, float]:
    """The ceiling when each weight pass yields ``mean_accepted_length`` tokens (speculative
    decoding; see the module docstring): ``tokens_per_pass`` and ``speculative_ceiling_tok_s``.
    Raises ValueError for a length below 1 (a step always yields the target's own token)."""
    length = float(mean_accepted_length)
    if not math.isfinite(length) or length < 1.0:
        raise ValueError(f"a mean accepted length is at least 1 token per step, not {brief(mean_accepted_length)}")
    return {"tokens_per_pass": length, "speculative_ceiling_tok_s": ceiling["ceiling_tok_s"] * length}
