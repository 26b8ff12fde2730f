"""One ``ncclsweep run`` of a job's study: the loop that asks, launches, decides and records.

``StudyDriver.run`` opens (or resumes) the study through ``study.storage``, ends servers a
dead driver left behind, recovers trials it left RUNNING, then loops: ask the search
policy (``study.policy``) for configs, hand their ``TrialSpec``s to the executor, decide
each result's final outcome (``core.outcome.decide``, the correctness gate included),
record it through the policy, and stop on the budget, the deadline, a signal
(``driver.signals``) or a circuit breaker. The golden reference and the votes that can
outvote it are ``driver.golden``'s; every line the run prints is ``driver.progress``'s.

A driver that stops for any reason first ends its running trials and records them
``interrupted`` (re-queued once): no trial stays RUNNING. A write into the study's folder
that fails (disk full, quota, read-only) stops the run with one line naming the folder and
the cause; what was recorded before stays readable and resumable.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TextIO

import optuna

from orchestrator.config.job_checks import check_sampler_installed
from orchestrator.config.yaml_input import display_path
from orchestrator.core import correctness, golden_check, logs, nccl, outcome
from orchestrator.core.errors import BadInput, CircuitOpen, RuntimeFailure, StorageWriteError, is_file_write_failure
from orchestrator.core.records import COMPLETE, FAIL, PRUNED, FailureKind, TrialResult, config_key
from orchestrator.driver.executor import Executor
from orchestrator.driver.golden import GateVotes, GoldenSource, Launched
from orchestrator.driver.lock import DriverLock
from orchestrator.driver.prescreen import (
    LATE_RATIO,
    PrescreenedSpace,
    dropped_settings,
    format_prescreen,
    late_settings,
    run_prescreen,
    setting_key,
)
from orchestrator.driver.progress import Progress, RunSummary
from orchestrator.driver.ray_executor import RayExecutor
from orchestrator.driver.signals import StopSignals
from orchestrator.node import preflight
from orchestrator.node.spec import TrialSpec, check_plan
from orchestrator.study import objective as objectives
from orchestrator.study import storage
from orchestrator.study.goodput import goodput_answer
from orchestrator.study.plan import build_plan
from orchestrator.study.policy import Proposal, SearchPolicy
from orchestrator.study.samplers import make_sampler, startup_trials
from orchestrator.study.storage import ATTR_BASELINE_REPEAT, ATTR_REFERENCE, ATTR_REFERENCE_RUN, open_study

log = logging.getLogger(__name__)

__all__ = ["StudyDriver", "RunSummary", "Launch"]

# Environment failures in a row that stop the study: the node, not the configs, needs fixing.
ENV_BREAKER = 2
# Launches outside the search have no Optuna trial number while they run; their log files
# are numbered apart from the trials': the reference config's run is trial-8001.log, the
# n-th baseline repeat of a run trial-(9000 + n).log.
REFERENCE_RUN_NUMBER = 8001
REPEAT_NUMBERS = 9000

LaunchKind = Literal["search", "reference", "repeat", "reference-config"]


@dataclass(frozen=True)
class Launch:
    """One server launch the driver started and waits for.

    ``kind``: ``search``, a trial of the study (``proposal``); ``reference``, the baseline
    launched alone to capture the golden reference (``proposal``; every later trial is
    compared with it); ``repeat``, the baseline again on another ``node`` (are the nodes
    comparable?), stored as an uncounted trial; ``reference-config``, the run of the config
    ``correctness.reference`` names. ``number`` names its log file: the Optuna trial number,
    or ``REPEAT_NUMBERS + n`` / ``REFERENCE_RUN_NUMBER``."""

    kind: LaunchKind
    number: int
    proposal: Proposal | None = None
    node: str | None = None  # the node a repeat runs on

    @classmethod
    def of(cls, proposal: Proposal, *, reference: bool) -> Launch:
        return cls("reference" if reference else "search", proposal.trial.number, proposal)

    @classmethod
    def repeat(cls, n: int, node: str) -> Launch:
        return cls("repeat", REPEAT_NUMBERS + n, node=node)

    @classmethod
    def reference_config(cls) -> Launch:
        return cls("reference-config", REFERENCE_RUN_NUMBER)

    @property
    def label(self) -> str:
        """How the driver's log names it."""
        return {"repeat": "baseline repeat", "reference-config": "reference config"}.get(self.kind, f"#{self.number}")


