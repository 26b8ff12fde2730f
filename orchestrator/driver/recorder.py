"""The tell step: what a launch that came back means, recorded and said.

``decide`` gives a search trial's final outcome (``core.outcome.decide`` with the job's rules,
the baseline's measurement and the config's earlier timeouts); ``record`` stores it through the
policy, re-queues what was not the config's fault, prints its line and the bans, and hands it
to the circuit breaker. A relaunch or race launch is judged by the same gate and stored as an
uncounted trial of its config (``launch_back``). A launch that failed on the job itself, not its
config (``stop_on_job_error``), stops the run with one line (exit 2).
"""

from __future__ import annotations

from typing import Any

from orchestrator.core import correctness, outcome
from orchestrator.core.errors import BadInput
from orchestrator.core.records import TrialResult
from orchestrator.driver.breaker import Breaker
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import Launch, LoopState
from orchestrator.driver.progress import Progress
from orchestrator.study.evidence.plan import build_plan
from orchestrator.study.search.policy import Proposal, SearchPolicy
from orchestrator.study.search.race import RACE
from orchestrator.study.search.relaunch import RELAUNCH
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage.storage import ATTR_LAUNCH_ROLE, ATTR_RACE


class Recorder:
    """Decides and records what comes back (module docstring). ``job_error``: the run stopped
    on the job's own error (the driver then forgets a study it created with nothing measured)."""

    def __init__(self, job, progress: Progress, breaker: Breaker, launcher: Launcher):
        self.job = job
        self.progress = progress
        self.breaker = breaker
        self.launcher = launcher
        self.job_error = False

    def decide(self, run: LoopState, proposal: Proposal, result: TrialResult,
               golden: correctness.Golden | None) -> outcome.Final:
        """The trial's final outcome, compared with ``golden`` (None: the gate compares nothing)."""
        base = run.policy.baseline_row()
        objective = self.job.objective
        return outcome.decide(result, stop_signals=run.signals.count, golden=golden, rules=self.job.constraints,
                              baseline=base.measurement if base else None,
                              earlier_timeouts=run.policy.earlier_timeouts(proposal.key, proposal.number),
                              slo=(lambda m: objectives.judged(objective, m)) if objective.slo else None)

    def record(self, policy: SearchPolicy, proposal: Proposal, final: outcome.Final) -> None:
        """Store the final outcome, re-queue what was not the config's fault, say it, and
        trip the circuit breakers."""
        policy.record(proposal, final.result, counted=final.counted, blameless=final.blameless)
        if final.requeue:
            policy.requeue(proposal)
        self.said_end(policy, proposal, final.result)
        self.stop_on_job_error(final, f"#{proposal.number}")
        self.progress.bans(policy.bans())
        self.breaker.check(final)

    def said_end(self, policy: SearchPolicy, proposal: Proposal, result: TrialResult) -> None:
        """The trial's end line, against the best and the baseline so far."""
        base = policy.baseline_row()
        plan = build_plan(policy.rows(), self.job.objective) if self.job.objective.by_level else None
        self.progress.ended(proposal.number, result, policy.best_row(), base.worth if base else None, plan=plan)

    def stop_on_job_error(self, final: outcome.Final, label: str) -> None:
        """A launch that failed on the job, not its config (``outcome.Final.job_error``: the server
        refused the job's requests as longer than its limit) stops the run with that one line, exit 2:
        no config is held to it, and a study this run created holds nothing measured, so it is
        forgotten (``StudyStart.forget_unlaunched``): the fixed job starts it afresh."""
        if final.job_error is None:
            return
        self.job_error = True
        key = "bench.traffic" if self.job.bench.traffic is not None else "bench"
        raise BadInput(f"stopping: {label}: {final.job_error}", file=str(self.job.path), key=key)

    def launch_back(self, run: LoopState, launch: Launch, result: TrialResult) -> None:
        """A relaunch or race launch is back: judged like a trial (the correctness gate: a config that
        answers wrong on a fresh launch is wrong) and stored as an uncounted trial of its config."""
        assert launch.config is not None and launch.key is not None
        final = outcome.decide(result, stop_signals=run.signals.count, golden=run.golden)
        result = final.result
        role = RELAUNCH if launch.kind == "relaunch" else RACE
        attrs: dict[str, Any] = {ATTR_LAUNCH_ROLE: role}
        if launch.record is not None:
            attrs[ATTR_RACE] = launch.record
        self.launcher.store_uncounted(run, result, launch.config, attrs, key=launch.key)
        self.stop_on_job_error(final, launch.shown)
        self.progress.finished += 1
        run.summary.relaunched += 1
        rows = run.policy.rows()
        self.progress.launch_back(launch.kind, launch.shown, result, rows, self.job.objective)
