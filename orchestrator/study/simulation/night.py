"""One night replayed whole: the search, the relaunches and the race as the driver schedules them,
every launch counted, and what the export would name against the truth.

``study.replay`` counts the search's own launches; a user's night has more: the driver relaunches
the baseline and the incumbent while the search goes (``study.relaunch``: the launch noise every
verdict carries) and races the finalists at the end (``study.race``). Each costs a server start
(7-8 minutes for GLM-5 on the PCIe box), so "launches to the optimum" that leave them out flatter
the search. Here the real ``SearchPolicy`` searches an in-memory study of a table (one slot, as one
node runs it), the schedule's relaunches come where ``next_relaunch`` puts them, the race runs to
its end (``race_state``), and the export is read as ``ncclsweep export`` reads it
(``history.best_rows`` over every launch). Per night:

- ``first_optimal``: the launch, of any kind, that first ran an optimal config (the table's best,
  every tie counts); ``first_optimal_search``: the same in search launches only;
- ``regret``: how far the exported config's true value lies below the table's best (0: optimal);
- ``reached``: the same for the best config any launch ran: an export that misses by more than 2%
  where ``reached`` is within 2% is the pick's fault (relaunches, race, the export's rule), else the
  search never ran a config good enough (``SuiteResult.missed_picks`` counts the former);
- ``hours``: the launches' start-up and benchmark time where the table has start-up costs.

    replay_night(table, spec, seed, budget=...) -> Night
    run_nights(tables, specs, seeds=20, budget=30) -> list[SuiteResult]     (``ncclsweep simulate --suite``)
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from orchestrator.config.job import DEFAULT_CONFIRM, DEFAULT_RELAUNCH, Objective
from orchestrator.core.outcome import DEFAULT_PRUNE_RATIO
from orchestrator.core.records import AFTER_START_KINDS, TrialResult
from orchestrator.study.evidence.history import best_rows
from orchestrator.study.model.cost import compile_key
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.race import RACE, race_state
from orchestrator.study.search.relaunch import RELAUNCH, next_relaunch
from orchestrator.study.search.samplers import make_sampler, startup_trials
from orchestrator.study.simulation.replay import Noise, SamplerSpec, TableSpace, nearest_rank, replay_launch
from orchestrator.study.simulation.replay_table import Table
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage.storage import ATTR_LAUNCH_ROLE, ATTR_RACE, add_uncounted_trial

DEFAULT_BUDGET = 30  # search launches of a night in the suite (the GLM-5 job: 30 trials)
WITHIN = 0.02  # an export this close to the best counts as found (the acceptance's 2%)
TABLE_NOISE = Noise()  # the table's own noise columns


@dataclass(frozen=True)
class Night:
    """One replayed night (module docstring)."""

    seed: int
    first_optimal: int | None  # launches of any kind up to the first optimal one; None: never
    first_optimal_search: int | None  # search launches up to it
    regret: float  # 1 - true value of the export / the table's best (1.0: nothing exported)
    launches: int  # every launch: search, relaunches, race
    search: int
    relaunches: int
    race: int
    hours: float | None  # every launch's hours (None: the table has no start-up costs)
    hours_to_optimal: float | None
    exported: str | None  # the exported config's key
    reached: float = 1.0  # 1 - true value of the best config any launch ran / the table's best


def replay_night(table: Table, spec: SamplerSpec | str, seed: int, *, budget: int = DEFAULT_BUDGET,
                 confirm: int = DEFAULT_CONFIRM, relaunch: float = DEFAULT_RELAUNCH, repeats: int = 3,
                 prune_ratio: float | None = DEFAULT_PRUNE_RATIO, noise: Noise = TABLE_NOISE) -> Night:
    """One night of ``table`` searched by ``spec`` with ``seed`` (module docstring): search launches
    until ``budget``, relaunches on the schedule with ``relaunch`` as its share, then a race of up
    to ``confirm`` launches."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if table.by_level:
        raise ValueError(f"{table.name}: a night replays a table of one level")
    if isinstance(spec, str):
        spec = SamplerSpec.parse(spec)
    space = TableSpace(table)
    objective = spec.objective(table)
    sampler = make_sampler(spec.name, seed=seed, budget=budget, space_size=space.size(), n_startup_trials=spec.startup,
                           options=spec.options, search_space=space.distributions())
    study = optuna.create_study(directions=objectives.directions(objective), sampler=sampler)  # type: ignore[arg-type]
    base = table.baseline
    baseline = {p: base.params.get(p, vals[0]) for p, vals in table.choices.items()} if base is not None else None
    startup = startup_trials(spec.name, budget=budget, space_size=space.size(), n_startup_trials=spec.startup,
                             options=spec.options)
    policy = SearchPolicy(study, space, space.normalize, baseline=baseline, budget=budget, seed=seed,
                          strategy=spec.strategy(startup), objective=objective)
    ratio = spec.prune_ratio if spec.prune_ratio is not None else prune_ratio
    rng = random.Random(seed * 1_000_003 + 17)
    rows = table.by_key()
    optimal = table.optimal()
    compiled: set[str] = set()
    tally = {"search": 0, RELAUNCH: 0, RACE: 0}
    seconds = 0.0
    first: tuple[int, int, float] | None = None  # (launches, search launches, seconds) at the first optimal
    reached = 0.0  # the best true value any launch ran

    def answer(key: str, config: dict[str, Any], role: str) -> TrialResult:
        nonlocal seconds, first, reached
        threshold = (policy.prune_threshold(ratio) if ratio and role == "search" and key != policy.baseline_key
                     else None)
        row = rows[key]
        reached = max(reached, row.median or 0.0)
        ck = compile_key(row.params)
        result = replay_launch(row, config, rng, repeats, threshold, cold=ck not in compiled, noise=noise)
        if row.failure is None or row.failure in AFTER_START_KINDS:
            compiled.add(ck)
        tally[role] += 1
        seconds += result.timing.get("total_s", 0.0)
        if first is None and key in optimal:
            first = (sum(tally.values()), tally["search"], seconds)
        return result

    run_schedule(policy, table, objective, answer, budget=budget, confirm=confirm, relaunch=relaunch)
    exported = best_rows(policy.rows(), 1)
    key = exported[0].config_key if exported else None
    true = (rows[key].median or 0.0) if key in rows else 0.0
    costs = table.has_costs
    return Night(seed, first[0] if first else None, first[1] if first else None, max(0.0, 1.0 - true / table.best),
                 sum(tally.values()), tally["search"], tally[RELAUNCH], tally[RACE],
                 seconds / 3600 if costs else None, first[2] / 3600 if (first and costs) else None, key,
                 max(0.0, 1.0 - reached / table.best))