@dataclass
class _Loop:
    """The state of one run's loop: what it talks to and what is in flight."""

    study: optuna.Study
    policy: SearchPolicy
    executor: Executor
    signals: StopSignals
    summary: RunSummary
    deadline: float | None
    checks: bool  # the job's correctness gate is on
    golden: correctness.Golden | None = None
    in_flight: dict[int, Launch] = field(default_factory=dict)  # executor ticket -> what runs there
    repeats: list[str] = field(default_factory=list)  # node ids still to repeat the baseline on
    said_paths: set[str] = field(default_factory=set)  # engine all-reduce path warnings the study has shown

    @property
    def need_reference(self) -> bool:
        """The golden reference is still to be captured (by the baseline, first and alone)."""
        return self.checks and self.golden is None

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


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
        self.golden_source = GoldenSource(job, {}, self.say)
        self.votes: GateVotes | None = None
        self.policy: SearchPolicy | None = None
        self._late: Callable[[dict], bool] | None = None  # the pre-screen's prior: settings tried late
        self.consecutive_failures = 0
        self.consecutive_env_failures = 0
        self._repeat_no = 0
        self._empty_study: tuple[optuna.Study, bool] | None = None  # a study this run created, still empty
        self.prompt_set = storage.prompt_fingerprint(job) or {}  # what every trial is measured on

    def make_executor(self) -> Executor:
        if self._executor is None:
            sel = self.job.ray.node_selector or {}
            self._executor = RayExecutor(address=self.ray_address, gpus_per_node=self.job.gpus_per_node,
                                         cpus_per_trial=self.job.cpus_per_trial, parallel=self.job.ray.parallel,
                                         resources=sel.get("resources"), accelerator_type=sel.get("gpu_model"))
        return self._executor

    def spec_for(self, number: int, config: dict, reference_texts: list[str] | None,
                 prune_below: Mapping[int, float] | None = None) -> TrialSpec:
        """Trial ``number``'s spec: the gate's capture scored against ``reference_texts``
        (None: capture the golden reference itself), the early stop's thresholds per level."""
        return TrialSpec.from_job(self.job, number, config, check=check_plan(self.job, reference_texts),
                                  prune_below=prune_below)

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
            sampler, startup = self._sampler()
            self._preflight(executor)  # before the study is opened: a refused run creates or changes nothing
            new_journal = job.journal_path is not None and not job.journal_path.exists()
            study = open_study(job, sampler, say=self.say)
            self._empty_study = (study, new_journal) if not study.get_trials(deepcopy=False) else None
            self.baseline_config = job.baseline_config()  # exactly the job's baseline: nothing sampled
            self.golden_source = GoldenSource(job, self.baseline_config, self.say)
            space = self._space(self.baseline_config)
            policy = self.policy = SearchPolicy(study, space, self.backend.normalize,
                                                baseline=self.baseline_config, budget=self.trials,
                                                remeasure=job.remeasure, seed=job.sampler.seed, startup=startup,
                                                objective=job.objective, late=self._late,
                                                run=datetime.now(timezone.utc).isoformat(timespec="seconds"))
            self.progress.expected_left = lambda n: (None if (s := policy.expected_seconds(n)) is None
                                                     else s / max(1, executor.slots))
            self.baseline_key = policy.baseline_key  # the policy's identity of the baseline config
            self.say(f"study {job.study!r} of {job.path}: results in {display_path(self.report_dir)}")
            self._warn_advice()
            expanded = objectives.expansion(job.objective)
            if expanded:  # a one-word objective: say what it means
                self.say(expanded)
            self._recover(executor, policy)
            if self.trials is not None and policy.budget_used() >= self.trials:
                self.say(f"budget reached: {policy.budget_used()} of {self.trials} trials already ran")
                summary = RunSummary("budget reached", best=self._best_summary())
                for line in self.progress.next_steps(summary, policy.rows()):
                    self.say(line)
                return summary
            return self._loop(study, policy, executor)
        except BaseException:
            self._forget_unlaunched()
            raise
        finally:
            try:
                self._release_held()  # gate failures held when the run stopped: recorded as what they are
            except StorageWriteError:
                log.debug("could not record the held gate failures", exc_info=True)
            finally:
                if executor is not None and self._owns_executor:
                    executor.shutdown()
                lock.release()
                for folder in created:  # nothing happened: leave no empty study folder (nor its parents made here)
                    if any(folder.iterdir()):
                        break
                    folder.rmdir()

    def _sampler(self) -> tuple[optuna.samplers.BaseSampler, int]:
        """The job's sampler and the start-up trials it was built with (the policy picks them)."""
        job = self.job
        budget, space_size = self.trials or 50, job.space.size()
        try:
            sampler = make_sampler(job.sampler.name, seed=job.sampler.seed, budget=budget, space_size=space_size,
                                   n_startup_trials=job.sampler.n_startup_trials, options=job.sampler.options,
                                   search_space=job.space.distributions())
            startup = startup_trials(job.sampler.name, budget=budget, space_size=space_size,
                                     n_startup_trials=job.sampler.n_startup_trials, options=job.sampler.options)
        except ValueError as exc:
            raise BadInput(str(exc), file=str(job.path), key="sampler") from None
        return sampler, startup

    def _recover(self, executor: Executor, policy: SearchPolicy) -> None:
        """What a dead driver left: its servers ended, its RUNNING trials finished or re-queued."""
        killed = executor.cleanup_orphans(self.dir.servers)
        if killed:
            self.say(f"ended {len(killed)} server(s) left behind by a previous driver")
        for number in policy.finish_recorded():
            self.say(f"#{number} was left running by a dead driver after its result was stored: kept as recorded")
        for number in policy.recover_interrupted():
            self.say(f"#{number} was left running by a dead driver: marked interrupted, re-queued")

    def _forget_unlaunched(self) -> None:
        """A run refused before anything ran (the golden reference file unusable, the
        pre-screen refused, Ctrl-C at start) leaves no study it created: nothing was measured
        under these settings, and a fixed job must find none to clash with."""
        empty, self._empty_study = self._empty_study, None
        if empty is None:
            return
        study, new_journal = empty
        try:
            if study.get_trials(deepcopy=False):
                return
            storage.forget_study(self.job, study, journal_made_here=new_journal)
        except Exception:  # the refusal is what the user must see
            log.debug("could not remove the study this run created", exc_info=True)

    def _preflight(self, executor: Executor) -> None:
        """Before the first launch: does every node have what the trials need? One line per
        node with a problem, and nothing launched (``orchestrator.node.preflight``)."""
        problem = preflight.format_problems(executor.preflight(preflight.needs(self.job)))
        if problem:
            raise RuntimeFailure(problem)

    def _space(self, baseline: dict):
        """The job's space, minus NCCL settings the all-reduce pre-screen dropped (if enabled);
        the baseline's own setting always stays (every result reads as x baseline)."""
        if not self.job.prescreen.enabled:
            return self.job.space
        stored = self.dir.prescreen
        if stored.exists():
            data = json.loads(stored.read_text())
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
            self._late = lambda config: setting_key(config) in late
        return PrescreenedSpace(self.job.space, dropped, self.backend.normalize)

    # ---- the loop ---------------------------------------------------------------------------
    def _loop(self, study: optuna.Study, policy: SearchPolicy, executor: Executor) -> RunSummary:
        deadline = self.progress.t_start + self.timeout_s if self.timeout_s else None
        with StopSignals(self.say) as signals:
            run = _Loop(study, policy, executor, signals, RunSummary("budget reached"), deadline,
                        checks=self.job.correctness.enabled)
            try:
                run.said_paths = _path_warnings(study)
                run.golden = self._golden(run)
                self._start_votes(run)
                self.progress.bans(policy.bans())
                self._trials(run)
            finally:
                self.progress.idle()
                self._stop_in_flight(run)
        self._release_held()
        run.summary.best = self._best_summary()
        self.say(self.progress.final_line(run.summary, policy.budget_used()))
        for line in self.progress.next_steps(run.summary, policy.rows()):
            self.say(line)
        return run.summary

    def _trials(self, run: _Loop) -> None:
        """Start what the free slots allow, collect what finished, until nothing runs and
        nothing more may start."""
        while True:
            logs.check_driver_log()  # a driver.log that cannot be written stops the run like the journal
            stop_starting = run.signals.count > 0 or run.past_deadline()
            if run.signals.kill_now and run.in_flight:
                run.executor.cancel_all()
            if not stop_starting:
                self._start_repeats(run)
                self._start_trials(run)
            if not run.in_flight:
                if run.past_deadline():
                    run.summary.reason = "timeout"
                if run.signals.count:
                    run.summary.reason = "stopped by signal"
                return
            for ticket, result in run.executor.wait(0.5):
                self._collect(run, run.in_flight.pop(ticket), result)
                self.progress.counted = run.policy.budget_used()
            self.progress.running([(run.in_flight[t].label, phase) for t, phase in run.executor.phases().items()
                                   if t in run.in_flight])

    def _start_repeats(self, run: _Loop) -> None:
        """The baseline once on every other matching node: are the nodes comparable?"""
        while run.repeats and len(run.in_flight) < run.executor.slots:
            node = run.repeats.pop(0)
            if node in run.executor.nodes():
                self._repeat_no += 1
                launch = Launch.repeat(self._repeat_no, node)
                spec = self.spec_for(launch.number, self.baseline_config, run.golden.texts if run.golden else None)
                run.in_flight[run.executor.submit(spec, node_id=node)] = launch
                self.say(f"repeating the baseline on node {node[:8]} (are the nodes comparable?)")

    def _start_trials(self, run: _Loop) -> None:
        """Proposals into free slots; the golden reference's capture runs alone, first."""
        job, policy = self.job, run.policy
        while len(run.in_flight) < run.executor.slots:
            need_reference = run.need_reference
            if need_reference and run.in_flight:
                return  # the reference runs alone: every later trial is compared with it
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
            spec = self.spec_for(proposal.number, proposal.config,
                                 None if need_reference else (run.golden.texts if run.golden else None), prune)
            run.in_flight[run.executor.submit(spec)] = Launch.of(proposal, reference=need_reference)
            run.summary.launched += 1
            self.progress.started(proposal.number, proposal.config, run.summary.launched, policy.budget_used(),
                                  is_baseline)
            if need_reference:
                return

    def _warn_advice(self) -> None:
        """What the job allows but likely does not mean (``Job.advice``), said before anything is launched."""
        for advice in getattr(self.job, "advice", ()):
            log.warning("%s", advice)

    def _collect(self, run: _Loop, launch: Launch, result: TrialResult) -> None:
        """A launch is back: store it as what it was (a repeat, the reference, a trial), with the
        prompt set it was measured on."""
        result = dataclasses.replace(result, prompt_set=dict(self.prompt_set))
        for text in result.warnings:  # the trial's warnings (its actor's logged ones included) into driver.log
            log.warning("%s: %s", launch.label, text)
            if text.startswith(nccl.ENGINE_PATH_WARNING) and text not in run.said_paths:  # once per study
                run.said_paths.add(text)
                self.say(f"warning ({launch.label}): {text}")
        if launch.kind == "repeat":
            result = outcome.decide(result, second_signal=run.signals.kill_now, golden=run.golden).result
            self._store_repeat(run.study, result)
            return
        proposal = launch.proposal
        assert proposal is not None  # search and reference launches carry their proposal
        if launch.kind == "reference":
            run.golden = self._reference_result(run, proposal, result)
            measured = run.golden is not None
        else:
            final = self._finish(run, proposal, result)
            measured = final is not None and final.result.outcome == COMPLETE
        self.progress.finished += 1
        if measured and proposal.key == self.baseline_key:
            run.repeats = self._other_nodes(run.executor, result)

    def _stop_in_flight(self, run: _Loop) -> None:
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

    # ---- one finished trial ----------------------------------------------------------------
    def _decide(self, run: _Loop, proposal: Proposal, result: TrialResult,
                golden: correctness.Golden | None) -> outcome.Final:
        base = run.policy.baseline_row()
        objective = self.job.objective
        return outcome.decide(result, second_signal=run.signals.kill_now, golden=golden, rules=self.job.constraints,
                              baseline=base.measurement if base else None,
                              earlier_timeouts=run.policy.earlier_timeouts(proposal.key, proposal.number),
                              slo=(lambda m: objectives.judged(objective, m)) if objective.slo else None)

    def _record(self, policy: SearchPolicy, proposal: Proposal, final: outcome.Final) -> None:
        """Store the final outcome, re-queue what was not the config's fault, say it, and
        trip the circuit breakers."""
        policy.record(proposal, final.result, counted=final.counted, blameless=final.blameless)
        if final.requeue:
            policy.requeue(proposal)
        self._said_end(policy, proposal, final.result)
        self.progress.bans(policy.bans())
        self._breaker(final)

    def _said_end(self, policy: SearchPolicy, proposal: Proposal, result: TrialResult) -> None:
        base = policy.baseline_row()
        plan = build_plan(policy.rows(), self.job.objective) if self.job.objective.is_plan else None
        self.progress.ended(proposal.number, result, policy.best_row(), base.value if base else None, plan=plan)

    def _finish(self, run: _Loop, proposal: Proposal, result: TrialResult) -> outcome.Final | None:
        """A trial's result decided and recorded, or held by the votes (None)."""
        final = self._decide(run, proposal, result, run.golden)
        if run.golden is None or self.votes is None:
            self._record(run.policy, proposal, final)
            return final
        vote = self.votes.consider(Launched(proposal.number, proposal.key, proposal.config), proposal, final,
                                   run.golden)
        if vote.decision == "record":
            for held, held_final in vote.release:
                run.policy.record(held, held_final.result, counted=held_final.counted, blameless=held_final.blameless)
            self._record(run.policy, proposal, final)
            return final
        if vote.decision == "hold":
            self._said_end(run.policy, proposal, final.result)
            self._breaker(final)  # a held failure is a failure: the circuit breaker counts it now
            return None
        numbers = [p.number for p, _ in vote.release]
        for held, held_final in vote.release:  # not held against these configs: the reference was wrong
            run.policy.record(held, held_final.result, counted=False, blameless=True)
        ref_trial = storage.outvote_golden(run.study)
        raise RuntimeFailure(
            f"stopping: the golden reference (the baseline, trial {ref_trial}) looks wrong: {vote.why}; check the "
            "baseline config (a shard-order bug or an unsafe NCCL setting there makes every correct config fail the "
            f"gate); trials {', '.join(map(str, numbers))} are not held against their configs, and `ncclsweep run` "
            "measures the baseline again")

    def _release_held(self) -> None:
        """Record the gate failures held so far as what they are: wrong output (their progress
        lines were printed when they came back)."""
        if self.votes is None or self.policy is None:
            return
        for proposal, final in self.votes.release():
            self.policy.record(proposal, final.result, counted=final.counted, blameless=final.blameless)

    # ---- the golden reference ---------------------------------------------------------------
    def _golden(self, run: _Loop) -> correctness.Golden | None:
        """The golden reference every trial is compared with: the stored one, the job's file,
        or a run of the config the job names; None: the baseline captures it first (or the
        job turns correctness off, and nothing is ever compared)."""
        if not self.job.correctness.enabled:
            return None
        data = storage.stored_golden(run.study)
        if data:
            return correctness.Golden.from_dict(data)
        golden = self.golden_source.from_file()
        if golden is not None:
            storage.store_golden(run.study, golden.to_dict())
            return golden
        if self.golden_source.config() is not None:
            return self._reference_run(run)
        return None

    def _start_votes(self, run: _Loop) -> None:
        """The votes on the reference, confirmed already when a config other than the
        reference's own passed the gate (a resumed study)."""
        source = self.golden_source
        if self.job.correctness.reference_kind == "file":
            ref_key = None
        else:
            config = source.config()
            ref_key = self.baseline_key if config is None else run.policy.key_of(config)[1]
        self.votes = GateVotes(self.baseline_config, self.backend.default_values(), ref_key,
                               confirmed=golden_check.vindicated(run.policy.rows()))

    def _reference_result(self, run: _Loop, proposal: Proposal, result: TrialResult) -> correctness.Golden | None:
        """The reference trial is back: check the reference it captured. A usable one is
        stored and returned; a blameless failure (environment, interruption, first
        timeout) re-queues it (None: still no reference); anything else stops the study
        with one line naming the cause, and is not held against the config."""
        final = self._decide(run, proposal, result, None)
        r = final.result
        if r.outcome == FAIL and final.blameless:
            self._record(run.policy, proposal, final)
            return None
        golden, why, warnings = self.golden_source.from_launch(r)
        if why:
            final = outcome.reference_failed(r, why)
            run.policy.record(proposal, final.result, counted=False, blameless=True)
            self._said_end(run.policy, proposal, final.result)
            raise RuntimeFailure(self.golden_source.stop_line(proposal.number, why, self.dir.logs))
        assert golden is not None  # calibrate gives a reference or says why not
        storage.store_golden(run.study, golden.to_dict(), proposal.number)
        final = dataclasses.replace(final, result=dataclasses.replace(
            r, warnings=[*r.warnings, *warnings],
            correctness={"ok": True, "reference": True, "tolerance": golden.tolerance,
                         "self_drift": golden.self_drift}))
        self._record(run.policy, proposal, final)
        return golden

    def _reference_run(self, run: _Loop) -> correctness.Golden:
        """The job names a reference config other than the baseline: one launch of it,
        before anything else, captures and checks the golden reference (stored as an
        uncounted trial)."""
        config = self.golden_source.config()
        assert config is not None  # called only when the job names a reference config
        spec = self.spec_for(Launch.reference_config().number, config, None)
        self.say("capturing the golden reference from correctness.reference: "
                 + " ".join(f"{k}={v}" for k, v in config.items()))
        ticket = run.executor.submit(spec)
        result = None
        while result is None:
            result = next((r for t, r in run.executor.wait(1.0) if t == ticket), None)
        golden, why, warnings = self.golden_source.from_launch(result)
        if golden is not None:
            golden.source = "config"
        result = dataclasses.replace(result, correctness={**result.correctness, "ok": why is None, "reference": True,
                                                          **({"reason": why} if why else {})})
        number = self._store_extra(run.study, result, config, {ATTR_REFERENCE_RUN: True, ATTR_REFERENCE: True})
        if why:
            raise RuntimeFailure(f"stopping: the golden reference is unusable: the reference config "
                                 f"(correctness.reference, trial {number}) {why}; fix it or name another reference")
        assert golden is not None  # calibrate gives a reference or says why not
        for w in warnings:
            self.say(f"warning: {w}")
        storage.store_golden(run.study, golden.to_dict(), number)
        return golden

    # ---- launches outside the search --------------------------------------------------------
    def _other_nodes(self, executor: Executor, baseline: TrialResult) -> list[str]:
        """Matching nodes other than the baseline's: each repeats the baseline once."""
        if executor.slots < 2:
            return []
        return [n for n in executor.nodes() if n != baseline.node.get("node_id")]

    def _store_repeat(self, study: optuna.Study, result: TrialResult) -> None:
        """A baseline repeat is a real measurement of the baseline's config on another node:
        stored as its own (uncounted) trial so the report can compare nodes."""
        self._store_extra(study, result, self.baseline_config, {ATTR_BASELINE_REPEAT: True}, key=self.baseline_key)
        ok = result.outcome == COMPLETE
        what = f"{result.value:.1f} tok/s" if ok else f"FAIL {result.failure_kind}: {result.failure_reason}"
        self.say(f"  baseline repeat on node {str(result.node.get('node_id'))[:8]} -> {what}")

    def _store_extra(self, study: optuna.Study, result: TrialResult, config: dict, attrs: dict,
                     key: str | None = None) -> int:
        """A launch outside the search, stored as an uncounted trial; returns its number."""
        values = None
        if result.outcome == COMPLETE and self.policy is not None and objectives.has_values(self.job.objective, result):
            values = self.policy.told_values(result)  # what the objective tells Optuna (one per level for a plan)
        return storage.add_uncounted_trial(study, result, config, key or config_key(config),
                                           self.job.space.distributions(), attrs, values=values)

    # ---- circuit breakers and the end -------------------------------------------------------
    def _breaker(self, final: outcome.Final) -> None:
        result = final.result
        if result.metrics.get("write_failed"):  # the trial could not write into the study's folder
            raise StorageWriteError.from_dict(result.metrics["write_failed"])
        if result.metrics.get("gpus_usable") is False:
            raise CircuitOpen("stopping: the GPUs were not usable after a teardown "
                              f"({'; '.join(result.warnings[-1:])}); check nvidia-smi for stuck processes "
                              "and the kernel log (dmesg) for Xid errors, then `ncclsweep run` resumes")
        if result.outcome == FAIL and result.failure_kind == FailureKind.ENV_ERROR:
            self.consecutive_env_failures += 1
            if self.consecutive_env_failures >= ENV_BREAKER:
                raise CircuitOpen(
                    f"stopping after {self.consecutive_env_failures} trials in a row failed for a reason outside "
                    f"their configs (env-error: {result.failure_reason}); {outcome.env_hint(result.failure_reason)}; "
                    "no config was banned for it, and `ncclsweep run` re-queues them")
            return
        self.consecutive_env_failures = 0
        if result.outcome == FAIL and final.counted:
            self.consecutive_failures += 1
        elif result.outcome in (COMPLETE, PRUNED):
            self.consecutive_failures = 0
        limit = self.job.max_consecutive_failures
        if limit and self.consecutive_failures >= limit:
            raise CircuitOpen(
                f"stopping after {self.consecutive_failures} consecutive failed trials (last: "
                f"{result.failure_kind}: {result.failure_reason}); look at the trial logs in {self.dir.logs} "
                f"and `ncclsweep status {self.job.path}`; the study resumes with `ncclsweep run`")

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
        plan = build_plan(rows, self.job.objective) if self.job.objective.is_plan else None
        goodput = goodput_answer(rows, self.job.objective) if self.job.objective.goodput is not None else None
        return self.progress.best_summary(self.policy.best_row(), self.policy.baseline_row(), plan=plan,
                                          goodput=goodput)


def _path_warnings(study: optuna.Study) -> set[str]:
    """The engine all-reduce path warnings (``nccl.ENGINE_PATH_WARNING``) earlier runs of the
    study recorded: each is shown once per study, not once per run."""
    attrs = study.user_attrs
    return {w for t in study.get_trials(deepcopy=False)
            for w in storage.trial_attrs(t, attrs).get("warnings") or () if str(w).startswith(nccl.ENGINE_PATH_WARNING)}
