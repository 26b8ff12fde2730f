"""The interface every search strategy implements, and what it sees of the study.

``SearchPolicy`` (``study.policy``) keeps the study contract: the baseline first, identity and
the cache of measured configs, failure memory, bans, the budget, resume. What it leaves to a
strategy is one question, asked where the policy may choose itself on a space it can enumerate:
which unmeasured config to launch next.

- ``pick(view)``: before every launch, when no fixed config (the baseline, a re-queued one) is
  waiting: the config to launch next and its role (``startup``, ``fill``, ``model``), or None to
  let the study's Optuna sampler propose;
- ``instead(view)``: when the sampler's proposal cannot run (measured already, a banned value, a
  duplicate of a trial in flight, infeasible again and again): the config to launch in its place.

Both answer with a key of ``view.remaining``: a config the study may launch (feasible, no banned
value, neither measured nor in flight), so a strategy cannot break the contract by construction.
A strategy keeps no state of its own between calls: everything comes from the ``View``, which the
policy recomputes from storage, so a resumed study continues where it stopped. It never writes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.config.job import Objective
from orchestrator.core.records import Config, TrialRow
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.model.promise import ValueModel


@dataclass(frozen=True)
class Pick:
    """A strategy's answer: launch the enumerated config ``key``; ``role`` is stored on its trial
    (``enqueued_by``), so the rows say who chose it."""

    key: str
    role: str


@dataclass
class View:
    """The study as a strategy sees it at one decision (module docstring). The callables are
    computed on demand (a fit costs a pass over the trials) and cached by the policy."""

    remaining: list[str]  # the keys a strategy may answer with (module docstring), enumeration order
    configs: Mapping[str, Config]  # key -> normalized config, every enumerated key
    raw: Mapping[str, Config]  # key -> one raw config of it (what the sampler would have drawn)
    seen: list[Config]  # normalized configs measured (one per key) or in flight
    in_flight: list[Config]  # normalized configs launched and not yet recorded
    launched: int  # counted launches, those in flight included
    rng: random.Random  # the policy's seeded RNG: every tie is broken with it
    objective: Objective
    rows: Callable[[], list[TrialRow]]  # the study's rows (``history.trial_rows``)
    trial_params: Callable[[int], Config]  # a trial's raw parameters, by number
    value_model: Callable[[], ValueModel]  # what a config should measure (``study.promise``)
    launch_cost: Callable[[], LaunchCost]  # what its launch should cost (``study.cost``, started launches)
    bans: Callable[[], dict[tuple[str, Any], str]]  # values not proposed any more (``study.bans``)
    late: Callable[[Config], bool] | None = None  # a prior that puts a config last (the pre-screen's slow settings)
    this_run: int | None = None  # of the launches, those of the run that asks (None: runs are not told apart)

    @property
    def launched_this_run(self) -> int:
        return self.launched if self.this_run is None else self.this_run

    def not_late(self, keys: list[str]) -> list[str]:
        """The keys the prior does not put last (all of them when it puts every one last)."""
        if self.late is None:
            return keys
        early = [k for k in keys if not self.late(self.configs[k])]
        return early or keys


class Strategy(Protocol):
    """Which config comes next (module docstring). ``name`` is what ``sampler:`` calls it;
    ``startup`` the launches the policy picks before the sampler's proposals are used (0: none)."""

    @property
    def name(self) -> str: ...

    @property
    def startup(self) -> int: ...

    def pick(self, view: View) -> Pick | None:
        """The next launch, or None: the sampler proposes."""
        ...

    def instead(self, view: View) -> str:
        """The key to launch in place of a proposal that cannot run (``view.remaining`` is not empty)."""
        ...
