"""Search-efficiency replay harness: how many server launches a search needs, measured offline.

The tables it replays (their format, reading and writing) are ``study.replay_table``'s.

``run_simulation`` replays the table as the objective for the *real* ``SearchPolicy``
and ``make_sampler`` on in-memory Optuna studies: for each sampler spec and seed it asks
for configs until the budget (launches) is spent; a launch of a failing row is a
config-caused FAIL; a launch of a working row draws one recorded sample per repeat
(seeded, with replacement, so the noise is the table's own), stopping after the first
repeat when it is below ``prune_ratio`` x the best median so far (the early-stop rule
of ``orchestrator.study.search.policy``). After each launch the study's best trial (chosen on its
noisy median) is looked up in the table: the first launch at which its *true* median
(the row's median) is within ``target`` of the table's best is the launch count that
search needed. With start-up costs in the table, each launch also costs time: its
``startup_s``, ``LAUNCH_OVERHEAD_S`` (warm-up, correctness capture, teardown) and
``REPEAT_S`` per benchmark repeat it ran (a failure at start runs none); the launches up to
that one, summed, are the hours that search needed, and the replayed trials carry those
durations, so the policy's cost-aware choices (``SearchPolicy(cost_aware=True)``, the default;
spec option ``cost=off`` breaks its ties at random instead) learn them as in a study. ``format_table``
renders the result as markdown.

A plan table replays a study over its levels: each launch measures every level (one sample
per level and repeat; the early stop needs every level below its threshold, as
``node.measure`` does), the sampler spec's ``levels=`` option names what the search is told
(default: every level of the table, a multi-objective study; ``levels=1``: single-level
search, which still measures every level, so its plan can be read; ``weights=0.6+0.3+0.1``:
the traffic mix, weights in level order), and the launch count is the first launch at which
the plan's best at *every* level (``study.plan``, on noisy medians) has a true median within
``target`` of that level's best.

The command line is ``ncclsweep simulate`` (``study.simulate``, also ``python -m
orchestrator.study.simulation.simulate``); ``study.night`` replays whole nights (relaunches and the race
counted).
"""

from __future__ import annotations

import json
import logging
import math
import random
import statistics
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution

from orchestrator.config.job import Objective
from orchestrator.config.sampler_options import SAMPLER_NAMES
from orchestrator.core.correctness import TEXT_DIFFERS
from orchestrator.core.errors import brief
from orchestrator.core.objectives import Draft
from orchestrator.core.outcome import DEFAULT_PRUNE_RATIO, early_stop
from orchestrator.core.records import (
    AFTER_START_KINDS,
    COMPLETE,
    PRUNED,
    FailureKind,
    TrialResult,
)
from orchestrator.study.evidence.plan import best_at, prune_thresholds
from orchestrator.study.model.cost import compile_key
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.samplers import make_sampler, make_strategy, startup_trials
from orchestrator.study.search.strategies.base import Strategy
from orchestrator.study.simulation.replay_table import LEVEL_PREFIX, Row, Table, load_table
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage.storage import ATTR_KEY, ATTR_SKIPPED

# What a launch costs besides its start-up, where a table gives start-up costs: warm-up,
# correctness capture and teardown, and one benchmark repeat (a round of the prompts at a
# GLM-5-like 20-60 tok/s, 64 tokens each). The start-up dominates either way (200-450 s).
LAUNCH_OVERHEAD_S = 30.0
REPEAT_S = 15.0
DEFAULT_SAMPLERS = "tpe,random"


# ---- noise --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Noise:
    """What a replayed launch measures besides its row's value: the table's ``noise`` and
    ``launch_noise`` columns (``study.replay_table``), or these overrides for every row (``sample_cv``:
    a sample's CV, drawn around the row's median; ``launch_cv``: a launch's CV). A launch first
    draws its factor (``launch_factor``), then each sample (``sample``) with it. Without any
    noise set, a sample is one of the row's recorded samples, drawn as before noise existed."""

    sample_cv: float | None = None
    launch_cv: float | None = None

    def launch_factor(self, row: Row, rng: random.Random) -> float:
        """The factor every sample of one launch of ``row`` is multiplied by (1.0: no launch noise)."""
        cv = row.launch_noise if self.launch_cv is None else self.launch_cv
        return max(0.01, rng.gauss(1.0, cv)) if cv else 1.0

    def sample(self, row: Row, recorded: list[float], rng: random.Random, factor: float) -> float:
        """One benchmark sample of a launch of ``row`` (``recorded``: its samples at one level)."""
        cv = row.noise if self.sample_cv is None else self.sample_cv
        if cv is None:
            return rng.choice(recorded) * factor
        return max(0.01, float(statistics.median(recorded)) * rng.gauss(1.0, cv)) * factor


