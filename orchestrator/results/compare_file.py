"""``compare.json`` and ``compare-plan.json`` as one typed record: what ``compare`` writes after every
launch and the report reads back, through this module only.

A file holds the facts (the configs launched every round, each launch's per-level record, the
rules, how far it got); every derived figure (medians, intervals, verdicts, the constraints' state)
is computed here from the rounds, so an older or hand-edited file is judged by today's rule. The
file also carries those derived figures (``to_record``), as every version wrote them, for whoever
reads the JSON itself.

Versions (``version``; none: 0), each still read by ``CompareFile.from_record``:

- 0: no ``version``; the earliest files have no ``rounds`` (each config's samples only: judged
  unpaired) or rounds whose level records carry ``total_tok_s`` (read as the level's value);
- 1: ``version: 1``; the same keys otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.core import files, verdict
from orchestrator.core.level import parse as parse_level
from orchestrator.core.measurement import LevelResult
from orchestrator.core.slo import Targets

VERSION = 1
BASELINE, BEST = "baseline", "best"


@dataclass(frozen=True)
class Failed:
    """A level whose benchmark failed in one launch: how many requests, and the first errors."""

    failures: int = 1
    errors: tuple[str, ...] = ()

    def to_record(self) -> dict[str, Any]:
        return {"failures": self.failures, "errors": list(self.errors)}


@dataclass(frozen=True)
class Launch:
    """One launch of one config in one round: its record of each level measured (``LevelResult``),
    the levels that failed, or why the whole launch failed (``error``, ``compare --plan``)."""

    round: int
    config: str  # the config's label: "baseline", "best", "trial-3"
    trial: int | None = None
    seconds: float = 0.0
    levels: Mapping[str, LevelResult] = field(default_factory=dict)
    failed: Mapping[str, Failed] = field(default_factory=dict)
    error: str | None = None

    def value(self, level: Any) -> float | None:
        """The launch's figure at ``level`` (None: failed or not measured)."""
        got = self.levels.get(str(level))
        value = got.value if got is not None else None
        return float(value) if value else None

    def figures(self) -> str:
        """'1: 139.8 decode tok/s, 10: 812.0 total tok/s' (``failed`` where a level failed)."""
        if self.error:
            return f"failed: {self.error}"
        parts = []
        for level in sorted({*self.levels, *self.failed}, key=parse_level):
            got = None if level in self.failed else self.levels.get(level)
            value = got.value if got is not None else None
            parts.append(f"{level}: {value:.1f} {got.unit}" if got is not None and value else f"{level}: failed")
        return ", ".join(parts)

    def to_record(self, plan: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"round": self.round, "config": self.config, "trial": self.trial,
                               "seconds": self.seconds}
        if plan:
            out.update(levels={k: v.value for k, v in self.levels.items()},
                       samples={k: list(v.samples) for k, v in self.levels.items()},
                       records={k: v.to_record() for k, v in self.levels.items()})
        else:
            recorded: dict[str, Any] = {k: v.to_record() for k, v in self.levels.items()}
            out["levels"] = {**recorded, **{k: v.to_record() for k, v in self.failed.items()}}
        return out

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], index: int) -> Launch:
        """A stored launch, any version: a plan's (``records``, else its ``levels`` of bare
        values), a compare's (``levels`` of records; version 0's with ``total_tok_s``)."""
        stored = rec.get("records") or rec.get("levels") or {}
        levels: dict[str, LevelResult] = {}
        failed: dict[str, Failed] = {}
        for key, got in stored.items() if isinstance(stored, Mapping) else ():
            if isinstance(got, Mapping) and got.get("failures"):
                failed[str(key)] = Failed(int(got["failures"]), tuple(str(e) for e in got.get("errors") or ()))
                continue
            if isinstance(got, Mapping) and "value" not in got and "samples" not in got:
                got = {**got, "value": got.get("total_tok_s")}  # version 0: a level's figure was its total
            levels[str(key)] = LevelResult.from_record(parse_level(key), got)
        trial = rec.get("trial")
        return cls(round=int(rec.get("round", index)), config=str(rec.get("config")),
                   trial=int(trial) if trial is not None else None, seconds=float(rec.get("seconds") or 0.0),
                   levels=levels, failed=failed)


@dataclass(frozen=True)
class Config:
    """A config every round launches: its label, trial, params and (``compare --plan``) roles."""

    label: str
    trial: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ()

    def column(self) -> str:
        """A ``compare --plan`` column's name: 'trial-3 (best at 1)', 'baseline'."""
        return f"{self.label} ({', '.join(self.roles)})" if self.roles else self.label


