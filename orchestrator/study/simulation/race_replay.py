"""The study's verdicts replayed under launch noise: how often a study names the wrong config
beyond noise, and how often a fresh launch lands in the exported figure's interval.

A table (``study.replay``) is the truth; every launch is fast or slow for its whole life (a
server relaunched can be: issue 34 measured 999 tok/s in a study and 721 relaunched). The real
``SearchPolicy`` searches an in-memory study of the table, the driver's schedule relaunches the
baseline and the incumbent (``study.relaunch``), the finalists are raced at the end
(``study.race``), and the study's figures and verdicts are read exactly as the run's last line,
``status``, the report and ``export`` read them (``study.launches``, ``study.plan``). Then the
exported config is launched ``fresh`` more times: the median of those launches should lie in the
interval the export printed for a fresh launch.

A launch draws its factor once (``LaunchNoise``): ``two_state`` (fast or slow by ``size``, even
odds: the harshest case for an interval, since a few launches of one state look like no noise
at all) or ``lognormal`` (a coefficient of variation ``size``); each sample of it then varies by
``sample_cv`` around the row's median times that factor.

    replay_verdicts(table, seed, ...) -> Verdicts
    python -m orchestrator.study.simulation.race_replay TABLE.csv --seeds 20 --launch-noise 0.35
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import dataclass
from typing import Any

import optuna

from orchestrator.config.job import DEFAULT_CONFIRM, DEFAULT_RELAUNCH, Objective
from orchestrator.core.measurement import LevelResult, Measurement
from orchestrator.core.records import COMPLETE, TrialResult, TrialRow
from orchestrator.core.verdict import FASTER, SLOWER, verdict
from orchestrator.study.evidence.history import baseline_row, best_rows
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.race import RACE
from orchestrator.study.search.relaunch import RELAUNCH
from orchestrator.study.search.samplers import make_sampler, make_strategy, startup_trials
from orchestrator.study.simulation.night import run_schedule
from orchestrator.study.simulation.replay import TableSpace
from orchestrator.study.simulation.replay_table import Row, Table, load_table
from orchestrator.study.storage import objective as objectives

LAUNCH_S = 60.0  # what one replayed launch costs (the schedule's shares need a cost; the table's own when it has one)
FRESH = 5  # fresh launches of the exported config


@dataclass(frozen=True)
class LaunchNoise:
    """How a replayed launch differs from the row's truth (module docstring)."""

    size: float = 0.35
    kind: str = "two_state"  # or "lognormal"
    sample_cv: float = 0.01

    def factor(self, rng: random.Random) -> float:
        if self.kind == "two_state":
            return 1.0 + self.size if rng.random() < 0.5 else 1.0 - self.size
        return math.exp(rng.gauss(-0.5 * self.size ** 2, self.size))


@dataclass(frozen=True)
class Verdicts:
    """One replayed study: what it exported and said, against the truth."""

    seed: int
    exported: str  # the exported config's key
    truly_best: bool  # it is the table's best (by the rows' medians)
    wrong_claim: bool  # a truly slower config named best beyond noise (against the truly best)
    beyond_noise: bool  # the exported config's verdict against the baseline is beyond noise
    fresh_inside: bool | None  # the median of FRESH fresh launches lies in the export's fresh-launch range
    launches: int  # every launch of the study (search, relaunches, race)
    race_launches: int
    tied: bool  # the race ended in a tie for the exported config


def _launch(row: Row, config: dict[str, Any], rng: random.Random, noise: LaunchNoise, repeats: int) -> TrialResult:
    """One replayed launch of a working row: ``repeats`` samples around its median x the launch's factor."""
    true = row.median or 0.0
    factor = noise.factor(rng)
    samples = tuple(true * factor * (1.0 + rng.gauss(0.0, noise.sample_cv)) for _ in range(repeats))
    cost = (row.startup_s or LAUNCH_S)
    m = Measurement(levels={1: LevelResult(1, samples=samples)}, rounds=repeats)
    return TrialResult(outcome=COMPLETE, config=dict(config), value=statistics.median(samples), measurement=m,
                       correctness={"ok": True}, timing={"total_s": cost})


