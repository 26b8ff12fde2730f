"""When the study relaunches the baseline or the incumbent during the search: the launch noise,
measured as the study goes.

Every verdict carries the launch noise (``study.launches``), and only a config launched more than
once shows it; the search launches each config once. So the study relaunches the two configs its
verdicts need most, interleaved with the search (a machine that drifts over the night shows in the
spread instead of in one verdict), paid from a share of the search's own time so they never delay
what the night is for, reaching the optimum:

- while the search goes on, a relaunch is due whenever the seconds that relaunches took, this one's
  expected seconds included, stay within ``share`` of the seconds the search's own launches took
  (``budget.relaunch``; ``config.job.DEFAULT_RELAUNCH`` says why a fifth), once the baseline and one
  other config are measured: on a night of 30 search launches about six relaunches, spread over it.
  (Until issue 49 a relaunch followed every search launch until the noise was known: six of the
  first thirteen launches of a night, which put the optimum six launches later on every stand-in of
  the suite, docs/benchmarks.md, "Search on spaces it has not seen".)
- once the search is over (``search_over``: its budget spent, its space exhausted) and the launch
  noise is still not known (``verdict.MIN_NOISE_DF``: until then no verdict has anything to rest
  on, and the race would have to take every config), relaunches follow each other until it is;
- each time, whichever of the baseline and the incumbents (the best at each level of the objective,
  and the best for the mix) has the fewest launches (the cheaper first on a tie).

Cost-aware: a launch's expected seconds are the study's measured launch costs (``study.cost``,
per config), so an incumbent that takes 8 minutes to start is relaunched a quarter as often as a
baseline that takes 2. A relaunch is a trial of its own (``launch_role`` "relaunch"): uncounted,
no new config, not part of ``budget.trials``.

    next_relaunch(rows, objective, share, cost, in_flight, search_over) -> Relaunch | None
    launches_to_know_noise(rows, objective) -> int   relaunches the launch noise still needs (the ETA)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.config.job import Objective
from orchestrator.core import outcome
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.verdict import MIN_NOISE_DF
from orchestrator.study.evidence.history import baseline_row
from orchestrator.study.evidence.launches import Evidence, measured_launches
from orchestrator.study.evidence.plan import best_at, best_for_mix
from orchestrator.study.model.cost import LaunchCost, trial_cost
from orchestrator.study.storage import objective as objectives

RELAUNCH = "relaunch"  # the ``launch_role`` of a relaunch
# The search's first launches are its own (``held``): half its budget, at most 12 launches. Relaunched
# earlier, the baseline told nothing the race would not (it needs the noise at the end), and on every
# stand-in of the suite the optimum came two launches later (docs/benchmarks.md, "Search on spaces it
# has not seen").
HOLD_SHARE = 0.5
HOLD_MAX = 12
IMPROVING = 3  # and while one of the search's last three launches beat the best before it by 2%
BETTER = 0.02


@dataclass(frozen=True)
class Relaunch:
    """A relaunch to start: the config (``row``: its representative trial), why it and how many
    launches it has had."""

    key: str
    row: TrialRow
    why: str  # "the baseline", "the incumbent at 1", "the incumbent for the mix"
    launches: int
    expected_s: float | None = None  # its expected seconds by the measured launch costs


def candidates(rows: Sequence[TrialRow], objective: Objective | None) -> list[tuple[TrialRow, str]]:
    """The baseline (measured) and the incumbents, each config once, the baseline first."""
    obj = objectives.of(objective)
    out: list[tuple[TrialRow, str]] = []
    base = baseline_row(list(rows))
    if base is not None and base.state == COMPLETE and base.value is not None \
            and base.config_key not in outcome.tainted_keys(list(rows)):
        out.append((base, "the baseline"))
    levels = objectives.levels(obj)
    for level in levels:
        got = best_at(list(rows), level)
        if got:
            out.append((got[0], f"the incumbent at {level}" if obj.by_level else "the incumbent"))
    if obj.weights:
        got = best_for_mix(list(rows), obj.weights)
        if got:
            out.append((got[0], "the incumbent for the mix"))
    seen: set[str] = set()
    unique = []
    for row, why in out:
        if row.config_key not in seen:
            seen.add(row.config_key)
            unique.append((row, why))
    return unique


def _noise_known(rows: Sequence[TrialRow], objective: Objective | None) -> bool:
    """The launch noise is known at every level of the objective (``verdict.MIN_NOISE_DF``)."""
    return launches_to_know_noise(rows, objective) == 0


def launches_to_know_noise(rows: Sequence[TrialRow], objective: Objective | None) -> int:
    """Relaunches still needed before the launch noise is known at every level: each relaunch of a
    measured config adds one degree of freedom (``verdict.MIN_NOISE_DF``)."""
    ev = Evidence(rows)
    return max(0, max(MIN_NOISE_DF - ev.noise(level).df for level in objectives.levels(objective)))


def held(rows: Sequence[TrialRow], budget: int | None) -> bool:
    """The search's launches are its own while it finds better configs: its first ``HOLD_SHARE`` of
    the budget (at most ``HOLD_MAX``), and any time one of its last ``IMPROVING`` launches beat the
    best before it by more than ``BETTER``."""
    search = sorted((r for r in rows if r.launch_role is None and r.counted), key=lambda r: r.number)
    if len(search) < (HOLD_MAX if budget is None else min(HOLD_MAX, int(budget * HOLD_SHARE))):
        return True
    record = 0.0
    last_gain = -1
    for i, r in enumerate(search):
        v = r.worth if r.state == COMPLETE and r.worth is not None else 0.0  # what the study ranks by
        if v > record * (1.0 + BETTER):
            last_gain = i
        record = max(record, v)
    return len(search) - 1 - last_gain < IMPROVING


def next_relaunch(rows: Sequence[TrialRow], objective: Objective | None, share: float,
                  cost: LaunchCost | None = None, in_flight: Iterable[str] = (),
                  search_over: bool = False, budget: int | None = None) -> Relaunch | None:
    """The relaunch due now (module docstring), or None. ``in_flight``: config keys of relaunches
    still running (counted as launches, their expected seconds as spent); ``search_over``: no
    search launch comes any more (the relaunches that make the launch noise known follow each
    other); ``budget``: the search's launches in all (``budget.trials``; None: no limit)."""
    if share <= 0 or (not search_over and held(rows, budget)):
        return None
    pending = list(in_flight)
    choices = candidates(rows, objective)
    ranked_keys = {r.config_key for r in outcome.rankable(list(rows))}
    if len(choices) < 1 or len(ranked_keys) < 2 or choices[0][1] != "the baseline":
        return None  # the baseline and one other config measured first
    launches = measured_launches(rows)
    count = {row.config_key: len(launches.get(row.config_key, ())) + pending.count(row.config_key)
             for row, _ in choices}
    def price(row: TrialRow) -> float:
        return (cost.predict(row.params) if cost is not None else None) or 0.0

    row, why = min(choices, key=lambda c: (count[c[0].config_key], price(c[0])))  # min keeps the first on a tie
    expected = cost.predict(row.params) if cost is not None else None
    if search_over:
        if _noise_known(rows, objective) or pending:
            return None  # known: the race relaunches from here; unknown: one at a time, back to back
        return Relaunch(row.config_key, row, why, count[row.config_key], expected)
    known = [c for r in rows if (c := trial_cost(r))]
    typical = statistics.median(known) if known else 1.0  # no launch timed: every launch counts as one

    def seconds(r: TrialRow) -> float:
        return trial_cost(r) or typical

    def predicted(params: dict) -> float:
        return (cost.predict(params) if cost is not None else None) or typical

    spent = sum(seconds(r) for r in rows if r.launch_role == RELAUNCH)
    spent += sum(predicted(c.params) for c, _ in choices for k in pending if k == c.config_key)
    search = sum(seconds(r) for r in rows if r.launch_role is None and r.counted)
    if spent + predicted(row.params) > share * search:
        return None
    return Relaunch(row.config_key, row, why, count[row.config_key], expected)