@dataclass(frozen=True)
class Judged:
    """An interval of b / a and what it says (``core.verdict``)."""

    interval: verdict.RatioInterval
    verdict: str
    text: str
    short: str | None = None  # '2.72x, 95% CI ...': the table's closing lines name a loss by it

    def to_record(self) -> dict[str, Any]:
        out = {**self.interval.to_dict(), "verdict": self.verdict, "text": self.text}
        return out if self.short is None else {**out, "short": self.short}


@dataclass(frozen=True)
class Constraint:
    """The job's "best >= min_ratio x baseline at concurrency c", judged like every verdict: ``ok``
    False (VIOLATED) only when the interval lies below min_ratio, True when at or above it, else
    None (within noise of the limit, not shown, not measured: ``state``)."""

    concurrency: int
    min_ratio: float
    interval: verdict.RatioInterval
    ok: bool | None
    state: str
    measured: bool

    @property
    def text(self) -> str:
        return verdict.interval_text(self.interval) if self.interval.ratio is not None else ""

    def to_record(self) -> dict[str, Any]:
        iv = self.interval
        return {"concurrency": self.concurrency, "min_ratio": self.min_ratio, "ratio": iv.ratio, "lo": iv.lo,
                "hi": iv.hi, "ok": self.ok, "state": self.state, "measured": self.measured, "text": self.text}