def replay_verdicts(table: Table, seed: int, *, budget: int | None = None, confirm: int = DEFAULT_CONFIRM,
                    relaunch: float = DEFAULT_RELAUNCH, noise: LaunchNoise = LaunchNoise(), repeats: int = 3,
                    sampler: str = "tpe", fresh: int = FRESH) -> Verdicts:
    """One study of ``table`` under launch noise (module docstring)."""
    if table.by_level or any(r.failure for r in table.rows):
        raise ValueError("replay_verdicts takes a table of one level whose every row works")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = TableSpace(table)
    budget = budget or space.size()
    objective = Objective()
    made = make_sampler(sampler, seed=seed, budget=budget, space_size=space.size(),
                        search_space=space.distributions())
    study = optuna.create_study(directions=objective.directions(), sampler=made)  # type: ignore[arg-type]
    base = table.baseline
    baseline = {p: base.params.get(p, vals[0]) for p, vals in table.choices.items()} if base is not None else None
    policy = SearchPolicy(study, space, space.normalize, baseline=baseline, budget=budget, seed=seed,
                          strategy=make_strategy(sampler, startup=startup_trials(sampler, budget=budget,
                                                                                 space_size=space.size())),
                          objective=objective)
    rng = random.Random(seed * 7919 + 3)
    rows_by_key = table.by_key()
    tally = {"search": 0, RELAUNCH: 0, RACE: 0}

    def answer(key: str, config: dict[str, Any], role: str) -> TrialResult:
        tally[role] += 1
        return _launch(rows_by_key[key], config, rng, noise, repeats)

    run_schedule(policy, table, objective, answer, budget=budget, confirm=confirm, relaunch=relaunch)
    launches, raced = sum(tally.values()), tally[RACE]
    return _judge(policy.rows(), table, seed, rng, noise, repeats, launches, raced, fresh)


def _judge(rows: list[TrialRow], table: Table, seed: int, rng: random.Random, noise: LaunchNoise, repeats: int,
           launches: int, raced: int, fresh: int) -> Verdicts:
    """What the study says, as its readers say it, against the table's truth."""
    ev = Evidence(rows)
    level = objectives.levels(None)[0]
    best = best_rows(rows, 1)[0]
    by_key = table.by_key()
    truth = {k: r.median or 0.0 for k, r in by_key.items()}
    top = max(truth, key=lambda k: truth[k])
    wrong = False
    if truth[best.config_key] < truth[top]:
        wrong = verdict(ev.interval(top, best.config_key, level)) == FASTER
    base = baseline_row(rows)
    beyond = base is not None and base.config_key != best.config_key and \
        verdict(ev.interval(base.config_key, best.config_key, level)) in (FASTER, SLOWER)
    if base is not None and truth[base.config_key] < truth[best.config_key]:
        pass  # beyond noise and right
    elif beyond and base is not None and verdict(ev.interval(base.config_key, best.config_key, level)) == FASTER:
        wrong = True  # called faster than the baseline beyond noise, while it is not
    row = by_key[best.config_key]
    again = [_launch(row, row.params, rng, noise, repeats).value or 0.0 for _ in range(fresh)]
    span = ev.fresh(best.config_key, level)
    inside = None if span is None else span[0] <= statistics.median(again) <= span[1]
    tied = _tied(ev, rows, best.config_key, level)
    return Verdicts(seed, best.config_key, best.config_key == top, wrong, beyond, inside, launches, raced, tied)


def _tied(ev: Evidence, rows: list[TrialRow], key: str, level: int) -> bool:
    others = [r.config_key for r in best_rows(rows, 10)[1:]]
    return any(verdict(ev.interval(key, k, level)) not in (SLOWER,) for k in others if ev.count(k, level))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("table")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--launch-noise", type=float, default=0.35)
    p.add_argument("--kind", choices=("two_state", "lognormal"), default="two_state")
    p.add_argument("--confirm", type=int, default=DEFAULT_CONFIRM)
    p.add_argument("--relaunch", type=float, default=DEFAULT_RELAUNCH)
    p.add_argument("--budget", type=int, default=None)
    a = p.parse_args(argv)
    table = load_table(a.table)
    noise = LaunchNoise(a.launch_noise, a.kind)
    runs = [replay_verdicts(table, s, budget=a.budget, confirm=a.confirm, relaunch=a.relaunch, noise=noise)
            for s in range(a.seeds)]
    inside = [r.fresh_inside for r in runs if r.fresh_inside is not None]
    print(f"{table.name}: {a.seeds} seeds, launch noise {a.kind} {a.launch_noise:g}, budget.confirm {a.confirm}, "
          f"budget.relaunch {a.relaunch:g}")
    print(f"wrong config named best beyond noise: {sum(r.wrong_claim for r in runs)} of {a.seeds}; exported the "
          f"true best: {sum(r.truly_best for r in runs)}; beyond noise of the baseline: "
          f"{sum(r.beyond_noise for r in runs)}; ties: {sum(r.tied for r in runs)}")
    per = statistics.median(r.launches for r in runs)
    race = statistics.median(r.race_launches for r in runs)
    print(f"median of {FRESH} fresh launches inside the export's range: {sum(inside)} of {len(inside)}; launches per "
          f"study: median {per:g} (race {race:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
