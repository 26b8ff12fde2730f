"""How a launch reaches the executor and comes back into the study: a spec carries the job's
config, the gate's reference texts and the early stop's thresholds; relaunches and race launches
are numbered after the study's stored ones and those in flight; a launch outside the search is
stored as an uncounted trial of its config, with this run's start (real reference servers, a
real journal)."""

from __future__ import annotations

import pytest
from loop_parts import loop_state, wait_for

from orchestrator.core.records import COMPLETE
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import EXTRA_NUMBERS, Launch
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.search.relaunch import RELAUNCH
from orchestrator.study.storage.storage import ATTR_LAUNCH_ROLE

pytestmark = pytest.mark.slow


def test_a_spec_carries_the_config_the_reference_texts_and_the_thresholds(tmp_path):
    with loop_state(tmp_path) as (job, run):
        launcher = Launcher(job)
        config = job.baseline_config()
        spec = launcher.spec(run.policy, 7, config, ["the reference"], {1: 5.0})
        assert (spec.number, spec.config, spec.prune_below) == (7, config, {1: 5.0})
        assert spec.check.reference_texts == ("the reference",)
        capture = launcher.spec(None, 8, config, None)
        assert capture.check.reference_texts is None  # no texts: this launch captures the reference


def test_a_relaunch_runs_and_is_stored_as_an_uncounted_trial_of_its_config(tmp_path, no_leftover_servers):
    with loop_state(tmp_path) as (job, run):
        launcher = Launcher(job)
        config = job.baseline_config()
        number = launcher.extra_number(run, run.policy.rows())
        assert number == EXTRA_NUMBERS + 1
        launch = Launch("relaunch", number, key=run.policy.baseline_key, config=config, shown="#0")
        launcher.start_extra(run, launch)
        assert list(run.in_flight.values()) == [launch]
        assert launcher.extra_number(run, run.policy.rows()) == EXTRA_NUMBERS + 2  # the one in flight counts
        [(ticket, result)] = wait_for(run.executor)
        assert run.in_flight.pop(ticket) == launch and result.outcome == COMPLETE, result.failure_reason
        stored = launcher.store_uncounted(run, result, config, {ATTR_LAUNCH_ROLE: RELAUNCH}, key=launch.key)
        [row] = trial_rows(run.study)
        assert row.number == stored and not row.counted and row.state == COMPLETE
        assert row.run == run.policy.run  # this run's: the report's wall clock counts it
        assert row.launch_role == RELAUNCH and row.config_key == run.policy.baseline_key and row.value == result.value
        assert launcher.extra_number(run, run.policy.rows()) == EXTRA_NUMBERS + 2  # now a stored one
        assert (tmp_path / "reports" / "t" / "logs" / f"trial-{number:04d}.log").exists()