def launch_seconds(row: Row, repeats: int, *, cold: bool = False) -> float | None:
    """What one launch of ``row`` costs when it ran ``repeats`` benchmark repeats, ``cold``:
    the first of its compile key in the run (module docstring)."""
    if row.startup_s is None:
        return None
    return row.startup_s + (row.compile_s if cold else 0.0) + LAUNCH_OVERHEAD_S + REPEAT_S * repeats


class TableSpace:
    """A SearchSpace-like object over a table: every column categorical, rows as feasible configs.

    ``normalize`` maps a raw config to its row's parameters (empty cells dropped), the
    same way a backend drops settings that cannot matter.
    """

    def __init__(self, table: Table) -> None:
        self.table = table

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        return {p: trial.suggest_categorical(p, vals) for p, vals in self.table.choices.items()}

    def active(self, config: dict[str, Any]) -> dict[str, Any]:
        return dict(config)

    def feasible(self, config: dict[str, Any]) -> str | None:
        if self.table.lookup(config) is None:
            return "no row of the table has this combination"
        return None

    def enumerate(self) -> list[dict[str, Any]]:
        out = []
        for row in self.table.rows:
            out.append({p: row.params.get(p, vals[0]) for p, vals in self.table.choices.items()})
        return out

    def size(self) -> int:
        return len(self.table.rows)

    def distributions(self) -> dict[str, CategoricalDistribution]:
        return {p: CategoricalDistribution(vals) for p, vals in self.table.choices.items()}

    def normalize(self, config: dict[str, Any]) -> dict[str, Any]:
        row = self.table.lookup(config)
        return dict(row.params) if row is not None else dict(config)


# ---- the replay ---------------------------------------------------------------------------------
@dataclass
class SamplerSpec:
    """``name[:opt=value[:opt=value...]]``: a sampler and its options, plus the search's own
    settings: ``fill``, ``startup``, ``startup_order``, ``plan_step``, ``cost`` (the strategy's:
    ``samplers.make_strategy``), ``prune_ratio``, and a plan table's ``levels`` and ``weights``."""

    text: str
    name: str
    options: dict[str, Any]
    fill: str | None = None  # None: the strategy's default, except "random" for the random sampler
    prune_ratio: float | None = None  # None: the run's setting
    startup: int | None = None
    startup_order: str | None = None  # None: the strategy's default
    plan_step: str | None = None  # None: the strategy's default, except "sampler" for the random sampler
    levels: tuple[int, ...] | None = None  # a plan table: the levels the search is told (None: all)
    weights: tuple[float, ...] | None = None  # a plan table: the traffic mix, in level order
    cost: bool | None = None  # the value-per-cost tie-breaks (``cost=off``: ties by the RNG only); None: on

    def objective(self, table: Table) -> Objective:
        """What the search is told on ``table`` (module docstring); ValueError for a level the
        table lacks or weights that do not match the levels."""
        if not table.by_level:
            if self.levels not in (None, (1,)) or self.weights:
                raise ValueError(f"{brief(self.text)}: levels/weights need a table with {LEVEL_PREFIX}N columns; "
                                 f"{table.name} has one level")
            return Objective()
        levels = self.levels or table.levels
        bad = [lv for lv in levels if lv not in table.levels]
        if bad:
            raise ValueError(f"{brief(self.text)}: level(s) {', '.join(map(str, bad))} not in {table.name} "
                             f"(levels {', '.join(map(str, table.levels))})")
        given = self.weights or ()  # in level order (none: a plan)
        if given and (len(given) != len(levels) or any(w <= 0 for w in given)):
            raise ValueError(f"{brief(self.text)}: weights must be {len(levels)} positive numbers, one per level "
                             f"({', '.join(map(str, sorted(levels)))})")
        return Draft(concurrency=tuple(sorted(levels)), weights=dict(zip(sorted(levels), given)) or None).build()

    def strategy(self, startup: int) -> Strategy:
        """The search policy's strategy for this spec (``samplers.make_strategy``): random search
        fills at random and leaves a plan's steps to the sampler (plain random search without
        replacement, the reference); ValueError for a setting the strategy does not have."""
        switches: dict[str, Any] = {"fill": self.fill, "startup_order": self.startup_order,
                                    "plan_step": self.plan_step, "cost_aware": self.cost}
        if self.name == "random":
            switches["fill"] = self.fill or "random"
            switches["plan_step"] = self.plan_step or "sampler"
        return make_strategy(self.name, startup=startup, options=self.options,
                             **{k: v for k, v in switches.items() if v is not None})

    @classmethod
    def parse(cls, text: str) -> "SamplerSpec":
        parts = text.strip().split(":")
        name = parts[0].strip().lower()
        if name not in SAMPLER_NAMES:
            raise ValueError(f"unknown sampler {brief(name)} in {brief(text)}; allowed: {', '.join(SAMPLER_NAMES)}")
        spec = cls(text.strip(), name, {})
        for part in parts[1:]:
            if "=" not in part:
                raise ValueError(f"sampler option {brief(part)} in {brief(text)} must look like key=value")
            k, v = (s.strip() for s in part.split("=", 1))
            if k == "fill":
                spec.fill = v
            elif k == "prune_ratio":
                spec.prune_ratio = float(v)
            elif k in ("startup", "n_startup_trials"):
                spec.startup = int(v)
            elif k == "startup_order":
                spec.startup_order = v
            elif k == "plan_step":
                spec.plan_step = v
            elif k == "levels":
                try:
                    spec.levels = tuple(int(x) for x in v.split("+"))
                except ValueError:
                    raise ValueError(f"levels must look like 1+10+64, not {brief(v)}") from None
            elif k == "weights":
                try:
                    spec.weights = tuple(float(x) for x in v.split("+"))
                except ValueError:
                    raise ValueError(f"weights must look like 0.6+0.3+0.1 (in level order), not {brief(v)}") from None
            elif k == "cost":
                if v not in ("on", "off"):
                    raise ValueError(f"cost must be on or off, not {brief(v)}")
                spec.cost = v == "on"
            else:
                spec.options[k] = v
        spec.strategy(0)  # a setting the strategy does not have, or a bad value: refused here, once
        return spec


