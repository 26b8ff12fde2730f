"""When the study relaunches the baseline or the incumbent during the search: the launch noise,
measured as the study goes.

Every verdict carries the launch noise (``study.launches``), and only a config launched more than
once shows it; the search launches each config once. So the study relaunches the two configs its
verdicts need most, on a schedule interleaved with the search (a machine that drifts over the
night shows in the spread instead of in one verdict):

- the baseline, as soon as it and one other config are measured, then, until the launch noise is
  known (``verdict.MIN_NOISE_DF``: until then no verdict has anything to rest on, and the race would
  have to take every config), a relaunch after every launch of the search, and back to back once
  the search is over (``search_over``);
- each time, whichever of the baseline and the incumbents (the best at each level of the objective,
  and the best for the mix) has the fewest launches (the cheaper first on a tie); later, whenever the seconds
  that relaunches took, this one's expected seconds included, stay within ``share`` of the
  seconds the search's own launches took (``budget.relaunch``; ``config.job.DEFAULT_RELAUNCH`` says why a fifth).

Cost-aware: a launch's expected seconds are the study's measured launch costs (``study.cost``,
per config), so an incumbent that takes 8 minutes to start is relaunched a quarter as often as a
baseline that takes 2. A relaunch is a trial of its own (``launch_role`` "relaunch"): uncounted,
no new config, not part of ``budget.trials``.

    next_relaunch(rows, objective, share, cost, in_flight, search_over) -> Relaunch | None
    launches_to_know_noise(rows, objective) -> int   relaunches the launch noise still needs (the ETA)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.config.job import Objective
from orchestrator.core import outcome
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.verdict import MIN_NOISE_DF
from orchestrator.study import objective as objectives
from orchestrator.study.cost import LaunchCost, trial_cost
from orchestrator.study.history import baseline_row
from orchestrator.study.launches import Evidence, measured_launches
from orchestrator.study.plan import best_at, best_for_mix

RELAUNCH = "relaunch"  # the ``launch_role`` of a relaunch


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
            out.append((got[0], f"the incumbent at {level}" if obj.is_plan else "the incumbent"))
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


def next_relaunch(rows: Sequence[TrialRow], objective: Objective | None, share: float,
                  cost: LaunchCost | None = None, in_flight: Iterable[str] = (),
                  search_over: bool = False) -> Relaunch | None:
    """The relaunch due now (module docstring), or None. ``in_flight``: config keys of relaunches
    still running (counted as launches, their expected seconds as spent); ``search_over``: no
    search launch comes any more (the relaunches that make the launch noise known follow each
    other)."""
    if share <= 0:
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
    if not _noise_known(rows, objective):  # until there is a launch noise, a verdict has nothing to rest on
        latest = max(rows, key=lambda r: r.number)
        if pending or (latest.launch_role == RELAUNCH and not search_over):
            return None  # one at a time, and between two launches of the search while it goes on
        return Relaunch(row.config_key, row, why, count[row.config_key], expected)
    if search_over:
        return None  # the noise is known: the race relaunches from here
    spent = sum(trial_cost(r) or 0.0 for r in rows if r.launch_role == RELAUNCH)
    spent += sum((cost.predict(c.params) if cost is not None else None) or 0.0
                 for c, _ in choices for k in pending if k == c.config_key)
    search = sum(trial_cost(r) or 0.0 for r in rows if r.launch_role is None and r.counted)
    if spent + (expected or 0.0) > share * search:
        return None
    return Relaunch(row.config_key, row, why, count[row.config_key], expected)
