"""The study's golden reference: where it comes from, whether a launch gives a usable one, and
the votes that can show it is wrong.

Every "wrong output" verdict of a study is relative to the golden reference, so the driver
treats it with care (README, "How a study runs", step 3):

- ``GoldenSource`` knows where the reference comes from: the stored one, the job's
  reference file (checked before anything launches), the config ``correctness.reference``
  names, or (by default) the baseline; and turns a launch's two captures into a reference,
  or into the one line that says why they cannot be one.
- ``GateVotes`` holds gate failures while no config other than the reference's own has
  passed the gate: a reference that still looks like text can be garbage (a shard-order bug
  in the baseline), and it shows when different configs agree with each other and not with
  it (``golden_check.outvoted``, pairs that share a departure from the baseline discounted:
  ``golden_check.shared_departure``). It decides, the driver records: ``consider`` says
  whether to record a result now, hold it, or stop the study because the reference was
  outvoted. No storage, no Optuna: tested on plain values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from orchestrator.core import correctness, golden_check
from orchestrator.core.errors import BadInput
from orchestrator.core.outcome import Final
from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialResult


@dataclass(frozen=True)
class Launched:
    """What the votes need of a launched trial: its number, config key and normalized config."""

    number: int
    key: str
    config: dict[str, Any]


class GoldenSource:
    """Where a job's golden reference comes from (module docstring)."""

    def __init__(self, job, baseline_config: dict[str, Any], say: Callable[[str], None]):
        self.job = job
        self.baseline_config = baseline_config
        self.say = say
        self.settings = job.correctness

    def from_file(self) -> correctness.Golden | None:
        """The job's reference file, checked (BadInput when it is unusable); None when the job
        names no file."""
        if not self.settings.enabled or self.settings.reference_kind != "file":
            return None
        golden = correctness.Golden.from_file(self.settings.reference)
        why, warnings = golden_check.unusable(golden, self.settings.allow_repetitive_reference)
        if why:
            raise BadInput(f"the reference file {self.settings.reference} is unusable: {why}",
                           file=str(self.job.path), key="correctness.reference")
        for w in warnings:
            self.say(f"warning: {w}")
        return golden

    def config(self) -> dict[str, Any] | None:
        """The config the job names as its reference when it is not the baseline, else None."""
        if self.settings.reference_kind != "config":
            return None
        backend = self.job.backend_obj()
        config = backend.normalize(self.job.space.active(dict(self.settings.reference)))
        return None if config == self.baseline_config else config

    def from_launch(self, result: TrialResult) -> tuple[correctness.Golden | None, str | None, list[str]]:
        """The golden reference a launch's two captures give, or why they cannot give one (the
        launch failed, the captures disagree, the text is unusable), with its warnings."""
        if result.outcome == FAIL:
            return None, f"it failed ({result.failure_kind}: {result.failure_reason})", []
        outputs = result.outputs or {}
        if not outputs.get("reference"):
            return None, "it captured no outputs", []
        golden, why = correctness.calibrate(self.settings.prompts, outputs["first"], outputs["second"],
                                            floor=self.settings.logprob_tolerance)
        if golden is None:
            return None, why, []
        why, warnings = golden_check.unusable(golden, self.settings.allow_repetitive_reference)
        return golden, why, warnings

    def stop_line(self, number: int, why: str, log_dir) -> str:
        """The one line that stops a study whose baseline gave no usable reference."""
        what = "the baseline" if why.startswith("it failed") else "the baseline's output"
        return (f"stopping: the golden reference is unusable: {what} (trial {number}) {why}; nothing else was "
                f"launched; fix the baseline config or the server (see the trial log in {log_dir}), or name another "
                "reference in correctness.reference; `ncclsweep run` measures the baseline again")


Decision = Literal["record", "hold", "outvoted"]


@dataclass
class Vote:
    """What ``GateVotes.consider`` decided: ``record`` the result now (with ``release``, the
    held ones, when a config other than the reference's passed), ``hold`` it, or the
    reference was ``outvoted`` (``why``; ``release`` is every held trial, none of them held
    against its config)."""

    decision: Decision
    release: list[tuple[Any, Final]] = field(default_factory=list)
    why: str | None = None


class GateVotes:
    """Gate failures held while the golden reference is not yet confirmed (module docstring).

    ``reference_key``: the config key the reference came from (its own pass proves nothing);
    ``defaults``: the backend's defaults (``Backend.default_values``: returning to one is no
    shared departure); ``confirmed``: a config other than the reference's already passed (a
    resumed study), so nothing is held."""

    def __init__(self, baseline_config: dict[str, Any], defaults: dict[str, Any], reference_key: str | None,
                 confirmed: bool = False):
        self.baseline_config = baseline_config
        self.defaults = defaults
        self.reference_key = reference_key
        self.confirmed = confirmed
        self.held: list[tuple[Any, Final]] = []  # (the trial's handle, its final outcome), in arrival order
        self._voters: dict[int, tuple[Launched, list[str]]] = {}  # trial number -> (trial, its greedy texts)

    def consider(self, trial: Launched, handle: Any, final: Final, golden: correctness.Golden) -> Vote:
        """A trial compared with ``golden`` is back: record it, hold it, or stop (``Vote``)."""
        result = final.result
        if self.confirmed:
            return Vote("record")
        if result.outcome == COMPLETE and result.correctness.get("ok"):
            if trial.key == self.reference_key:  # the reference's own config agreeing proves nothing
                return Vote("record")
            self.confirmed = True
            return Vote("record", release=self.release())
        texts = (result.outputs or {}).get("texts")
        if result.failure_kind != FailureKind.WRONG_OUTPUT or not texts or list(texts) == list(golden.texts):
            return Vote("record")
        self.held.append((handle, final))
        self._voters[trial.number] = (trial, list(texts))
        why = golden_check.outvoted(golden.texts, [(t.number, t.key, texts) for t, texts in self._voters.values()],
                                    self._related)
        if why is None:
            return Vote("hold")
        return Vote("outvoted", release=[(h, self._not_held_against(f)) for h, f in self.release()], why=why)

    def release(self) -> list[tuple[Any, Final]]:
        """Every held (handle, final), emptied: the driver records them as what they are."""
        held, self.held, self._voters = self.held, [], {}
        return held

    def _related(self, a: int, b: int) -> bool:
        return golden_check.shared_departure(self._voters[a][0].config, self._voters[b][0].config,
                                             self.baseline_config, self.defaults) is not None

    @staticmethod
    def _not_held_against(final: Final) -> Final:
        """A held failure once its reference was outvoted: not the config's (uncounted, blameless)."""
        result = replace(final.result, correctness={**final.result.correctness, "outvoted_reference": True})
        return Final(result, counted=False, blameless=True, requeue=False)
