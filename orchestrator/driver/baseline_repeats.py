"""The baseline again on every other matching node, once its first launch measured it: are the
nodes comparable?

Each repeat runs on its node (``Launch.repeat``, log number ``REPEAT_NUMBERS + n``), is judged
by the gate like a trial, and comes back as an uncounted trial of the baseline's config that the
report compares across nodes. One slot or one node: no repeat.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.core import outcome
from orchestrator.core.records import COMPLETE, TrialResult
from orchestrator.driver.launcher import Launcher
from orchestrator.driver.loop_state import Launch, LoopState
from orchestrator.driver.recorder import Recorder
from orchestrator.study.storage.storage import ATTR_BASELINE_REPEAT


class BaselineRepeats:
    """The repeats of one run (module docstring): ``pending`` node ids, ``started`` so far."""

    def __init__(self, launcher: Launcher, recorder: Recorder, say: Callable[[str], None]):
        self.launcher = launcher
        self.recorder = recorder
        self.say = say
        self.pending: list[str] = []
        self.started = 0

    def baseline_measured(self, run: LoopState, baseline: TrialResult) -> None:
        """The baseline was measured on its node: every other matching node repeats it once."""
        if run.executor.slots < 2:
            self.pending = []
            return
        self.pending = [n for n in run.executor.nodes() if n != baseline.node.get("node_id")]

    def start(self, run: LoopState) -> None:
        """The pending repeats into free slots, each pinned to its node (a node gone is skipped)."""
        while self.pending and len(run.in_flight) < run.executor.slots:
            node = self.pending.pop(0)
            if node in run.executor.nodes():
                self.started += 1
                launch = Launch.repeat(self.started, node)
                spec = self.launcher.spec(run.policy, launch.number, dict(run.policy.baseline or {}),
                                          run.golden.texts if run.golden else None)
                run.in_flight[run.executor.submit(spec, node_id=node)] = launch
                self.say(f"repeating the baseline on node {node[:8]} (are the nodes comparable?)")

    def back(self, run: LoopState, result: TrialResult) -> None:
        """A repeat is back: a real measurement of the baseline's config on another node, judged by
        the gate and stored as its own (uncounted) trial so the report can compare nodes."""
        repeat = outcome.decide(result, stop_signals=run.signals.count, golden=run.golden)
        result = repeat.result
        self.launcher.store_uncounted(run, result, dict(run.policy.baseline or {}), {ATTR_BASELINE_REPEAT: True},
                                      key=run.policy.baseline_key)
        ok = result.outcome == COMPLETE
        what = f"{result.value:.1f} tok/s" if ok else f"FAIL {result.failure_kind}: {result.failure_reason}"
        self.say(f"  baseline repeat on node {str(result.node.get('node_id'))[:8]} -> {what}")
        self.recorder.stop_on_job_error(repeat, "the baseline's repeat")
