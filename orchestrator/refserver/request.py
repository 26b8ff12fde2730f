"""A completion request as the engine sees it (no torch import: the HTTP layer builds it)."""

from __future__ import annotations

import itertools
import queue
from dataclasses import dataclass, field
from typing import Any

# (token id, its logprob, [(id, logprob) of the top k])
LogprobEntry = tuple[int, float, list[tuple[int, float]]]

_ids = itertools.count()


@dataclass(eq=False)
class Request:
    """Inputs from the client, the queue its events go to, and the engine's state of it."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    ignore_eos: bool = False
    logprobs: int | None = None  # top-k per token; None: no logprobs
    prompt_logprobs: bool = False  # echo scoring: logprobs of the prompt tokens
    out: queue.Queue = field(default_factory=queue.Queue)
    cancelled: bool = False
    # engine state
    rid: int = field(default_factory=lambda: next(_ids))
    slot: int = -1
    ids: list[int] = field(default_factory=list)
    n_gen: int = 0
    gen: Any = None  # torch.Generator when sampling
