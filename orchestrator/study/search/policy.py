"""The search policy: how Optuna's proposals become server launches, and how outcomes go back.

``SearchPolicy`` sits between the study driver and Optuna. The driver asks it for the
next config (``next()``), launches it (or not), and hands the ``TrialResult`` back
(``record()``). The policy owns every rule of the study contract that concerns *which*
config runs:

- the baseline is enqueued as the very first trial (once, if not yet measured), exactly
  as given: its trial records only the parameters it sets, and nothing is sampled for
  the others (also when it is re-queued, or launched afresh as the golden reference:
  ``ensure_baseline_next``);
- identity: a proposal is normalized (``normalize(space.active(raw))``) and keyed with
  ``records.config_key``; a config already measured (a counted COMPLETE, config-caused
  FAIL or PRUNED trial) is answered from the study (``Proposal.cached``) instead of
  being launched, and an unmeasured config (the strategy's ``instead``) is enqueued so the
  next ask makes progress;
- which unmeasured config comes next where the policy picks itself (the start-up, the fill, a
  plan's level steps, or every launch): its ``strategy`` decides (``study.strategies``: one
  strategy per module behind ``strategies.base.Strategy``; ``samplers.make_strategy`` builds the
  one a job's ``sampler:`` names). The policy hands it a ``View`` of the study and enqueues what it
  picks; a strategy only ever answers with a config the study may launch;
- proposals land on configs the study may launch: the study's sampler is wrapped in
  ``feasible.FeasibleSampler`` (feasible under the space's constraints, no value that
  ``bans`` stopped); what still gets through (a space too large to enumerate, an
  enqueued config), or duplicates a trial still in flight, is recorded as an uncounted
  PRUNED trial with its reason (``skipped``: not a trial for status, report or plots),
  and the sampler asked again;
- failure memory, in storage (see ``docs/architecture.md``, "Trial records"): a
  config-caused FAIL is told to Optuna as COMPLETE with value 0.0 and the infeasible
  constraint ``1.0`` (``Trial.set_constraint(CONSTRAINT, 1.0)`` before ``study.tell``; so
  does a proposal the space rules out or a banned value; every other COMPLETE or PRUNED
  trial gets ``0.0``, a measured config that breaks an outcome constraint ``1.0``), so
  TPE/GP/NSGA-II treat it as infeasible and it can never be "best"; a blameless failure
  (``outcome.decide``: ``interrupted``, ``node-lost``, ``env-error``, a first timeout) is
  an Optuna FAIL (the sampler ignores it) that ``requeue`` puts back once; PRUNED (early
  stop) is PRUNED with its intermediate value reported first (for a single objective). A trial a dead driver left
  RUNNING is told FAIL by the next one (``recover_interrupted``); why is stored as a study
  user attribute (``storage.RECOVERED_PREFIX`` + its number) that ``history`` reads as the
  trial's own. Only Optuna's public API is used;
- the objective (``study.objective``): what Optuna is told of a COMPLETE trial is one value
  (the default single level, or the weighted mix of several) or one per level (a plan: a
  multi-objective study, one ``maximize`` direction per level); a config-caused failure is
  0.0 at every level; "best" is per level where the policy needs it (the early stop's
  thresholds, ``prune_thresholds``);
- the budget counts launched trials (COMPLETE, config-caused FAIL, PRUNED) only, and
  the policy stops proposing when it is reached or when every enumerated config has
  been measured (``budget_reached`` / ``exhausted`` say which).

It never launches anything and never prints; several trials may be in flight at once
(call ``next()`` several times before ``record()``). Every decision is recomputed from
the study's trials, so a policy built on a resumed study continues where it stopped.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from orchestrator.config.job import Objective
from orchestrator.core.errors import StorageWriteError
from orchestrator.core.outcome import DEFAULT_PRUNE_RATIO, TIMEOUT_KINDS, infeasibility, interrupted
from orchestrator.core.records import (
    COMPLETE,
    FAIL,
    NOT_THE_CONFIGS_FAULT,
    PRUNED,
    Config,
    FailureKind,
    TrialResult,
    TrialRow,
    config_key,
)
from orchestrator.study.evidence.bans import banned_values, describe, hit
from orchestrator.study.evidence.history import baseline_row, best_rows, trial_rows
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.evidence.plan import prune_thresholds
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.model.promise import ValueModel
from orchestrator.study.search.feasible import FeasibleSampler
from orchestrator.study.search.strategies.base import Strategy, View
from orchestrator.study.search.strategies.sampler_led import SamplerLed
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage.storage import (
    ATTR_BASELINE,
    ATTR_CACHED_FROM,
    ATTR_COUNTED,
    ATTR_ENQUEUED_BY,
    ATTR_KEY,
    ATTR_REFERENCE,
    ATTR_REQUEUE_OF,
    ATTR_RUN,
    ATTR_SKIPPED,
    CONSTRAINT,
    FEASIBLE,
    INFEASIBLE,
    contains,
    recovered_attr,
)

log = logging.getLogger(__name__)


class SpaceLike(Protocol):
    """What the policy needs from ``orchestrator.config.space.SearchSpace``."""

    def suggest(self, trial: optuna.Trial) -> Config: ...
    def active(self, config: Config) -> Config: ...
    def feasible(self, config: Config) -> str | None: ...
    def enumerate(self) -> list[Config] | None: ...
    def distributions(self) -> dict[str, Any]: ...


@dataclass
class Proposal:
    """One config to run (or, when ``cached`` is set, to answer from the study).

    ``config`` is normalized and holds active parameters only; ``raw`` is what the space
    suggested. With ``cached`` set the caller must not launch: it calls
    ``record(proposal, proposal.cached)`` right away.
    """

    trial: optuna.Trial
    config: Config
    key: str
    cached: TrialResult | None = None
    cached_from: int | None = None
    raw: Config = field(default_factory=dict)
    role: str = "sampler"  # sampler, baseline, reference, requeue, or the strategy's: startup, fill, model

    @property
    def number(self) -> int:
        return self.trial.number


@dataclass
class _State:
    """One scan of the study's trials."""

    measured: dict[str, FrozenTrial]
    counted: list[FrozenTrial]
    waiting: list[FrozenTrial]
    running: list[FrozenTrial]
    requeued_keys: set[str]
    baseline_pending: bool