@dataclass(frozen=True)
class CompareFile:
    """One ``compare`` (``plan`` False: the baseline, the best and the ``--also`` trials) or
    ``compare --plan`` (the baseline and the plan's configs) as it stands after its last launch."""

    concurrency: tuple[Any, ...]  # the levels measured, as the job names them (1, 10, "64@8192")
    configs: tuple[Config, ...]  # launched every round, in the first round's order
    rounds_planned: int | None = None
    plan: bool = False
    baseline_trial: int | None = None
    best_trial: int | None = None
    anchor_trial: int | None = None  # a plan's best at its lowest level
    same_config: bool = False  # the best is the baseline's config
    launches: tuple[Launch, ...] = ()
    failures: tuple[str, ...] = ()
    slo: Targets | None = None
    rules: tuple[tuple[int, float], ...] = ()  # the job's outcome constraints (compare)
    complete: bool | None = False  # None: a version 0 file that did not say
    stopped: str | None = None  # why the rounds stopped early (an exception, Ctrl-C)
    # version 0 without rounds: each side's samples and medians per level, as stored
    kept_samples: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    kept_medians: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    # ---- the rounds --------------------------------------------------------------------------------
    def launched(self, launch: Launch, failures: tuple[str, ...] = ()) -> CompareFile:
        """This record with one more launch (and the failures it had)."""
        return dataclasses.replace(self, launches=(*self.launches, launch), failures=(*self.failures, *failures))

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.configs]

    @property
    def others(self) -> tuple[Config, ...]:
        """The ``--also`` trials of a compare (every config but the baseline and the best)."""
        return () if self.plan else self.configs[2:]

    def per_round(self, label: str, level: Any) -> dict[int, float | None]:
        """Round number -> ``label``'s figure at ``level`` (None where it failed)."""
        out: dict[int, float | None] = {}
        for launch in self.launches:
            if launch.config == label:
                out[launch.round] = launch.value(level)
        return out

    def samples(self, label: str, level: Any) -> list[float]:
        """``label``'s figures at ``level``, round by round (a version 0 file: its samples)."""
        got = [v for _, v in sorted(self.per_round(label, level).items()) if v]
        return got or list((self.kept_samples.get(label) or {}).get(str(level)) or [])

    def median(self, label: str, level: Any) -> float | None:
        if not self.launches and label in self.kept_medians:
            return (self.kept_medians.get(label) or {}).get(str(level))
        got = [v for v in self.per_round(label, level).values() if v]
        return statistics.median(got) if got else None

    def interval(self, a: str, b: str, level: Any) -> verdict.RatioInterval:
        """b / a at ``level`` from the rounds where both were measured (paired by round); a file
        without rounds (version 0) gives an unpaired interval of its samples."""
        ra, rb = self.per_round(a, level), self.per_round(b, level)
        if ra or rb:
            common = sorted(set(ra) & set(rb))
            return verdict.ratio_interval([ra[i] for i in common], [rb[i] for i in common], paired=True)
        return verdict.ratio_interval(self.samples(a, level), self.samples(b, level))

    def judged(self, a: str, b: str, level: Any, *, same: bool = False) -> Judged:
        iv = self.interval(a, b, level)
        return Judged(iv, verdict.verdict(iv, same_config=same), verdict.describe(iv, same_config=same))

    @property
    def rounds_done(self) -> int:
        """Rounds in which every config was launched."""
        by_round: dict[int, set[str]] = {}
        for launch in self.launches:
            by_round.setdefault(launch.round, set()).add(launch.config)
        return sum(1 for got in by_round.values() if set(self.labels) <= got)

    # ---- what the rounds say -----------------------------------------------------------------------
    def level_verdicts(self) -> dict[str, Judged]:
        """Concurrency -> best vs baseline there. Where the best is the baseline, each round launched
        it twice: no verdict, the interval the noise between its launches."""
        out = {}
        for c in self.concurrency:
            iv = self.interval(BASELINE, BEST, c)
            out[str(c)] = Judged(iv, verdict.verdict(iv, same_config=self.same_config),
                                 verdict.describe_one_config(iv) if self.same_config else verdict.describe(iv),
                                 f"{verdict.ratio_text(iv)}, {verdict.interval_text(iv)}")
        return out

    def vs_best(self, label: str) -> dict[str, Judged]:
        """An ``--also`` trial against the best at each concurrency."""
        return {str(c): self.judged(BEST, label, c) for c in self.concurrency}

    def constraints(self) -> list[Constraint]:
        """The job's outcome constraints (``rules``), judged on the rounds."""
        out = []
        for c, min_ratio in self.rules:
            measured = str(c) in {str(x) for x in self.concurrency}
            iv = (self.interval(BASELINE, BEST, c) if measured
                  else verdict.RatioInterval(None, None, None, 0, True))
            if iv.ratio is None:
                ok, state = None, "not measured"
            elif self.same_config:  # the best is the baseline: its own ratio is 1 by definition
                ok, state = True, "met: same config"
            elif not iv.bounded:  # no interval: nothing is shown either way
                ok, state = None, f"{verdict.NOT_SHOWN}: {verdict.why_unbounded(iv)}"
            elif iv.hi < min_ratio:  # type: ignore[operator]
                ok, state = False, "VIOLATED"
            elif iv.lo >= min_ratio:  # type: ignore[operator]
                ok, state = True, "met"
            else:
                ok, state = None, "within noise of the limit"
            out.append(Constraint(c, min_ratio, iv, ok, state, measured))
        return out

    def level_records(self, label: str, level: Any) -> list[LevelResult]:
        """``label``'s record of ``level`` in every round that measured it."""
        return [got for launch in self.launches if launch.config == label
                and (got := launch.levels.get(str(level))) is not None]

    def anchor(self) -> Config | None:
        """A plan's anchor: its best at the lowest level."""
        return next((c for c in self.configs if c.trial == self.anchor_trial), None) if self.plan else None

    # ---- stored --------------------------------------------------------------------------------------
    def to_record(self) -> dict[str, Any]:
        """The file (every derived figure beside the facts, as every version wrote them)."""
        if self.plan:
            return self._plan_record()
        levels = [str(c) for c in self.concurrency]
        out: dict[str, Any] = {
            "version": VERSION, "concurrency": list(self.concurrency), "rounds_planned": self.rounds_planned,
            "complete": self.complete, "baseline_trial": self.baseline_trial, "best_trial": self.best_trial,
            "same_config": self.same_config,
            "others": [{"trial": o.trial, "label": o.label, "params": dict(o.params),
                        "samples": {c: self.samples(o.label, c) for c in levels},
                        "median": {c: self.median(o.label, c) for c in levels},
                        "vs_best": {c: j.to_record() for c, j in self.vs_best(o.label).items()}}
                       for o in self.others],
            "rounds": [launch.to_record(False) for launch in self.launches], "failures": list(self.failures),
            "slo": self.slo.to_record() if self.slo else None, **self._stopped(early=True)}
        for which in (BASELINE, BEST):
            out[f"{which}_samples"] = {c: self.samples(which, c) for c in levels}
            out[which] = {c: self.median(which, c) for c in levels}
        out["intervals"] = {c: j.to_record() for c, j in self.level_verdicts().items()}
        out["rounds_done"] = self.rounds_done
        out["constraints"] = [c.to_record() for c in self.constraints()]  # [] without rules, as ever written
        return {**out, **self._stopped(early=False)}

    def _stopped(self, *, early: bool) -> dict[str, Any]:
        """``{"stopped": why}`` at the place in the file every version wrote it (``early``: right
        after ``slo``, where it stands when no launch had finished; else last), or nothing there."""
        here = self.stopped is not None and early == (not self.launches)
        return {"stopped": self.stopped} if here else {}

    def _plan_record(self) -> dict[str, Any]:
        anchor = self.anchor()
        configs = []
        for c in self.configs:
            rec: dict[str, Any] = {"label": c.label, "trial": c.trial, "params": dict(c.params), "roles": list(c.roles),
                                   "median": {str(lv): self.median(c.label, lv) for lv in self.concurrency},
                                   "vs_baseline": {str(lv): self.judged(BASELINE, c.label, lv,
                                                                        same=c.label == BASELINE).to_record()
                                                   for lv in self.concurrency}, "vs_anchor": {}}
            if anchor is not None:
                rec["vs_anchor"] = {str(lv): self.judged(anchor.label, c.label, lv,
                                                         same=c.label == anchor.label).to_record()
                                    for lv in self.concurrency}
            configs.append(rec)
        out: dict[str, Any] = {
            "version": VERSION, "plan": True, "concurrency": list(self.concurrency),
            "rounds_planned": self.rounds_planned, "complete": self.complete, "baseline_trial": self.baseline_trial,
            "anchor_trial": self.anchor_trial, "configs": configs,
            "rounds": [launch.to_record(True) for launch in self.launches], "failures": list(self.failures),
            "slo": self.slo.to_record() if self.slo else None, **self._stopped(early=True)}
        out["rounds_done"] = self.rounds_done
        return {**out, **self._stopped(early=False)}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> CompareFile:
        """A stored file, any version (module docstring)."""
        plan = bool(data.get("plan"))
        if plan:
            configs = tuple(Config(str(c.get("label")), c.get("trial"), dict(c.get("params") or {}),
                                   tuple(c.get("roles") or ())) for c in data.get("configs") or ()
                            if isinstance(c, Mapping))
        else:
            others = [o for o in data.get("others") or () if isinstance(o, Mapping)]
            configs = (Config(BASELINE, data.get("baseline_trial")), Config(BEST, data.get("best_trial")),
                       *(Config(str(o.get("label") or f"trial-{o.get('trial')}"), o.get("trial"),
                                dict(o.get("params") or {})) for o in others))
        launches = tuple(Launch.from_record(r, i) for i, r in enumerate(data.get("rounds") or ())
                         if isinstance(r, Mapping))
        kept = {which: data.get(f"{which}_samples") for which in (BASELINE, BEST)}
        medians = {which: data.get(which) for which in (BASELINE, BEST)}
        concurrency = data.get("concurrency") or sorted(
            {str(k) for m in medians.values() if isinstance(m, Mapping) for k in m}, key=float)
        rules = tuple((int(r["concurrency"]), float(r["min_ratio"])) for r in data.get("constraints") or ()
                      if isinstance(r, Mapping) and r.get("concurrency") is not None)
        return cls(
            concurrency=tuple(concurrency), configs=configs, rounds_planned=data.get("rounds_planned"), plan=plan,
            baseline_trial=data.get("baseline_trial"), best_trial=data.get("best_trial"),
            anchor_trial=data.get("anchor_trial"), same_config=bool(data.get("same_config")), launches=launches,
            failures=tuple(str(f) for f in data.get("failures") or ()), slo=Targets.from_record(data.get("slo")),
            rules=rules, complete=data.get("complete") if "complete" in data else None, stopped=data.get("stopped"),
            kept_samples={k: {str(c): tuple(float(x) for x in xs if x is not None) for c, xs in v.items()}
                          for k, v in kept.items() if isinstance(v, Mapping)},
            kept_medians={k: {str(c): float(x) for c, x in v.items() if x is not None}
                          for k, v in medians.items() if isinstance(v, Mapping)})


def write(path: Path, record: CompareFile) -> None:
    """Write ``path`` so that it is always either the old or the new whole document."""
    files.write_whole(path, json.dumps(record.to_record(), indent=2))


def read(path: Path) -> CompareFile | None:
    """The record in ``path``; None where there is none or it is not a compare file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return CompareFile.from_record(data) if isinstance(data, Mapping) else None