@dataclass
class Run:
    """One sampler x seed replay."""

    seed: int
    launches_to_target: int | None  # None: never within target in the budget
    repeats_to_target: int | None
    best_ratio: float  # true median of the final best / table best (0 when nothing completed)
    launches: int
    repeats: int
    pruned: int
    failed: int
    cached: int
    skipped: int  # infeasible or in-flight duplicates: told PRUNED, never launched
    pruned_good: int = 0  # early-stopped launches of configs that were truly within target
    hours_to_target: float | None = None  # launch hours up to the one that got within target
    hours: float | None = None  # launch hours of the whole run (None: the table has no start-up costs)
    first_optimal: int | None = None  # the launch that first ran an optimal config (None: none did; a plan table)
    hours_to_optimal: float | None = None  # launch hours up to that one


@dataclass
class SamplerResult:
    spec: str
    runs: list[Run]
    wall_s: float

    def _hits(self, attr: str) -> list[float]:
        return [getattr(r, attr) if getattr(r, attr) is not None else math.inf for r in self.runs]

    @property
    def median_launches(self) -> float:
        return nearest_rank(self._hits("launches_to_target"), 0.5)

    @property
    def p90_launches(self) -> float:
        return nearest_rank(self._hits("launches_to_target"), 0.9)

    @property
    def median_first_optimal(self) -> float:
        """Median launch that first ran an optimal config (inf: never in most runs)."""
        return nearest_rank(self._hits("first_optimal"), 0.5)

    @property
    def p90_first_optimal(self) -> float:
        return nearest_rank(self._hits("first_optimal"), 0.9)

    @property
    def median_hours_to_optimal(self) -> float | None:
        """Median launch hours until an optimal config first ran (None: the table has no costs)."""
        if any(r.hours is None for r in self.runs):
            return None
        return nearest_rank(self._hits("hours_to_optimal"), 0.5)

    def within_by(self, launch: int) -> int:
        """Runs whose best was within the target by ``launch``."""
        return sum(1 for r in self.runs if r.launches_to_target is not None and r.launches_to_target <= launch)

    @property
    def median_repeats(self) -> float:
        return nearest_rank(self._hits("repeats_to_target"), 0.5)

    @property
    def median_hours(self) -> float | None:
        """Median launch hours to within target (inf: never; None: the table has no costs)."""
        if any(r.hours is None for r in self.runs):
            return None
        return nearest_rank(self._hits("hours_to_target"), 0.5)

    @property
    def mean_hours(self) -> float | None:
        """Mean launch hours to within target, a run that never got there counted with the
        hours of its whole budget."""
        if any(r.hours is None for r in self.runs):
            return None
        return statistics.fmean(r.hours_to_target if r.hours_to_target is not None else r.hours  # type: ignore[misc]
                                for r in self.runs)

    def mean_launches(self, budget: int) -> float:
        """Mean launches to target, a run that never got there counted as ``budget + 1``."""
        return statistics.fmean(r.launches_to_target if r.launches_to_target is not None else budget + 1
                                for r in self.runs)

    @property
    def never(self) -> int:
        return sum(r.launches_to_target is None for r in self.runs)

    @property
    def median_best_ratio(self) -> float:
        return float(statistics.median(r.best_ratio for r in self.runs))

    @property
    def median_total_repeats(self) -> float:
        return float(statistics.median(r.repeats for r in self.runs))

    @property
    def mean_pruned(self) -> float:
        return statistics.fmean(r.pruned for r in self.runs)

    @property
    def pruned_good(self) -> int:
        return sum(r.pruned_good for r in self.runs)


