"""The golden reference's lifecycle in one run: where it comes from, its capture checked, and
the votes that can outvote it.

Before the loop, ``golden`` finds the reference every trial is compared with (the stored one,
the job's file, or one launch of the config ``correctness.reference`` names; None: the baseline
captures it, first and alone) and ``start_votes`` opens the votes (``driver.golden.GateVotes``).
The reference trial's result comes back through ``reference_back`` (stored and returned when
usable; the run stops with one line when not); every other search trial through ``tell``, which
records it or holds a gate failure while the reference is unconfirmed, and stops the run when
the votes outvote the reference. ``release_held`` records what is still held when the run ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from orchestrator.core import correctness, golden_check, outcome
from orchestrator.core.errors import RuntimeFailure
from orchestrator.core.records import FAIL, TrialResult
from orchestrator.driver.golden import GateVotes, GoldenSource, Launched
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import Launch, LoopState
from orchestrator.driver.recorder import Recorder
from orchestrator.study.search.policy import Proposal, SearchPolicy
from orchestrator.study.storage import storage
from orchestrator.study.storage.storage import ATTR_REFERENCE, ATTR_REFERENCE_RUN


class GoldenLifecycle:
    """The golden reference of one run (module docstring). ``baseline_key``: the policy's key of
    the baseline config; ``defaults``: the backend's default values (the votes discount them)."""

    def __init__(self, job, source: GoldenSource, baseline_key: str | None, defaults: dict[str, Any],
                 recorder: Recorder, launcher: Launcher, say: Callable[[str], None]):
        self.job = job
        self.source = source
        self.baseline_config = source.baseline_config
        self.baseline_key = baseline_key
        self.defaults = defaults
        self.recorder = recorder
        self.launcher = launcher
        self.say = say
        self.votes: GateVotes | None = None

    def golden(self, run: LoopState) -> correctness.Golden | None:
        """The golden reference every trial is compared with: the stored one, the job's file,
        or a run of the config the job names; None: the baseline captures it first (or the
        job turns correctness off, and nothing is ever compared)."""
        if not self.job.correctness.enabled:
            return None
        data = storage.stored_golden(run.study)
        if data:
            return correctness.Golden.from_dict(data)
        golden = self.source.from_file()
        if golden is not None:
            storage.store_golden(run.study, golden.to_dict())
            return golden
        if self.source.config() is not None:
            return self._reference_run(run)
        return None

    def start_votes(self, run: LoopState) -> None:
        """The votes on the reference, confirmed already when a config other than the
        reference's own passed the gate (a resumed study)."""
        source = self.source
        if self.job.correctness.reference_kind == "file":
            ref_key = None
        else:
            config = source.config()
            ref_key = self.baseline_key if config is None else run.policy.key_of(config)[1]
        self.votes = GateVotes(self.baseline_config, self.defaults, ref_key,
                               confirmed=golden_check.vindicated(run.policy.rows()))

    def reference_back(self, run: LoopState, proposal: Proposal, result: TrialResult) -> correctness.Golden | None:
        """The reference trial is back: check the reference it captured. A usable one is
        stored and returned; a blameless failure (environment, interruption, first
        timeout) re-queues it (None: still no reference); anything else stops the study
        with one line naming the cause, and is not held against the config."""
        final = self.recorder.decide(run, proposal, result, None)
        r = final.result
        if r.outcome == FAIL and final.blameless:
            self.recorder.record(run.policy, proposal, final)
            return None
        golden, why, warnings = self.source.from_launch(r)
        if why:
            final = outcome.reference_failed(r, why)
            run.policy.record(proposal, final.result, counted=False, blameless=True)
            self.recorder.said_end(run.policy, proposal, final.result)
            raise RuntimeFailure(self.source.stop_line(proposal.number, why, self.job.dir.logs))
        assert golden is not None  # calibrate gives a reference or says why not
        storage.store_golden(run.study, golden.to_dict(), proposal.number)
        final = dataclasses.replace(final, result=dataclasses.replace(
            r, warnings=[*r.warnings, *warnings],
            correctness={"ok": True, "reference": True, "tolerance": golden.tolerance,
                         "self_drift": golden.self_drift}))
        self.recorder.record(run.policy, proposal, final)
        return golden

    def _reference_run(self, run: LoopState) -> correctness.Golden:
        """The job names a reference config other than the baseline: one launch of it,
        before anything else, captures and checks the golden reference (stored as an
        uncounted trial)."""
        config = self.source.config()
        assert config is not None  # called only when the job names a reference config
        spec = self.launcher.spec(run.policy, Launch.reference_config().number, config, None)
        self.say("capturing the golden reference from correctness.reference: "
                 + " ".join(f"{k}={v}" for k, v in config.items()))
        ticket = run.executor.submit(spec)
        result = None
        while result is None:
            result = next((r for t, r in run.executor.wait(1.0) if t == ticket), None)
        golden, why, warnings = self.source.from_launch(result)
        if golden is not None:
            golden.source = "config"
        result = dataclasses.replace(result, correctness={**result.correctness, "ok": why is None, "reference": True,
                                                          **({"reason": why} if why else {})})
        number = self.launcher.store_uncounted(run, result, config, {ATTR_REFERENCE_RUN: True, ATTR_REFERENCE: True})
        if why:
            raise RuntimeFailure(f"stopping: the golden reference is unusable: the reference config "
                                 f"(correctness.reference, trial {number}) {why}; fix it or name another reference")
        assert golden is not None  # calibrate gives a reference or says why not
        for w in warnings:
            self.say(f"warning: {w}")
        storage.store_golden(run.study, golden.to_dict(), number)
        return golden

    def tell(self, run: LoopState, proposal: Proposal, result: TrialResult) -> outcome.Final | None:
        """A trial's result decided and recorded, or held by the votes (None)."""
        final = self.recorder.decide(run, proposal, result, run.golden)
        if run.golden is None or self.votes is None:
            self.recorder.record(run.policy, proposal, final)
            return final
        vote = self.votes.consider(Launched(proposal.number, proposal.key, proposal.config), proposal, final,
                                   run.golden)
        if vote.decision == "record":
            for held, held_final in vote.release:
                run.policy.record(held, held_final.result, counted=held_final.counted, blameless=held_final.blameless)
            self.recorder.record(run.policy, proposal, final)
            return final
        if vote.decision == "hold":
            self.recorder.said_end(run.policy, proposal, final.result)
            self.recorder.breaker.check(final)  # a held failure is a failure: the circuit breaker counts it now
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

    def release_held(self, policy: SearchPolicy) -> None:
        """Record the gate failures held so far as what they are: wrong output (their progress
        lines were printed when they came back)."""
        if self.votes is None:
            return
        for proposal, final in self.votes.release():
            policy.record(proposal, final.result, counted=final.counted, blameless=final.blameless)
