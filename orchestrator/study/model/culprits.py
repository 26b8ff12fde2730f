"""Which parameter values make a launch fail: a posterior over culprits that explains failures away.

A config that crashed, was refused or answered wrong says that *something* in it cannot work: one
of its values (NVLS without NVSwitch, LL128 over PCIe) or the combination (a capture list too large
for the memory one layout leaves). The search must keep off the culprit without condemning its
bystanders: on the GLM-5 stand-in a first launch with TP=4, PAT and LL128 failed (NCCL named PAT),
and a rule that shared the blame among the config's untried values kept TP=4, the runner-up
layout, off the rest of the night (issue 49).

The model: each value is *bad* (makes every launch that carries it fail) with prior ``PRIOR_BAD``,
independently. A launch that worked (COMPLETE or PRUNED) clears its values. A failed launch is
explained by any bad value it carried, or else, with chance ``UNEXPLAINED``, by its combination or
by accident (a server that fell over); a start failure cannot be a value that got past start-up
elsewhere (a wrong answer after a full start proves the values can start). A value the failure's
log names (``bans.named_in_log``: NCCL names the algorithm it refuses) is the culprit unless a log
named an innocent value, which happens with chance ``MISNAMED``. So two failures that shared LL128
and Ring leave each half suspect, one more failure of LL128 with Tree makes LL128 the likely
culprit and clears Ring back towards the prior (explaining away), and a failure whose log names PAT
leaves its other values as they were.

The posterior is exact: the suspects (values never cleared that some failure carried) fall into
groups that failures connect; each group's assignments are enumerated (``MAX_EXACT`` values; a
larger group, rare, falls back on each value's share of its failures). A failure whose values each
worked elsewhere is a combination's: its smallest combinations (pairs, else triples) that no working
launch carried together share the blame, so the search stops relaunching the same combination with
other bystanders (issue 49: a capture list too large for TP=2 crashed nine times in one night).
``Culprits.works(configs)``
is the chance that none of a config's values is bad, the factor the search multiplies a config's
promise by (``strategies.value_led``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np  # the enumeration over a group's assignments

from orchestrator.core.records import (
    AFTER_START_KINDS,
    COMPLETE,
    FAIL,
    NOT_THE_CONFIGS_FAULT,
    PRUNED,
    START_KINDS,
    Config,
    TrialRow,
)
from orchestrator.study.evidence.bans import named_in_log
from orchestrator.study.model.additive import value_of

Value = tuple[str, Any]

PRIOR_BAD = 0.15  # a value of a tuning space cannot work: 3 of ~20 in the motivating space (NVLS, PAT, LL128)
UNEXPLAINED = 0.1  # a failure no single value explains: a combination, or a server that fell over
MISNAMED = 0.05  # a failure's log names a value that is not why it failed
MAX_EXACT = 16  # values of one group enumerated exactly (2^16 assignments)


@dataclass(frozen=True)
class _Failure:
    suspects: tuple[Value, ...]
    named: frozenset[Value]


@dataclass(frozen=True)
class _Group:
    values: tuple[Value, ...]
    assignments: Any  # numpy (assignments x values) bool: which values are bad
    weights: Any  # numpy (assignments,): the posterior of each assignment


@dataclass(frozen=True)
class Culprits:
    """The posterior (module docstring)."""

    names: tuple[str, ...]
    groups: tuple[_Group, ...]
    cleared: frozenset[Value]
    bad: dict[Value, float]  # each suspect's marginal chance of being bad
    combos: dict[frozenset[Value], float] = field(default_factory=dict)  # combinations suspected, chance bad

    @classmethod
    def fit(cls, rows: Iterable[TrialRow], names: Sequence[str], bans: Iterable[Value] = ()) -> "Culprits":
        """The posterior given the study's launched ``rows`` (``history`` rows, normalized params) over
        the parameters ``names``; ``bans``: values the policy's bans (``study.bans``) already stopped
        (certainly bad)."""
        names = tuple(names)
        banned = set(bans)
        launched = [r for r in rows if r.counted and r.cached_from is None and not r.skipped and (
            r.state in (COMPLETE, PRUNED) or (r.state == FAIL and r.failure_kind not in NOT_THE_CONFIGS_FAULT))]

        def values(r: TrialRow) -> list[Value]:
            return [(n, value_of(r.params or {}, n)) for n in names]

        cleared = {v for r in launched if r.state != FAIL for v in values(r)}
        started = cleared | {v for r in launched if r.state == FAIL and r.failure_kind in AFTER_START_KINDS
                             for v in values(r)}
        failures = []
        worked = [frozenset(values(r)) for r in launched if r.state != FAIL]
        innocent: dict[frozenset[Value], float] = {}
        for r in launched:
            if r.state != FAIL:
                continue
            held = started if r.failure_kind in START_KINDS else cleared
            suspects = tuple(v for v in values(r) if v not in held)
            if any(v in banned for v in suspects):
                continue  # explained: a banned value was in it
            if not suspects:  # every value worked elsewhere: a combination of them did not
                combos = _uncleared(values(r), worked)
                for c in combos:
                    innocent[c] = innocent.get(c, 1.0) * (1.0 - (1.0 - UNEXPLAINED) / len(combos))
                continue
            named = frozenset((n, value_of({n: x}, n)) for n, x in named_in_log(r)) & set(suspects)
            failures.append(_Failure(suspects, named))
        groups, bad = _posterior(failures)
        for v in banned:
            bad[v] = 1.0
        return cls(names, tuple(groups), frozenset(cleared), bad, {c: 1.0 - left for c, left in innocent.items()})

    def works_absolute(self, configs: Sequence[Config]) -> list[float]:
        """The chance that none of each config's values is bad, a value never tried at the prior."""
        rel = self.works(configs, cap=False)
        out = []
        for cfg, r in zip(configs, rel):
            fresh = sum(1 for n in self.names if (n, value_of(cfg, n)) not in self.cleared)
            out.append(r * (1.0 - PRIOR_BAD) ** fresh)
        return out

    def works(self, configs: Sequence[Config], cap: bool = True) -> list[float]:
        """How likely each config is to work against one of values never tried: the chance that none
        of its suspects is bad over the prior's (a suspect the failures explained away weighs
        nothing; capped at 1.0: the search is optimistic about what it has not tried)."""
        out = np.ones(len(configs))
        grouped = {v for g in self.groups for v in g.values}
        for i, cfg in enumerate(configs):
            for n in self.names:
                v = (n, value_of(cfg, n))
                if v not in grouped and v in self.bad:
                    out[i] *= (1.0 - self.bad[v]) / (1.0 - PRIOR_BAD)
        for g in self.groups:
            index = {v: j for j, v in enumerate(g.values)}
            masks = np.zeros((len(configs), len(g.values)), dtype=np.int32)
            for i, cfg in enumerate(configs):
                for n in self.names:
                    j = index.get((n, value_of(cfg, n)))
                    if j is not None:
                        masks[i, j] = 1
            clean = (g.assignments.astype(np.int32) @ masks.T) == 0  # (assignments x configs)
            out *= (g.weights @ clean) / (1.0 - PRIOR_BAD) ** masks.sum(axis=1)
        if self.combos:
            for i, cfg in enumerate(configs):
                mine = {(n, value_of(cfg, n)) for n in self.names}
                for combo, chance in self.combos.items():
                    if combo <= mine:
                        out[i] *= 1.0 - chance
        return [float(x) for x in (np.minimum(out, 1.0) if cap else out)]