@dataclass
class SimulationResult:
    table: str
    n_configs: int
    n_failing: int
    n_within: int
    best: float
    budget: int
    seeds: int
    target: float
    repeats: int
    prune_ratio: float | None
    parallel: int
    baseline: bool
    samplers: list[SamplerResult]

    baseline_within: bool = False
    levels: tuple[int, ...] = ()  # a plan table's levels (the target: within at every level)
    level_bests: dict[int, float] = field(default_factory=dict)
    has_costs: bool = False  # the table gives start-up costs: hours are counted
    n_optimal: int = 0  # rows whose true median is the best
    noise: str = ""  # how samples were drawn, in words

    @property
    def random_expectation(self) -> float:
        """Expected launches of uniform sampling without replacement to hit one of ``n_within``.

        With the baseline launched first: 1 if it is within target, else 1 + N' / (k + 1)
        over the N' = N - 1 other configs.
        """
        if self.baseline:
            return 1.0 if self.baseline_within else 1 + self.n_configs / (self.n_within + 1)
        return (self.n_configs + 1) / (self.n_within + 1)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for s, res in zip(d["samplers"], self.samplers):
            s.update(median_first_optimal=res.median_first_optimal, p90_first_optimal=res.p90_first_optimal,
                     median_hours_to_optimal=res.median_hours_to_optimal,
                     median_launches=res.median_launches, p90_launches=res.p90_launches, never=res.never,
                     mean_launches=res.mean_launches(self.budget), median_hours=res.median_hours,
                     mean_hours=res.mean_hours,
                     median_best_ratio=res.median_best_ratio, median_repeats=res.median_repeats)
        return json.loads(json.dumps(d, default=str).replace("Infinity", "null"))


def nearest_rank(values: list[float], q: float) -> float:
    """Nearest-rank quantile (inf stays inf: 'never within the budget')."""
    s = sorted(values)
    idx = max(0, math.ceil(q * len(s)) - 1)
    return s[idx]


def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*GridSampler.*")
    logging.getLogger("optuna").setLevel(logging.ERROR)


