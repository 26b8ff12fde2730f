"""The study driver: the only code that talks to Optuna storage.

It opens (or resumes) the study, ends servers a dead driver left behind, fails trials
a dead driver left RUNNING as ``interrupted`` (re-queued once), asks the search policy
for configs, hands them to the executor, applies the correctness gate to what comes
back, records every outcome, and stops on the budget, the deadline, a signal, or the
circuit breaker. Progress is one line per event, logged to ``ncclsweep.progress``
(the CLI sends it to stderr and the study's ``driver.log``, see ``orchestrator.core.logs``).

Trials are numbered once: ``#N`` is the Optuna trial number everywhere (progress,
``status``, report); the budget is counted separately ("launch 2 of 8"). A driver that
stops for any reason (a signal, the circuit breaker, an error) first ends its running
trials and records them ``interrupted`` (re-queued once): no trial stays RUNNING.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import optuna

from orchestrator.config.yaml_input import display_path
from orchestrator.core import correctness, golden_check, logs, outcome, verdict
from orchestrator.core.errors import (
    BadInput,
    CircuitOpen,
    RuntimeFailure,
    StorageWriteError,
    is_file_write_failure,
)
from orchestrator.core.records import COMPLETE, FAIL, PRUNED, FailureKind, TrialResult, config_key
from orchestrator.driver.executor import Executor
from orchestrator.driver.lock import DriverLock
from orchestrator.driver.prescreen import (
    PrescreenedSpace,
    dropped_settings,
    format_prescreen,
    run_prescreen,
    setting_key,
)
from orchestrator.driver.ray_executor import RayExecutor
from orchestrator.node import preflight
from orchestrator.node.spec import TrialSpec, check_plan
from orchestrator.study import bans as value_bans
from orchestrator.study.history import trial_rows
from orchestrator.study.policy import SearchPolicy
from orchestrator.study.samplers import make_sampler, startup_trials
from orchestrator.study.storage import (
    ATTR_BASELINE,
    ATTR_BASELINE_REPEAT,
    ATTR_KEY,
    ATTR_REFERENCE,
    ATTR_REFERENCE_RUN,
    GOLDEN_ATTR,
    OUTVOTED_ATTR,
    add_uncounted_trial,
    open_study,
    storage_for,
)

log = logging.getLogger(__name__)

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

    ``kind`` says what it is: ``search``, a trial of the study (``proposal``);
    ``reference``, the baseline launched alone to capture the golden reference
    (``proposal``; every later trial is compared with it); ``repeat``, the baseline config
    again on another ``node`` (are the nodes comparable?), stored as an uncounted trial
    when it ends; ``reference-config``, the run of the config ``correctness.reference``
    names. ``number`` is what its log file is named after (``trial-NNNN.log``): the Optuna
    trial number, or ``REPEAT_NUMBERS + n`` / ``REFERENCE_RUN_NUMBER``.
    """

    kind: LaunchKind
    number: int
    proposal: Any = None  # search.Proposal for "search" and "reference"
    node: str | None = None  # the node a repeat runs on

    @classmethod
    def of(cls, proposal, *, reference: bool) -> "Launch":
        """A launch of a proposal: the golden reference's, or a search trial."""
        return cls("reference" if reference else "search", proposal.trial.number, proposal)

    @classmethod
    def repeat(cls, n: int, node: str) -> "Launch":
        """The n-th baseline repeat of this run, on ``node``."""
        return cls("repeat", REPEAT_NUMBERS + n, node=node)

    @classmethod
    def reference_config(cls) -> "Launch":
        """The run of the config ``correctness.reference`` names."""
        return cls("reference-config", REFERENCE_RUN_NUMBER)

    @property
    def label(self) -> str:
        """How the driver's log names it."""
        return {"repeat": "baseline repeat", "reference-config": "reference config"}.get(self.kind, f"#{self.number}")


