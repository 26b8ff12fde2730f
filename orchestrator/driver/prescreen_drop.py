"""What the study makes of the pre-screen before any server launch: the NCCL settings it drops
and the ones it tries late.

A setting is dropped when its probe failed, or when it is slower than ``keep_within`` x the
fastest at its TP (``prescreen.keep_within``, default 4: ``config.job``), judged at the objective's
decode sizes (the geometric mean of its ratio to the fastest at each): a server launch costs
minutes, a probe seconds. A kept setting ``LATE_RATIO`` (2) x slower than the fastest or more is a
prior, not a verdict: the search policy leaves it out of its own start-up and fill choices while
others remain, so with the defaults the settings from 2x to 4x are tried late. The custom path's
sweep is not part of it (the prior chooses among NCCL settings).
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.core.prescreened import Prescreen
from orchestrator.core.records import config_key

LATE_RATIO = 2.0  # a kept setting this much slower than the fastest all-reduce at its TP, or more, is tried late


def scores(data: Prescreen) -> dict[str, float]:
    """config_key(setting) -> its latency relative to the fastest setting at its TP, the
    geometric mean over the objective's decode sizes (one size: the plain ratio); the sizes a
    row was not measured at fall back to its ``latency_us`` (files written before the sweep)."""
    decode = data.decode()
    ok = [r for r in data.rows if r.ok]
    out: dict[str, float] = {}
    for r in ok:
        same = [o for o in ok if o.tp_size == r.tp_size]
        ratios = [r.latency_at(size) / min(o.latency_at(size) for o in same) for size in decode]
        out[r.key] = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return out


def dropped_settings(data: Prescreen, keep_within: float) -> dict[str, str]:
    """config_key(setting) -> why, for settings the study should not launch."""
    dropped: dict[str, str] = {}
    score = scores(data)
    best: dict[int, float] = {}
    for r in data.rows:
        if r.ok:
            best[r.tp_size] = min(best.get(r.tp_size, float("inf")), r.latency_us)
    for r in data.rows:
        if not r.ok:
            dropped[r.key] = f"pre-screen all-reduce failed ({r.kind}: {r.reason})"
        elif score[r.key] > keep_within:
            dropped[r.key] = (f"pre-screen all-reduce {r.latency_us:.1f} us, {score[r.key]:.2f}x the fastest at "
                              f"TP={r.tp_size} at the decode sizes (> {keep_within:g}x; fastest "
                              f"{best[r.tp_size]:.1f} us at {data.message_bytes} B)")
    return dropped


def late_settings(data: Prescreen, ratio: float = LATE_RATIO) -> set[str]:
    """config_key(setting) of the measured settings ``ratio`` x slower than the fastest at the
    same TP, or more (at the decode sizes): tried late by the search, not dropped."""
    return {key for key, score in scores(data).items() if score >= ratio}


def setting_key(config: dict[str, Any]) -> str | None:
    """The pre-screen setting a (normalized) config belongs to; None at TP=1."""
    tp = int(config.get("tp_size", 1))
    if tp < 2:
        return None
    return config_key({"tp_size": tp, **{k: v for k, v in sorted(config.items()) if k.startswith("env.NCCL_")}})


class PrescreenedSpace:
    """A search space minus the NCCL settings the pre-screen dropped.

    Delegates to the job's space; ``feasible`` additionally refuses a config whose
    (tp_size, NCCL env) setting was dropped, so the search policy records such a
    proposal as not launched (and never counts it) instead of paying for a server.
    """

    def __init__(self, space, dropped: dict[str, str], normalize):
        self._space, self._dropped, self._normalize = space, dropped, normalize

    def __getattr__(self, name):
        return getattr(self._space, name)

    @property
    def checked_names(self) -> tuple[str, ...]:
        """The parameters a dropped setting is made of (``feasible.FeasibleSampler``)."""
        return tuple(n for n in self._space.names if n == "tp_size" or n.startswith("env.NCCL_"))

    def feasible(self, config: dict[str, Any]) -> str | None:
        reason = self._space.feasible(config)
        if reason is None:
            key = setting_key(self._normalize(dict(config)))
            reason = self._dropped.get(key) if key else None
        return reason
