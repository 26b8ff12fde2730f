"""What the study has not explored: values never measured working, values seen only in configs far
below the best and never beside it, and value pairs of the parameters that matter most never
measured together.

A crown over a region the search never visited is what issue 49 found: on the GLM-5 stand-in a
study exported TP=4 x PP=2 at 3.48x the baseline, beyond noise, while TP=8 with LL over a Ring,
never launched together, ran 24% faster. TP=8 had been measured twice, with eager kernels (the
baseline) and with Tree and P2P off, so it looked slow; what was slow was the combination. The
answer must say so ("tp_size=8: seen only at 0.46x the best, never beside it"), and the search must
go there before it spends launches elsewhere (``strategies.value_led``: these gaps, tried beside the
best config, every other launch and first in a run that continues a study).

A *gap* is one of, in the order the search takes them:

- a value of the space never measured working (no COMPLETE or PRUNED launch carried it), unless the
  study holds it for the one that made launches fail (``study.culprits``: more likely bad than not)
  or its bans stopped it;
- a value measured working only in configs below ``TAU`` of the best, none of them beside a good
  config (within one setting of a config that measured within ``TAU`` of the best: values that always
  go together, TP=8 with PP=1, count as one);
- a value suspected of making launches fail whose failures all shared another value the best does not
  have (a failed launch is evidence about its combination: flashinfer's all-reduce failed twice, both
  times with P2P off, which it needs), never tried beside a good config;
- two values of the ``TOP`` parameters that moved the speed most (the spread of the best launch
  carrying each of their values), never measured together.

Values of the parameters that moved the speed most come first; of them, the one seen in the fewest
launches. A value tried beside a good config, or a pair measured together, is explored: how it measured
is the study's answer. Beside a good config, not only beside the best: the best moves by a few percent
as the search goes (and by noise), and a value seen at 0.45x one step from a config 2% below the best
has shown what it can do there; re-opening it at every new best spent one launch per value and best
(eager kernels, filled twice two launches apart in nights of the end-to-end stand-in).
``coverage(rows, choices, ...)`` computes them from the study's rows (the search, ``status`` and the
report read the same ones); ``describe`` says them in lines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, FAIL, NOT_THE_CONFIGS_FAULT, PRUNED, Config, TrialRow
from orchestrator.study.evidence.bans import banned_values
from orchestrator.study.model.additive import UNSET, value_of
from orchestrator.study.model.culprits import Culprits
from orchestrator.study.model.promise import row_value

Value = tuple[str, Any]

TAU = 0.9  # a value seen only in configs below this share of the best has not shown what it can do
TOP = 3  # the parameters whose value pairs must have been measured together
LIKELY_BAD = 0.5  # a value the failures make more likely bad than not is not a gap: it is a suspect


@dataclass(frozen=True)
class Gap:
    """Values the study has not explored (module docstring): one value, or a pair."""

    values: tuple[Value, ...]
    why: str  # "never measured working", "seen only at 0.46x the best (1 launch), never beside it", ...
    seen: int  # working launches that carried it (for a pair: carried both)


@dataclass(frozen=True)
class Coverage:
    """The study's gaps, in the order the search takes them, and the best config they are judged by."""

    best: Config | None
    best_value: float | None
    important: tuple[str, ...]  # the parameters that moved the speed most, most first
    gaps: tuple[Gap, ...]


def companions(configs: Iterable[Config], names: Sequence[str]) -> dict[Value, int]:
    """Each value's setting: values that always go together in ``configs`` (TP=8 and PP=1 where
    TP x PP = 8) share one number, so changing one is changing the other, one setting."""
    where: dict[Value, set[int]] = {}
    for i, cfg in enumerate(configs):
        for n in names:
            where.setdefault((n, value_of(cfg, n)), set()).add(i)
    ids: dict[frozenset[int], int] = {}
    return {v: ids.setdefault(frozenset(at), len(ids)) for v, at in where.items()}


def settings_apart(a: Config, b: Config, names: Sequence[str], together: Mapping[Value, int]) -> int:
    """How many settings ``a`` changes from ``b``: values that always go together count once, and a
    parameter only one of them has (capture sizes with graphs on) goes with the one that switches it."""
    return len({together.get((n, value_of(a, n)), -1 - i) for i, n in enumerate(names)
                if value_of(a, n) != value_of(b, n) and UNSET not in (value_of(a, n), value_of(b, n))})