@dataclass
class RunSummary:
    """How a ``run`` invocation ended."""

    reason: str  # budget reached, space exhausted, timeout, stopped by signal
    launched: int = 0
    best: dict[str, Any] | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal: the CLI exits 130."""
        return self.reason == "stopped by signal"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Signals:
    """First Ctrl-C, SIGTERM or SIGHUP (a dropped ssh session): finish running trials, then
    stop. Second: kill them now. Either way the run exits 130."""

    def __init__(self, say) -> None:
        self.count = 0
        self.say = say
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (tests): no handlers
                pass
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1:
            self.say(f"{name}: stopping after the running trial finishes "
                     "(Ctrl-C or another signal kills it now)")
        else:
            self.say(f"{name}: killing the running trial now")

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class StudyDriver:
    """Runs one ``ncclsweep run`` invocation of a job's study."""

    def __init__(self, job, *, trials: int | None = None, timeout_s: float | None = None,
                 ray_address: str | None = None, executor: Executor | None = None, out: TextIO | None = None):
        self.job = job
        self.trials = trials if trials is not None else job.budget.trials
        self.timeout_s = timeout_s if timeout_s is not None else job.budget.timeout_s
        self.timeout_source = "--timeout" if timeout_s is not None else "the job's budget.timeout"
        self.ray_address = ray_address or job.ray.address
        self._executor = executor
        self._owns_executor = executor is None
        self.out = out  # None: the progress logger (stderr and driver.log, set up by the CLI)
        self.backend = job.backend_obj()
        self.report_dir = Path(job.report_dir).resolve()
        self.dir = job.dir
        self.registry_dir = self.dir.servers
        self.log_dir = self.dir.logs
        self.t_start = time.monotonic()
        self.consecutive_failures = 0
        self.consecutive_env_failures = 0
        self._finished = 0  # trials finished in this invocation (for the time-to-go estimate)
        self._repeat_no = 0

    # ---- helpers -------------------------------------------------------------------------
    def say(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)
        else:
            logs.progress.info(line)

    def make_executor(self) -> Executor:
        if self._executor is None:
            sel = self.job.ray.node_selector or {}
            self._executor = RayExecutor(address=self.ray_address, gpus_per_node=self.job.gpus_per_node,
                                         cpus_per_trial=self.job.cpus_per_trial, parallel=self.job.ray.parallel,
                                         resources=sel.get("resources"), accelerator_type=sel.get("gpu_model"))
        return self._executor

    def spec_for(self, number: int, config: dict, reference_texts: list[str] | None,
                 prune_below: float | None = None) -> TrialSpec:
        """Trial ``number``'s spec: the gate's capture scored against ``reference_texts``
        (None: capture the golden reference itself), the early stop's threshold."""
        return TrialSpec.from_job(self.job, number, config, check=check_plan(self.job, reference_texts),
                                  prune_below={1: prune_below} if prune_below is not None else None)

    # ---- the run ---------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """One invocation; a write into the study's folder that fails (disk full, quota,
        read-only) stops it with one line naming the folder and the cause (exit 1)."""
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
        created = [d for d in (self.report_dir, *self.report_dir.parents) if not d.exists()]
        self.report_dir.mkdir(parents=True, exist_ok=True)
        lock = DriverLock(self.dir.lock)
        lock.acquire()
        executor = None
        try:
            executor = self.make_executor()  # first: a cluster that cannot be reached leaves no study behind
            try:
                budget, space_size = self.trials or 50, job.space.size()
                sampler = make_sampler(job.sampler.name, seed=job.sampler.seed, budget=budget, space_size=space_size,
                                       n_startup_trials=job.sampler.n_startup_trials, options=job.sampler.options,
                                       search_space=job.space.distributions())
                startup = startup_trials(job.sampler.name, budget=budget, space_size=space_size,  # as built
                                         n_startup_trials=job.sampler.n_startup_trials, options=job.sampler.options)
            except ValueError as exc:
                raise BadInput(str(exc), file=str(job.path), key="sampler") from None
            self._preflight(executor)  # before the study is opened: a refused run creates or changes nothing
            new_journal = job.journal_path is not None and not job.journal_path.exists()
            study = open_study(job, sampler, say=self.say)
            self._empty_study = (study, new_journal) if not study.get_trials(deepcopy=False) else None
            baseline = job.baseline_config()  # exactly the job's baseline: nothing sampled, same on every seed
            self._baseline_config = baseline
            policy = SearchPolicy(study, self._space(baseline), self.backend.normalize, baseline=baseline,
                                  budget=self.trials, remeasure=job.remeasure, seed=job.sampler.seed,
                                  startup=startup)
            self.baseline_key = policy.baseline_key  # the policy's identity of the baseline config
            self._policy = policy
            self.say(f"study {job.study!r} of {job.path}: results in {_shown_dir(self.report_dir)}")
            killed = executor.cleanup_orphans(self.registry_dir)
            if killed:
                self.say(f"ended {len(killed)} server(s) left behind by a previous driver")
            for number in policy.finish_recorded():
                self.say(f"#{number} was left running by a dead driver after its result was stored: kept as recorded")
            for number in policy.recover_interrupted():
                self.say(f"#{number} was left running by a dead driver: marked interrupted, re-queued")
            if self.trials is not None and policy.budget_used() >= self.trials:
                self.say(f"budget reached: {policy.budget_used()} of {self.trials} trials already ran")
                summary = RunSummary("budget reached", best=self._best_summary(policy))
                self.say(self._next_steps(summary))
                return summary
            return self._loop(study, policy, executor)
        except BaseException:
            self._forget_unlaunched()
            raise
        finally:
            try:
                if getattr(self, "_held", None):  # gate failures held when the run stopped: record them
                    self._release_held(self._policy)
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

    def _forget_unlaunched(self) -> None:
        """A run refused before anything ran (the golden reference file unusable, the
        pre-screen refused, Ctrl-C at start) leaves no study it created: nothing was measured
        under these settings, and a fixed job must find none to clash with."""
        empty, self._empty_study = getattr(self, "_empty_study", None), None
        if empty is None:
            return
        study, new_journal = empty
        try:
            if study.get_trials(deepcopy=False):
                return
            storage = storage_for(self.job.storage)
            path = self.job.journal_path
            if new_journal and path is not None and optuna.get_all_study_names(storage) == [self.job.study]:
                path.unlink(missing_ok=True)  # the journal this run made, and it holds nothing else
            else:
                optuna.delete_study(study_name=self.job.study, storage=storage)
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
        return PrescreenedSpace(self.job.space, dropped, self.backend.normalize)

    def _golden(self, study: optuna.Study) -> correctness.Golden | None:
        """The stored golden reference, or the job's reference file (checked first)."""
        corr = self.job.correctness
        if not corr.enabled:
            return None
        data = study.user_attrs.get(GOLDEN_ATTR)
        if data:
            return correctness.Golden.from_dict(data)
        if corr.reference_kind == "file":
            golden = correctness.Golden.from_file(corr.reference)
            why, warnings = golden_check.unusable(golden, corr.allow_repetitive_reference)
            if why:
                raise BadInput(f"the reference file {corr.reference} is unusable: {why}", file=str(self.job.path),
                               key="correctness.reference")
            for w in warnings:
                self.say(f"warning: {w}")
            study.set_user_attr(GOLDEN_ATTR, golden.to_dict())
            return golden
        return None

    def _reference_key(self, policy) -> str | None:
        """The key of the config the golden reference came from (the baseline's, or the
        config ``correctness.reference`` names; None: a reference file)."""
        if self.job.correctness.reference_kind == "file":
            return None
        config = self._reference_config()
        return self.baseline_key if config is None else policy.key_of(config)[1]

    def _reference_config(self) -> dict | None:
        """The config the job names as its reference when it is not the baseline, else None."""
        corr = self.job.correctness
        if corr.reference_kind != "config":
            return None
        config = self.backend.normalize(self.job.space.active(dict(corr.reference)))
        return None if config == self._baseline_config else config

    def _loop(self, study: optuna.Study, policy, executor: Executor) -> RunSummary:
        summary = RunSummary("budget reached")
        in_flight: dict[int, Launch] = {}  # executor ticket -> what runs there
        with _Signals(self.say) as signals:
            try:
                self._trials(study, policy, executor, summary, in_flight, signals)
            finally:
                self._stop_in_flight(policy, executor, in_flight)
        self._release_held(policy)
        summary.best = self._best_summary(policy)
        self.say(self._final_line(summary, policy))
        self.say(self._next_steps(summary))
        return summary

    def _stop_in_flight(self, policy, executor: Executor, in_flight: dict[int, Launch]) -> None:
        """The loop is leaving (an error, the breaker, a signal while waiting): end the servers
        still running and record their trials ``interrupted`` (re-queued once), so no trial
        stays RUNNING in storage."""
        reason = "the driver stopped while this trial ran"
        if in_flight:
            try:
                executor.cancel_all()
            except Exception as exc:  # noqa: BLE001 - still record the trials
                log.warning("could not stop the running trials: %s", exc)
            for launch in list(in_flight.values()):
                proposal = launch.proposal
                if proposal is None:  # a baseline repeat: not a trial of the study yet
                    continue
                try:
                    policy.record(proposal, TrialResult.failed(proposal.config, FailureKind.INTERRUPTED, reason))
                    policy.requeue(proposal)
                    self.say(f"  #{proposal.trial.number} -> interrupted: {reason}; re-queued")
                except StorageWriteError:  # the stop line says why; the next run recovers it
                    log.debug("could not record #%s as interrupted", proposal.trial.number, exc_info=True)
                except Exception as exc:  # noqa: BLE001 - recover_interrupted below catches it
                    log.warning("could not record #%s as interrupted: %s", proposal.trial.number, exc)
            in_flight.clear()
        try:
            policy.finish_recorded()  # a record whose last write failed (a full disk) but had its result
            policy.recover_interrupted(reason)
        except StorageWriteError:  # the stop line says why; the next run marks them interrupted
            log.debug("trials left RUNNING", exc_info=True)
        except Exception as exc:  # noqa: BLE001 - the next run recovers them
            log.warning("trials left RUNNING, the next run marks them interrupted: %s", exc)

    def _trials(self, study: optuna.Study, policy, executor: Executor, summary: RunSummary,
                in_flight: dict[int, Launch], signals: _Signals) -> None:
        job = self.job
        deadline = self.t_start + self.timeout_s if self.timeout_s else None
        golden = self._golden(study)
        if golden is None and job.correctness.enabled and self._reference_config() is not None:
            golden = self._reference_run(study, executor)
        self._held: list[tuple[Any, outcome.Final]] = []  # gate failures held while the reference is unproven

        self._vindicated = golden_check.vindicated(trial_rows(study))  # a config other than the reference's passed
        self._announced: set = set()
        self._announce_bans(policy)
        repeats: list[str] = []  # node ids still to repeat the baseline on (comparability across nodes)
        while True:
            logs.check_driver_log()  # a driver.log that cannot be written stops the run like the journal
            stop_starting = signals.count > 0 or (deadline is not None and time.monotonic() >= deadline)
            if signals.count > 1 and in_flight:
                executor.cancel_all()
            # start trials while there are free slots
            while not stop_starting and repeats and len(in_flight) < executor.slots:
                node = repeats.pop(0)
                if node in executor.nodes():
                    self._repeat_no += 1
                    launch = Launch.repeat(self._repeat_no, node)
                    spec = self.spec_for(launch.number, self._baseline_config,
                                         golden.texts if golden else None, None)
                    in_flight[executor.submit(spec, node_id=node)] = launch
                    self.say(f"repeating the baseline on node {node[:8]} (are the nodes comparable?)")
            while not stop_starting and len(in_flight) < executor.slots:
                need_reference = job.correctness.enabled and golden is None
                if need_reference and in_flight:
                    break  # the reference runs alone: every later trial is compared with it
                if need_reference:
                    policy.ensure_baseline_next()  # the golden reference comes from the baseline, never another config
                proposal = policy.next()
                if proposal is None:
                    summary.reason = "space exhausted" if policy.exhausted else "budget reached"
                    break
                if proposal.cached is not None:
                    policy.record(proposal, proposal.cached, counted=False)
                    self.say(f"#{proposal.trial.number}: same config as #{proposal.cached_from}, answered "
                             "from the study (not launched, not counted)")
                    continue
                if need_reference and proposal.key != self.baseline_key:  # queued before the baseline
                    policy.defer(proposal, "the golden reference (the baseline) has to be measured first")
                    continue
                is_baseline = proposal.key == self.baseline_key
                if is_baseline:
                    proposal.trial.set_user_attr(ATTR_BASELINE, True)
                prune = None
                if job.pruning.enabled and not is_baseline and not need_reference:
                    prune = policy.prune_threshold(job.pruning.min_ratio)
                spec = self.spec_for(proposal.trial.number, proposal.config,
                                     None if need_reference else (golden.texts if golden else None), prune)
                if need_reference:
                    proposal.trial.set_user_attr(ATTR_REFERENCE, True)
                ticket = executor.submit(spec)
                in_flight[ticket] = Launch.of(proposal, reference=need_reference)
                summary.launched += 1
                self._progress_start(policy, proposal, len(in_flight), is_baseline)
                if need_reference:
                    break
            if not in_flight:
                if deadline is not None and time.monotonic() >= deadline:
                    summary.reason = "timeout"
                if signals.count:
                    summary.reason = "stopped by signal"
                break
            for ticket, result in executor.wait(0.5):
                launch = in_flight.pop(ticket)
                self._log_warnings(launch, result)
                if launch.kind == "repeat":
                    result = outcome.decide(result, second_signal=signals.count > 1, golden=golden).result
                    self._store_repeat(study, result)
                    continue
                proposal = launch.proposal
                if launch.kind == "reference":
                    golden = self._reference_result(study, policy, proposal, result, signals.count > 1)
                    measured = golden is not None
                else:
                    final = self._finish(study, policy, proposal, result, golden, signals.count > 1)
                    measured = final is not None and final.result.outcome == COMPLETE
                self._finished += 1
                if measured and proposal.key == self.baseline_key:
                    repeats = self._other_nodes(executor, result)

    def _log_warnings(self, launch: Launch, result: TrialResult) -> None:
        """The trial's warnings (its actor's logged ones included) into the driver's log."""
        for text in result.warnings:
            log.warning("%s: %s", launch.label, text)

    # ---- one finished trial ----------------------------------------------------------------
    def _decide(self, policy, proposal, result: TrialResult, golden, second_signal: bool) -> outcome.Final:
        base = policy.baseline_trial()
        return outcome.decide(result, second_signal=second_signal, golden=golden, rules=self.job.constraints,
                              baseline_metrics=(base.user_attrs.get("metrics") or {}) if base else None,
                              earlier_timeouts=policy.earlier_timeouts(proposal.key, proposal.number))

    def _record(self, policy, proposal, final: outcome.Final) -> None:
        """Store the final outcome, re-queue what was not the config's fault, say it, and
        trip the circuit breakers."""
        policy.record(proposal, final.result, counted=final.counted, blameless=final.blameless)
        if final.requeue:
            policy.requeue(proposal)
        self._progress_end(policy, proposal, final.result)
        self._announce_bans(policy)
        self._breaker(final)

    def _finish(self, study, policy, proposal, result: TrialResult, golden, second_signal: bool):
        final = self._decide(policy, proposal, result, golden, second_signal)
        if golden is not None and not self._vindicated and self._hold(study, policy, proposal, final, golden):
            return None
        self._record(policy, proposal, final)
        return final

    def _hold(self, study, policy, proposal, final: outcome.Final, golden) -> bool:
        """While no trial has passed the gate yet, a gate failure on the greedy text is held
        (not yet recorded): if ``golden_check.OUTVOTE_TRIALS`` distinct configs that share no
        departure from the baseline (``golden_check.shared_departure``: a value that is the
        backend's default is none) agree with each other and all differ from the
        reference, the reference is the odd one out and the study stops. True: held."""
        r = final.result
        if r.outcome == COMPLETE and r.correctness.get("ok"):
            if proposal.key != self._reference_key(policy):  # the reference's own config proves nothing
                self._vindicated = True
                self._release_held(policy)
            return False
        texts = (r.outputs or {}).get("texts")
        if r.failure_kind != FailureKind.WRONG_OUTPUT or not texts or list(texts) == list(golden.texts):
            return False
        self._held.append((proposal, final))
        self._progress_end(policy, proposal, final.result)
        configs = {p.number: p.config for p, _ in self._held}
        defaults = self.backend.default_values()

        def related(a: int, b: int) -> bool:
            return golden_check.shared_departure(configs[a], configs[b], self._baseline_config, defaults) is not None

        votes = [(p.number, p.key, (f.result.outputs or {}).get("texts")) for p, f in self._held]
        why = golden_check.outvoted(golden.texts, votes, related)
        if why is None:
            self._breaker(final)  # a held failure is a failure: the circuit breaker counts it now
            return True
        held, self._held = self._held, []
        numbers = [p.number for p, _ in held]
        for p, f in held:  # not held against these configs: the reference was wrong
            f = outcome.Final(dataclasses.replace(f.result, correctness={**f.result.correctness, "outvoted_reference":
                                                                             True}),
                              counted=False, blameless=True, requeue=False)
            policy.record(p, f.result, counted=False, blameless=True)
        ref_trial = (study.user_attrs.get(GOLDEN_ATTR) or {}).get("trial")
        study.set_user_attr(OUTVOTED_ATTR, [*study.user_attrs.get(OUTVOTED_ATTR, []),
                                            *([ref_trial] if ref_trial is not None else [])])
        study.set_user_attr(GOLDEN_ATTR, None)
        raise RuntimeFailure(
            f"stopping: the golden reference (the baseline, trial {ref_trial}) looks wrong: {why}; check the baseline "
            f"config (a shard-order bug or an unsafe NCCL setting there makes every correct config fail the gate); "
            f"trials {', '.join(map(str, numbers))} are not held against their configs, and `ncclsweep run` "
            "measures the baseline again")

    def _release_held(self, policy) -> None:
        """Record the gate failures held so far as what they are: wrong output (their progress
        lines were printed when they came back)."""
        held, self._held = getattr(self, "_held", []), []
        for proposal, final in held:
            policy.record(proposal, final.result, counted=final.counted, blameless=final.blameless)

    def _reference_result(self, study, policy, proposal, result: TrialResult, second_signal: bool):
        """The reference trial is back: check the reference it captured. A usable one is
        stored and returned; a blameless failure (environment, interruption, first
        timeout) re-queues it (None: still no reference); anything else stops the study
        with one line naming the cause, and is not held against the config."""
        final = self._decide(policy, proposal, result, None, second_signal)
        r = final.result
        if r.outcome == FAIL and final.blameless:
            self._record(policy, proposal, final)
            return None
        golden, why, warnings = self._golden_from(r)
        if why:
            final = outcome.reference_failed(r, why)
            policy.record(proposal, final.result, counted=False, blameless=True)
            self._progress_end(policy, proposal, final.result)
            raise RuntimeFailure(self._reference_stop(proposal.number, why))
        assert golden is not None  # calibrate gives a reference or says why not
        study.set_user_attr(GOLDEN_ATTR, {**golden.to_dict(), "trial": proposal.number})
        final = dataclasses.replace(final, result=dataclasses.replace(
            r, warnings=[*r.warnings, *warnings],
            correctness={"ok": True, "reference": True, "tolerance": golden.tolerance,
                         "self_drift": golden.self_drift}))
        self._record(policy, proposal, final)
        return golden

    def _golden_from(self, r) -> tuple[correctness.Golden | None, str | None, list[str]]:
        """The golden reference a launch's two captures give, or why they cannot give one (the
        launch failed, the captures disagree, the text is unusable), with its warnings."""
        if r.outcome == FAIL:
            return None, f"it failed ({r.failure_kind}: {r.failure_reason})", []
        golden, why = self._calibrate(r.outputs or {})
        if golden is None:
            return None, why, []
        why, warnings = golden_check.unusable(golden, self.job.correctness.allow_repetitive_reference)
        return golden, why, warnings

    def _calibrate(self, outputs: dict) -> tuple[correctness.Golden | None, str | None]:
        if not outputs.get("reference"):
            return None, "it captured no outputs"
        return correctness.calibrate(self.job.correctness.prompts, outputs["first"], outputs["second"],
                                     floor=self.job.correctness.logprob_tolerance)

    def _reference_stop(self, number, why: str) -> str:
        return (f"stopping: the golden reference is unusable: the baseline (trial {number}) {why}"
                if why.startswith("it failed") else
                f"stopping: the golden reference is unusable: the baseline's output (trial {number}) {why}") + (
                "; nothing else was launched; fix the baseline config or the server (see the trial log in "
                f"{self.log_dir}), or name another reference in correctness.reference; `ncclsweep run` measures "
                "the baseline again")

    def _reference_run(self, study: optuna.Study, executor: Executor) -> correctness.Golden:
        """The job names a reference config other than the baseline: one launch of it,
        before anything else, captures and checks the golden reference (stored as an
        uncounted trial)."""
        config = self._reference_config()
        assert config is not None  # called only when the job names a reference config
        launch = Launch.reference_config()
        spec = self.spec_for(launch.number, config, None)
        self.say("capturing the golden reference from correctness.reference: "
                 + " ".join(f"{k}={v}" for k, v in config.items()))
        ticket = executor.submit(spec)
        result = None
        while result is None:
            result = next((r for t, r in executor.wait(1.0) if t == ticket), None)
        golden, why, warnings = self._golden_from(result)
        if golden is not None:
            golden.source = "config"
        result = dataclasses.replace(result, correctness={**result.correctness, "ok": why is None, "reference": True,
                                                          **({"reason": why} if why else {})})
        number = self._store_extra(study, result, config, {ATTR_REFERENCE_RUN: True, ATTR_REFERENCE: True})
        if why:
            raise RuntimeFailure(f"stopping: the golden reference is unusable: the reference config "
                                 f"(correctness.reference, trial {number}) {why}; fix it or name another reference")
        assert golden is not None  # calibrate gives a reference or says why not
        for w in warnings:
            self.say(f"warning: {w}")
        study.set_user_attr(GOLDEN_ATTR, {**golden.to_dict(), "trial": number})
        return golden

    def _other_nodes(self, executor: Executor, baseline: TrialResult) -> list[str]:
        """Matching nodes other than the baseline's: each repeats the baseline once."""
        if executor.slots < 2:
            return []
        return [n for n in executor.nodes() if n != baseline.node.get("node_id")]

    def _store_repeat(self, study: optuna.Study, result: TrialResult) -> None:
        """A baseline repeat is a real measurement of the baseline's config on another node:
        stored as its own (uncounted) trial so the report can compare nodes."""
        self._store_extra(study, result, self._baseline_config, {ATTR_BASELINE_REPEAT: True}, key=self.baseline_key)
        ok = result.outcome == COMPLETE
        what = f"{result.value:.1f} tok/s" if ok else f"FAIL {result.failure_kind}: {result.failure_reason}"
        self.say(f"  baseline repeat on node {str(result.node.get('node_id'))[:8]} -> {what}")

    def _store_extra(self, study: optuna.Study, result: TrialResult, config: dict, attrs: dict,
                     key: str | None = None) -> int:
        """A launch outside the search (a baseline repeat, the reference config's run):
        stored as an uncounted trial; returns its number."""
        return add_uncounted_trial(study, result, config, key or config_key(config), self.job.space.distributions(),
                                   attrs)

    def _announce_bans(self, policy) -> None:
        """Say, once, each parameter value the study stops proposing (``orchestrator.study.bans``)."""
        for pair, why in policy.bans().items():
            if pair not in self._announced:
                self._announced.add(pair)
                self.say(f"  not proposing {value_bans.describe(pair)} any more: {why}")

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
                f"{result.failure_kind}: {result.failure_reason}); look at the trial logs in {self.log_dir} "
                f"and `ncclsweep status {self.job.path}`; the study resumes with `ncclsweep run`")

    # ---- progress -------------------------------------------------------------------------
    def _elapsed(self) -> str:
        return _fmt_s(time.monotonic() - self.t_start)

    def _progress_start(self, policy, proposal, running: int, is_baseline: bool = False) -> None:
        used = policy.budget_used() + running
        total = f" of {self.trials}" if self.trials else ""
        role = ", the baseline" if is_baseline else ""
        params = " ".join(f"{k}={v}" for k, v in proposal.config.items())
        self.say(f"starting #{proposal.trial.number} (launch {used}{total}{role}): {params or '(defaults)'} "
                 f"(elapsed {self._elapsed()}{self._remaining(policy, used)})")

    def _remaining(self, policy, used: int) -> str:
        """Time left: trials left x mean trial time so far, and the wall-clock budget if any."""
        elapsed = time.monotonic() - self.t_start
        parts = []
        if self.trials and self._finished:
            per_trial = elapsed / self._finished
            parts.append(f"~{_fmt_s(per_trial * max(0, self.trials - used + 1))} to go at this pace")
        if self.timeout_s:
            parts.append(f"{_fmt_s(max(0.0, self.timeout_s - elapsed))} left of {self.timeout_source}")
        return (", " + ", ".join(parts)) if parts else ""

    def _progress_end(self, policy, proposal, result: TrialResult) -> None:
        base = policy.baseline_value()
        if result.outcome == COMPLETE:
            ratio = f" ({result.value / base:.2f}x baseline)" if base else ""
            what = f"{result.value:.1f} tok/s{ratio}"
        elif result.outcome == PRUNED:
            below = result.metrics.get("pruned_below")
            limit = (f" < threshold {below:.1f} tok/s ({self.job.pruning.min_ratio:g} x the best so far)"
                     if below else "")
            what = f"pruned after the first repeat: {result.value:.1f} tok/s{limit}"
        else:
            what = f"FAIL {result.failure_kind}: {result.failure_reason}"
            ignored = result.metrics.get("decode_tok_s_ignored")
            if result.failure_kind == FailureKind.WRONG_OUTPUT and ignored:
                what = f"FAIL wrong-output (its {ignored:.1f} tok/s do not count): {result.failure_reason}"
        best = policy.best()
        best_s = ""
        if best is not None:
            ratio = f" = {best.value / base:.2f}x baseline" if base else ""
            best_s = f" | best #{best.number} {best.value:.1f} tok/s{ratio}"
        self.say(f"  #{proposal.trial.number} -> {what}{best_s} (elapsed {self._elapsed()})")

    def _best_summary(self, policy) -> dict[str, Any] | None:
        best = policy.best()
        if best is None:
            return None
        base = policy.baseline_trial()
        base_value = base.value if base is not None else None
        return {"number": best.number, "value": best.value, "config": best.user_attrs.get("config"),
                "spread": _spread(best), "vs_baseline": (best.value / base_value) if base_value else None,
                "verdict": vs_baseline_words(best, base),
                "baseline": None if base is None or not base_value else
                {"number": base.number, "value": base_value, "spread": _spread(base)}}

    def _final_line(self, summary: RunSummary, policy) -> str:
        best = summary.best
        head = f"{summary.reason}: {policy.budget_used()} trials counted, {summary.launched} launched this run"
        if not best:
            return head + "; no config may be called best yet"
        params = " ".join(f"{k}={v}" for k, v in (best["config"] or {}).items())
        return f"{head}; best #{best['number']}: {best['value']:.1f} tok/s with {params or '(defaults)'}"

    def _next_steps(self, summary: RunSummary) -> str:
        """The last line: the verdict against the baseline, where the results are, what to run next."""
        job = self.job.path
        best = summary.best
        if summary.interrupted:
            return (f"stopped: `ncclsweep run {job}` continues the study; `ncclsweep status {job}` shows it "
                    f"so far (results in {_shown_dir(self.report_dir)})")
        if best is None:
            why = golden_check.disputed(trial_rows(self._policy.study)) if getattr(self, "_policy", None) else None
            if why:
                return (f"no config is called best: {why}; check the baseline's output in the trial logs in "
                        f"{_shown_dir(self.log_dir)} and `ncclsweep status {job}`; `ncclsweep run {job} --trials N` "
                        "compares more configs with it")
            return (f"no config passed yet: see `ncclsweep status {job}` and the trial logs in "
                    f"{_shown_dir(self.log_dir)}")
        base = best.get("baseline")
        if base is None:
            verdict = f"best #{best['number']} {best['value']:.1f} tok/s (no baseline measured to compare with)"
        elif base["number"] == best["number"]:
            verdict = f"the baseline #{base['number']} is the best config found ({best['value']:.1f} tok/s)"
        else:
            verdict = f"best #{best['number']} {best['value']:.1f} tok/s = {best['verdict']}"
        return (f"{verdict} | next: `ncclsweep report {job}` (writes {_shown_dir(self.report_dir)}/report.html), "
                f"`ncclsweep compare {job}`, `ncclsweep export {job} --format env`")