def _uncleared(values: list[Value], worked: list[frozenset[Value]]) -> list[frozenset[Value]]:
    """The smallest combinations of a failed launch's values (pairs, else triples) that no working
    launch carried together: what may be why it failed when each value worked elsewhere."""
    for size in (2, 3):
        found = [frozenset(c) for c in combinations(values, size)
                 if not any(set(c) <= w for w in worked)]
        if found:
            return found
    return []


def _posterior(failures: list[_Failure]) -> tuple[list[_Group], dict[Value, float]]:
    """The groups of suspects that failures connect, each enumerated (or its fallback), and every
    suspect's marginal chance of being bad."""
    parent: dict[Value, Value] = {}

    def find(v: Value) -> Value:
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for f in failures:
        for v in f.suspects:
            find(v)
        for a, b in zip(f.suspects, f.suspects[1:]):
            parent[find(a)] = find(b)
    members: dict[Value, list[Value]] = {}
    for v in parent:
        members.setdefault(find(v), []).append(v)
    groups: list[_Group] = []
    bad: dict[Value, float] = {}
    for group in members.values():
        group = sorted(group, key=repr)
        mine = [f for f in failures if f.suspects and f.suspects[0] in group]
        if len(group) > MAX_EXACT:
            bad.update(_shares(group, mine))
            continue
        g = _enumerate(group, mine)
        groups.append(g)
        marginal = g.weights @ g.assignments
        bad.update({v: float(p) for v, p in zip(g.values, marginal)})
    return groups, bad


def _enumerate(group: list[Value], failures: list[_Failure]) -> _Group:
    k = len(group)
    index = {v: j for j, v in enumerate(group)}
    codes = np.arange(2 ** k, dtype=np.int64)
    assignments = ((codes[:, None] >> np.arange(k)) & 1).astype(bool)
    n_bad = assignments.sum(axis=1)
    log_w = n_bad * np.log(PRIOR_BAD) + (k - n_bad) * np.log(1.0 - PRIOR_BAD)
    for f in failures:
        mask = np.zeros(k, dtype=bool)
        mask[[index[v] for v in f.suspects]] = True
        explained = (assignments & mask).any(axis=1)
        log_w += np.where(explained, 0.0, np.log(UNEXPLAINED))
        for v in f.named:  # the log names v: v is bad, or the log misnamed it
            log_w += np.where(assignments[:, index[v]], 0.0, np.log(MISNAMED))
    w = np.exp(log_w - log_w.max())
    return _Group(tuple(group), assignments, w / w.sum())


def _shares(group: list[Value], failures: list[_Failure]) -> dict[Value, float]:
    """A group too large to enumerate: each failure's blame shared among its suspects (a named one
    takes it alone), a value's chance that of being the culprit of at least one of its failures."""
    innocent = {v: 1.0 - PRIOR_BAD for v in group}
    for f in failures:
        blamed = list(f.named) or list(f.suspects)
        for v in blamed:
            innocent[v] *= 1.0 - (1.0 - UNEXPLAINED) / len(blamed)
    return {v: 1.0 - left for v, left in innocent.items()}
