"""The race of the finalists, and the time it needs.

When the search is over (its budget spent, its space exhausted, or the time left only what the
race needs) the incumbent and every config within launch noise of it are relaunched in
interleaved rounds until the order is decided or ``budget.confirm`` launches are spent
(``study.race``); each race launch is an uncounted trial with its race record, so a run that
finds the search's budget spent continues a stopped run's race. With a time budget the search
yields to the race once what is left is what the race needs (``leave_time``), and no race launch
starts that would end past the deadline. A goodput study, or a shared study whose race another
driver holds, has no race (``budget`` 0).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.core import logs
from orchestrator.core.records import COMPLETE, TrialResult
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import Launch, LoopState
from orchestrator.driver.progress import Progress, fmt_s
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.race import RaceState, race_state

# the loop's own step for a launch that came back (``StudyDriver._collect``)
Collect = Callable[[LoopState, Launch, TrialResult], None]


class RaceRunner:
    """The race of one run (module docstring): ``budget`` launches (``budget.confirm``) for a job
    with ``objective``."""

    def __init__(self, objective, budget: int, launcher: Launcher, progress: Progress):
        self.objective = objective
        self.budget = budget
        self.launcher = launcher
        self.progress = progress
        self.say = progress.say

    def state(self, policy: SearchPolicy) -> RaceState | None:
        """The race this study's search calls for now, None when there is none to run (no budget,
        nothing to race, or it is over)."""
        budget = self.budget
        if budget <= 0:
            return None
        state = race_state(policy.rows(), self.objective, budget, policy.budget_used())
        return None if state.over() else state

    def seconds(self, policy: SearchPolicy) -> float | None:
        """What the race should take: ``budget.confirm`` launches at the cost of the study's best
        configs (the likely finalists) by the measured launch costs."""
        budget = self.budget
        cost = policy.launch_cost()
        if budget <= 0 or cost.median is None:
            return 0.0 if budget <= 0 else None
        best = policy.best_row()
        per = (cost.predict(best.params) if best is not None else None) or cost.median
        return budget * per

    def leave_time(self, run: LoopState) -> bool:
        """With a time budget, the search stops when what is left is what the race needs (and the
        next search launch would eat into it); said once. Not before two configs are measured: one
        config alone has no race (on a loaded box the first launch's cost once stopped the demo
        after its baseline). A race longer than the run's whole time
        budget stops nothing: the search goes on, and the race runs in the runs after it (a run that
        finds the search's budget spent continues it, launch by launch within its time)."""
        if run.time.deadline is None or self.budget <= 0:
            return False
        measured = {r.config_key for r in run.policy.rows() if r.state == COMPLETE and r.value is not None}
        if len(measured) < 2:  # nothing to race yet: a time budget spent on one config's race is lost
            return False
        race = self.seconds(run.policy)
        cost = run.policy.launch_cost()
        if race is None or cost.median is None:
            return False
        if run.time.timeout_s is not None and race + cost.median > run.time.timeout_s:
            return False
        left = run.time.left()
        assert left is not None  # a deadline, checked above
        if left >= race + cost.median:
            return False
        run.search_over = True
        run.summary.reason = "timeout"
        self.say(f"stopping the search with {fmt_s(left)} left of the time budget: the race of the finalists "
                 f"needs ~{fmt_s(race)} ({self.budget} launches, budget.confirm)")
        return True

    def run(self, run: LoopState, collect: Collect) -> None:
        """The finalists relaunched in interleaved rounds until the order is decided or the
        race's budget is spent (``study.race``); a stopped run's race continues here."""
        if run.time.past() or (run.checks and run.golden is None):
            return
        state = self.state(run.policy)
        if state is None:
            return
        cost = run.policy.launch_cost()
        self.progress.race_planned(state, run.policy.rows(), cost)
        rounds_seen = state.rounds_done
        while True:
            logs.check_driver_log()
            stop = run.stop_starting()
            if run.signals.kill_now and run.in_flight:
                run.executor.cancel_all()
            if not stop:
                self._start(run, state, cost)
            if not run.in_flight:
                break
            for ticket, result in run.executor.wait(0.5):
                collect(run, run.in_flight.pop(ticket), result)
                state = race_state(run.policy.rows(), self.objective, self.budget, state.plan.id)
                if state.rounds_done > rounds_seen:
                    rounds_seen = state.rounds_done
                    self.progress.race_round(state, run.policy.rows())
        if run.signals.count:
            run.summary.reason = "stopped by signal"
        elif run.time.past() and not state.over():
            run.summary.reason = "timeout"
        self.progress.race_over(state, run.policy.rows(), self.objective)

    def _start(self, run: LoopState, state: RaceState, cost: LaunchCost) -> None:
        """Race launches into free slots, the round's next finalist first; none that would end past the deadline."""
        while len(run.in_flight) < run.executor.slots:
            flying = [launch.key for launch in run.flying("race") if launch.key]
            key = state.next(flying)
            if key is None:
                return
            row = state.plan.configs.get(key)
            if row is None:
                return
            expected = state.launch_seconds(key, cost)
            if run.time.ends_past(expected):
                self.say("the race stops here: its next launch would end past the time budget")
                run.search_over = True
                return
            rows = run.policy.rows()
            launch = Launch("race", self.launcher.extra_number(run, rows), key=key, config=dict(row.params),
                            record=state.plan.record(state.round), shown=f"#{row.number}")
            self.launcher.start_extra(run, launch)
            self.progress.racing(launch.shown, state, len(flying) + 1, state.expected_seconds(cost))