def _spread(trial) -> float | None:
    """Relative spread of a trial's median (rel_ci, else cv), as ``history`` reads it."""
    metrics = trial.user_attrs.get("metrics") or {}
    value = metrics.get("rel_ci")
    return value if value is not None else metrics.get("cv")


def _shown_dir(path) -> str:
    return display_path(path)


def vs_baseline_words(best, base) -> str | None:
    """The run's verdict on its best trial against the baseline trial (Optuna trials): the ratio
    is "beyond noise" only when the two trials' decode samples put its interval off 1.0
    (``verdict.py``, unpaired: repeats within one launch each), else "within noise of the
    baseline"; the baseline's own config is "the baseline itself". None without a baseline."""
    if base is None or not base.value:
        return None
    if best.user_attrs.get(ATTR_KEY) == base.user_attrs.get(ATTR_KEY):
        return "the baseline itself"
    samples = lambda t: (t.user_attrs.get("metrics") or {}).get("decode_samples") or []  # noqa: E731
    iv = verdict.ratio_interval(samples(base), samples(best))
    beyond = verdict.verdict(iv) in (verdict.FASTER, verdict.SLOWER)
    return (f"{verdict.ratio_text(iv, best.value / base.value)} the baseline, "
            + ("beyond noise" if beyond else "within noise of the baseline")
            + f", {verdict.interval_text(iv)}")


def _fmt_s(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")