def run_schedule(policy: SearchPolicy, table: Table, objective: Objective,
                 answer: Callable[[str, dict[str, Any], str], TrialResult], *, budget: int, confirm: int,
                 relaunch: float) -> None:
    """The driver's schedule of one night on an in-memory study of ``table`` (one slot): a relaunch
    whenever ``study.relaunch`` says one is due, else the search's next launch, until its ``budget``;
    then the race of the finalists (``study.race``, at most ``confirm`` launches). ``answer(key, config,
    role)`` is what a launch of ``key`` measures (``role``: "search", ``RELAUNCH`` or ``RACE``);
    relaunches and race launches are stored as the driver stores them, uncounted trials of their
    config."""
    study = policy.study
    rows = table.by_key()
    dists: dict[str, Any] = dict(TableSpace(table).distributions())

    def store(key: str, result: TrialResult, attrs: dict[str, Any]) -> None:
        full = {p: rows[key].params.get(p, vals[0]) for p, vals in table.choices.items()}
        add_uncounted_trial(study, result, full, key, dists, attrs)

    while True:
        done = policy.rows()
        over = policy.budget_reached or policy.exhausted
        due = next_relaunch(done, objective, relaunch, policy.launch_cost(), search_over=over, budget=budget)
        if due is not None:
            store(due.key, answer(due.key, dict(due.row.params), RELAUNCH), {ATTR_LAUNCH_ROLE: RELAUNCH})
            continue
        proposal = policy.next()
        if proposal is None:
            break
        if proposal.cached is not None:
            policy.record(proposal, proposal.cached, counted=False)
            continue
        policy.record(proposal, answer(proposal.key, proposal.config, "search"))
    race_id = policy.budget_used()
    while confirm > 0:
        state = race_state(policy.rows(), objective, confirm, race_id)
        key = state.next()
        if key is None:
            break
        store(key, answer(key, dict(rows[key].params), RACE),
              {ATTR_LAUNCH_ROLE: RACE, ATTR_RACE: state.plan.record(state.round)})


@dataclass(frozen=True)
class SuiteResult:
    """One strategy's nights on one table."""

    table: str
    spec: str
    nights: tuple[Night, ...]
    wall_s: float

    def _first(self) -> list[float]:
        return [n.first_optimal if n.first_optimal is not None else float("inf") for n in self.nights]

    @property
    def median_first(self) -> float:
        return nearest_rank(self._first(), 0.5)

    @property
    def p90_first(self) -> float:
        return nearest_rank(self._first(), 0.9)

    @property
    def median_first_search(self) -> float:
        return nearest_rank([n.first_optimal_search if n.first_optimal_search is not None else float("inf")
                             for n in self.nights], 0.5)

    @property
    def never(self) -> int:
        return sum(n.first_optimal is None for n in self.nights)

    @property
    def found(self) -> int:
        """Nights whose export is within ``WITHIN`` of the best."""
        return sum(n.regret <= WITHIN for n in self.nights)

    @property
    def missed_picks(self) -> int:
        """Nights whose export misses by more than ``WITHIN`` although a launch ran a config within it:
        the pick's fault, not the search's (module docstring)."""
        return sum(n.reached <= WITHIN < n.regret for n in self.nights)

    @property
    def median_regret(self) -> float:
        return float(statistics.median(n.regret for n in self.nights))

    @property
    def worst_regret(self) -> float:
        return max(n.regret for n in self.nights)

    @property
    def median_launches(self) -> float:
        return float(statistics.median(n.launches for n in self.nights))

    @property
    def median_hours_to_optimal(self) -> float | None:
        if any(n.hours is None for n in self.nights):
            return None
        return nearest_rank([n.hours_to_optimal if n.hours_to_optimal is not None else float("inf")
                             for n in self.nights], 0.5)

    @property
    def median_hours(self) -> float | None:
        if any(n.hours is None for n in self.nights):
            return None
        return float(statistics.median(n.hours for n in self.nights if n.hours is not None))


