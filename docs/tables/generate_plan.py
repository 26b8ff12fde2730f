"""Regenerate the synthetic per-level (plan) replay tables of this folder (deterministic: fixed seeds).

    python docs/tables/generate_plan.py            # plan-h200-vllm-graphs.csv, plan-pcie-8gpu.csv

A plan table has one ``samples@N`` column per concurrency level (level 1: single-request
decode tok/s; N > 1: total output tok/s with N concurrent streams; format in
``orchestrator/study/simulation/replay_table.py``). Every number here is a figure of issue 24 (listed in
docs/tables/README.md, "Plan tables") or an assumption labelled P<n>; the samples are
SYNTHETIC: a mean per configuration and level from the model, then 3-5 repeats with a
per-configuration coefficient of variation drawn from a range.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEVELS_H200 = (1, 10, 64)
LEVELS_PCIE = (1, 10, 100)

# ---- one H200, vLLM 0.26.0, the 1b checkpoint, TP=1 (issue 24's measured table) -------------
# measured: eager 94.7 decode tok/s at 1, total 788/701 at 10 and 4500/3514 at 64; graphs captured
# up to 8: 433.9 at 1, 692/685 at 10, 3789/3542 at 64; captured up to 64: 363.8, 3438/3874, 13757/15673.
EAGER = {1: 94.7, 10: (788 + 701) / 2, 64: (4500 + 3514) / 2}
CAP8_AT1 = 433.9
CAP64 = {1: 363.8, 10: (3438 + 3874) / 2, 64: (13757 + 15673) / 2}
CAPTURES = {"1,2,4,8": 8, "1,2,4,8,16,32": 32, "1,2,4,8,16,32,64": 64}
MODES = ("PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY")


def h200_mean(graphs: bool, mode: str, capture: str, max_num_seqs: int, level: int) -> float:
    """Mean of a config at a level (the labelled assumptions)."""
    # P1: a batch larger than the largest captured size runs eager (vLLM pads a batch up to a
    # captured size, else it does not replay a graph): captured up to 8 is eager at 10 and 64, as
    # measured (692 vs 745, 3789 vs 4007).
    # P2: capturing more sizes costs at every level as at level 1 (433.9 up to 8 vs 363.8 up to 64,
    # the figures; read as a log-linear cost in the number of sizes: up to 32 halfway).
    # P3: FULL_AND_PIECEWISE is the graph mode; FULL_DECODE_ONLY decodes 3% faster at 1 (no
    # piecewise split of decode) and 6% slower from 10 on (mixed prefill/decode batches run eager);
    # PIECEWISE keeps 40% of eager's launch overhead at every level.
    # P4: max-num-seqs 256 reserves more KV cache blocks: 1% slower at every level; it admits the
    # same 64 requests.
    kv = 0.99 if max_num_seqs == 256 else 1.0
    if not graphs:
        return EAGER[level] * kv
    largest = CAPTURES[capture]
    if level > largest:
        return EAGER[level] * kv
    r = CAP64[1] / CAP8_AT1  # what capturing up to 64 instead of up to 8 costs (P2)
    sizes = math.log2(largest) - math.log2(8)  # 0 up to 8, 2 up to 32, 3 up to 64
    full = CAP64[level] / r * r ** (sizes / 3)
    if mode == "FULL_DECODE_ONLY":
        full *= 1.03 if level == 1 else 0.94
    elif mode == "PIECEWISE":
        step_full, step_eager = level / full, level / EAGER[level]
        full = level / (step_full + 0.4 * (step_eager - step_full))
    return full * kv


def h200_rows(seed: int = 20260101) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    configs = [(False, "", "", m) for m in (64, 256)]
    configs += [(True, mode, cap, m) for mode in MODES for cap in CAPTURES for m in (64, 256)]
    for graphs, mode, cap, mns in configs:
        row = {"graph_capture": str(graphs).lower(), "backend.cudagraph_mode": mode, "capture_sizes": cap,
               "backend.max_num_seqs": mns}
        cv = {lv: rng.uniform(0.01, 0.03) if lv == 1 else rng.uniform(0.02, 0.04) for lv in LEVELS_H200}  # P5
        for lv in LEVELS_H200:
            row[f"samples@{lv}"] = ";".join(f"{s:g}" for s in _samples(rng, h200_mean(graphs, mode, cap, mns, lv),
                                                                        cv[lv]))
        row.update(failure="", baseline="1" if (not graphs and mns == 64) else "", note="")
        rows.append(row)
    return rows


# ---- 8x RTX PRO 6000 over PCIe, a MoE model (issue 24: others' report) ----------------------------
# reported: P2P on wins for one request (90 vs 70 tok/s); P2P off with 32-64 channels and larger
# buffers wins at 100 concurrent requests (10,000 vs 5,000 tok/s); the MoE kernel backend that is
# best at 1-2 requests loses from 4 on.
CHANNELS = (8, 16, 32, 64)
BUFFERS = (4194304, 8388608, 16777216)
MOE = ("triton", "cutlass")


def pcie_mean(p2p_off: int, channels: int, buffsize: int, moe: str, level: int) -> float:
    # P6: single request: 90 tok/s with P2P on, 70 with P2P off (reported); more channels cost a
    # little latency at one request (32: -2%, 64: -4%), buffers none.
    # P7: at 100 requests with P2P off the all-reduces are bandwidth-bound: 5,500 total tok/s at 8
    # channels and 4 MiB buffers, x1.25 / x1.55 / x1.60 at 16 / 32 / 64 channels and x1.07 / x1.13
    # with 8 / 16 MiB buffers (64 channels, 16 MiB: ~9,950, the reported 10,000); with P2P on 5,000
    # (reported) whatever the channels and buffers (+-3%).
    # P8: at 10 requests: 1,500 (P2P off, 8 channels, 4 MiB), P2P on x1.07, P2P off 16 / 32 / 64
    # channels x1.05 / x1.10 / x1.08, buffers x1.02 from 8 MiB.
    # P9: the MoE backend "triton" is the best at 1 (cutlass x0.92 there) and loses from 4 on
    # (triton x0.85 at 10, x0.80 at 100).
    moe_f = {1: (1.0, 0.92), 10: (0.85, 1.0), 100: (0.80, 1.0)}[level][MOE.index(moe)]
    if level == 1:
        base = 70.0 if p2p_off else 90.0
        return base * {8: 1.0, 16: 1.0, 32: 0.98, 64: 0.96}[channels] * moe_f
    if level == 10:
        if not p2p_off:
            return 1500 * 1.07 * {8: 1.0, 16: 1.01, 32: 1.0, 64: 0.99}[channels] * moe_f
        buf = 1.0 if buffsize == BUFFERS[0] else 1.02
        return 1500 * {8: 1.0, 16: 1.05, 32: 1.10, 64: 1.08}[channels] * buf * moe_f
    if not p2p_off:
        return 5000 * {8: 1.0, 16: 1.02, 32: 0.99, 64: 0.97}[channels] * moe_f
    buf = {BUFFERS[0]: 1.0, BUFFERS[1]: 1.07, BUFFERS[2]: 1.13}[buffsize]
    return 5500 * {8: 1.0, 16: 1.25, 32: 1.55, 64: 1.60}[channels] * buf * moe_f


def pcie_failure(p2p_off: int, channels: int, buffsize: int) -> str:
    # P10: with P2P on, 64 channels x 16 MiB buffers of peer memory on each of 8 GPUs do not fit
    # beside the KV cache: the server does not start.
    return "start-crash" if not p2p_off and channels == 64 and buffsize == BUFFERS[2] else ""


def pcie_rows(seed: int = 20260102) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for p2p_off in (0, 1):
        for channels in CHANNELS:
            for buffsize in BUFFERS:
                for moe in MOE:
                    failure = pcie_failure(p2p_off, channels, buffsize)
                    row = {"env.NCCL_P2P_DISABLE": p2p_off, "env.NCCL_MIN_NCHANNELS": channels,
                           "env.NCCL_BUFFSIZE": buffsize, "backend.moe_backend": moe}
                    cv = {lv: rng.uniform(0.01, 0.03) if lv == 1 else rng.uniform(0.02, 0.04)  # P11
                          for lv in LEVELS_PCIE}
                    for lv in LEVELS_PCIE:
                        row[f"samples@{lv}"] = "" if failure else ";".join(
                            f"{s:g}" for s in _samples(rng, pcie_mean(p2p_off, channels, buffsize, moe, lv), cv[lv]))
                    base = (p2p_off, channels, buffsize, moe) == (0, 8, BUFFERS[0], "triton")
                    row.update(failure=failure, baseline="1" if base else "", note="")
                    rows.append(row)
    return rows


def _samples(rng: random.Random, mean: float, cv: float) -> list[float]:
    n = rng.randint(3, 5)
    return [round(max(0.1, rng.gauss(mean, cv * mean)), 1) for _ in range(n)]


def write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    write(HERE / "plan-h200-vllm-graphs.csv", h200_rows())
    write(HERE / "plan-pcie-8gpu.csv", pcie_rows())
