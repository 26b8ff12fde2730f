"""Which knobs mattered: the share of the tok/s variance each parameter explains on its own.

Not Optuna's importance evaluator: its default changed between releases (fANOVA, which
needs scikit-learn; then PED-ANOVA, which rates what separates the top 10% of trials and,
on a study of 6-40 trials, ranks near-ties among the best above the knob that doubled
throughput). Study spaces here are small and categorical, so a one-way analysis of
variance per parameter is exact, deterministic and readable beside the mean tok/s of
each value.

Below ``FEW_TRIALS`` measured trials the shares come with a caveat: from a handful of trials a
knob's share is mostly which trials happened to be drawn (a value seen once carries that
launch's own noise), a hint where to look rather than a finding. Under 3 there is none.

Trials stopped early count with their one sample (they were stopped for being clearly
worse: leaving them out would hide exactly the knob that made them so). A conditional
parameter (absent where it does not apply, e.g. capture sizes without graphs) is rated
among the trials that set it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.core import outcome
from orchestrator.core.records import PRUNED, TrialRow

MIN_TRIALS = 3  # fewer measured trials: no shares at all
FEW_TRIALS = 10  # fewer: the shares are stated with a caveat


@dataclass(frozen=True)
class KnobEffect:
    name: str
    share: float  # of the tok/s variance among its trials explained by this parameter alone
    means: dict[Any, float]  # value -> mean tok/s of the trials with that value, in value order
    counts: dict[Any, int]  # value -> trials
    trials: int  # trials it was rated over
    conditional: bool  # set in only some trials: rated among those


def sort_values(values) -> list:
    """Parameter values in their natural order (mixed types by their text)."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def measured_points(rows: list[TrialRow]) -> list[tuple[dict[str, Any], float, bool]]:
    """(params, tok/s, stopped early) per launched trial whose measurement may be compared.

    Ranked COMPLETE trials (not cache answers) and trials stopped early with their first
    sample; never a config that failed the correctness gate or NCCL verification.
    """
    points = [(r.params, float(r.value), False) for r in outcome.rankable(rows) if r.value is not None]
    tainted = outcome.tainted_keys(rows)
    for r in rows:
        first = r.measured
        if (r.state == PRUNED and r.counted and r.cached_from is None and first
                and r.config_key not in tainted):
            points.append((r.params, float(first), True))
    return points


def span_text(values: list[float]) -> str:
    """'tok/s 102.6-193.6, a 47.0% range': what the shares divide, relative to its top."""
    lo, hi = min(values), max(values)
    return f"tok/s {lo:.1f}-{hi:.1f}, a {(hi - lo) / hi:.1%} range" if hi > 0 else "no tok/s"


def explained_share(values: list[float], levels: list[Any]) -> float:
    """Between-level sum of squares / total sum of squares (eta squared); 0 for no spread."""
    mean = sum(values) / len(values)
    total = sum((v - mean) ** 2 for v in values)
    if total <= 0:
        return 0.0
    groups: dict[Any, list[float]] = {}
    for v, level in zip(values, levels, strict=True):
        groups.setdefault(level, []).append(v)
    between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
    return between / total


def knob_effects(rows: list[TrialRow]) -> tuple[list[KnobEffect], list[str]]:
    """(effects, notes): parameters over every trial first, by share; then conditional ones."""
    points = measured_points(rows)
    if len(points) < MIN_TRIALS:
        return [], [f"parameter effects need at least {MIN_TRIALS} measured trials; this study has {len(points)}"]
    notes: list[str] = []
    if len(points) < FEW_TRIALS:
        notes.append(f"from only {len(points)} measured trials: a share from so few is a hint where to look, not a "
                     f"finding (a value seen in one or two trials carries their own noise); {FEW_TRIALS} or more "
                     "firm it up")
    stopped = sum(p for _, _, p in points)
    if stopped:
        notes.append(f"{stopped} of the {len(points)} trials {'was' if stopped == 1 else 'were'} stopped early "
                     "and count with their one sample")
    effects, single = _effects(points)
    if single:
        notes.append("not rated (one value in every measured trial): " + ", ".join(single))
    return effects, notes


def effects_given_top(rows: list[TrialRow], effects: list[KnobEffect],
                      best_params: dict[str, Any]) -> tuple[str, Any, list[KnobEffect], list[float]] | None:
    """(name, value, effects, tok/s values): the other knobs among the trials that share the
    best config's value of the dominant knob.

    One knob that explains most of the variance (graphs on/off) hides the rest: with graphs
    on, the NCCL protocol may still move tok/s by 20%, which is a few percent of a variance
    that graphs dominate. None when no knob dominates or too few trials share its value.
    """
    if not effects or effects[0].conditional or effects[0].share < 0.5 or effects[0].name not in best_params:
        return None
    name, value = effects[0].name, best_params[effects[0].name]
    subset = [p for p in measured_points(rows) if p[0].get(name) == value]
    if len(subset) < 3:
        return None
    others, _ = _effects(subset, skip=name)
    return (name, value, others, [v for _, v, _ in subset]) if others else None


def _effects(points: list[tuple[dict[str, Any], float, bool]], skip: str | None = None
             ) -> tuple[list[KnobEffect], list[str]]:
    """(effects by share, names with one value) over ``points``."""
    observed: dict[str, set] = {}
    for params, _, _ in points:
        for k, v in params.items():
            if k != skip and isinstance(v, (str, int, float, bool)):
                observed.setdefault(k, set()).add(v)
    effects = []
    for name in (k for k, vs in observed.items() if len(vs) >= 2):
        with_it = [(params[name], value) for params, value, _ in points if name in params]
        levels = [level for level, _ in with_it]
        values = [value for _, value in with_it]
        order = sort_values(set(levels))
        means = {lv: _mean([v for lvl, v in with_it if lvl == lv]) for lv in order}
        counts = {lv: levels.count(lv) for lv in order}
        effects.append(KnobEffect(name, explained_share(values, levels), means, counts, len(with_it),
                                  conditional=len(with_it) < len(points)))
    effects.sort(key=lambda e: (e.conditional, -e.share, e.name))
    return effects, sorted(k for k, vs in observed.items() if len(vs) < 2)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