def coverage(rows: Sequence[TrialRow], choices: Mapping[str, Sequence[Any]], objective: Objective | None = None,
             bans: Iterable[Value] = (), configs: Sequence[Config] | None = None) -> Coverage:
    """The gaps of a study (module docstring). ``rows``: its launched trials (``history`` rows, the
    normalized params); ``choices``: every parameter's values in the space; ``configs``: the space's
    normalized configs (which values always go together; default: none do)."""
    names = sorted(choices)
    banned = set(bans)
    launched = [r for r in rows if r.counted and r.cached_from is None and not r.skipped and (
        r.state in (COMPLETE, PRUNED) or (r.state == FAIL and r.failure_kind not in NOT_THE_CONFIGS_FAULT))]
    worked = [(v, r.params or {}) for r in launched if r.state in (COMPLETE, PRUNED)
              and (v := row_value(r, objective))]
    if not worked:
        return Coverage(None, None, (), ())
    top, best = max(worked, key=lambda p: p[0])
    together = companions(configs or [], names)
    suspects = Culprits.fit(launched, names, banned).bad

    good = [cfg for v, cfg in worked if v >= TAU * top]  # the contexts a value shows what it can do in

    def beside(cfg: Config) -> bool:
        return any(settings_apart(cfg, g, names, together) <= 1 for g in good)

    spread = {}
    for n in names:
        per: dict[Any, float] = {}
        for v, cfg in worked:
            x = value_of(cfg, n)
            per[x] = max(per.get(x, 0.0), v)
        spread[n] = math.log(max(per.values()) / min(per.values())) if len(per) > 1 else 0.0
    important = tuple(n for n in sorted(names, key=lambda n: (-spread[n], n)) if spread[n] > 0)[:TOP]
    every = {(n, value_of({n: x}, n)) for n in names for x in choices[n]}
    open_values = {v for v in every if v not in banned and suspects.get(v, 0.0) <= LIKELY_BAD}
    singles: list[tuple[float, int, Gap]] = []
    failed = [r for r in launched if r.state == FAIL]
    for n, x in sorted(every - open_values - banned, key=repr):  # a suspect that only ever failed beside one value
        fails = [{(m, value_of(r.params or {}, m)) for m in names} for r in failed
                 if value_of(r.params or {}, n) == x]
        if not fails or any(beside(r.params or {}) for r in launched if value_of(r.params or {}, n) == x):
            continue
        shared = set.intersection(*fails) - {(n, x)}
        partner = sorted((u for u in shared if value_of(best, u[0]) != u[1]), key=repr)
        if partner:
            singles.append((-spread[n], len(fails), Gap(((n, x),), f"failed only with {partner[0][0]}="
                                                        f"{partner[0][1]}, never beside the best", 0)))
    for n, x in sorted(open_values, key=repr):
        if x == value_of(best, n):
            continue
        carried = [v for v, cfg in worked if value_of(cfg, n) == x]
        if any(beside(r.params or {}) for r in launched if value_of(r.params or {}, n) == x):
            continue  # tried beside a good config: explored
        if not carried:
            why = "never measured working"
        elif max(carried) < TAU * top:
            many = f"{len(carried)} launch{'es' if len(carried) > 1 else ''}"
            why = f"seen only at {max(carried) / top:.2f}x the best ({many}), never beside it"
        else:
            continue
        singles.append((-spread[n], len(carried), Gap(((n, x),), why, len(carried))))
    pairs: list[tuple[float, int, Gap]] = []
    for a, b in combinations(important, 2):
        for xa in choices[a]:
            for xb in choices[b]:
                va, vb = (a, value_of({a: xa}, a)), (b, value_of({b: xb}, b))
                if va not in open_values or vb not in open_values:
                    continue
                if any(value_of(cfg, a) == va[1] and value_of(cfg, b) == vb[1] for _, cfg in worked):
                    continue
                pairs.append((-(spread[a] + spread[b]), 0, Gap((va, vb), "never measured together", 0)))
    gaps = [g for _, _, g in sorted(singles, key=lambda t: t[:2])]
    gaps += [g for _, _, g in sorted(pairs, key=lambda t: t[:2])]
    return Coverage(dict(best), top, important, tuple(gaps))


def of_job(job: Any, rows: Sequence[TrialRow]) -> Coverage:
    """The gaps of a job's study (``status`` and the report): the space's values and layouts from the
    job (``job.space``; without one, the values its trials carried), its bans from the rows."""
    space = getattr(job, "space", None)
    if space is not None:
        choices = {p.name: list(p.values(limit=64) or ()) for p in space.params}
        enumerated = space.enumerate()
        configs = [space.active(c) for c in enumerated] if enumerated is not None else None
    else:
        choices = {}
        for r in rows:
            for n, x in (r.params or {}).items():
                if x not in choices.setdefault(n, []):
                    choices[n].append(x)
        configs = None
    return coverage(rows, choices, getattr(job, "objective", None), banned_values(list(rows)), configs)


def _value_text(v: Value) -> str:
    return f"{v[0]}={v[1]}"


def describe(cov: Coverage, limit: int = 8) -> list[str]:
    """The gaps in lines (at most ``limit``, then how many more), or none when nothing is left."""
    if not cov.gaps:
        return []
    out = [f"not explored ({len(cov.gaps)}; `run --trials N` goes there first):"]
    for g in cov.gaps[:limit]:
        out.append("  " + " with ".join(_value_text(v) for v in g.values) + f": {g.why}")
    if len(cov.gaps) > limit:
        out.append(f"  ... and {len(cov.gaps) - limit} more")
    return out