def replay_once(table: Table, spec: SamplerSpec | str, seed: int, *, budget: int, target: float = 0.02,
                repeats: int = 3, prune_ratio: float | None = DEFAULT_PRUNE_RATIO, parallel: int = 1,
                use_baseline: bool = True, noise: Noise = Noise()) -> Run:
    """One replay of ``table`` with one sampler spec and seed (see the module docstring)."""
    _quiet()
    if isinstance(spec, str):
        spec = SamplerSpec.parse(spec)
    space = TableSpace(table)
    ratio = spec.prune_ratio if spec.prune_ratio is not None else prune_ratio
    sampler = make_sampler(spec.name, seed=seed, budget=budget, space_size=space.size(), n_startup_trials=spec.startup,
                           options=spec.options, search_space=space.distributions())
    objective = spec.objective(table)
    study = optuna.create_study(directions=objectives.directions(objective), sampler=sampler)  # type: ignore[arg-type]
    base = table.baseline if use_baseline else None
    baseline = None
    if base is not None:
        baseline = {p: base.params.get(p, vals[0]) for p, vals in table.choices.items()}
    startup = startup_trials(spec.name, budget=budget, space_size=space.size(), n_startup_trials=spec.startup,
                             options=spec.options)  # what the sampler was built with
    policy = SearchPolicy(study, space, space.normalize, baseline=baseline, budget=budget, seed=seed,
                          strategy=spec.strategy(startup), objective=objective)
    rng = random.Random(seed * 1_000_003 + 17)
    rows = table.by_key()
    floor = (1.0 - target) * table.best
    floors = {lv: (1.0 - target) * table.best_at(lv) for lv in table.levels}
    optimal = table.optimal() if not table.by_level else set()
    launches = reps = pruned = failed = cached = pruned_good = 0
    seconds = 0.0
    hit_l: int | None = None
    hit_r: int | None = None
    hit_h: float | None = None
    first_opt: int | None = None  # the launch that first ran an optimal config
    opt_h: float | None = None
    in_flight: list[Any] = []

    def within(study_rows) -> bool:
        """The plan's best at every level of the table is truly within target there."""
        for lv, lv_floor in floors.items():
            best = best_at(study_rows, lv)
            true = rows[best[0].config_key].median_at(lv) if best else None
            if true is None or true < lv_floor:
                return False
        return True
    compiled: set[str] = set()  # compile keys a launch of this run got past start-up with (warm caches)

    def settle(proposal, number: int) -> None:
        nonlocal reps, pruned, failed, hit_l, hit_r, hit_h, pruned_good, seconds, first_opt, opt_h
        row = rows[proposal.key]
        key = compile_key(row.params)
        cold = key not in compiled
        if table.by_level:  # every level is measured whatever the search is told: thresholds at every level
            result = replay_levels(row, proposal.config, rng, repeats,
                                    prune_thresholds(policy.rows(), table.levels, ratio) if ratio else None,
                                    cold=cold, noise=noise)
            good = all((row.median_at(lv) or 0.0) >= f for lv, f in floors.items())
        else:
            threshold = policy.prune_threshold(ratio) if ratio else None
            result = replay_launch(row, proposal.config, rng, repeats, threshold, cold=cold, noise=noise)
            good = (row.median or 0.0) >= floor
        if row.failure is None or row.failure in AFTER_START_KINDS:
            compiled.add(key)
        reps += result.measurement.rounds if result.measurement is not None else 0
        seconds += result.timing.get("total_s", 0.0)
        if first_opt is None and proposal.key in optimal:
            first_opt, opt_h = number, (seconds / 3600 if table.has_costs else None)
        pruned += result.outcome == PRUNED
        if result.outcome == PRUNED and good:
            pruned_good += 1
        failed += result.outcome == "FAIL"
        policy.record(proposal, result)
        if hit_l is not None:
            return
        if table.by_level:
            if within(policy.rows()):
                hit_l, hit_r = launches, reps
            return
        best = policy.best()
        if best is not None:
            true = rows[best.user_attrs[ATTR_KEY]].median
            if true is not None and true >= floor:
                hit_l, hit_r = launches, reps
                hit_h = seconds / 3600 if table.has_costs else None

    while True:
        proposal = policy.next() if len(in_flight) < parallel else None
        if proposal is None:
            if not in_flight:
                break
            settle(*in_flight.pop(0))
            continue
        if proposal.cached is not None:
            cached += 1
            policy.record(proposal, proposal.cached, counted=False)
            continue
        launches += 1
        in_flight.append((proposal, launches))
        if len(in_flight) >= parallel:
            settle(*in_flight.pop(0))
    ratio_best = 0.0
    if table.by_level:  # the worst level's: the plan's best there against the level's best
        final = policy.rows()
        picks = {lv: best_at(final, lv) for lv in table.levels}
        ratio_best = min(((rows[picks[lv][0].config_key].median_at(lv) or 0.0) / table.best_at(lv)
                          if picks[lv] else 0.0) for lv in table.levels)
    else:
        best = policy.best()
        if best is not None:
            ratio_best = (rows[best.user_attrs[ATTR_KEY]].median or 0.0) / table.best
    skipped = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get(ATTR_SKIPPED))
    return Run(seed, hit_l, hit_r, ratio_best, launches, reps, pruned, failed, cached, skipped, pruned_good,
               hit_h, seconds / 3600 if table.has_costs else None, first_opt, opt_h)