class SearchPolicy:
    """Turns Optuna proposals into launches under the study contract (module docstring).

    The seam between the driver and Optuna: the driver (``orchestrator.driver.run``) asks
    ``next`` for a ``Proposal``, launches it or answers it from the study, and hands the
    ``TrialResult`` back to ``record``; it reads the study's standing through ``rows``,
    ``best_row``, ``baseline_row``, ``budget_used``, ``bans`` and ``prune_threshold``. The
    replay harness (``study.replay``) drives it the same way with recorded results. Not
    thread-safe: one driver thread calls it (the driver lock keeps one driver per study; the
    drivers of a shared study each have their own, and pick under ``study.shared``'s claim lock).
    Every answer is recomputed from storage, so a policy built on a resumed study continues
    where the last one stopped; nothing but ``record``, ``defer``, ``requeue``, ``mark`` and
    the recoveries writes.
    """

    def __init__(
        self,
        study: optuna.Study,
        space: SpaceLike,
        normalize: Callable[[Config], Config],
        *,
        baseline: Config | None,
        budget: int | None,
        remeasure: bool = False,
        seed: int = 0,
        strategy: Strategy | None = None,
        startup: int = 0,
        late: Callable[[Config], bool] | None = None,
        objective: Objective | None = None,
        run: str | None = None,
        shared: bool = False,
        on_ask: Callable[[int], None] | None = None,
        max_asks: int = 200,
        max_consecutive_duplicates: int = 200,
    ) -> None:
        """``strategy``: which unmeasured config comes next (``study.strategies``); without one,
        the sampler leads (``SamplerLed``) with ``startup`` start-up launches picked by the
        policy (the start-up trials the sampler was built with: ``samplers.startup_trials``).
        ``late``: a prior that puts a (normalized) config last among equals (the pre-screen's
        slow settings). ``run``: the driver's run that records results, stored on every record.
        ``shared``: other drivers run the study at once (``study.shared``): their trials in flight
        are busy like this policy's own, count toward the budget, and are never recovered here
        but through ``account_stale``; ``on_ask``: called with every trial number as soon as it is
        asked (its first heartbeat)."""
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0 or None, not {budget}")
        self.study = study
        self.run = run
        self.shared = shared
        self.on_ask = on_ask
        self.space = space
        self.normalize = normalize
        self.baseline = dict(baseline) if baseline is not None else None
        self.budget = budget
        self.remeasure = remeasure
        self.objective = objectives.of(objective)  # what Optuna is told (study.objective)
        self.levels = objectives.levels(self.objective)
        self.strategy: Strategy = strategy if strategy is not None else SamplerLed(startup=startup)
        self.late = late
        self.max_asks = max_asks
        self.max_consecutive_duplicates = max_consecutive_duplicates
        self._rng = random.Random(seed)
        self._in_flight: dict[int, Proposal] = {}
        self._session_keys: set[str] = set()  # measured by this policy (what remeasure trusts)
        self._enumerated: dict[str, Config] | None = None
        self._enum_norm: dict[str, Config] = {}  # key -> normalized config
        self._enum_raw: list[tuple[Config, str]] = []  # every feasible raw config and its key
        self._enumerated_done = False
        self._baseline_checked = False
        self._consecutive_dups = 0
        self._gave_up = False
        self.baseline_key = self._key_of(self.baseline) if self.baseline is not None else None
        self._bans_at: tuple[int, dict] = (-1, {})  # (finished trials, bans) cache
        self._cost_at: tuple[int, LaunchCost] = (-1, LaunchCost())
        self._value_at: tuple[int, ValueModel] = (-1, ValueModel())
        self._allowed_at: tuple[int, list[Config] | None] = (-1, None)
        if not isinstance(study.sampler, FeasibleSampler):  # draws land on configs the study may launch
            study.sampler = FeasibleSampler(study.sampler, self.allowed_configs, seed=seed)

    @property
    def startup(self) -> int:
        """Launches the policy picks before the sampler's proposals are used (the strategy's)."""
        return self.strategy.startup

    # ---- identity --------------------------------------------------------------------------
    def key_of(self, raw: Config) -> tuple[Config, str]:
        """The normalized active config of a raw config and its key."""
        config = self.normalize(self.space.active(dict(raw)))
        return config, config_key(config)

    def _key_of(self, config: Config) -> str:
        try:
            return self.key_of(config)[1]
        except Exception:  # noqa: BLE001 - an already-normalized config may not re-normalize
            return config_key(config)

    def _enumeration(self) -> dict[str, Config] | None:
        """key -> one raw config, over every feasible config of the space (None: too large)."""
        if not self._enumerated_done:
            self._enumerated_done = True
            configs = self.space.enumerate()
            if configs is not None:
                out: dict[str, Config] = {}
                for raw in configs:
                    if self.space.feasible(raw) is not None:
                        continue
                    config, key = self.key_of(raw)
                    self._enum_raw.append((dict(raw), key))
                    if key not in out:
                        out[key] = dict(raw)
                        self._enum_norm[key] = config
                self._enumerated = out
        return self._enumerated

    def _raw_for(self, key: str, fallback: Config) -> Config:
        """Params to enqueue for a config: the enumerated raw config, a stored trial's, or as given."""
        enum = self._enumeration()
        if enum and key in enum:
            return dict(enum[key])
        for t in self.study.get_trials(deepcopy=False):
            if t.user_attrs.get(ATTR_KEY) == key and t.params:
                return dict(t.params)
        return dict(fallback)

    # ---- reading the study -------------------------------------------------------------------
    def _scan(self) -> _State:
        measured: dict[str, FrozenTrial] = {}
        counted: list[FrozenTrial] = []
        waiting: list[FrozenTrial] = []
        running: list[FrozenTrial] = []
        requeued: set[str] = set()
        baseline_pending = False
        for t in self.study.get_trials(deepcopy=False):
            ua = t.user_attrs
            if ATTR_REQUEUE_OF in ua:
                requeued.add(ua[ATTR_REQUEUE_OF])
            if t.state in (TrialState.WAITING, TrialState.RUNNING):
                (waiting if t.state == TrialState.WAITING else running).append(t)
                baseline_pending |= bool(ua.get(ATTR_BASELINE)) or (
                    self.baseline_key is not None and ua.get(ATTR_REQUEUE_OF) == self.baseline_key)
                continue
            outcome = ua.get("outcome")
            key = ua.get(ATTR_KEY)
            if not ua.get(ATTR_COUNTED):
                continue
            counted.append(t)
            if key is None or not _is_measurement(ua):
                continue
            if self.remeasure and key not in self._session_keys:
                continue
            prev = measured.get(key)
            # a config-caused failure wins over an earlier success: a failed config is never "best"
            if prev is None or (outcome == FAIL and prev.user_attrs.get("outcome") != FAIL):
                measured[key] = t
        return _State(measured, counted, waiting, running, requeued, baseline_pending)

    def _remaining(self, st: _State) -> list[str] | None:
        """Enumerated keys neither measured nor in flight (None when the space is not enumerable)."""
        enum = self._enumeration()
        if enum is None:
            return None
        busy = {p.key for p in self._in_flight.values() if p.cached is None}
        busy |= {t.user_attrs[ATTR_KEY] for t in self._others(st)}
        bans = self.bans()
        return [k for k in enum if k not in st.measured and k not in busy and not hit(self._enum_norm[k], bans)]

    # ---- what may be proposed ------------------------------------------------------------------
    def _finished(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL,
                                                                  TrialState.PRUNED)))

    def bans(self) -> dict[tuple[str, Any], str]:
        """Parameter values not proposed any more: they kept crashing servers at start
        (``orchestrator.study.evidence.bans``): {(param, value): why}."""
        n = self._finished()
        if self._bans_at[0] != n:
            self._bans_at = (n, banned_values(trial_rows(self.study)))
        return self._bans_at[1]

    def launch_cost(self) -> LaunchCost:
        """What a launch that starts costs, learned from the study's trials (``study.cost``)."""
        n = self._finished()
        if self._cost_at[0] != n:
            self._cost_at = (n, LaunchCost.fit(trial_rows(self.study), started_only=True))
        return self._cost_at[1]

    def value_model(self) -> ValueModel:
        """What a launch should measure, learned from the study's trials (``study.promise``)."""
        n = self._finished()
        if self._value_at[0] != n:
            self._value_at = (n, ValueModel.fit(trial_rows(self.study), self.objective))
        return self._value_at[1]

    def expected_seconds(self, launches: int) -> float | None:
        """Seconds the next ``launches`` launches should take by the study's measured costs
        (failures with what they took), over the configs still to launch; None before any."""
        model = LaunchCost.fit(self.rows())
        return model.expected_left(self.unmeasured_configs(), launches)

    def unmeasured_configs(self) -> list[Config] | None:
        """The normalized configs still to launch (neither measured, in flight nor banned);
        None when the space is not enumerable."""
        remaining = self._remaining(self._scan())
        return None if remaining is None else [self._enum_norm[k] for k in remaining]

    def allowed_configs(self) -> list[Config] | None:
        """What the study may launch, as seen by the parameters that decide it: every
        feasible enumerated config without a banned value, restricted to the parameters
        of the space's constraints, the pre-screen's and the bans' (``FeasibleSampler``
        keeps draws inside it). None: not enumerable, or nothing is ever refused."""
        n = self._finished()
        if self._allowed_at[0] != n:
            bans = self.bans()
            names = {p for c in getattr(self.space, "constraints", ()) for p in getattr(c, "params", ())}
            names |= set(getattr(self.space, "checked_names", ())) | {name for name, _ in bans}
            allowed = None
            if names and self._enumeration() is not None:
                seen: dict[str, Config] = {}
                for raw, k in self._enum_raw:
                    if not hit(self._enum_norm[k], bans):
                        part = {n: raw[n] for n in sorted(names) if n in raw}
                        seen.setdefault(repr(sorted(part.items(), key=lambda kv: kv[0])), part)
                allowed = list(seen.values())
            self._allowed_at = (n, allowed)
        return self._allowed_at[1]

    def _launches_in_flight(self) -> int:
        return sum(1 for p in self._in_flight.values() if p.cached is None)

    def _others(self, st: _State) -> list[FrozenTrial]:
        """Launches other drivers of a shared study have in flight: RUNNING trials this policy did
        not hand out whose config is known (``next`` writes it before the launch)."""
        if not self.shared:
            return []
        return [t for t in st.running if t.number not in self._in_flight and ATTR_KEY in t.user_attrs]

    def others_running(self) -> list[FrozenTrial]:
        """Launches other drivers of a shared study have in flight (none for a study of one driver)."""
        return self._others(self._scan()) if self.shared else []

    # ---- flags --------------------------------------------------------------------------------
    @property
    def budget_reached(self) -> bool:
        """True when counted trials plus launches in flight have reached the budget."""
        if self.budget is None:
            return False
        st = self._scan()
        return len(st.counted) + self._launches_in_flight() + len(self._others(st)) >= self.budget

    @property
    def exhausted(self) -> bool:
        """True when no unmeasured config is left to launch (every enumerated config measured or in flight).

        For a space that cannot be enumerated: after ``max_consecutive_duplicates`` cached
        answers in a row, or ``max_asks`` proposals in one ``next()`` that could not run.
        """
        if self._gave_up:
            return True
        remaining = self._remaining(self._scan())
        return remaining is not None and not remaining

    # ---- proposing ------------------------------------------------------------------------------
    def next(self) -> Proposal | None:
        """The next config to launch.

        Returns:
            A ``Proposal`` to launch; or one with ``cached`` set, answered from an earlier
            measurement (``record`` it at once, never launch it); or None: the budget is
            reached or every config of the space is measured (``exhausted`` says which).
            Several proposals may be handed out before any is recorded (trials in flight).
        """
        self._gave_up = False
        self._ensure_baseline()
        bad_streak = 0
        for _ in range(self.max_asks):
            st = self._scan()
            if self.budget is not None and \
                    len(st.counted) + self._launches_in_flight() + len(self._others(st)) >= self.budget:
                return None
            remaining = self._remaining(st)
            if remaining is not None and not remaining:
                return None
            if remaining is None and self._consecutive_dups >= self.max_consecutive_duplicates:
                self._gave_up = True  # not enumerable, and the sampler keeps proposing measured configs
                return None
            if remaining and not st.waiting:  # a fixed config (baseline, re-queued) waiting goes first
                pick = self.strategy.pick(self._view(remaining, st))
                if pick is not None:
                    self._enqueue(pick.key, pick.role)
            trial = self.study.ask()
            if self.on_ask is not None:
                self.on_ask(trial.number)
            role = _role_of(trial.user_attrs)
            try:
                is_base = role in ("baseline", "reference") or (
                    role == "requeue" and self.baseline is not None
                    and trial.user_attrs.get(ATTR_REQUEUE_OF) == self.baseline_key)  # the baseline, again
                raw = self._fixed_baseline(trial) if is_base else self.space.suggest(trial)
            except Exception:
                # e.g. an enqueued value the space no longer allows: do not leave it RUNNING
                trial.set_user_attr(ATTR_SKIPPED, "suggest-error")
                trial.set_user_attr(ATTR_COUNTED, False)
                self.study.tell(trial, state=TrialState.FAIL)
                raise
            reason = self.space.feasible(raw)
            if reason is not None:
                self._skip(trial, raw, None, "infeasible", reason, constraint=1.0)
                bad_streak += 1
                if bad_streak >= 3:
                    self._enqueue_fill(remaining)
                continue
            config, key = self.key_of(raw)
            banned = hit(config, self.bans()) if role not in ("baseline", "reference", "requeue") else None
            if banned is not None:
                self._skip(trial, raw, (config, key), "banned-value",
                           f"{describe(banned)} is not proposed any more: {self.bans()[banned]}", constraint=1.0)
                bad_streak += 1
                self._enqueue_fill(remaining)
                continue
            busy = {p.key: n for n, p in self._in_flight.items() if p.cached is None}
            busy.update({t.user_attrs[ATTR_KEY]: t.number for t in self._others(st)})
            if key in busy:
                self._skip(trial, raw, (config, key), "in-flight-duplicate",
                           f"same config as trial {busy[key]}, still running", constraint=0.0)
                bad_streak += 1
                self._enqueue_fill(remaining)
                continue
            source = None if role == "reference" else st.measured.get(key)  # the reference is measured afresh
            if source is not None:
                self._enqueue_fill(remaining)
                self._consecutive_dups += 1
                cached = TrialResult.from_attrs(source.user_attrs)
                proposal = Proposal(trial, config, key, cached=cached, cached_from=source.number,
                                    raw=dict(raw), role=role)
                self._in_flight[trial.number] = proposal
                return proposal
            self._consecutive_dups = 0
            proposal = Proposal(trial, config, key, raw=dict(raw), role=role)
            if self.baseline_key is not None and key == self.baseline_key:
                trial.set_user_attr(ATTR_BASELINE, True)
            # known before the launch, so a trial a dead driver leaves RUNNING can be re-queued
            trial.set_user_attr(ATTR_KEY, key)
            trial.set_user_attr("config", config)
            self._in_flight[trial.number] = proposal
            return proposal
        self._gave_up = True  # every ask was infeasible or a duplicate
        return None

    def _ensure_baseline(self, force: bool = False, reference: bool = False) -> None:
        """Enqueue the baseline unless it is measured or already waiting (once per policy;
        ``force``: check again). ``reference``: enqueue it even when measured, to be
        measured afresh (the golden reference has to come from a launch of it)."""
        if self.baseline is None or (self._baseline_checked and not force):
            return
        self._baseline_checked = True
        st = self._scan()
        if st.baseline_pending or (self.baseline_key in st.measured and not reference):
            return
        role = "reference" if self.baseline_key in st.measured else "baseline"
        self.study.enqueue_trial(self._baseline_params(), user_attrs={ATTR_BASELINE: True, ATTR_ENQUEUED_BY: role})

    def ensure_baseline_next(self) -> None:
        """Make the baseline the next launch, measured afresh if it already was (the golden
        reference is captured from a launch of it; docs/architecture.md, "Baseline")."""
        self._ensure_baseline(force=True, reference=True)

    def _baseline_params(self) -> Config:
        """The baseline's own settings that are points of the space's distributions: the
        Optuna params of its trial. A parameter it leaves unset stays unset (the backend's
        default, or NCCL's own for an NCCL variable): never sampled."""
        dists = self.space.distributions()
        return {k: v for k, v in self.space.active(self.baseline or {}).items()
                if k in dists and contains(dists[k], v)}

    def _fixed_baseline(self, trial: optuna.Trial) -> Config:
        """The baseline exactly, whatever the sampler would draw: its trial records only the
        parameters the baseline sets (a sampler fills nothing in)."""
        dists = self.space.distributions()
        for name in self._baseline_params():
            _suggest(trial, name, dists[name])  # the enqueued fixed value, recorded as the trial's param
        return dict(self.baseline or {})

    def _enqueue_fill(self, remaining: list[str] | None) -> None:
        """Enqueue the strategy's replacement for a proposal that cannot run, unless a fixed
        config is already waiting."""
        if not remaining or self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        self._enqueue(self.strategy.instead(self._view(remaining, self._scan())), "fill")

    def _enqueue(self, key: str, role: str) -> None:
        enum = self._enumeration()
        assert enum is not None and key in enum, "a strategy answers with an enumerated key"
        self.study.enqueue_trial(dict(enum[key]), user_attrs={ATTR_ENQUEUED_BY: role})

    def view(self) -> View | None:
        """What the strategy sees now (None: the space cannot be enumerated)."""
        st = self._scan()
        remaining = self._remaining(st)
        return None if remaining is None else self._view(remaining, st)

    def _view(self, remaining: list[str], st: _State) -> View:
        """What the strategy sees now (``strategies.base.View``)."""
        flying = [p.config for p in self._in_flight.values() if p.cached is None]
        seen = [self._config_of(t) for t in st.measured.values()] + flying
        return View(remaining=list(remaining), configs=self._enum_norm, raw=self._enumeration() or {}, seen=seen,
                    in_flight=flying,
                    launched=len(st.counted) + self._launches_in_flight(), rng=self._rng, objective=self.objective,
                    rows=self.rows, trial_params=lambda n: dict(self._trial(n).params),
                    value_model=self.value_model, launch_cost=self.launch_cost, bans=self.bans, late=self.late,
                    this_run=None if self.run is None else sum(
                        1 for t in st.counted if t.user_attrs.get(ATTR_RUN) == self.run) + self._launches_in_flight())

    def _config_of(self, t: FrozenTrial) -> Config:
        key = t.user_attrs.get(ATTR_KEY)
        return (self._enum_norm.get(key) if key else None) or t.user_attrs.get("config") or dict(t.params)

    def _skip(self, trial: optuna.Trial, raw: Config, ck: tuple[Config, str] | None, kind: str, reason: str,
              *, constraint: float) -> None:
        """Record a proposal that is not launched: uncounted PRUNED with its reason."""
        if ck is None:
            try:
                ck = self.key_of(raw)
            except Exception:  # noqa: BLE001 - an infeasible raw config may not normalize
                ck = (dict(raw), config_key(dict(raw)))
        config, key = ck
        attrs = TrialResult(outcome=PRUNED, config=config, failure_reason=reason).to_attrs()
        attrs.update({ATTR_KEY: key, ATTR_COUNTED: False, ATTR_SKIPPED: kind})
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        trial.set_constraint(CONSTRAINT, constraint)
        self.study.tell(trial, state=TrialState.PRUNED)

    # ---- recording -------------------------------------------------------------------------------
    def record(self, proposal: Proposal, result: TrialResult, *, counted: bool = True,
               blameless: bool | None = None) -> FrozenTrial:
        """Store ``result`` on the proposal's trial and tell Optuna (encoding: module docstring).

        ``counted`` and ``blameless`` come from ``outcome.decide``; ``blameless`` (default:
        an ``interrupted``/``node-lost``/``env-error`` failure) means not the config's fault:
        never counted, never its cached answer, an Optuna FAIL the sampler ignores. A cached
        answer is never counted. Returns the finished trial.
        """
        trial = proposal.trial
        if blameless is None:
            blameless = result.outcome == FAIL and result.failure_kind in NOT_THE_CONFIGS_FAULT
        not_the_config = result.outcome == FAIL and blameless
        if proposal.cached is not None or not_the_config:
            counted = False
        attrs = result.to_attrs()
        attrs[ATTR_KEY] = proposal.key
        if self.run:
            attrs[ATTR_RUN] = self.run
        attrs[ATTR_COUNTED] = bool(counted)
        if proposal.cached_from is not None:
            attrs[ATTR_CACHED_FROM] = proposal.cached_from
        if result.outcome == COMPLETE and not objectives.has_values(self.objective, result):
            raise ValueError(f"trial {trial.number}: a COMPLETE result needs a value (at every level of the objective)")
        try:
            self._store(trial, result, attrs, not_the_config)
        except UpdateFinishedTrialError:
            if not self.shared:
                raise
            # another driver took it over as its driver's (no heartbeat for the grace period): it is
            # recorded interrupted there and its config re-queued; this result is not stored
            self._in_flight.pop(trial.number, None)
            log.warning("#%s was taken over by another driver while it ran (no heartbeat): its result is not "
                        "stored", trial.number)
            return self._trial(trial.number)
        except StorageWriteError:  # half recorded: ``recover_interrupted`` may now tell it interrupted
            self._in_flight.pop(trial.number, None)
            raise
        self._in_flight.pop(trial.number, None)
        if counted and not not_the_config:
            self._session_keys.add(proposal.key)
        return self._trial(trial.number)

    def _store(self, trial: optuna.Trial, result: TrialResult, attrs: dict[str, Any], not_the_config: bool) -> None:
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        if result.outcome == COMPLETE:
            # a measured config that breaks one of the job's outcome constraints, or counts nowhere under
            # its latency targets, is infeasible (by how far over them: ``outcome.infeasibility``)
            trial.set_constraint(CONSTRAINT, infeasibility(result))
        elif result.outcome == FAIL and not not_the_config:
            trial.set_constraint(CONSTRAINT, INFEASIBLE)
        elif result.outcome == PRUNED:
            inter = objectives.intermediate(self.objective, result)  # None for a plan: Optuna takes none there
            if inter is not None:
                step = (result.measurement.rounds if result.measurement is not None else 0) or 1
                trial.report(float(inter), step)
            trial.set_constraint(CONSTRAINT, FEASIBLE)
        self._tell(trial, result, not_the_config)

    def _tell(self, trial: optuna.Trial | int, result: TrialResult, not_the_config: bool) -> None:
        """The final state of a recorded trial (encoding: module docstring)."""
        if result.outcome == COMPLETE:  # record() and finish_recorded() check the values first
            self.study.tell(trial, self.told_values(result))
        elif result.outcome == FAIL and not not_the_config:
            self.study.tell(trial, objectives.failed_values(self.objective))
        elif result.outcome == FAIL:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, state=TrialState.PRUNED)

    def finish_recorded(self) -> list[int]:
        """Trials a dead driver left RUNNING after it had stored their whole record, all but
        Optuna's final state (a crash between the two, or the journal's last line cut):
        told as recorded, so a measured trial is kept. Whole means its constraint is set
        (``record`` sets it after every user attribute: a COMPLETE, config-caused FAIL or
        PRUNED record); the rest are ``recover_interrupted``'s."""
        done = []
        for t in self.pending_running():
            if not any(k == "constraints" or k.startswith("constraints:") for k in t.system_attrs):
                continue  # Optuna's keys of a set constraint (a list in studies recorded before Optuna 5)
            try:
                result = TrialResult.from_attrs(t.user_attrs)
            except (TypeError, ValueError):
                continue
            if result.outcome == COMPLETE and not objectives.has_values(self.objective, result):
                continue
            self._tell(t.number, result, not_the_config=False)
            done.append(t.number)
        return done

    def defer(self, proposal: Proposal, reason: str) -> None:
        """Put a proposal back without launching it: recorded as not launched (uncounted,
        ``skipped: deferred``) and re-queued once."""
        self._skip(proposal.trial, dict(proposal.raw), (proposal.config, proposal.key), "deferred", reason,
                   constraint=0.0)
        self._in_flight.pop(proposal.number, None)
        self.requeue(proposal)

    def requeue(self, what: Proposal | FrozenTrial | Config) -> bool:
        """Enqueue a config again (after ``interrupted``/``node-lost``), at most once per config.

        Accepts the proposal, the trial, or a (raw or normalized) config. Returns False when
        this config was already re-queued once.
        """
        if isinstance(what, Proposal):
            key, raw = what.key, dict(what.raw or what.trial.params)
        elif isinstance(what, FrozenTrial):
            key = what.user_attrs.get(ATTR_KEY) or self._key_of(dict(what.params))
            raw = dict(what.params)
        else:
            config = dict(what)
            key = self._known_key(config)
            raw = self._raw_for(key, config)
        if key in self._scan().requeued_keys:
            return False
        self.study.enqueue_trial(raw, user_attrs={ATTR_REQUEUE_OF: key, ATTR_ENQUEUED_BY: "requeue"})
        return True

    def _known_key(self, config: Config) -> str:
        """Key of a config that may already be normalized (then config_key(config) is known)."""
        direct = config_key(config)
        enum = self._enumeration() or {}
        if direct in enum or any(t.user_attrs.get(ATTR_KEY) == direct for t in self.study.get_trials(deepcopy=False)):
            return direct
        return self._key_of(config)

    def recover_interrupted(self, reason: str = "the driver died while this trial ran") -> list[int]:
        """Trials left RUNNING by a dead driver: FAIL ``interrupted`` (uncounted), re-queued once.

        Optuna sets a trial's user attributes only through the ``Trial`` its asking process
        held, so the record of why (the ``TrialResult`` attributes, ``counted: False``) is
        a study user attribute, ``storage.recovered_attr(number)``, which ``history`` reads
        as the trial's own; then ``study.tell(number, state=FAIL)``.
        """
        done = []
        for t in self.pending_running():
            self._record_interrupted(t, reason)
            self.study.tell(t.number, state=TrialState.FAIL)
            self.requeue(t)
            done.append(t.number)
        return done

    def _record_interrupted(self, t: FrozenTrial, reason: str) -> None:
        """The record of a trial whose launch ended with its driver: ``interrupted``, uncounted, as
        the study user attribute ``recovered_attr`` (the trial's own attributes are its asker's)."""
        config = t.user_attrs.get("config") or dict(t.params)
        left = TrialResult(outcome=FAIL, config=config, failure_kind=FailureKind.INTERRUPTED)
        attrs = interrupted(left, reason).to_attrs()
        attrs[ATTR_COUNTED] = False
        attrs[ATTR_KEY] = t.user_attrs.get(ATTR_KEY) or self._key_of(dict(t.params))
        self.study.set_user_attr(recovered_attr(t.number), attrs)

    def account_stale(self, trials: list[FrozenTrial],
                      reason: str = "its driver stopped while it ran (no heartbeat)") -> tuple[list[int], list[int]]:
        """Trials of a dead driver of a shared study, which Optuna's heartbeat check has just moved
        from RUNNING to FAIL (``shared.SharedStudy.stale``; each handed to one driver only). One
        whose whole record was stored (its constraint set: ``finish_recorded``) is kept as recorded:
        its user attributes say what it measured. Any other is recorded ``interrupted`` (uncounted,
        the study user attribute ``recovered_attr``, as ``recover_interrupted``) and its config
        re-queued once. Returns (kept, interrupted) trial numbers."""
        kept, lost = [], []
        for t in trials:
            if any(k == "constraints" or k.startswith("constraints:") for k in t.system_attrs) \
                    and t.user_attrs.get("outcome"):
                kept.append(t.number)
                continue
            self._record_interrupted(t, reason)
            if ATTR_KEY in t.user_attrs:  # a launch (not a trial cut short while it was asked)
                self.requeue(t)
            lost.append(t.number)
        return kept, lost

    # ---- queries ---------------------------------------------------------------------------------
    def budget_used(self) -> int:
        """How many counted trials are finished (launches in flight not included)."""
        return len(self._scan().counted)

    def rows(self) -> list[TrialRow]:
        """Every trial as the user sees it (``history.trial_rows``)."""
        return trial_rows(self.study)

    def best_row(self) -> TrialRow | None:
        """The best trial's row (``best``)."""
        best = best_rows(self.rows(), 1)
        return best[0] if best else None

    def baseline_row(self) -> TrialRow | None:
        """The measured baseline's row (``baseline_trial``)."""
        base = baseline_row(self.rows())
        return base if base is not None and base.state == COMPLETE and base.value is not None else None

    def mark(self, proposal: Proposal, *, baseline: bool = False, reference: bool = False) -> None:
        """Mark a launch as the baseline's and/or the golden reference's capture, before it runs."""
        if baseline:
            proposal.trial.set_user_attr(ATTR_BASELINE, True)
        if reference:
            proposal.trial.set_user_attr(ATTR_REFERENCE, True)

    def best(self) -> FrozenTrial | None:
        """The best trial by the study's one ranking rule (``history.best_rows`` over
        ``outcome.rankable``): what export and the report call best, never a failure, a
        wrong config, a cached duplicate or a config that breaks an outcome constraint."""
        best = best_rows(self.rows(), 1)
        return self._trial(best[0].number) if best else None

    def baseline_trial(self) -> FrozenTrial | None:
        """The measured baseline trial (``history.baseline_row``), once there is one."""
        base = baseline_row(self.rows())
        if base is None or base.state != COMPLETE or base.value is None:
            return None
        return self._trial(base.number)

    def _trial(self, number: int) -> FrozenTrial:
        trials = self.study.get_trials(deepcopy=False)
        if number < len(trials) and trials[number].number == number:  # numbered 0, 1, ... in order
            return trials[number]
        return next(t for t in trials if t.number == number)

    def prune_threshold(self, min_ratio: float = DEFAULT_PRUNE_RATIO) -> float | None:
        """``min_ratio`` x the best figure so far, the median over its launches (None before any
        COMPLETE trial)."""
        best = self.best_row()
        if best is None or best.value is None:
            return None
        level = best.headline.level if best.headline is not None else 1
        return float(Evidence(self.rows()).median(best.config_key, level) or best.worth or best.value) * min_ratio

    def prune_thresholds(self, min_ratio: float = DEFAULT_PRUNE_RATIO) -> dict[int, float] | None:
        """Per level of the objective, ``min_ratio`` x the best median so far there (the early
        stop, ``core.outcome.early_stop``, stops a trial below it at every level); None before
        any COMPLETE trial. For the default objective: ``{1: prune_threshold(min_ratio)}``; none
        for goodput (its first round is a concurrency the bisection may leave at once)."""
        if self.objective.by_capacity:
            return None
        return prune_thresholds(self.rows(), self.levels, min_ratio, self.objective.slo)

    def told_values(self, result: TrialResult) -> list[float]:
        """What Optuna is told for a COMPLETE result (``objective.told_values``)."""
        return objectives.told_values(self.objective, result)

    def earlier_timeouts(self, key: str, before: int) -> int:
        """Launches of the config ``key`` before trial ``before`` that timed out."""
        return sum(1 for t in self.study.get_trials(deepcopy=False)
                   if t.number < before and t.user_attrs.get(ATTR_KEY) == key
                   and t.user_attrs.get("outcome") == FAIL and t.user_attrs.get("failure_kind") in TIMEOUT_KINDS)

    def pending_running(self) -> list[FrozenTrial]:
        """Trials RUNNING in storage that this policy did not hand out (left by a dead driver). None
        in a shared study: another driver's may be alive; dead ones' come through ``account_stale``."""
        if self.shared:
            return []
        return [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if t.number not in self._in_flight]

    def in_flight(self) -> list[Proposal]:
        """Proposals handed out and not yet recorded."""
        return list(self._in_flight.values())


def _is_measurement(ua: dict[str, Any]) -> bool:
    """A counted trial that measured its config: COMPLETE, config-caused FAIL, or early-stopped."""
    outcome = ua.get("outcome")
    if outcome == COMPLETE:
        return True
    if outcome == FAIL:
        return ua.get("failure_kind") not in NOT_THE_CONFIGS_FAULT
    return outcome == PRUNED and not ua.get(ATTR_SKIPPED)


def _suggest(trial: optuna.Trial, name: str, dist) -> Any:
    """``trial.suggest_*`` for an Optuna distribution (an enqueued value comes back as fixed)."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, list(dist.choices))
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)


def _role_of(user_attrs: dict[str, Any]) -> str:
    by = user_attrs.get(ATTR_ENQUEUED_BY)
    if by in ("baseline", "reference", "requeue", "fill", "startup", "model", "gap", "cover"):
        return by
    return "sampler"
