"""How one run starts its study, apart from the loop that runs it (``driver.run``).

``StudyStart`` holds what start-up decides and the loop reads later: the job's sampler and
strategy, the pre-flight of every node, the space the all-reduce pre-screen leaves (and the
settings it puts last), the study opened (shared with other drivers or not), what a dead driver
left behind (its servers, its RUNNING trials), and a study this run created that stays empty
(forgotten when the run is refused). Each step says what it did through ``say``, as the run's
other lines; none launches a server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import optuna

from orchestrator.core import nccl, prescreened
from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.driver.executor import Executor
from orchestrator.driver.prescreen import run_prescreen
from orchestrator.driver.prescreen_drop import (
    LATE_RATIO,
    PrescreenedSpace,
    dropped_settings,
    late_settings,
    setting_key,
)
from orchestrator.driver.prescreen_table import format_prescreen
from orchestrator.driver.race_runner import RaceRunner
from orchestrator.driver.relaunch_schedule import RelaunchSchedule
from orchestrator.node import preflight
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.samplers import make_sampler, make_strategy, startup_trials
from orchestrator.study.search.strategies.base import Strategy
from orchestrator.study.storage import storage
from orchestrator.study.storage.shared import SharedStudy, is_shared, shown
from orchestrator.study.storage.storage import open_study

# the run's own logger: driver.log names the logger of every warning (the job's advice), and start-up's
# lines are the run's, as they were before start-up had a module of its own
log = logging.getLogger("orchestrator.driver.run")


class StudyStart:
    """The start-up of one run of ``job``'s study (module docstring). ``trials``: the run's
    budget (None: the job's has none); ``normalize``: the backend's, for the pre-screened space;
    ``say``: where its lines go.

    After ``open``: ``shared`` is the ``SharedStudy`` when other drivers may run the study at
    once (else None); after ``space``: ``late`` is the pre-screen's prior (settings tried late)
    or None."""

    def __init__(self, job, *, trials: int | None, normalize: Callable[[dict], dict],
                 say: Callable[[str], None]) -> None:
        self.job = job
        self.trials = trials
        self.normalize = normalize
        self.say = say
        self.dir = job.dir
        self.late: Callable[[dict], bool] | None = None  # the pre-screen's prior: settings tried late
        self.shared: SharedStudy | None = None  # other drivers may run the study at once (``study.shared``)
        self._empty_study: tuple[optuna.Study, bool] | None = None  # a study this run created, still empty
        # when this run last looked for dead drivers' trials (a shared study); None: never (not 0.0: the
        # monotonic clock counts from boot, and a box up for less than a heartbeat period would never look)
        self._took_over_at: float | None = None

    def sampler(self) -> tuple[optuna.samplers.BaseSampler, Strategy]:
        """The job's sampler and what the policy does with it (``samplers.make_strategy``: with the
        start-up trials the sampler was built with, which the policy picks). BadInput for options
        the sampler refuses."""
        job = self.job
        budget, space_size = self.trials or 50, job.space.size()
        try:
            sampler = make_sampler(job.sampler.name, seed=job.sampler.seed, budget=budget, space_size=space_size,
                                   n_startup_trials=job.sampler.n_startup_trials, options=job.sampler.options,
                                   search_space=job.space.distributions())
            startup = startup_trials(job.sampler.name, budget=budget, space_size=space_size,
                                     n_startup_trials=job.sampler.n_startup_trials, options=job.sampler.options)
            strategy = make_strategy(job.sampler.name, startup=startup, options=job.sampler.options)
        except ValueError as exc:
            raise BadInput(str(exc), file=str(job.path), key="sampler") from None
        return sampler, strategy

    def preflight(self, executor: Executor) -> None:
        """Before the first launch: does every node have what the trials need? One line per
        node with a problem, and nothing launched (``orchestrator.node.preflight``): RuntimeFailure."""
        problem = preflight.format_problems(executor.preflight(preflight.needs(self.job)))
        if problem:
            raise RuntimeFailure(problem)

    def open(self, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        """The job's study, opened or created (``storage.open_study``), through a ``SharedStudy``
        when its storage is shared; a study this run created empty is remembered, so a refused run
        can forget it (``forget_unlaunched``). A shared study is never forgotten here: another
        driver may be running it."""
        job = self.job
        new_journal = job.journal_path is not None and not job.journal_path.exists()
        if is_shared(job.storage):
            self.shared = SharedStudy(job.storage, job.study, grace_s=round(job.timeouts.takeover_s))
        study = open_study(job, sampler, say=self.say, storage=self.shared.storage if self.shared else None)
        self._empty_study = (study, new_journal) if not study.get_trials(deepcopy=False) and not self.shared \
            else None
        return study

    def space(self, baseline: dict):
        """The job's space, minus NCCL settings the all-reduce pre-screen dropped (if enabled);
        the baseline's own setting always stays (every result reads as x baseline). Runs the
        pre-screen when the study has none stored; sets ``late``."""
        if not self.job.prescreen.enabled:
            return self.job.space
        stored = self.dir.prescreen
        if stored.exists():
            data = prescreened.load(stored)
        else:
            self.say("pre-screen: measuring all-reduce latency per NCCL setting before any server launch")
            data = run_prescreen(self.job, say=self.say)
            self.say(format_prescreen(data))
        dropped = dropped_settings(data, self.job.prescreen.keep_within)
        dropped.pop(setting_key(baseline) or "", None)
        if dropped:
            self.say(f"pre-screen: {len(dropped)} NCCL setting(s) dropped before launch")
        late = late_settings(data) - set(dropped)
        if late:
            self.say(f"pre-screen: {len(late)} NCCL setting(s) {LATE_RATIO:g}x the fastest all-reduce or slower, "
                     "tried late")
            self.late = lambda config: setting_key(config) in late
        return PrescreenedSpace(self.job.space, dropped, self.normalize)

    def share(self, policy: SearchPolicy, relaunches: RelaunchSchedule, race: RaceRunner) -> None:
        """A shared study (``study.shared``): heartbeats for this run's trials in flight, and the
        relaunches and the race left to the driver that holds them (else this run's share of
        both is set to none)."""
        shared = self.shared
        assert shared is not None
        self.say(f"study {self.job.study!r} is shared through {shown(self.job.storage)}: other drivers may run it at "
                 "once (each with its own report_dir); none launches a config another measured or is measuring")
        shared.start_beats(lambda: [p.number for p in policy.in_flight() if p.cached is None])
        if (relaunches.share > 0 or race.budget > 0) and not shared.take_extras():
            relaunches.share, race.budget = 0.0, 0
            self.say("the relaunches and the race of the finalists are another driver's (it holds them): this run "
                     "only searches")

    def take_over(self, policy: SearchPolicy, *, now: bool = False) -> None:
        """A shared study: the trials of drivers that died (no heartbeat for ``timeouts.takeover``) are
        recorded interrupted and their configs re-queued, once every heartbeat period at most
        (``now``: at once). Nothing for a study of one driver."""
        if self.shared is None:
            return
        last = self._took_over_at
        if not now and last is not None and time.monotonic() - last < self.shared.heartbeat_s:
            return
        self._took_over_at = time.monotonic()
        kept, lost = policy.account_stale(self.shared.stale(policy.study))
        for number in kept:
            self.say(f"#{number} was left running by a driver that stopped after its result was stored: kept as "
                     "recorded")
        for number in lost:
            self.say(f"#{number} was left running by a driver that stopped (no heartbeat): marked interrupted, "
                     "re-queued")

    def recover(self, executor: Executor, policy: SearchPolicy) -> None:
        """What a dead driver left: its servers ended, its RUNNING trials finished or re-queued."""
        killed = executor.cleanup_orphans(self.dir.servers)
        if killed:
            self.say(f"ended {len(killed)} server(s) left behind by a previous driver")
        self.take_over(policy, now=True)
        for number in policy.finish_recorded():
            self.say(f"#{number} was left running by a dead driver after its result was stored: kept as recorded")
        for number in policy.recover_interrupted():
            self.say(f"#{number} was left running by a dead driver: marked interrupted, re-queued")

    def forget_unlaunched(self, job_error: bool) -> None:
        """A run refused before anything ran (the golden reference file unusable, the
        pre-screen refused, Ctrl-C at start) leaves no study it created: nothing was measured
        under these settings, and a fixed job must find none to clash with. Nor does a run the job's
        own error stopped (``job_error``: ``Recorder.stop_on_job_error``) before anything of the
        study was measured. Once per run; a failure to remove it is logged, never raised."""
        empty, self._empty_study = self._empty_study, None
        if empty is None:
            return
        study, new_journal = empty
        try:
            trials = study.get_trials(deepcopy=False)
            measured = [t for t in trials if t.state != optuna.trial.TrialState.FAIL]
            if measured or (trials and not job_error):
                return
            storage.forget_study(self.job, study, journal_made_here=new_journal)
        except Exception:  # the refusal is what the user must see
            log.debug("could not remove the study this run created", exc_info=True)

    def warn_advice(self) -> None:
        """What the job allows but likely does not mean (``Job.advice``), said before anything is launched."""
        for advice in getattr(self.job, "advice", ()):
            log.warning("%s", advice)


def path_warnings(study: optuna.Study) -> set[str]:
    """The engine all-reduce path warnings (``nccl.ENGINE_PATH_WARNING``) earlier runs of the
    study recorded: each is shown once per study, not once per run."""
    attrs = study.user_attrs
    return {w for t in study.get_trials(deepcopy=False)
            for w in storage.trial_attrs(t, attrs).get("warnings") or () if str(w).startswith(nccl.ENGINE_PATH_WARNING)}
