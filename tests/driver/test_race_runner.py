"""The race of the finalists and its time: no budget, no race and no time kept for it; the time
the race needs is its launches at the best config's measured cost; with a time budget the search
stops for the race only once two configs are measured and the time left is what the race needs
(a real journal study, recorded as the driver records)."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import recorded_study as fx

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.progress import Progress
from orchestrator.driver.race_runner import RaceRunner
from orchestrator.driver.time_budget import TimeBudget
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage.storage import open_study

CHOICES = {"tp_size": [1, 2], "backend.threads": [1, 2]}
BASE = {"tp_size": 1, "backend.threads": 1}
OTHER = {"tp_size": 2, "backend.threads": 2}


def race_of(job, budget: int, out: io.StringIO) -> RaceRunner:
    return RaceRunner(job.objective, budget, Launcher(job), Progress(job, trials=8, timeout_s=None, out=out))


def study_of(tmp_path, **budget):
    job = load_job(write_job(tmp_path, study="race-time", budget={"trials": 8, "timeout": "15m", **budget}))
    study = open_study(job)
    return job, study, SearchPolicy(study, fx.Space(CHOICES), lambda c: dict(c), baseline=None, budget=None)


def test_no_budget_no_race_and_no_time_kept_for_it(tmp_path):
    job, study, policy = study_of(tmp_path)
    fx.record(study, policy, BASE, fx.ok(BASE, 20.0), baseline=True, choices=CHOICES)
    fx.record(study, policy, OTHER, fx.ok(OTHER, 20.2, at=70), choices=CHOICES)
    race = race_of(job, 0, io.StringIO())
    assert race.state(policy) is None and race.seconds(policy) == 0.0
    run = SimpleNamespace(time=TimeBudget(15 * 60, time.monotonic() - 890), policy=policy, search_over=False,
                          summary=SimpleNamespace(reason=None))  # 10 s left
    assert race.leave_time(run) is False and not run.search_over


def test_the_race_takes_its_launches_at_the_measured_cost(tmp_path):
    job, study, policy = study_of(tmp_path)
    race = race_of(job, 8, io.StringIO())
    assert race.seconds(policy) is None  # no launch measured: no cost known
    fx.record(study, policy, BASE, fx.ok(BASE, 20.0), baseline=True, choices=CHOICES)  # one launch: 60 s
    assert race.seconds(policy) == 8 * 60.0


def test_the_search_stops_for_the_race_only_once_two_configs_are_measured(tmp_path):
    """Found running the demo beside the test suite on a busy 2-core box: its baseline's first
    launch cost so much that the time left looked like only the race's (8 launches), and the
    search stopped after the baseline, a race with nothing to race. One config has no race; with
    two, the search stops for it when the time left is what it needs."""
    job, study, policy = study_of(tmp_path, confirm=8)
    fx.record(study, policy, BASE, fx.ok(BASE, 20.0), baseline=True, choices=CHOICES)  # one launch: 60 s
    out = io.StringIO()
    race = race_of(job, job.budget.confirm, out)
    run = SimpleNamespace(time=TimeBudget(15 * 60, time.monotonic() - 600), policy=policy, search_over=False,
                          summary=SimpleNamespace(reason=None))  # 300 s left: less than 8 launches of 60 s
    assert race.leave_time(run) is False and not run.search_over
    fx.record(study, policy, OTHER, fx.ok(OTHER, 30.0, at=70), choices=CHOICES)
    assert race.leave_time(run) is True and run.search_over and run.summary.reason == "timeout"
    assert "the race of the finalists needs ~" in out.getvalue()