def replay_launch(row: Row, config: dict[str, Any], rng: random.Random, repeats: int,
                  threshold: float | None, *, cold: bool = False, noise: Noise = Noise()) -> TrialResult:
    """Answer one launch from a table row: a failure, an early stop, or ``repeats`` draws
    (``noise``: the launch's factor, then each sample).

    A working row passed the correctness gate where it was measured, a ``wrong-output``
    row failed it on its text: their verdicts say so, as a real trial's do, so the study's
    value bans (``orchestrator.study.evidence.bans``) learn from them as in a real study."""
    if row.failure:
        corr = ({"ok": False, "reason": f"{TEXT_DIFFERS} (replayed from the table)"}
                if row.failure == FailureKind.WRONG_OUTPUT else {})
        ran = repeats if row.failure in AFTER_START_KINDS else 0  # a failure after start ran its benchmark
        started = row.failure in AFTER_START_KINDS
        return TrialResult.failed(config, row.failure, "replayed from the table", metrics={"repeats": 0},
                                  correctness=corr, log_tail=row.log,
                                  **_costs(row, ran, started=started, cold=cold and started))
    factor = noise.launch_factor(row, rng)
    first = noise.sample(row, row.samples, rng, factor)
    if early_stop({1: first}, {1: threshold}):
        return TrialResult(outcome=PRUNED, config=config, value=first, correctness={"ok": True},
                           metrics={"intermediate": first, "decode_samples": [first], "repeats": 1},
                           **_costs(row, 1, started=True, cold=cold))
    samples = [first] + [noise.sample(row, row.samples, rng, factor) for _ in range(max(0, repeats - 1))]
    median = float(statistics.median(samples))
    return TrialResult(outcome=COMPLETE, config=config, value=median, correctness={"ok": True},
                       metrics={"decode_tok_s": median, "decode_samples": samples, "repeats": len(samples)},
                       **_costs(row, len(samples), started=True, cold=cold))


def _costs(row: Row, repeats: int, *, started: bool, cold: bool) -> dict[str, Any]:
    """The durations a replayed launch records (none when the table has no start-up costs)."""
    total = launch_seconds(row, repeats, cold=cold)
    if total is None:
        return {}
    start = row.startup_s + (row.compile_s if cold else 0.0)  # type: ignore[operator]
    phases: dict[str, Any] = {"ready_s": start} if started else {"ended_s": start}
    if row.compile_s and started:
        phases["compile_cache"] = "miss" if cold else "hit"
    return {"timing": {"total_s": total}, "startup_phases": phases}


def replay_levels(row: Row, config: dict[str, Any], rng: random.Random, repeats: int,
                   thresholds: dict[int, float] | None, *, cold: bool = False, noise: Noise = Noise()) -> TrialResult:
    """A launch of a plan table's row: a failure, an early stop (the first repeat below its
    threshold at every level: ``core.outcome.early_stop``, as ``node.measure`` stops), or
    ``repeats`` draws at every level, recorded as a trial records its levels."""
    if row.failure:
        return replay_launch(row, config, rng, repeats, None, cold=cold)
    levels = sorted(row.levels)
    factor = noise.launch_factor(row, rng)
    first = {lv: noise.sample(row, row.levels[lv], rng, factor) for lv in levels}

    def record(samples: dict[int, list[float]]) -> dict[str, Any]:
        return {str(lv): {"value": float(statistics.median(got)), "samples": list(got),
                          "unit": objectives.unit(lv)} for lv, got in samples.items()}

    if early_stop(first, thresholds):
        levels_rec = record({lv: [v] for lv, v in first.items()})
        return TrialResult(outcome=PRUNED, config=config, value=first[levels[0]], correctness={"ok": True},
                           metrics={"levels": levels_rec, "decode_samples": [first[1]] if 1 in first else [],
                                    "intermediate": first[levels[0]], "repeats": 1},
                           **_costs(row, 1, started=True, cold=cold))
    samples = {lv: [first[lv]] + [noise.sample(row, row.levels[lv], rng, factor) for _ in range(max(0, repeats - 1))]
               for lv in levels}
    levels_rec = record(samples)
    value = levels_rec[str(levels[0])]["value"]
    metrics: dict[str, Any] = {"levels": levels_rec, "repeats": repeats}
    if 1 in samples:
        metrics.update(decode_tok_s=levels_rec["1"]["value"], decode_samples=samples[1])
    return TrialResult(outcome=COMPLETE, config=config, value=value, correctness={"ok": True}, metrics=metrics,
                       **_costs(row, repeats, started=True, cold=cold))


