"""One ``ncclsweep run`` of a job's study: the loop that asks, launches, decides and records.

``StudyDriver.run`` opens (or resumes) the study through ``study.storage``, ends servers a
dead driver left behind, recovers trials it left RUNNING, then loops: ask the search
policy (``study.policy``) for configs, hand their ``TrialSpec``s to the executor, decide
each result's final outcome (``core.outcome.decide``, the correctness gate included),
record it through the policy, and stop on the budget, the deadline, a signal
(``driver.signals``) or a circuit breaker. The loop asks, starts, collects and tells; each
other job is an object handed to it: the study's start-up (``driver.study_start``: sampler,
pre-flight, pre-screened space, the study opened, what a dead driver left), the tell step
(``driver.recorder``), the launches (``driver.launcher``), the golden reference's lifecycle
(``driver.golden_lifecycle``, its votes ``driver.golden``'s), the relaunch schedule
(``driver.relaunch_schedule``), the baseline's repeats (``driver.baseline_repeats``), the race of
the finalists (``driver.race_runner``), the deadline (``driver.time_budget``) and the circuit
breaker (``driver.breaker``); what runs is ``driver.loop_state``'s, every line the run prints
``driver.progress``'s.

A driver that stops for any reason first ends its running trials and records them
``interrupted`` (re-queued once): no trial stays RUNNING.

Every launch is evidence (``study.launches``): during the search the driver relaunches the
baseline or the incumbent on the schedule of ``study.relaunch`` (the launch noise every verdict
carries), and when the search is over (its budget spent, its space exhausted, or the time left
only what the race needs) it races the finalists (``study.race``: the incumbent and every config
within launch noise of it, relaunched in interleaved rounds until the order is decided or
``budget.confirm`` launches are spent). Both are uncounted trials of the study; a run that
finds its search's budget spent continues the relaunches (until the launch noise is known) and
the race a stopped run left. A goodput study (``objective.goodput``) does neither: its answer
is each config's capacity within the SLO (``study.goodput``), its figure the median over its
launches (``launches.HEADLINE``). A write into the study's folder
that fails (disk full, quota, read-only) stops the run with one line naming the folder and
the cause; what was recorded before stays readable and resumable.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import optuna

from orchestrator.config.job_checks import check_sampler_installed
from orchestrator.config.yaml_input import display_path
from orchestrator.core import correctness, logs, nccl
from orchestrator.core.errors import RuntimeFailure, StorageWriteError, is_file_write_failure
from orchestrator.core.records import COMPLETE, FailureKind, TrialResult
from orchestrator.driver.baseline_repeats import BaselineRepeats
from orchestrator.driver.breaker import Breaker
from orchestrator.driver.executor import Executor
from orchestrator.driver.golden import GoldenSource
from orchestrator.driver.golden_lifecycle import GoldenLifecycle
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.lock import DriverLock
from orchestrator.driver.loop_state import Launch, LoopState
from orchestrator.driver.progress import Progress, RunSummary
from orchestrator.driver.race_runner import RaceRunner
from orchestrator.driver.ray_executor import RayExecutor
from orchestrator.driver.recorder import Recorder
from orchestrator.driver.relaunch_schedule import RelaunchSchedule
from orchestrator.driver.signals import StopSignals
from orchestrator.driver.study_start import StudyStart, path_warnings
from orchestrator.driver.time_budget import TimeBudget
from orchestrator.study.evidence.goodput import goodput_answer
from orchestrator.study.evidence.plan import build_plan
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage import storage

log = logging.getLogger(__name__)

__all__ = ["StudyDriver", "RunSummary", "Launch"]


class StudyDriver:
    """Runs one ``ncclsweep run`` invocation of a job's study (module docstring).

    ``trials``/``timeout_s``/``ray_address`` override the job's; ``executor``: where trials
    run (default a ``RayExecutor`` the driver owns and shuts down); ``out``: a stream for
    the progress lines instead of the progress logger."""

    def __init__(self, job, *, trials: int | None = None, timeout_s: float | None = None,
                 ray_address: str | None = None, executor: Executor | None = None, out: TextIO | None = None):
        self.job = job
        self.trials = trials if trials is not None else job.budget.trials
        self.timeout_s = timeout_s if timeout_s is not None else job.budget.timeout_s
        self.ray_address = ray_address or job.ray.address
        self._executor = executor
        self._owns_executor = executor is None
        self.backend = job.backend_obj()
        self.report_dir = Path(job.report_dir).resolve()
        self.dir = job.dir
        self.progress = Progress(job, trials=self.trials, timeout_s=self.timeout_s, out=out)
        self.say = self.progress.say
        self.baseline_config: dict[str, Any] = {}
        self.baseline_key: str | None = None
        self.reference: GoldenLifecycle | None = None  # built once the study's policy is
        self.policy: SearchPolicy | None = None
        self.breaker = Breaker(job.max_consecutive_failures, self.dir.logs, job.path)
        self.launcher = Launcher(job)
        self.recorder = Recorder(job, self.progress, self.breaker, self.launcher)
        # a goodput study's answer is its crossing (``study.goodput``), not a ratio over levels: it is not
        # relaunched nor raced (module docstring)
        goodput = job.objective.by_capacity
        self.relaunches = RelaunchSchedule(job.objective, 0.0 if goodput else job.budget.relaunch, self.launcher,
                                           self.progress)
        self.repeats = BaselineRepeats(self.launcher, self.recorder, self.say)
        self.race = RaceRunner(job.objective, 0 if goodput else job.budget.confirm, self.launcher, self.progress)
        self.prompt_set = storage.prompt_fingerprint(job) or {}  # what every trial is measured on
        # the study's start-up: sampler, pre-flight, pre-screened space, the study opened (shared or
        # not), what a dead driver left, a study this run created and left empty
        self.start = StudyStart(job, trials=self.trials, normalize=self.backend.normalize, say=self.say)

    def make_executor(self) -> Executor:
        if self._executor is None:
            sel = self.job.ray.node_selector or {}
            self._executor = RayExecutor(address=self.ray_address, gpus_per_node=self.job.gpus_per_node,
                                         cpus_per_trial=self.job.cpus_per_trial, parallel=self.job.ray.parallel,
                                         resources=sel.get("resources"), accelerator_type=sel.get("gpu_model"))
        return self._executor

    # ---- the run ---------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """One invocation (module docstring); a failed write into the study's folder is one line."""
        try:
            return self._run()
        except StorageWriteError as exc:
            raise self._write_stop(exc) from None
        except OSError as exc:
            if not is_file_write_failure(exc):
                raise
            folder = Path(exc.filename).parent if isinstance(exc.filename, str) else self.report_dir
            raise self._write_stop(StorageWriteError(folder, exc)) from None

    def _write_stop(self, exc: StorageWriteError) -> RuntimeFailure:
        return RuntimeFailure(f"stopping: {exc.where}; every record written before is kept: {exc.hint}, then "
                              f"`ncclsweep run {self.job.path}` resumes the study")

    def _run(self) -> RunSummary:
        job = self.job
        check_sampler_installed(job)  # at once: nothing started, nothing created
        created = [d for d in (self.report_dir, *self.report_dir.parents) if not d.exists()]
        self.report_dir.mkdir(parents=True, exist_ok=True)
        lock = DriverLock(self.dir.lock)
        lock.acquire()
        executor = None
        try:
            executor = self.make_executor()  # first: a cluster that cannot be reached leaves no study behind
            start = self.start
            sampler, strategy = start.sampler()
            start.preflight(executor)  # before the study is opened: a refused run creates or changes nothing
            study = start.open(sampler)
            self.baseline_config = job.baseline_config()  # exactly the job's baseline: nothing sampled
            space = start.space(self.baseline_config)
            policy = self.policy = SearchPolicy(study, space, self.backend.normalize,
                                                baseline=self.baseline_config, budget=self.trials,
                                                remeasure=job.remeasure, seed=job.sampler.seed, strategy=strategy,
                                                objective=job.objective, late=start.late,
                                                run=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                                shared=start.shared is not None,
                                                on_ask=start.shared.beat_one if start.shared else None)
            if start.shared is not None:
                start.share(policy, self.relaunches, self.race)
            self.progress.expected_left = lambda n: self._expected_left(policy, executor, n)
            self.baseline_key = policy.baseline_key  # the policy's identity of the baseline config
            self.reference = GoldenLifecycle(job, GoldenSource(job, self.baseline_config, self.say), self.baseline_key,
                                             self.backend.default_values(), self.recorder, self.launcher, self.say)
            self.say(f"study {job.study!r} of {job.path}: results in {display_path(self.report_dir)}")
            start.warn_advice()
            expanded = objectives.expansion(job.objective)
            if expanded:  # a one-word objective: say what it means
                self.say(expanded)
            start.recover(executor, policy)
            if self.trials is not None and policy.budget_used() >= self.trials:
                self.say(f"budget reached: {policy.budget_used()} of {self.trials} trials already ran")
                if self.relaunches.noise_due(policy):
                    self.say("the launch noise is not known yet: relaunching until it is")
                elif self.race.state(policy) is None:
                    summary = RunSummary("budget reached", best=self._best_summary())
                    for line in self.progress.next_steps(summary, policy.rows()):
                        self.say(line)
                    return summary
                else:
                    self.say("the race of the finalists is not over: continuing it")
            return self._loop(study, policy, executor)
        except BaseException:
            self.start.forget_unlaunched(self.recorder.job_error)
            raise
        finally:
            try:
                self._release_held()  # gate failures held when the run stopped: recorded as what they are
            except StorageWriteError:
                log.debug("could not record the held gate failures", exc_info=True)
            finally:
                if executor is not None and self._owns_executor:
                    executor.shutdown()
                if self.start.shared is not None:
                    self.start.shared.close()
                lock.release()
                for folder in created:  # nothing happened: leave no empty study folder (nor its parents made here)
                    if any(folder.iterdir()):
                        break
                    folder.rmdir()

    def _expected_left(self, policy: SearchPolicy, executor: Executor, launches: int) -> float | None:
        """Seconds the rest of the run should take by the measured launch costs: the search's
        launches left, the relaunches (their share, or the ones the launch noise still needs if
        more), and the race."""
        search = policy.expected_seconds(launches)
        if search is None:
            return None
        relaunch = self.relaunches.seconds(policy, search)
        total = search + relaunch + (self.race.seconds(policy) or 0.0)
        return total / max(1, executor.slots)

    # ---- the loop ---------------------------------------------------------------------------
    def _loop(self, study: optuna.Study, policy: SearchPolicy, executor: Executor) -> RunSummary:
        reference = self.reference
        assert reference is not None  # built with the policy, before the loop
        with StopSignals(self.say) as signals:
            run = LoopState(study, policy, executor, signals, RunSummary("budget reached"),
                            TimeBudget(self.timeout_s, self.progress.t_start),
                            checks=self.job.correctness.enabled)
            try:
                run.said_paths = path_warnings(study)
                run.golden = reference.golden(run)
                reference.start_votes(run)
                self.progress.bans(policy.bans())
                self._trials(run)
                if not run.signals.count:
                    self.race.run(run, self._collect)
            finally:
                self.progress.idle()
                self._stop_in_flight(run)
        self._release_held()
        run.summary.best = self._best_summary()
        self.say(self.progress.final_line(run.summary, policy.budget_used()))
        for line in self.progress.next_steps(run.summary, policy.rows()):
            self.say(line)
        return run.summary

    def _trials(self, run: LoopState) -> None:
        """Start what the free slots allow, collect what finished, until nothing runs and
        nothing more may start."""
        while True:
            logs.check_driver_log()  # a driver.log that cannot be written stops the run like the journal
            stop_starting = run.stop_starting()
            if run.signals.kill_now and run.in_flight:
                run.executor.cancel_all()
            if not stop_starting:
                self.start.take_over(run.policy)
                self.repeats.start(run)
                self.relaunches.start(run)
                self._start_trials(run)
            if not run.in_flight and not stop_starting and run.policy.others_running():
                # a shared study: another driver's launches may come back to the pool (blameless, or
                # its driver dies): wait for them rather than end
                time.sleep(1.0)
                continue
            if not run.in_flight:
                if run.time.past():
                    run.summary.reason = "timeout"
                if run.signals.count:
                    run.summary.reason = "stopped by signal"
                return
            for ticket, result in run.executor.wait(0.5):
                self._collect(run, run.in_flight.pop(ticket), result)
                self.progress.counted = run.policy.budget_used()
            self.progress.running([(run.in_flight[t].label, phase) for t, phase in run.executor.phases().items()
                                   if t in run.in_flight])

    def _start_trials(self, run: LoopState) -> None:
        """Proposals into free slots; the golden reference's capture runs alone, first. A shared
        study's drivers pick one at a time (``SharedStudy.claim``); one that has no reference yet
        takes the one another driver stored, and waits while another may be capturing it."""
        shared = self.start.shared
        if shared is None:
            self._start_trials_here(run)
            return
        if len(run.in_flight) >= run.executor.slots or run.search_over:
            return
        with shared.claim():
            if run.need_reference:
                stored = storage.stored_golden(run.study)
                if stored:
                    run.golden = correctness.Golden.from_dict(stored)
                elif run.policy.others_running():
                    return  # the reference runs alone, and another driver's launch may be capturing it
            self._start_trials_here(run)

    def _start_trials_here(self, run: LoopState) -> None:
        job, policy = self.job, run.policy
        while len(run.in_flight) < run.executor.slots and not run.search_over:
            need_reference = run.need_reference
            if need_reference and run.in_flight:
                return  # the reference runs alone: every later trial is compared with it
            if not need_reference and self.race.leave_time(run):
                return
            if need_reference:
                policy.ensure_baseline_next()  # the golden reference comes from the baseline, never another config
            proposal = policy.next()
            if proposal is None:
                run.summary.reason = "space exhausted" if policy.exhausted else "budget reached"
                return
            if proposal.cached is not None:
                policy.record(proposal, proposal.cached, counted=False)
                self.say(f"#{proposal.number}: same config as #{proposal.cached_from}, answered from the study "
                         "(not launched, not counted)")
                continue
            if need_reference and proposal.key != self.baseline_key:  # queued before the baseline
                policy.defer(proposal, "the golden reference (the baseline) has to be measured first")
                continue
            is_baseline = proposal.key == self.baseline_key
            policy.mark(proposal, baseline=is_baseline, reference=need_reference)
            prune = (policy.prune_thresholds(job.pruning.min_ratio)  # per level: early_stop needs every one
                     if job.pruning.enabled and not is_baseline and not need_reference else None)
            spec = self.launcher.spec(run.policy, proposal.number, proposal.config,
                                      None if need_reference else (run.golden.texts if run.golden else None), prune)
            run.in_flight[run.executor.submit(spec)] = Launch.of(proposal, reference=need_reference)
            run.summary.launched += 1
            self.progress.started(proposal.number, proposal.config, run.summary.launched, policy.budget_used(),
                                  is_baseline)
            if need_reference:
                return

    def _collect(self, run: LoopState, launch: Launch, result: TrialResult) -> None:
        """A launch is back: store it as what it was (a repeat, the reference, a trial), with the
        prompt set it was measured on."""
        self.progress.trial_over(launch.label, result.phases)
        result = dataclasses.replace(result, prompt_set=dict(self.prompt_set))
        for text in result.warnings:  # the trial's warnings (its actor's logged ones included) into driver.log
            log.warning("%s: %s", launch.label, text)
            if text.startswith(nccl.ENGINE_PATH_WARNING) and text not in run.said_paths:  # once per study
                run.said_paths.add(text)
                self.say(f"warning ({launch.label}): {text}")
        if launch.kind == "repeat":
            self.repeats.back(run, result)
            return
        if launch.kind in ("relaunch", "race"):
            self.recorder.launch_back(run, launch, result)
            return
        proposal = launch.proposal
        assert proposal is not None  # search and reference launches carry their proposal
        reference = self.reference
        assert reference is not None  # built with the policy, before the loop
        if launch.kind == "reference":
            run.golden = reference.reference_back(run, proposal, result)
            measured = run.golden is not None
        else:
            final = reference.tell(run, proposal, result)
            measured = final is not None and final.result.outcome == COMPLETE
        self.progress.finished += 1
        if measured and proposal.key == self.baseline_key:
            self.repeats.baseline_measured(run, result)

    def _stop_in_flight(self, run: LoopState) -> None:
        """The loop is leaving (an error, the breaker, a signal while waiting): end the servers
        still running and record their trials ``interrupted`` (re-queued once), so no trial
        stays RUNNING in storage."""
        reason = "the driver stopped while this trial ran"
        policy = run.policy
        if run.in_flight:
            try:
                run.executor.cancel_all()
            except Exception as exc:  # noqa: BLE001 - still record the trials
                log.warning("could not stop the running trials: %s", exc)
            for launch in list(run.in_flight.values()):
                proposal = launch.proposal
                if proposal is None:  # a baseline repeat: not a trial of the study yet
                    continue
                try:
                    policy.record(proposal, TrialResult.failed(proposal.config, FailureKind.INTERRUPTED, reason))
                    policy.requeue(proposal)
                    self.say(f"  #{proposal.number} -> interrupted: {reason}; re-queued")
                except StorageWriteError:  # the stop line says why; the next run recovers it
                    log.debug("could not record #%s as interrupted", proposal.number, exc_info=True)
                except Exception as exc:  # noqa: BLE001 - recover_interrupted below catches it
                    log.warning("could not record #%s as interrupted: %s", proposal.number, exc)
            run.in_flight.clear()
        try:
            policy.finish_recorded()  # a record whose last write failed (a full disk) but had its result
            policy.recover_interrupted(reason)
        except StorageWriteError:  # the stop line says why; the next run marks them interrupted
            log.debug("trials left RUNNING", exc_info=True)
        except Exception as exc:  # noqa: BLE001 - the next run recovers them
            log.warning("trials left RUNNING, the next run marks them interrupted: %s", exc)

    # ---- the end --------------------------------------------------------------------------
    def _release_held(self) -> None:
        """The gate failures held when the run ends, recorded as what they are (``GoldenLifecycle.release_held``)."""
        if self.reference is not None and self.policy is not None:
            self.reference.release_held(self.policy)

    def counted(self) -> int | None:
        """The study's counted trials now (None: no study opened, or it cannot be read)."""
        try:
            return self.policy.budget_used() if self.policy is not None else None
        except Exception:
            log.debug("could not count the trials", exc_info=True)
            return None

    def best_now(self) -> dict[str, Any] | None:
        """The best so far as ``RunSummary.best`` holds it (None: none, or it cannot be read)."""
        try:
            return self._best_summary()
        except Exception:
            log.debug("could not read the best trial", exc_info=True)
            return None

    def _best_summary(self) -> dict[str, Any] | None:
        if self.policy is None:
            return None
        rows = self.policy.rows()
        plan = build_plan(rows, self.job.objective) if self.job.objective.by_level else None
        answers = (goodput_answer(rows, self.job.objective, self.job.pricing()).section()
                   if self.job.objective.by_capacity else {})
        return self.progress.best_summary(self.policy.best_row(), self.policy.baseline_row(), plan=plan,
                                          rows=rows, objective=self.job.objective, answers=answers)

