"""What one run's loop holds: the launches in flight and what the loop talks to.

``Launch`` is one server launch the driver started and waits for (a search trial, the golden
reference's capture, a baseline repeat, the reference config's run, a relaunch, a race launch);
``LoopState`` the run's study, policy, executor, stop signals, time budget, golden reference and
the dict executor ticket -> ``Launch`` of what runs now. The loop's parts (``driver.run``, the
relaunch schedule, the race, the golden reference's lifecycle) read and change it; it decides
nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import optuna

from orchestrator.core import correctness
from orchestrator.driver.executor import Executor
from orchestrator.driver.progress import RunSummary
from orchestrator.driver.signals import StopSignals
from orchestrator.driver.time_budget import TimeBudget
from orchestrator.study.search.policy import Proposal, SearchPolicy

# Launches outside the search have no Optuna trial number while they run; their log files
# are numbered apart from the trials': the reference config's run is trial-8001.log, the
# n-th baseline repeat of a run trial-(9000 + n).log.
REFERENCE_RUN_NUMBER = 8001
REPEAT_NUMBERS = 9000
# Relaunches and race launches: trial-(7000 + n).log for the study's n-th of them.
EXTRA_NUMBERS = 7000

LaunchKind = Literal["search", "reference", "repeat", "reference-config", "relaunch", "race"]


@dataclass(frozen=True)
class Launch:
    """One server launch the driver started and waits for.

    ``kind``: ``search``, a trial of the study (``proposal``); ``reference``, the baseline
    launched alone to capture the golden reference (``proposal``; every later trial is
    compared with it); ``repeat``, the baseline again on another ``node`` (are the nodes
    comparable?), stored as an uncounted trial; ``reference-config``, the run of the config
    ``correctness.reference`` names. ``number`` names its log file: the Optuna trial number,
    or ``REPEAT_NUMBERS + n`` / ``REFERENCE_RUN_NUMBER``. ``relaunch``: the baseline or the
    incumbent again during the search (``study.relaunch``), ``race``: a launch of the finalists'
    race (``study.race``), both stored as uncounted trials of their config (``key``, ``config``),
    numbered ``EXTRA_NUMBERS + n``."""

    kind: LaunchKind
    number: int
    proposal: Proposal | None = None
    node: str | None = None  # the node a repeat runs on
    key: str | None = None  # a relaunch's or race launch's config key
    config: dict | None = None  # ... and its config
    record: dict | None = None  # a race launch's race record (``RacePlan.record``)
    shown: str = ""  # how the lines name its config ("#5")

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
        if self.kind in ("relaunch", "race"):
            return f"{self.kind} of {self.shown}"
        return {"repeat": "baseline repeat", "reference-config": "reference config"}.get(self.kind, f"#{self.number}")


@dataclass
class LoopState:
    """The state of one run's loop: what it talks to and what is in flight."""

    study: optuna.Study
    policy: SearchPolicy
    executor: Executor
    signals: StopSignals
    summary: RunSummary
    time: TimeBudget
    checks: bool  # the job's correctness gate is on
    golden: correctness.Golden | None = None
    in_flight: dict[int, Launch] = field(default_factory=dict)  # executor ticket -> what runs there
    search_over: bool = False  # no search trial starts any more (the rest of the time is the race's)
    said_paths: set[str] = field(default_factory=set)  # engine all-reduce path warnings the study has shown

    def flying(self, kind: str) -> list[Launch]:
        """The launches of ``kind`` in flight."""
        return [launch for launch in self.in_flight.values() if launch.kind == kind]

    @property
    def need_reference(self) -> bool:
        """The golden reference is still to be captured (by the baseline, first and alone)."""
        return self.checks and self.golden is None

    def stop_starting(self) -> bool:
        """A stop signal came or the deadline passed: nothing more starts."""
        return self.signals.count > 0 or self.time.past()