def run_nights(tables: Sequence[Table], specs: Sequence[str], *, seeds: int = 20, first_seed: int = 0,
               budget: int = DEFAULT_BUDGET, confirm: int = DEFAULT_CONFIRM, relaunch: float = DEFAULT_RELAUNCH,
               repeats: int = 3, prune_ratio: float | None = DEFAULT_PRUNE_RATIO, noise: Noise = TABLE_NOISE,
               progress: Any = None) -> list[SuiteResult]:
    """Every spec's nights on every table, seeds ``first_seed`` .. + ``seeds`` (module docstring);
    ``progress`` (a text stream) gets a line per table and spec."""
    parsed = [SamplerSpec.parse(s) for s in specs]
    out = []
    for table in tables:
        for spec in parsed:
            t0 = time.perf_counter()
            nights = tuple(replay_night(table, spec, s, budget=budget, confirm=confirm, relaunch=relaunch,
                                        repeats=repeats, prune_ratio=prune_ratio, noise=noise)
                           for s in range(first_seed, first_seed + seeds))
            res = SuiteResult(table.name, spec.text, nights, time.perf_counter() - t0)
            out.append(res)
            if progress is not None:
                print(f"  {table.name}: {spec.text}: first optimal launch median {_n(res.median_first)}, "
                      f"p90 {_n(res.p90_first)}; export within {WITHIN:.0%}: {res.found}/{len(nights)} "
                      f"({res.wall_s:.0f}s)", file=progress, flush=True)
    return out


def to_dict(result: SuiteResult) -> dict[str, Any]:
    """One table's nights as JSON (``simulate --json``): the summary figures and every night."""
    inf = float("inf")
    return {"table": result.table, "spec": result.spec, "median_first": None if result.median_first == inf
            else result.median_first, "p90_first": None if result.p90_first == inf else result.p90_first,
            "never": result.never, "found": result.found, "missed_picks": result.missed_picks,
            "nights": [dataclasses.asdict(n) for n in result.nights]}


def _n(v: float) -> str:
    return "never" if v == float("inf") else f"{v:g}"


def format_suite(results: Sequence[SuiteResult]) -> str:
    """Per table and strategy, then overall: the first optimal launch counting every launch (median,
    p90, never), in search launches alone, the exports within 2% and their regret, hours."""
    lines = ["| table | search | first optimal launch, every kind: median | p90 | never | search launches only: "
             "median | export within 2% | of the misses, a launch within 2% | median regret | worst regret | "
             "launches per night | hours to first optimal: median |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        hours = r.median_hours_to_optimal
        lines.append(f"| {r.table} | {r.spec} | {_n(r.median_first)} | {_n(r.p90_first)} | {r.never} | "
                     f"{_n(r.median_first_search)} | {r.found}/{len(r.nights)} | "
                     f"{r.missed_picks}/{len(r.nights) - r.found} | {r.median_regret:.1%} | "
                     f"{r.worst_regret:.1%} | {r.median_launches:g} | "
                     f"{'-' if hours is None else _n(round(hours, 2))} |")
    by_spec: dict[str, list[SuiteResult]] = {}
    for r in results:
        by_spec.setdefault(r.spec, []).append(r)
    if len({r.table for r in results}) > 1:
        lines += ["", "| search | tables | worst median first optimal | worst p90 | exports within 2% | "
                      "tables meeting median <= 15 and p90 <= 25 |", "|---|---:|---:|---:|---:|---:|"]
        for spec, group in by_spec.items():
            nights = sum(len(r.nights) for r in group)
            meets = sum(r.median_first <= 15 and r.p90_first <= 25 for r in group)
            lines.append(f"| {spec} | {len(group)} | {_n(max(r.median_first for r in group))} | "
                         f"{_n(max(r.p90_first for r in group))} | {sum(r.found for r in group)}/{nights} "
                         f"({sum(r.found for r in group) / nights:.0%}) | {meets}/{len(group)} |")
    return "\n".join(lines)