def run_simulation(table_path: str | Path | Table, samplers: Sequence[str] | str = DEFAULT_SAMPLERS, *,
                   seeds: int = 20, budget: int | None = None, target: float = 0.02, repeats: int = 3,
                   use_pruning: bool = True, prune_ratio: float = DEFAULT_PRUNE_RATIO, parallel: int = 1,
                   use_baseline: bool = True, first_seed: int = 0, noise: Noise = Noise(),
                   progress: Any = None) -> SimulationResult:
    """Replay a table for each sampler spec x seed; see the module docstring.

    ``budget`` defaults to the number of configs in the table (every config once). ``noise``
    overrides the table's noise columns. ``progress`` (a text stream) gets one line per
    finished sampler.
    """
    table = table_path if isinstance(table_path, Table) else load_table(table_path)
    if isinstance(samplers, str):
        samplers = [s for s in samplers.split(",") if s.strip()]
    specs = [SamplerSpec.parse(s) for s in samplers]
    if not specs:
        raise ValueError("no sampler given")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, not {seeds}")
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, not {parallel}")
    budget = len(table.rows) if budget is None else budget
    if budget < 1:
        raise ValueError(f"budget must be >= 1, not {budget}")
    ratio = prune_ratio if use_pruning else None
    results = []
    for spec in specs:
        t0 = time.perf_counter()
        runs = [replay_once(table, spec, s, budget=budget, target=target, repeats=repeats, prune_ratio=ratio,
                            parallel=parallel, use_baseline=use_baseline, noise=noise)
                for s in range(first_seed, first_seed + seeds)]
        res = SamplerResult(spec.text, runs, time.perf_counter() - t0)
        results.append(res)
        if progress is not None:
            print(f"  {table.name}: {spec.text}: median {_fmt_n(res.median_launches)} launches "
                  f"({res.wall_s:.0f}s)", file=progress, flush=True)
    return SimulationResult(
        table=table.name, n_configs=len(table.rows), n_failing=sum(r.failure is not None for r in table.rows),
        n_within=len(table.within(target)), best=table.best, budget=budget, seeds=seeds, target=target,
        repeats=repeats, prune_ratio=ratio, parallel=parallel,
        baseline=use_baseline and table.baseline is not None, samplers=results,
        baseline_within=table.baseline is not None and table.baseline in table.within(target),
        levels=table.levels, level_bests={lv: table.best_at(lv) for lv in table.levels}, has_costs=table.has_costs,
        n_optimal=len(table.optimal()), noise=_noise_text(table, noise))


def _noise_text(table: Table, noise: Noise) -> str:
    """How the replay drew its samples, in words (the comparison's header)."""
    sample = noise.sample_cv if noise.sample_cv is not None else next(
        (r.noise for r in table.rows if r.noise is not None), None)
    launch = noise.launch_cv if noise.launch_cv is not None else max((r.launch_noise for r in table.rows), default=0.0)
    text = "recorded samples" if sample is None else f"{sample * 100:g}% per sample"
    return text + (f", {launch * 100:g}% per launch" if launch else "")


# ---- output -------------------------------------------------------------------------------------
def _fmt_n(v: float) -> str:
    if math.isinf(v):
        return "never"
    return f"{v:g}"


def _fmt_h(v: float | None) -> str:
    if v is None:
        return "-"
    return "never" if math.isinf(v) else f"{v:.2f}"


