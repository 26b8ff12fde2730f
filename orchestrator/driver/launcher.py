"""How the driver puts a launch on the executor, and stores one outside the search.

Every launch runs a ``TrialSpec`` (``spec``): the job's, with the gate's reference texts, the
early stop's thresholds and a start-up limit from the starts the study measured. A relaunch or
race launch (``start_extra``) is numbered apart from the trials (``extra_number``:
``EXTRA_NUMBERS + n``, the study's n-th of them); a launch outside the search (a baseline
repeat, the reference config's run, a relaunch, a race launch) comes back as an uncounted trial
of its config (``store_uncounted``), which the report's wall clock and the verdicts read.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.core.records import COMPLETE, TrialResult, config_key
from orchestrator.driver.loop_state import EXTRA_NUMBERS, Launch, LoopState
from orchestrator.node.spec import TrialSpec, check_plan
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.race import RACE
from orchestrator.study.search.relaunch import RELAUNCH
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage import storage


class Launcher:
    """The job's launches onto the executor, and back into the study (module docstring)."""

    def __init__(self, job):
        self.job = job

    def spec(self, policy: SearchPolicy | None, number: int, config: dict, reference_texts: list[str] | None,
             prune_below: Mapping[int, float] | None = None) -> TrialSpec:
        """Trial ``number``'s spec: the gate's capture scored against ``reference_texts``
        (None: capture the golden reference itself), the early stop's thresholds per level, its
        start-up limit from the starts ``policy``'s study has measured (``node.spec.startup_limit``)."""
        starts = [row.durations.get("launch_s") for row in policy.rows()] if policy is not None else []
        return TrialSpec.from_job(self.job, number, config, check=check_plan(self.job, reference_texts),
                                  prune_below=prune_below, measured_starts=starts)

    def start_extra(self, run: LoopState, launch: Launch) -> None:
        """A relaunch or race launch onto the executor, in flight from now."""
        assert launch.config is not None  # relaunches and race launches carry their config
        spec = self.spec(run.policy, launch.number, launch.config, run.golden.texts if run.golden else None)
        run.in_flight[run.executor.submit(spec)] = launch

    @staticmethod
    def extra_number(run: LoopState, rows: list) -> int:
        """The next relaunch's or race launch's log number: after the study's stored ones (``rows``)
        and those in flight."""
        stored = sum(1 for r in rows if r.launch_role in (RELAUNCH, RACE))
        return EXTRA_NUMBERS + stored + len(run.flying("relaunch")) + len(run.flying("race")) + 1

    def store_uncounted(self, run: LoopState, result: TrialResult, config: dict, attrs: dict,
                        key: str | None = None) -> int:
        """A launch outside the search, stored as an uncounted trial of ``config`` (with this run's
        start: the report's wall clock counts it); returns its trial number."""
        policy = run.policy
        if policy.run:
            attrs = {**attrs, storage.ATTR_RUN: policy.run}
        values = None
        if result.outcome == COMPLETE and objectives.has_values(self.job.objective, result):
            values = policy.told_values(result)  # what the objective tells Optuna (one per level for a plan)
        return storage.add_uncounted_trial(run.study, result, config, key or config_key(config),
                                           self.job.space.distributions(), attrs, values=values)
