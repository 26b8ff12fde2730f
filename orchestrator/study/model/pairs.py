"""Which value pairs the study's launches have measured together, and how many new ones a config
would add: the arithmetic of a pairwise (covering-array) design.

Why (issue 49): on the boxes the search misses (``random-1``, ``random-2``, the GLM-5 box) the
optimum hides behind a value slow alone and fast with one partner. The additive model reads a
launch as evidence about each of its values; a pair it never launched together leaves no trace, so
nothing points at it. A design whose launches carry as many value pairs not yet launched together
as they can (a greedy covering array: after the baseline, launch k covers the most of what launches
0..k-1 did not) gives every pair an early, unconfounded launch, where the baseline's complement
(what the bound picks first) covers each single value and few pairs.

Values that always go together in the space (TP=8 with PP=1: ``coverage.companions``) are one
setting, so their pair is not counted (it is forced) and neither is a pair the space forbids (no
config carries it). A launch covers its pairs once it worked or is in flight; a failed launch says
nothing about speed, so its pairs stay open (the caller keeps values likely to crash out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

from orchestrator.core.records import Config
from orchestrator.study.model.additive import value_of

Value = tuple[str, Any]


def settings(cfg: Config, names: Sequence[str], together: Mapping[Value, int]) -> frozenset[Any]:
    """The config's settings: its values, values that always go together sharing one id."""
    return frozenset(together.get(v, v) for v in ((n, value_of(cfg, n)) for n in names))


def pairs_of(cfg: Config, names: Sequence[str], together: Mapping[Value, int]) -> set[frozenset[Any]]:
    """The pairs of settings the config carries together."""
    return {frozenset(p) for p in combinations(settings(cfg, names, together), 2)}


def covered(launched: Iterable[Config], names: Sequence[str], together: Mapping[Value, int]) -> set[frozenset[Any]]:
    """Every pair of settings some launched config carried together."""
    out: set[frozenset[Any]] = set()
    for cfg in launched:
        out |= pairs_of(cfg, names, together)
    return out


def new_pairs(configs: Sequence[Config], launched: Iterable[Config], names: Sequence[str],
              together: Mapping[Value, int]) -> list[int]:
    """For each of ``configs``, how many pairs of its settings no launch carried together."""
    done = covered(launched, names, together)
    return [len(pairs_of(c, names, together) - done) for c in configs]
