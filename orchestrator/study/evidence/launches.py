"""Every launch is evidence: a config's figure is over its launches, and every verdict carries the
noise between launches.

Within one launch the measurement is right, but its samples are not what a relaunch measures
(clocks, where the workers land, NCCL's channel setup, warm or fresh caches): the unit of
evidence for a config is a *launch*. A launch is a row that measured its config (COMPLETE, not a
cached answer): a trial of the search, a relaunch of the baseline or the incumbent during the
search (``study.relaunch``), a launch of the finalists' race (``study.race``), a launch
``compare`` made. The baseline repeated on another node is not one: it measures that node, and
the report compares the nodes with it. A config whose output was ever wrong has none
(``outcome.tainted_keys``). A launch's figure at a level is its median there (``LevelResult.value``).

``Evidence(rows)`` is what every verdict of the study reads:

- per config and level, the launch figures and their median (the figure a study reports); the
  level ``HEADLINE`` is a goodput launch's total tok/s within the SLO (a goodput study's figure);
- per level, the launch noise (``verdict.pooled_noise`` over every config launched more than
  once, on logs), and for a traffic mix the same over each launch's weighted geometric mean;
- the box's drift over time (``core.drift``, ``at_one_time``): where launches of one config
  measured slower (or faster) the later they ran, every launch's figure is read at one time
  before the ranking (``history.best_rows``), the noise and the intervals read it, and the
  readers say the box drifted; the figures printed stay as measured;
- the interval of one config against another over their launches (``verdict.launch_interval``):
  a config measured on one launch gets the study's launch noise in it; every one is held to the
  launches' ranks too wherever they can bound an interval (``verdict.launch_interval``'s
  ``robust``: launches in two states, or fresh launches on a machine that changed, are not
  averaged into a verdict); two finalists of a race are judged over its rounds, each round's two
  launches a pair (``verdict.round_interval``: what a round shares cancels), at the race's
  confidence (``RACE_LOOKS``: a race looks at them after every round);
- what ``compare``'s launches alone say of one config against another (``compared``): after a
  study, fresh launches on a machine that changed can put a winner within noise that the
  study's launches, pooled with them, still call faster; the readers say both;
- where a fresh launch of a config should measure (``verdict.launch_range``).

    measured_launches(rows)     config key -> its launches, in trial order
    at_one_time(figures(...))   each config's figures, read at one time where the box drifted; the drift
    Evidence(rows)              the study's evidence (above)
    Evidence.headline_drift(objective)  the drift the study's answer carries (its headline's figure)
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core import outcome
from orchestrator.core.drift import Drift, trend
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.verdict import (
    FASTER,
    SLOWER,
    LaunchNoise,
    RatioInterval,
    launch_interval,
    launch_range,
    pooled_noise,
    round_interval,
    verdict,
)
from orchestrator.study.storage import objective as objectives

# The key of a race row's ``race`` record (``study.race``) that says how many times the race judged
# its finalists: every comparison between two finalists of one contest is held to that many looks.
RACE_LOOKS = "looks"
MIX = "mix"  # the contest name of the traffic mix (a level's is str(level))
HEADLINE = None  # the "level" of a goodput launch's figure (``figure``)
COMPARE = "compare"  # the ``launch_role`` of a launch ``compare`` made
RACE = "race"  # the ``launch_role`` of a launch of the finalists' race (``study.race``)


def is_launch(row: TrialRow) -> bool:
    """The row measured its config on a launch of its own."""
    return (row.state == COMPLETE and row.cached_from is None and not row.skipped and row.launch_role != "repeat"
            and row.measurement is not None and bool(row.levels))


def measured_launches(rows: Sequence[TrialRow]) -> dict[str, list[TrialRow]]:
    """Config key -> every launch that measured it, in trial order (module docstring)."""
    tainted = outcome.tainted_keys(list(rows))
    out: dict[str, list[TrialRow]] = {}
    for r in sorted(rows, key=lambda r: r.number):
        if is_launch(r) and r.config_key not in tainted:
            out.setdefault(r.config_key, []).append(r)
    return out


def figure(row: TrialRow, level: int | None) -> float | None:
    """One launch's figure at ``level`` (its median there); ``HEADLINE``: a goodput launch's total
    tok/s within the SLO (None for a launch that measured no goodput: ``compare``'s)."""
    if level is HEADLINE:
        return row.worth if row.measurement is not None and row.measurement.by_capacity else None
    return row.worth_at(level)


def mix_figure(row: TrialRow, weights: Mapping[int, float]) -> float | None:
    """One launch's weighted geometric mean over the weighted levels (None when one is missing)."""
    total = 0.0
    for level, w in weights.items():
        v = figure(row, level)
        if v is None or v <= 0:
            return None
        total += w * math.log(v)
    return math.exp(total / sum(weights.values()))


def launch_time(row: TrialRow) -> float | None:
    """When the launch measured (unix time: its end, else its start); None where not recorded."""
    for text in (row.ended_at, row.started_at):
        if text:
            try:
                return _dt.datetime.fromisoformat(text).timestamp()
            except ValueError:
                continue
    return None


Read = dict[str, list[tuple[TrialRow, float]]]  # config key -> (launch, its figure) in trial order


def figures(by_key: Mapping[str, Sequence[TrialRow]], score: Callable[[TrialRow], float | None]) -> Read:
    """Each config's launches with their figure by ``score`` (positive figures only)."""
    return {k: [(r, v) for r in launches if (v := score(r)) is not None and v > 0] for k, launches in by_key.items()}


def at_one_time(raw: Read) -> tuple[Read, Drift]:
    """The box's drift over ``raw`` (``core.drift``: fitted on the study's own launches that recorded
    their time, not ``compare``'s, a later session) and, where it drifted, each of those figures read at
    one time (the study's first launch), which is what pairing launches close in time does for launches
    that were not; elsewhere ``raw`` itself. The one rule the ranking (``history.best_rows``) and every
    interval (``Evidence``) read figures by."""
    drift = trend([(t, v) for r, v in got if r.launch_role != COMPARE and (t := launch_time(r)) is not None]
                  for got in raw.values())
    if not drift.drifted:
        return raw, drift
    out: Read = {}
    for k, got in raw.items():
        out[k] = []
        for r, v in got:
            t = launch_time(r) if r.launch_role != COMPARE else None
            out[k].append((r, v * math.exp(-drift.shift(t - drift.start)) if t is not None else v))  # type: ignore[operator]
    return out, drift


@dataclass(frozen=True)
class _Series:
    """One contest's figures (a level, goodput's headline, the mix): as measured (``raw``), read at one
    time where the box drifted (``read``), the drift, the launch noise."""

    raw: Read
    read: Read
    drift: Drift
    noise: LaunchNoise

    def times(self, key: str) -> float | None:
        """The mean time of the config's launches the drift's reading moved (None: none)."""
        got = [t for r, _ in self.raw.get(key, ()) if r.launch_role != COMPARE and (t := launch_time(r)) is not None]
        return statistics.fmean(got) if got else None


class Evidence:
    """The study's launches as evidence (module docstring). Built once per reading of the rows;
    every figure and interval is computed on demand and kept."""

    def __init__(self, rows: Sequence[TrialRow]):
        self.rows = list(rows)
        self.by_key = measured_launches(self.rows)
        self._series: dict[Any, _Series] = {}
        self._looks = _race_looks(self.rows)

    def _of(self, contest: Any, score: Callable[[TrialRow], float | None]) -> _Series:
        if contest not in self._series:
            raw = figures(self.by_key, score)
            read, drift = at_one_time(raw)
            noise = pooled_noise(([v for _, v in got] for got in read.values()), fitted=1 if drift.drifted else 0)
            self._series[contest] = _Series(raw, read, drift, noise)
        return self._series[contest]

    def _level(self, level: int | None) -> _Series:
        return self._of(level, lambda r: figure(r, level))

    def _mix(self, weights: Mapping[int, float]) -> _Series:
        return self._of((MIX, tuple(sorted(weights.items()))), lambda r: mix_figure(r, weights))

    # ---- one config -------------------------------------------------------------------------
    def launches(self, key: str) -> list[TrialRow]:
        """The config's launches (trial order)."""
        return list(self.by_key.get(key, ()))

    def values(self, key: str, level: int | None) -> list[float]:
        """The config's launch figures at ``level``, as measured."""
        return [v for r in self.by_key.get(key, ()) if (v := figure(r, level)) is not None]

    def mix_values(self, key: str, weights: Mapping[int, float]) -> list[float]:
        """The config's launch figures for the mix (each launch's weighted geometric mean)."""
        return [v for r in self.by_key.get(key, ()) if (v := mix_figure(r, weights)) is not None]

    def count(self, key: str, level: int | None) -> int:
        return len(self.values(key, level))

    def median(self, key: str, level: int | None) -> float | None:
        """The config's figure at ``level``: the median over its launches."""
        values = self.values(key, level)
        return statistics.median(values) if values else None

    def mix_median(self, key: str, weights: Mapping[int, float]) -> float | None:
        values = self.mix_values(key, weights)
        return statistics.median(values) if values else None

    def ranked(self, key: str, level: int | None) -> float | None:
        """What the ranking reads of the config at ``level`` (``history.best_rows``): the median over its
        launches, read at one time where the box drifted (``at_one_time``)."""
        got = [v for _, v in self._level(level).read.get(key, ())]
        return statistics.median(got) if got else None

    def mix_ranked(self, key: str, weights: Mapping[int, float]) -> float | None:
        got = [v for _, v in self._mix(weights).read.get(key, ())]
        return statistics.median(got) if got else None

    # ---- the noise between launches, the drift over time -----------------------------------------
    def noise(self, level: int | None) -> LaunchNoise:
        """The launch noise at ``level``, pooled over every config launched more than once (about the
        drift where the box drifted)."""
        return self._level(level).noise

    def mix_noise(self, weights: Mapping[int, float]) -> LaunchNoise:
        """The launch noise of the mix's figure."""
        return self._mix(weights).noise

    def noises(self, levels: Sequence[int]) -> dict[int, LaunchNoise]:
        return {lv: self.noise(lv) for lv in levels}

    def drift(self, level: int | None) -> Drift:
        """The box's drift at ``level`` over the study's launches (``core.drift``)."""
        return self._level(level).drift

    def headline_drift(self, objective: Any) -> Drift:
        """The box's drift at the figure the study's answer is read at (a goodput study's ``HEADLINE``,
        else its lowest level): the one the run's last lines, ``status`` and the report's headline say."""
        return self.drift(objectives.of(objective).headline)

    def mix_drift(self, weights: Mapping[int, float]) -> Drift:
        return self._mix(weights).drift

    # ---- one config against another ------------------------------------------------------------
    def looks(self, contest: str, a: str, b: str) -> int:
        """How many times a race judged configs ``a`` and ``b`` against each other in ``contest``
        (a level as text, or ``MIX``): 1 when they were never raced against each other."""
        return self._looks.get((contest, frozenset((a, b))), 1)

    def interval(self, a: str, b: str, level: int | None) -> RatioInterval:
        """Config ``b`` relative to config ``a`` at ``level``: over the rounds of the race that had both
        among its finalists there (paired by round, at its looks), else over their launches."""
        return self._interval(self._level(level), str(level), a, b)

    def mix_interval(self, a: str, b: str, weights: Mapping[int, float]) -> RatioInterval:
        """Config ``b`` relative to config ``a`` for the traffic mix (as ``interval``)."""
        return self._interval(self._mix(weights), MIX, a, b)

    def over_launches(self, a: str, b: str, level: int | None, weights: Mapping[int, float] | None = None, *,
                      looks: int = 1) -> RatioInterval:
        """Config ``b`` relative to ``a`` over their launches whether raced or not, held to ``looks`` (how
        a race screens its finalists): at ``level``, or for the mix with ``weights``."""
        series = self._mix(weights) if weights else self._level(level)
        return self._launches(series, a, b, looks=looks, robust=False)

    def _interval(self, series: _Series, contest: str, a: str, b: str) -> RatioInterval:
        """Over the race's rounds where both were raced, unless their launches (read at one time) say
        it is within noise: a verdict stands on both (a few rounds can agree by chance; four rounds of
        launches fast or slow by 35% at random named the slower config 2x faster, issue 49's replay)."""
        pairs = _race_pairs(series.read, contest, a, b)
        if pairs is None:
            return self._launches(series, a, b)
        looks = self.looks(contest, a, b)
        rounds = round_interval([x for x, _ in pairs], [y for _, y in pairs], looks=looks,
                                drift_removed=series.drift.drifted, noise=series.noise)
        if verdict(rounds) in (FASTER, SLOWER):
            launches = self._launches(series, a, b, looks=looks)
            if verdict(launches) != verdict(rounds):
                return launches
        return rounds

    @staticmethod
    def _launches(series: _Series, a: str, b: str, *, looks: int = 1, robust: bool = True) -> RatioInterval:
        """b/a over the launches' figures as read (at one time where the box drifted, the slope's own
        uncertainty over the distance between their mean times added)."""
        ta, tb = series.times(a), series.times(b)
        spread = series.drift.shift_var(tb - ta) if ta is not None and tb is not None else 0.0
        return launch_interval([v for _, v in series.read.get(a, ())], [v for _, v in series.read.get(b, ())],
                               series.noise, looks=looks, robust=robust, shift_var=spread,
                               drift_removed=series.drift.drifted)

    def compared(self, a: str, b: str, level: int | None) -> RatioInterval | None:
        """Config ``b`` relative to ``a`` at ``level`` over the launches ``compare`` made of each (the
        study's launch noise, held to their ranks): what the fresh launches alone say, which a
        machine that changed since the study can make differ from ``interval``. None unless
        ``compare`` launched both."""
        fresh_a, fresh_b = ([v for r in self.by_key.get(k, ()) if r.launch_role == COMPARE
                             and (v := figure(r, level)) is not None] for k in (a, b))
        if not fresh_a or not fresh_b:
            return None
        return launch_interval(fresh_a, fresh_b, self.noise(level), robust=True)

    def fresh(self, key: str, level: int | None) -> tuple[float, float] | None:
        """Where a fresh launch of the config should measure at ``level`` (95%); None while the
        launch noise is unknown."""
        return launch_range(self.values(key, level), self.noise(level))

    def mix_fresh(self, key: str, weights: Mapping[int, float]) -> tuple[float, float] | None:
        return launch_range(self.mix_values(key, weights), self.mix_noise(weights))


def _race_pairs(read: Read, contest: str, a: str, b: str) -> list[tuple[float, float]] | None:
    """The figures of ``a`` and ``b`` round by round in the latest race that had both among the finalists
    of ``contest`` (a round where either has none left out); None when no race had both."""
    races: dict[int, dict[int, dict[str, float]]] = {}
    for key in (a, b):
        for r, v in read.get(key, ()):
            race = r.race or {}
            if r.launch_role != RACE or not isinstance(race.get("id"), int):
                continue
            finalists = (race.get("contests") or {}).get(contest) or ()
            if a in finalists and b in finalists:
                races.setdefault(race["id"], {}).setdefault(int(race.get("round", 0)), {})[key] = v
    if not races:
        return None
    rounds = races[max(races)]
    return [(got[a], got[b]) for _, got in sorted(rounds.items()) if a in got and b in got]


def _race_looks(rows: Sequence[TrialRow]) -> dict[tuple[str, frozenset[str]], int]:
    """(contest, {a, b}) -> the looks of the latest race that had both among that contest's finalists."""
    out: dict[tuple[str, frozenset[str]], int] = {}
    for r in sorted(rows, key=lambda r: r.number):
        race = r.race or {}
        looks = race.get(RACE_LOOKS)
        contests = race.get("contests")
        if not isinstance(looks, int) or not isinstance(contests, Mapping):
            continue
        for contest, keys in contests.items():
            keys = [k for k in keys or () if isinstance(k, str)]
            for i, a in enumerate(keys):
                for b in keys[i + 1:]:
                    out[(str(contest), frozenset((a, b)))] = max(1, looks)
    return out


# A host is quiet while other work takes under this share of its CPUs (busy: ``HostLoad.busy``, half).
QUIET_SHARE = 0.25


def load_note(rows: Sequence[TrialRow]) -> str | None:
    """One sentence when the study's launches ran under very different load (some while other work
    took at least half the host's CPUs, ``HostLoad.busy``, others on a quiet host: under a quarter):
    their figures are not comparable, and the verdicts between them say more about the neighbours.
    None when they ran alike or the load was not recorded (GPU boxes record it too)."""
    busy: list[tuple[TrialRow, float, int]] = []
    quiet: list[TrialRow] = []
    for launches in measured_launches(rows).values():
        for r in launches:
            host = r.measurement.host if r.measurement is not None else None
            others = host.others_cpus if host is not None else None
            if host is None or others is None or not host.cpus:
                continue
            if host.busy:
                busy.append((r, others, host.cpus))
            elif others < QUIET_SHARE * host.cpus:
                quiet.append(r)
    if not busy or not quiet:
        return None
    worst = max(busy, key=lambda b: b[1])
    shown = ", ".join(f"#{r.number}" for r, _, _ in busy[:6]) + (", ..." if len(busy) > 6 else "")
    return (f"the launches ran under very different load: {len(busy)} while other work took at least half the "
            f"host's CPUs (up to {worst[1]:.1f} of {worst[2]}: {shown}), {len(quiet)} on a quiet host; their figures "
            "are not comparable, so run the study again on a quiet machine before trusting a ratio between them")
