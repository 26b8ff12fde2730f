"""The relaunch schedule on a real study: with no share nothing is relaunched, nor is any time
kept for it; a search that is over (the baseline and one other config measured) with the launch
noise unknown relaunches the baseline (its second launch) into a free slot, numbered apart from
the trials, and keeps the time the noise still needs (real reference servers, a real journal)."""

from __future__ import annotations

import io

import pytest
from loop_parts import loop_state, wait_for

from orchestrator.core.records import COMPLETE
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import EXTRA_NUMBERS, Launch
from orchestrator.driver.progress import Progress
from orchestrator.driver.relaunch_schedule import RelaunchSchedule

pytestmark = pytest.mark.slow


def measure_the_search(run, launcher: Launcher) -> None:
    """The search's budget spent: the baseline and one other config measured."""
    while (proposal := run.policy.next()) is not None:
        run.policy.mark(proposal, baseline=proposal.key == run.policy.baseline_key)
        run.in_flight[run.executor.submit(launcher.spec(run.policy, proposal.number, proposal.config, None))] = \
            Launch.of(proposal, reference=False)
        [(ticket, result)] = wait_for(run.executor)
        run.in_flight.pop(ticket)
        assert result.outcome == COMPLETE, result.failure_reason
        run.policy.record(proposal, result)


def test_a_search_over_with_the_noise_unknown_relaunches_the_baseline(tmp_path, no_leftover_servers):
    out = io.StringIO()
    with loop_state(tmp_path, correctness={"enabled": False}, budget={"trials": 2}) as (job, run):
        launcher = Launcher(job)
        schedule = RelaunchSchedule(job.objective, 0.2, launcher, Progress(job, trials=2, timeout_s=None, out=out))
        assert not schedule.noise_due(run.policy)  # nothing measured: nothing to relaunch
        measure_the_search(run, launcher)
        assert run.policy.budget_reached and schedule.noise_due(run.policy)
        assert schedule.seconds(run.policy, 0.0) > 0  # the launches the noise still needs
        schedule.start(run)
        [launch] = run.in_flight.values()
        assert (launch.kind, launch.number, launch.key, launch.shown) == ("relaunch", EXTRA_NUMBERS + 1,
                                                                          run.policy.baseline_key, "#0")
        assert "relaunching" in out.getvalue() and "#0 (its 2nd launch" in out.getvalue()
        run.search_over = True
        schedule.start(run)  # the search gave its time to the race: nothing more starts
        assert len(run.in_flight) == 1


def test_no_share_relaunches_nothing_and_keeps_no_time(tmp_path, no_leftover_servers):
    with loop_state(tmp_path, correctness={"enabled": False}, budget={"trials": 2}) as (job, run):
        launcher = Launcher(job)
        schedule = RelaunchSchedule(job.objective, 0.0, launcher, Progress(job, trials=2, timeout_s=None,
                                                                            out=io.StringIO()))
        measure_the_search(run, launcher)
        schedule.start(run)
        assert run.in_flight == {}
        assert not schedule.noise_due(run.policy) and schedule.seconds(run.policy, 600.0) == 0.0