def format_table(result: SimulationResult | Iterable[SimulationResult]) -> str:
    """Markdown: one block per table, one row per sampler spec."""
    results = [result] if isinstance(result, SimulationResult) else list(result)
    out = []
    for res in results:
        pct = f"{res.target * 100:g}%"
        prune = f"first repeat < {res.prune_ratio:g} x best" if res.prune_ratio else "off"
        if res.levels:
            bests = ", ".join(f"{res.level_bests[lv]:.4g} at {lv}" for lv in res.levels)
            out.append(
                f"**{res.table}**: {res.n_configs} configs ({res.n_failing} failing) over concurrency "
                f"{', '.join(map(str, res.levels))}, best {bests}; target: the plan's best within {pct} at every "
                f"level; budget {res.budget} launches, {res.seeds} seeds, {res.repeats} repeats, early stop "
                f"{'first repeat below the threshold at every level' if res.prune_ratio else 'off'}"
                f"{f' ({res.prune_ratio:g} x best there)' if res.prune_ratio else ''}, {res.parallel} in flight, "
                f"baseline first: {'yes' if res.baseline else 'no'}.")
        else:
            out.append(
                f"**{res.table}**: {res.n_configs} configs ({res.n_failing} failing), best {res.best:.4g} tok/s, "
                f"{res.n_within} within {pct}; budget {res.budget} launches, {res.seeds} seeds, {res.repeats} "
                f"repeats, early stop {prune}, {res.parallel} in flight, baseline first: "
                f"{'yes' if res.baseline else 'no'}; uniform random order needs {res.random_expectation:.1f} "
                f"launches on average ({res.random_expectation / res.n_configs * 100:.0f}% of the table).")
        out.append("")
        every = " at every level" if res.levels else ""
        hours = (f" | hours to within {pct}: median | mean**" if res.has_costs else "")
        out.append(f"| sampler | launches to within {pct}{every}: median | p90 | mean* | never (of {res.seeds}) "
                   f"| median, % of table | repeats to within {pct}: median | best after {res.budget} "
                   f"(median, % of best{', worst level' if res.levels else ''}) | repeats used (median) "
                   f"| pruned/run | good configs pruned{hours} |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if res.has_costs else ""))
        for s in res.samplers:
            share = "-" if math.isinf(s.median_launches) else f"{s.median_launches / res.n_configs * 100:.0f}%"
            cells = f" | {_fmt_h(s.median_hours)} | {_fmt_h(s.mean_hours)}" if res.has_costs else ""
            out.append(f"| {s.spec} | {_fmt_n(s.median_launches)} | {_fmt_n(s.p90_launches)} "
                       f"| {s.mean_launches(res.budget):.1f} | {s.never} | {share} "
                       f"| {_fmt_n(s.median_repeats)} | {s.median_best_ratio * 100:.1f}% "
                       f"| {s.median_total_repeats:g} | {s.mean_pruned:.1f} | {s.pruned_good}{cells} |")
        out.append("")
        out.append(f"\\* mean launches to within {pct}, a run that never got there counted as budget + 1 "
                   f"= {res.budget + 1}.")
        if res.has_costs:
            out.append(f"\\*\\* mean launch hours to within {pct} (start-up from the table's startup_s, plus "
                       f"{LAUNCH_OVERHEAD_S:g} s per launch and {REPEAT_S:g} s per benchmark repeat), a run that "
                       "never got there counted with the hours of its whole budget.")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def format_summary(results: Iterable[SimulationResult]) -> str:
    """Markdown, one row per table: each sampler's median launches to within target (% of the table)."""
    results = list(results)
    specs: list[str] = []
    for res in results:
        for s in res.samplers:
            if s.spec not in specs:
                specs.append(s.spec)
    pct = f"{results[0].target * 100:g}%" if results else "2%"
    out = [f"median launches to within {pct} (% of the table) [mean, never = budget + 1]; "
           "`never`: not within the budget in most seeds", "",
           "| table | configs | within | budget | " + " | ".join(specs) + " |",
           "|---|---:|---:|---:|" + "---:|" * len(specs)]
    for res in results:
        cells = []
        by_spec = {s.spec: s for s in res.samplers}
        for spec in specs:
            got = by_spec.get(spec)
            if got is None:
                cells.append("")
            elif math.isinf(got.median_launches):
                cells.append(f"never [{got.mean_launches(res.budget):.1f}]")
            else:
                cells.append(f"{got.median_launches:g} ({got.median_launches / res.n_configs * 100:.0f}%) "
                             f"[{got.mean_launches(res.budget):.1f}]"
                             + (f", {_fmt_h(got.median_hours)} h" if res.has_costs else ""))
        name = f"{res.table} (every level of {', '.join(map(str, res.levels))})" if res.levels else res.table
        out.append(f"| {name} | {res.n_configs} | {res.n_within} | {res.budget} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def format_comparison(results: Iterable[SimulationResult], by: int = 20) -> str:
    """Markdown, one block per table, one row per search: the launch that first ran an optimal
    config, the launches until the study's best was within the target, how many runs had it by
    launch ``by``, and the hours of both where the table has start-up costs."""
    out = []
    for res in results:
        pct = f"{res.target * 100:g}%"
        if res.levels:
            out.append(f"**{res.table}**: a plan table (every level's best within {pct}); use the default format.")
            out.append("")
            continue
        out.append(f"**{res.table}**: {res.n_configs} configs ({res.n_failing} failing), {res.n_optimal} optimal "
                   f"({res.best:.4g} tok/s), {res.n_within} within {pct}; noise: {res.noise}; budget {res.budget} "
                   f"launches, {res.seeds} seeds, baseline first: {'yes' if res.baseline else 'no'}.")
        out.append("")
        hours = " | hours to first optimal: median | hours to within " + pct + ": median" if res.has_costs else ""
        out.append(f"| search | first optimal launch: median | p90 | never | best within {pct}: median | p90 "
                   f"| never | within {pct} by launch {by} (of {res.seeds}){hours} |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if res.has_costs else ""))
        for s in res.samplers:
            first_never = sum(r.first_optimal is None for r in s.runs)
            cells = (f" | {_fmt_h(s.median_hours_to_optimal)} | {_fmt_h(s.median_hours)}" if res.has_costs else "")
            out.append(f"| {s.spec} | {_fmt_n(s.median_first_optimal)} | {_fmt_n(s.p90_first_optimal)} | {first_never} "
                       f"| {_fmt_n(s.median_launches)} | {_fmt_n(s.p90_launches)} | {s.never} "
                       f"| {s.within_by(by)}{cells} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
