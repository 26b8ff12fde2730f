"""The finalists' race: before a winner is named, the incumbent and every config within launch
noise of it are relaunched in interleaved rounds until the order is decided beyond noise or the
race's budget of launches (``budget.confirm``) is spent.

Why: one launch can be fast or slow as a whole, and the search launched most configs once; the
configs whose intervals over launches overlap the incumbent's cannot be told apart by what the
search measured. SMAC's intensifier races a challenger against the incumbent on fresh runs before
it may replace it; here every finalist is raced at once, in rounds A B C | C B A | A B C ..., and the
race reads its rounds as pairs (a blocked design): two finalists are compared on the ratios of their
launches round by round (``verdict.round_interval``), so what a round shares, a box that drifts
during the race or a neighbour's load, cancels instead of swelling the noise, and the order turning
each round cancels what is left of a steady drift within a round.

Contests: a study of one level has one contest, that level; a plan has one per level and, with
weights, one for the mix (``MIX``). Every launch measures every level, so one set of rounds serves
every contest: a round launches each config still in contention in some undecided contest, in the
order of ``RacePlan.order`` (the contests' finalists, each contest's incumbent first).

The rules:

- finalists (``plan_race``): per contest, the incumbent (``history.best_rows``' best there: the
  median over its launches) and every other rankable config whose interval against it over launches
  does not lie below 1.0 at 1 - 5% / budget (generous: a config a race could still crown is not
  left out by a single 95% look; none: the launch noise unknown), the best by their medians, as
  many as the budget gives the ``verdict.MIN_ROUNDS`` rounds a verdict between two of them needs
  (two finalists at least, ``MAX_FINALISTS`` at most); a contest where no config comes near the
  incumbent is decided without a launch.
- rounds: round r launches every config in contention once, the order turned every other round; a
  launch that fails counts (a config that no longer starts is not raced for ever) and, failing,
  leaves its round out of that finalist's pairs.
- after each whole round, in each undecided contest: the leader is the finalist in contention with
  the best median over launches (read at one time where the box drifted: ``launches.at_one_time``,
  what the ranking reads), and a finalist whose interval against the leader over the race's rounds
  lies below 1.0 leaves the contest (none before ``MIN_ROUNDS`` rounds measured both); one finalist
  left is a decided contest.
- confidence: the race judges its finalists after every round from the ``MIN_ROUNDS``-th, so each
  judgement is held to 1 - (1 - 95%) / ``looks`` (Bonferroni; ``looks`` the judgements the rounds the
  budget allows the finalists can make), and the study's verdicts between two finalists of one
  contest keep it (``launches.Evidence.looks``): a race is no way to a verdict by looking again and
  again.
- the end: every contest decided, or the budget spent. A contest undecided then is a tie between
  the configs still in it (``outcomes``). Where the box drifted during the study (``core.drift``),
  the outcome says so.
- resuming: a race launch records its race (``id``: the counted trials when the race was planned),
  its round, the contests' finalists and the looks; the race's state is recomputed from those
  records and the rows alone (``race_state``), so a driver killed during the race continues it and
  nothing is measured twice.

Cost-aware: ``RaceState.expected_seconds`` is what the launches still to come should take by each
finalist's own measured launch cost (``study.cost``): the driver counts it in the time to go,
stops the search early enough to leave it within ``budget.timeout``, and prints each finalist's
cost per launch with the race's plan.

The default budget, ``DEFAULT_CONFIRM`` (``config.job``), says why it is eight launches.

    plan_race(rows, objective, budget, race_id) -> RacePlan
    race_state(rows, objective, budget, race_id) -> RaceState   (the next launch, the contests)
    outcomes(rows, objective) -> [ContestOutcome]                the latest race, as readers see it
    said(outcomes, trial_numbers(rows)) -> str                   it in one line
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.job import DEFAULT_CONFIRM, Objective
from orchestrator.core.drift import Drift
from orchestrator.core.records import TrialRow
from orchestrator.core.verdict import (
    DEFAULT_CONFIDENCE,
    MIN_ROUNDS,
    SLOWER,
    RatioInterval,
    looked_confidence,
    verdict,
)
from orchestrator.study.evidence.launches import MIX, RACE, RACE_LOOKS, Evidence
from orchestrator.study.evidence.plan import best_at, best_for_mix
from orchestrator.study.model.cost import LaunchCost, trial_cost
from orchestrator.study.storage import objective as objectives

# At most this many finalists per contest (the incumbent and the closest rivals by their medians), and
# no more than the budget gives ``MIN_ROUNDS`` rounds each: a finalist raced on fewer rounds can be
# told from no other (the default budget of eight races two).
MAX_FINALISTS = 4
__all__ = ["DEFAULT_CONFIRM", "MAX_FINALISTS", "RACE", "Contest", "RacePlan", "RaceState", "ContestOutcome",
           "plan_race", "race_state", "race_rows", "outcomes", "said", "trial_numbers"]


@dataclass(frozen=True)
class Contest:
    """One thing the race decides: a level (``level``) or the mix (``weights``), among ``finalists``
    (config keys, the incumbent first)."""

    name: str  # str(level) or MIX
    finalists: tuple[str, ...]
    level: int | None = None
    weights: Mapping[int, float] | None = None
    left_out: int = 0  # configs within noise of the incumbent beyond MAX_FINALISTS

    @property
    def is_mix(self) -> bool:
        """The contest is the traffic mix's (else a level's)."""
        return bool(self.weights)

    def label(self) -> str:
        return "the mix" if self.is_mix else f"{self.level}"

    def ranked(self, ev: Evidence, key: str) -> float | None:
        """What the ranking reads of the finalist (``Evidence.ranked``)."""
        return ev.mix_ranked(key, self.weights) if self.weights else ev.ranked(key, self.level or 1)

    def drift(self, ev: Evidence) -> Drift:
        return ev.mix_drift(self.weights) if self.weights else ev.drift(self.level or 1)

    def interval(self, ev: Evidence, a: str, b: str) -> RatioInterval:
        """b against a: over the race's rounds where both are its finalists (at its looks), else over
        their launches."""
        if self.weights:
            return ev.mix_interval(a, b, self.weights)
        return ev.interval(a, b, self.level or 1)

    def screen(self, ev: Evidence, a: str, b: str, looks: int) -> RatioInterval:
        """b against a as the finalists are chosen: over launches, held to ``looks`` looks."""
        return ev.over_launches(a, b, self.level or 1, self.weights, looks=looks)



@dataclass(frozen=True)
class RacePlan:
    """A race (module docstring): its ``id`` (the counted trials when it was planned), its contests,
    its budget of launches and the looks its judgements are held to."""

    id: int
    contests: tuple[Contest, ...]
    budget: int
    looks: int
    configs: Mapping[str, TrialRow] = field(default_factory=dict)  # key -> the config's representative row

    @property
    def order(self) -> tuple[str, ...]:
        """Every finalist once, in the contests' order (each incumbent first): a round's order."""
        out: list[str] = []
        for c in self.contests:
            out += [k for k in c.finalists if k not in out]
        return tuple(out)

    @property
    def confidence(self) -> float:
        return looked_confidence(DEFAULT_CONFIDENCE, self.looks)

    def record(self, round_no: int) -> dict[str, Any]:
        """What a race launch of round ``round_no`` stores (``TrialRow.race``)."""
        return {"id": self.id, "round": round_no, "budget": self.budget, RACE_LOOKS: self.looks,
                "contests": {c.name: list(c.finalists) for c in self.contests}}


def _contests(objective: Objective | None) -> list[tuple[str, int | None, Mapping[int, float] | None]]:
    obj = objectives.of(objective)
    out: list[tuple[str, int | None, Mapping[int, float] | None]] = [(str(lv), lv, None)
                                                                   for lv in objectives.levels(obj)]
    if obj.weights:
        out.append((MIX, None, dict(obj.weights)))
    return out


def _ranked(rows: list[TrialRow], level: int | None, weights: Mapping[int, float] | None) -> list[TrialRow]:
    if weights:
        return best_for_mix(rows, dict(weights), len(rows))
    return best_at(rows, level or 1, len(rows))


def plan_race(rows: Sequence[TrialRow], objective: Objective | None, budget: int, race_id: int) -> RacePlan:
    """The race the rows call for now (module docstring, "finalists")."""
    rows = list(rows)
    ev = Evidence(rows)
    contests = []
    configs: dict[str, TrialRow] = {}
    most = min(MAX_FINALISTS, max(2, int(budget) // MIN_ROUNDS))
    for name, level, weights in _contests(objective):
        ranked = _ranked(rows, level, weights)
        if not ranked:
            continue
        incumbent = ranked[0]
        probe = Contest(name, (), level, weights)
        near = [r for r in ranked[1:]  # generous: only a config beyond noise at the race's strictest stays out
                if verdict(probe.screen(ev, incumbent.config_key, r.config_key, max(1, budget))) != SLOWER]
        picked = [incumbent] + near[: most - 1]
        contests.append(Contest(name, tuple(r.config_key for r in picked), level, weights,
                                left_out=max(0, len(near) - (most - 1))))
        for r in picked:
            configs.setdefault(r.config_key, r)
    contending = {k for c in contests if len(c.finalists) > 1 for k in c.finalists}
    rounds = math.ceil(budget / max(1, len(contending))) if contending else 0
    looks = max(1, rounds - MIN_ROUNDS + 1)  # the judgements those rounds allow (module docstring)
    return RacePlan(race_id, tuple(contests), max(0, int(budget)), looks, configs)


def _from_record(record: Mapping[str, Any], rows: list[TrialRow], objective: Objective | None,
                 budget: int, race_id: int) -> RacePlan:
    """The plan a stored race launch recorded (the finalists as they were when the race began)."""
    stored = record.get("contests") or {}
    contests = []
    for name, level, weights in _contests(objective):
        keys = tuple(k for k in stored.get(name) or () if isinstance(k, str))
        if keys:
            contests.append(Contest(name, keys, level, weights))
    configs: dict[str, TrialRow] = {}
    wanted = {k for c in contests for k in c.finalists}
    for r in sorted(rows, key=lambda r: r.number):  # a counted trial of the config names its params
        known = configs.get(r.config_key)
        if r.config_key in wanted and (known is None or (r.counted and not known.counted)):
            configs[r.config_key] = r
    looks = record.get(RACE_LOOKS)
    return RacePlan(race_id, tuple(contests), max(0, int(budget)), int(looks) if isinstance(looks, int) else 1,
                    configs)


@dataclass
class RaceState:
    """Where a race stands (module docstring): its plan, its launches so far, the round under way,
    who is still in contention in each contest."""

    plan: RacePlan
    launched: int = 0  # stored race launches
    round: int = 0  # the round under way
    rounds_done: int = 0
    alive: dict[str, tuple[str, ...]] = field(default_factory=dict)  # contest -> finalists in contention
    this_round: list[str] = field(default_factory=list)  # keys launched in the round under way
    evidence: Evidence | None = None
    eliminated: list[tuple[str, str, int]] = field(default_factory=list)  # (contest, key, after round)

    def undecided(self) -> list[Contest]:
        return [c for c in self.plan.contests if len(self.alive.get(c.name, ())) > 1]

    def contenders(self) -> list[str]:
        """Configs in contention in some undecided contest, in the round's order: the plan's, turned
        every other round (a steady drift within a round falls first on one, then on the other)."""
        keys = {k for c in self.undecided() for k in self.alive[c.name]}
        order = [k for k in self.plan.order if k in keys]
        return order[::-1] if self.round % 2 else order

    def next(self, in_flight: Iterable[str] = ()) -> str | None:
        """The config to launch next, None when none may start now (the round's others are in
        flight, the budget is spent, or the race is over)."""
        flying = list(in_flight)
        if self.launched + len(flying) >= self.plan.budget or not self.undecided():
            return None
        for key in self.contenders():
            if key not in self.this_round and key not in flying:
                return key
        return None

    def over(self, in_flight: Iterable[str] = ()) -> bool:
        """Nothing more to launch and nothing in flight."""
        flying = list(in_flight)
        return not flying and self.next() is None

    def launch_seconds(self, key: str, cost: LaunchCost | None) -> float | None:
        """What one launch of finalist ``key`` costs: the median of its own launches' costs (every
        finalist was launched), else the model's prediction (``study.cost``)."""
        rows = self.evidence.launches(key) if self.evidence is not None else []
        own = [c for r in rows if (c := trial_cost(r)) is not None]
        if own:
            return statistics.median(own)
        row = self.plan.configs.get(key)
        return cost.predict(row.params) if cost is not None and row is not None else None

    def expected_seconds(self, cost: LaunchCost | None) -> float | None:
        """Seconds the launches still allowed should take (each finalist's own cost, in the rounds'
        order); None when no cost is known."""
        left = self.plan.budget - self.launched
        order = self.contenders()
        if left <= 0 or not order:
            return 0.0
        pending = [k for k in order if k not in self.this_round] + order * (left // len(order) + 1)
        costs = [self.launch_seconds(k, cost) for k in pending[:left]]
        if any(c is None for c in costs):
            return None
        return float(sum(costs))  # type: ignore[arg-type]


def race_rows(rows: Sequence[TrialRow], race_id: int | None = None) -> list[TrialRow]:
    """The stored launches of race ``race_id`` (None: of the latest race), in trial order."""
    races = [r for r in rows if r.launch_role == RACE and isinstance((r.race or {}).get("id"), int)]
    if race_id is None:
        if not races:
            return []
        race_id = max(r.race["id"] for r in races)
    return sorted((r for r in races if r.race["id"] == race_id), key=lambda r: r.number)


def race_state(rows: Sequence[TrialRow], objective: Objective | None, budget: int, race_id: int) -> RaceState:
    """The race ``race_id`` as the stored rows leave it (module docstring, "resuming")."""
    rows = list(rows)
    mine = race_rows(rows, race_id)
    plan = _from_record(mine[0].race, rows, objective, budget, race_id) if mine else \
        plan_race(rows, objective, budget, race_id)
    state = RaceState(plan, launched=len(mine), alive={c.name: c.finalists for c in plan.contests})
    by_round: dict[int, list[TrialRow]] = {}
    for r in mine:
        by_round.setdefault(int(r.race.get("round", 0)), []).append(r)
    while True:
        launched = by_round.get(state.round, [])
        contenders = state.contenders()
        state.this_round = [r.config_key for r in launched]
        if not contenders or not launched or any(k not in state.this_round for k in contenders):
            break  # the round under way (or none may start)
        boundary = max(r.number for r in launched)
        state.evidence = Evidence([r for r in rows if r.number <= boundary])
        _judge(state, state.evidence)
        state.round += 1
        state.rounds_done += 1
    state.this_round = [r.config_key for r in by_round.get(state.round, [])]
    if state.evidence is None:
        state.evidence = Evidence(rows)
    return state


def _judge(state: RaceState, ev: Evidence) -> None:
    """After a whole round: in each undecided contest, the finalists beyond noise slower than the
    leader over the race's rounds leave it (none before ``MIN_ROUNDS`` rounds measured both)."""
    for contest in state.undecided():
        alive = state.alive[contest.name]
        leader = max(alive, key=lambda k: (contest.ranked(ev, k) or 0.0, -alive.index(k)))
        keep = []
        for key in alive:
            if key != leader and verdict(contest.interval(ev, leader, key)) == SLOWER:
                state.eliminated.append((contest.name, key, state.round))
            else:
                keep.append(key)
        state.alive[contest.name] = tuple(keep)


@dataclass(frozen=True)
class ContestOutcome:
    """How one contest of the latest race ended, as the readers say it: its ``winner`` (the best by
    the median over launches, ``history.best_rows``), ``tied`` (finalists still within the race's
    noise of it when the budget ran out), whether it is ``decided``, and what it cost."""

    contest: Contest
    winner: str | None
    tied: tuple[str, ...]
    decided: bool
    launches: int  # race launches in all
    rounds: int
    confidence: float
    finished: bool  # the race is over (else still under way: a stopped run)
    drift: str = ""  # the box drifted during the study at this contest (``core.drift``: its text), else ''

    def to_dict(self, numbers: Mapping[str, int]) -> dict[str, Any]:
        """JSON-able, configs named by their trial numbers (``numbers``: key -> trial)."""
        return {"contest": self.contest.name, "winner": numbers.get(self.winner or ""),
                "tied": [numbers.get(k) for k in self.tied],
                "finalists": [numbers.get(k) for k in self.contest.finalists], "decided": self.decided,
                "launches": self.launches, "rounds": self.rounds, "confidence": self.confidence,
                "finished": self.finished, "drift": self.drift or None}


def outcomes(rows: Sequence[TrialRow], objective: Objective | None) -> list[ContestOutcome]:
    """The latest race's contests as they stand (none when the study never raced)."""
    rows = list(rows)
    mine = race_rows(rows)
    if not mine:
        return []
    record = mine[0].race
    state = race_state(rows, objective, int(record.get("budget") or len(mine)), int(record["id"]))
    ev = Evidence(rows)
    out = []
    for contest in state.plan.contests:
        ranked = _ranked(rows, contest.level, contest.weights)
        winner = ranked[0].config_key if ranked else None
        alive = state.alive.get(contest.name, ())
        tied = tuple(k for k in alive if k != winner and winner is not None
                     and verdict(contest.interval(ev, winner, k)) != SLOWER)
        out.append(ContestOutcome(contest, winner, tied, decided=not tied, launches=len(mine),
                                  rounds=state.rounds_done, confidence=state.plan.confidence,
                                  finished=state.over(), drift=contest.drift(ev).text()))
    return out


def said(outcomes: list[ContestOutcome], numbers: dict[str, int]) -> str:
    """'raced: at 1 #5 decided over #8 (8 launches)' / 'at 10 #5 tied with #8: the 8 launches did not
    tell them apart', and where the box drifted, the drift (its first contest's: ``core.drift``);
    '' when the study never raced."""
    if not outcomes:
        return ""
    parts = []
    for o in outcomes:
        where = "for the mix" if o.contest.is_mix else f"at {o.contest.level}"
        win = f"#{numbers.get(o.winner or '', '?')}"
        others = [f"#{numbers.get(k, '?')}" for k in o.contest.finalists if k != o.winner]
        if o.tied:
            tied = ", ".join(f"#{numbers.get(k, '?')}" for k in o.tied)
            parts.append(f"{where} {win} tied with {tied}" + (": the race's launches did not tell them apart"
                                                           if o.finished else " so far (the race is not over)"))
        elif others:
            parts.append(f"{where} {win} decided beyond noise over {', '.join(others)}")
    if not parts:
        return ""
    o = outcomes[0]
    drift = next((x.drift for x in outcomes if x.drift), "")
    return f"raced ({o.launches} launches, {o.rounds} round(s)): " + "; ".join(parts) + (f"; {drift}" if drift else "")


def trial_numbers(rows: list[TrialRow]) -> dict[str, int]:
    """Config key -> the trial that names it (its first counted trial, else its first launch)."""
    out: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: (not r.counted, r.number)):
        out.setdefault(r.config_key, r.number)
    return out
