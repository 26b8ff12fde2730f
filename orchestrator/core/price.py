"""What serving costs at a throughput: dollars per million output tokens, and tok/s per GPU.

A job's ``cost:`` prices an hour of one GPU (``gpu_hour``) or of one node (``node_hour``; on a
GPU job a node's hour is shared by its GPUs: ``node_hour / gpus_per_node`` a GPU, so a config that
occupies half the node pays half its hour, and two TP=4 replicas and one TP=8 server compare on
one box; a CPU job's config pays the whole node). A config occupies the GPUs its server runs on
(``Backend.gpus_occupied``: TP x PP (x DP), or the node's where the backend cannot count them).
At the capacity point (``core.capacity``) the answer, ``status``, the report and ``export`` say::

    dollars per hour / (tok/s x 3600) x 1e6 = $ per million output tokens
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SECONDS_PER_HOUR = 3600.0
TOKENS = 1e6  # the price is per million output tokens


@dataclass(frozen=True)
class Cost:
    """The job's price: one of an hour of a GPU or of a node, in dollars (module docstring)."""

    gpu_hour: float | None = None
    node_hour: float | None = None

    def hourly(self, gpus: int, gpus_per_node: int) -> float:
        """Dollars an hour of a config that occupies ``gpus`` GPUs of a node of ``gpus_per_node``."""
        if self.gpu_hour is not None:
            return self.gpu_hour * max(1, gpus)
        node = float(self.node_hour or 0.0)
        return node * gpus / gpus_per_node if gpus_per_node > 0 and gpus > 0 else node

    def describe(self) -> str:
        """'$2.50 a GPU-hour'."""
        return f"${self.gpu_hour:g} a GPU-hour" if self.gpu_hour is not None else f"${self.node_hour:g} a node-hour"

    def to_record(self) -> dict[str, float]:
        return {"gpu_hour": self.gpu_hour} if self.gpu_hour is not None else {"node_hour": float(self.node_hour or 0)}


def per_million(dollars_per_hour: float, tok_s: float | None) -> float | None:
    """Dollars per million output tokens at ``tok_s`` (None where nothing was served)."""
    if not tok_s or tok_s <= 0:
        return None
    return dollars_per_hour / (tok_s * SECONDS_PER_HOUR) * TOKENS


@dataclass(frozen=True)
class Priced:
    """A config's price at its capacity point: the GPUs it occupies, tok/s per GPU, $ per million
    output tokens."""

    cost: Cost
    gpus: int
    tok_s: float | None

    @property
    def per_gpu(self) -> float | None:
        """tok/s per GPU it occupies (None on a CPU job: no GPU)."""
        return self.tok_s / self.gpus if self.tok_s and self.gpus > 0 else None

    def dollars(self, gpus_per_node: int) -> float | None:
        return per_million(self.cost.hourly(self.gpus, gpus_per_node), self.tok_s)

    def describe(self, gpus_per_node: int) -> str:
        """'$0.036 per million output tokens at $2.50 a GPU-hour, 19037 tok/s per GPU (1 GPU)'."""
        dollars = self.dollars(gpus_per_node)
        if dollars is None:
            return f"no price: nothing served within the SLO ({self.cost.describe()})"
        per_gpu = (f", {self.per_gpu:.0f} tok/s per GPU ({self.gpus} GPU{'s' if self.gpus != 1 else ''})"
                   if self.per_gpu is not None else "")
        return f"{money(dollars)} per million output tokens at {self.cost.describe()}{per_gpu}"

    def to_record(self, gpus_per_node: int) -> dict[str, Any]:
        return {**self.cost.to_record(), "gpus": self.gpus, "tok_s_per_gpu": self.per_gpu,
                "dollars_per_million_tokens": self.dollars(gpus_per_node), "text": self.describe(gpus_per_node)}


@dataclass(frozen=True)
class Pricing:
    """How a study prices its configs: the job's ``cost``, its ``gpus_per_node``, and the GPUs a
    config occupies (``gpus_of``: the job's backend counts them, ``config.job.Job.pricing``)."""

    cost: Cost
    gpus_per_node: int
    gpus_of: Callable[[Mapping[str, Any]], int]

    def price(self, config: Mapping[str, Any], tok_s: float | None) -> Priced:
        return Priced(self.cost, self.gpus_of(config), tok_s)


def money(dollars: float) -> str:
    """'$0.036', '$1.25', '$12.4': three significant figures."""
    return f"${dollars:.3g}" if dollars < 100 else f"${dollars:.0f}"
