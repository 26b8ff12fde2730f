"""The relaunches during the search: the baseline or the incumbent launched again when the
schedule of ``study.relaunch`` says so, the launch noise every verdict carries measured as the
search goes.

``share`` is ``budget.relaunch``, the share of the search's launches spent on relaunches (0: none;
a goodput study, or a shared study whose relaunches another driver holds). Once the search is
over only the relaunches that make the noise known still start (``noise_due``: a run that finds
its search's budget spent continues them). Each relaunch is numbered ``EXTRA_NUMBERS + n`` and
comes back as an uncounted trial of its config (``Recorder.launch_back``).
"""

from __future__ import annotations

from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import Launch, LoopState
from orchestrator.driver.progress import Progress
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.relaunch import launches_to_know_noise, next_relaunch


class RelaunchSchedule:
    """When to relaunch what (module docstring), for one run of a job with ``objective``."""

    def __init__(self, objective, share: float, launcher: Launcher, progress: Progress):
        self.objective = objective
        self.share = share
        self.launcher = launcher
        self.progress = progress

    def start(self, run: LoopState) -> None:
        """The relaunches due now into free slots (none before the golden reference, nor once the
        search gave its time to the race)."""
        policy, share = run.policy, self.share
        if share <= 0 or run.need_reference or run.search_over:
            return
        over = policy.budget_reached or policy.exhausted  # then only the relaunches that make the noise known
        while len(run.in_flight) < run.executor.slots:
            if over and run.flying("search"):
                return
            rows = policy.rows()
            due = next_relaunch(rows, self.objective, share, policy.launch_cost(),
                                in_flight=[launch.key for launch in run.flying("relaunch") if launch.key],
                                search_over=over, budget=policy.budget)
            if due is None:
                return
            launch = Launch("relaunch", self.launcher.extra_number(run, rows), key=due.key, config=dict(due.row.params),
                            shown=f"#{due.row.number}")
            self.launcher.start_extra(run, launch)
            self.progress.relaunching(launch.shown, due.why, due.launches + 1)

    def noise_due(self, policy: SearchPolicy) -> bool:
        """A search that is over left the launch noise unknown (a run stopped during its relaunches)."""
        if self.share <= 0:
            return False
        return next_relaunch(policy.rows(), self.objective, self.share, policy.launch_cost(),
                             search_over=True) is not None

    def seconds(self, policy: SearchPolicy, search_s: float) -> float:
        """What the relaunches should take beside ``search_s`` of search: their share of it, or the
        launches the launch noise still needs by the measured launch cost if more."""
        if self.share <= 0:
            return 0.0
        needed = launches_to_know_noise(policy.rows(), self.objective) * (policy.launch_cost().median or 0.0)
        return max(search_s * self.share, needed)
