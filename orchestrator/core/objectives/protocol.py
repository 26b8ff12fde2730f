"""The objective's two halves: what one level of one launch is worth (``Measure``) and how the
levels a study tunes for make its answer (``Objective``, one subclass per kind in ``kinds``).

Every reader asks the objective instead of branching on its fields: the values Optuna is told and
their directions, what a launch is worth at a level, the unit and the words a verdict uses, what
the study is and how it says so. A measure's *worth* is positive and higher is better whatever its
direction (a latency's is its reciprocal), so the ranking, the intervals over launches, the early
stop, the race and the per-value models read it unchanged; ``Measure.shown`` turns it back into the
figure a user reads (tok/s, ms) and ``Measure.told`` into what Optuna is told under ``direction``.

``Objective(...)`` builds the kind its fields make (``kinds``: goodput, a weighted mix, a plan of
several levels, one level), so a job, a test or the replay harness never names the class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.core import slo as slos
from orchestrator.core.level import make as make_level
from orchestrator.core.level import streams
from orchestrator.core.measurement import LevelResult, Measurement
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.slo import Targets
from orchestrator.core.verdict import FASTER, SLOWER, RatioInterval, describe

HEADLINE = None  # the "level" of a capacity figure (a goodput launch's tok/s within the SLO)
MAXIMIZE, MINIMIZE = "maximize", "minimize"


@dataclass(frozen=True)
class Measure:
    """What one level of one launch is worth (the base: its throughput, higher is better).

    ``worth`` is what every comparison reads (positive, higher is better); ``shown`` is the figure
    a user reads, in ``unit``; ``told`` what Optuna is told under ``direction``; ``worst`` the
    value Optuna is told for a config-caused failure; ``better``/``worse`` the verdict's words."""

    direction: ClassVar[str] = MAXIMIZE
    better: ClassVar[str] = "faster"
    worse: ClassVar[str] = "slower"
    throughput: ClassVar[bool] = True  # a throughput (goodput's capacity can be read in it)
    worse_sign: ClassVar[str] = "<"  # how a worse figure compares with a better one, as the user reads them

    def worth(self, got: LevelResult | None, config: Mapping[str, Any] | None = None) -> float | None:
        """The level's worth (its median tok/s); None where not measured."""
        return got.value if got is not None else None

    def of_value(self, value: float | None, config: Mapping[str, Any] | None = None) -> float | None:
        """The worth of a bare headline tok/s (a record of only a value, goodput's capacity)."""
        return value

    def headline(self, value: float | None, got: LevelResult | None,
                 config: Mapping[str, Any] | None = None) -> float | None:
        """A launch's one worth: of its headline ``value`` (a throughput's: the headline level's median,
        goodput's capacity), where a measure reads its headline level ``got`` otherwise."""
        return self.of_value(value, config)

    def shown(self, worth: float) -> float:
        """The figure a user reads for ``worth``, in ``unit``."""
        return worth

    def shown_range(self, lo: float, hi: float) -> tuple[float, float]:
        """A range of worths as the user reads it, low to high."""
        a, b = self.shown(lo), self.shown(hi)
        return (a, b) if a <= b else (b, a)

    def oriented(self, interval: RatioInterval) -> RatioInterval:
        """An interval of worths (b/a: > 1 is better) as the figures' own ratio (a latency's: inverted)."""
        return interval

    def word(self, said: str) -> str:
        """A verdict's word in the measure's own (faster -> lower for a latency)."""
        return self.better if said == FASTER else self.worse if said == SLOWER else said

    def compared(self, interval: RatioInterval, *, same_config: bool = False) -> str:
        """'1.31x faster (95% CI 1.22-1.41x)', '0.50x lower (...)' (``core.verdict.describe``)."""
        return describe(self.oriented(interval), same_config=same_config, words=(self.better, self.worse))

    def told(self, worth: float) -> float:
        """What Optuna is told for ``worth`` under ``direction``."""
        return float(self.shown(worth))

    def below(self, worth: float, limit: float, level: int) -> str:
        """'41.2 < 45.0 tok/s': a first round worth less than the early stop's ``limit``."""
        unit = "tok/s" if streams(level) == 1 else "total tok/s"
        return f"{self.shown(worth):.1f} {self.worse_sign} {self.shown(limit):.1f} {unit}" + \
            (f" {self.name()}" if self.name() else "")

    def text(self, worth: float, digits: int = 1) -> str:
        """'41.2 tok/s' (a launch's one figure as the run's lines and the report say it)."""
        return f"{self.shown(worth):.{digits}f} tok/s{' ' + self.name() if self.name() else ''}"

    def worst(self) -> float:
        """What Optuna is told where a config is worth nothing (a failure, a broken target)."""
        return 0.0

    def unit(self, level: int | None) -> str:
        """What the figure at ``level`` is: decode tok/s at one stream, total tok/s at N."""
        return "decode tok/s" if level is not None and streams(level) == 1 else "total tok/s"

    def name(self) -> str:
        """A word or two the objective's description adds ('' for plain throughput)."""
        return ""

    def export_unit(self, level: int | None, named: bool) -> str:
        """The unit of an exported figure at ``level`` (``HEADLINE``: goodput's capacity; ``named``: the
        user chose the level with ``--concurrency``)."""
        if level is HEADLINE:
            return "tok/s total within the SLO"
        if not named and level == 1:
            return "tok/s single-request decode"
        return self.unit(level)

    def mix_unit(self) -> str:
        """The unit of a traffic mix's figure."""
        return "weighted geometric mean of the levels' tok/s"

    def identity(self) -> dict[str, Any] | None:
        """What of the measure makes a study another study (None: throughput, every study before)."""
        return None


_MEASURES: dict[str, Callable[[dict[str, Any]], Measure]] = {}


def measure(key: str) -> Callable[[Callable[[dict[str, Any]], Measure]], Callable[[dict[str, Any]], Measure]]:
    """Register how a measure is rebuilt from its ``identity`` (the key it stores), so a study's rows
    are read with the measure the study was run with (``history.trial_rows``)."""
    def register(build: Callable[[dict[str, Any]], Measure]) -> Callable[[dict[str, Any]], Measure]:
        _MEASURES[key] = build
        return build
    return register


def measure_of(identity: Any) -> Measure:
    """The measure a stored ``identity`` names (``Measure.identity``); throughput for None or one
    this release does not know."""
    if isinstance(identity, dict):
        for key, build in _MEASURES.items():
            if key in identity:
                return build(identity)
    return Measure()


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) or math.isinf(out) else out


Kind = type["Objective"]
_KINDS: list[tuple[int, Callable[[Any], bool], Kind]] = []


class Refused(ValueError):
    """An objective its kind does not answer: ``key`` (under the job's ``objective``) and ``why``, which
    the loader says as the job's error at that key."""

    def __init__(self, key: str, why: str):
        super().__init__(why)
        self.key, self.why = key, why


def kind_of(fields: Any) -> Kind:
    """The kind ``fields`` make (an object with the fields as attributes): the highest-ranked that claims them."""
    return next(k for _, claims, k in _KINDS if claims(fields))


def kind(rank: int, claims: Callable[[Any], bool]) -> Callable[[Kind], Kind]:
    """Register an objective kind: ``Objective(...)`` builds the highest-ranked kind that claims its
    fields (``claims(fields)``: an object with the fields as attributes)."""
    def register(cls: Kind) -> Kind:
        _KINDS.append((rank, claims, cls))
        _KINDS.sort(key=lambda item: -item[0])
        return cls
    return register


@dataclass(frozen=True)
class _Fields:
    concurrency: tuple[int, ...] = (1,)
    weights: dict[int, float] | None = None
    context: tuple[int, ...] = ()
    goodput: int | None = None
    slo: Targets | None = None
    preset: str | None = None
    measure: Measure = field(default_factory=Measure)
    rate: RateAxis | None = None


@dataclass(frozen=True)
class Objective:
    """What the study tunes for (module docstring); built by ``config.job`` from the job's
    ``objective:``. The fields are the job's; the methods are what readers ask."""

    concurrency: tuple[int, ...] = (1,)
    weights: dict[int, float] | None = None  # normalized to sum 1 (a traffic mix)
    # long context as a second axis (``core.level``): each concurrency at each of these prompt lengths
    # (tokens; 0: the prompts as they are); () : no axis, the levels are the concurrencies themselves
    context: tuple[int, ...] = ()
    # goodput (``max_concurrency``): the total tok/s at the capacity point, found by the capacity search
    # in each launch (``core.capacity``; ``concurrency`` is then not used)
    goodput: int | None = None
    slo: Targets | None = None  # the job's ``slo:`` (``core.slo``): what a level must hold to count there
    preset: str | None = None  # the one word the job gave (``PRESETS``), expanded into the fields above
    measure: Measure = field(default_factory=Measure)  # what one level of one launch is worth
    # goodput by request rate (``max_rate``): the output tok/s at the highest open-loop rate within the SLO,
    # found by the rate search in each launch (``core.rate_search``; ``concurrency`` is then not used)
    rate: RateAxis | None = None

    kind_name: ClassVar[str] = "objective"
    # the answer per level (a plan: the best per level, the Pareto set), one value told per level,
    # the answer a capacity under the SLO: each kind says which it is
    by_level: ClassVar[bool] = False
    value_per_level: ClassVar[bool] = False
    by_capacity: ClassVar[bool] = False
    # a launch searches the load axis (the concurrencies ``core.capacity`` picks, probing where the engine
    # changes regime) instead of measuring the levels
    searches_load: ClassVar[bool] = False
    per_request_slo: ClassVar[bool] = False  # per-request targets and their attainment judge it (open-loop probes)
    # a launch probes open-loop request rates (``node.open_loop``) instead of streams: it has no concurrency,
    # its one figure is the capacity's, and what measures a closed loop (``compare``) does not answer it
    open_loop: ClassVar[bool] = False
    axis: ClassVar[str] = "concurrency"  # the load axis its levels or its search run along, as the answer says it

    def __new__(cls, *args: Any, **kw: Any) -> Objective:
        if cls is Objective or args or kw:  # build the kind the fields make (unpickling passes none)
            cls = kind_of(_Fields(*args, **kw))
        return object.__new__(cls)

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), {f: getattr(self, f) for f in _Fields.__dataclass_fields__}))

    # ---- how a job's objective becomes this kind (``build.Draft``) ------------------------------
    @classmethod
    def refuse(cls, draft: Any) -> None:
        """``Refused`` for what the job gave that this kind does not answer (the levels' kinds: nothing)."""

    @classmethod
    def slo_levels(cls, draft: Any, measured: tuple[int, ...]) -> tuple[int, ...]:
        """The levels the job's ``slo:`` may name a target at: the objective's and the ``measured`` ones."""
        return tuple(draft.levels) + tuple(measured)

    @classmethod
    def refuse_slo(cls, slo: Targets | None) -> None:
        """``Refused`` where the kind needs latency targets the job did not give (the levels' kinds: none)."""

    @classmethod
    def refuse_measure(cls, measure: Measure) -> None:
        """``Refused`` for a measure the kind does not answer in (the levels' kinds: every one)."""

    # ---- the levels --------------------------------------------------------------------------
    @property
    def levels(self) -> tuple[int, ...]:
        """Every level the study tunes for: the concurrencies, or each (concurrency, context) pair
        (``core.level``; context 0 is the bare concurrency), in the job's order."""
        if not self.context:
            return self.concurrency
        return tuple(make_level(c, ctx) for ctx in self.context for c in self.concurrency)

    @property
    def minimize(self) -> str | None:
        """The job's ``objective.minimize`` (the latency percentile), None for a throughput."""
        return (self.measure.identity() or {}).get("minimize")

    @property
    def per_gpu(self) -> bool:
        """The job's ``objective.per_gpu``."""
        return bool((self.measure.identity() or {}).get("per_gpu", False))

    @property
    def ascending(self) -> tuple[int, ...]:
        """The levels in ascending order (the order every trial measures them in)."""
        return tuple(sorted(self.levels))

    @property
    def headline(self) -> int | None:
        """The figure the study's answer is read at: its lowest level (``HEADLINE`` for a capacity)."""
        return self.ascending[0]

    # ---- what Optuna is told -----------------------------------------------------------------
    @property
    def direction(self) -> str:
        """The direction of the figure the user reads (maximize tok/s, minimize a latency)."""
        return self.measure.direction

    def directions(self) -> list[str]:
        """Optuna's study directions: one per value told."""
        return [self.measure.direction] * (len(self.levels) if self.value_per_level else 1)

    def worth(self, got: LevelResult | None, config: Mapping[str, Any] | None = None) -> float | None:
        """What one level of one launch is worth (positive, higher is better: ``Measure``)."""
        return self.measure.worth(got, config)

    def worths(self, measurement: Measurement | None, config: Mapping[str, Any] | None = None
               ) -> dict[int, float | None]:
        """Each measured level's worth."""
        if measurement is None:
            return {}
        return {lv: self.worth(got, config) for lv, got in measurement.levels.items()}

    def headline_worth(self, measurement: Measurement | None, value: float | None,
                       config: Mapping[str, Any] | None = None) -> float | None:
        """The one figure of a launch of this objective (its first level, else the bare value)."""
        got = self.worths(measurement, config).get(self.levels[0])
        return got if got is not None else self.measure.of_value(value, config)

    def told(self, result: Any) -> list[float]:
        """What Optuna is told for a COMPLETE launch; ValueError when a level it needs is missing."""
        got = self.headline_worth(result.measurement, result.value, result.config)
        if got is None:
            raise ValueError("a COMPLETE result needs a value")
        return [self.measure.told(got)]

    def failed(self) -> list[float]:
        """A config-caused failure: the worst value at every value told."""
        return [self.measure.worst()] * len(self.directions())

    def intermediate(self, result: Any) -> float | None:
        """What an early-stopped launch reports before it is told PRUNED (its first round, on the
        objective's scale); None where Optuna takes none (several values) or nothing was measured."""
        recorded = self.worths(result.measurement, result.config)
        level = self.levels[0]
        if level in recorded and min(recorded) != level:  # the trial measured lower levels too: the objective's own
            got = recorded[level]
            return self.measure.told(got) if got is not None else None
        inter = _num(result.metrics.get("intermediate"))
        first = self.measure.of_value(inter if inter is not None else result.value, result.config)
        return self.measure.told(first) if first is not None else None

    def mix_worth(self, worths: Mapping[int, float | None]) -> float | None:
        """The weighted geometric mean of the levels' worths (None without weights, or where a weighted
        level has none)."""
        if not self.weights:
            return None
        total = 0.0
        for level, w in self.weights.items():
            v = worths.get(level)
            if v is None or v <= 0:
                return None
            total += w * math.log(v)
        return math.exp(total / sum(self.weights.values()))

    # ---- the latency targets ---------------------------------------------------------------------
    def judged(self, measurement: Measurement | None) -> slos.Judged:
        """The latency targets against one launch (``core.slo.judge``): a plan counts a config at each
        level apart, one level or a mix needs every level, goodput some concurrency (or request rate)."""
        return slos.judge(measurement, self.slo, self.ascending, each_level=self.value_per_level,
                          goodput=self.by_capacity)

    # ---- what the user reads -----------------------------------------------------------------
    def shown(self, worth: float | None) -> float | None:
        """The figure a user reads for ``worth``."""
        return self.measure.shown(worth) if worth is not None else None

    def unit(self, level: int | None) -> str:
        return self.measure.unit(level)

    def export_unit(self, level: int | None, named: bool) -> str:
        """The unit of an exported figure (``Measure.export_unit``; a kind whose capacity is another
        figure says so)."""
        return self.measure.export_unit(level, named)

    def text(self, worth: float | None) -> str:
        """A launch's one figure as the run's lines say it ('41.2 tok/s', '3.1 ms TPOT p99'; '-': none)."""
        return self.measure.text(worth) if worth is not None else "-"

    def ratio(self, worth: float, base: float) -> float:
        """``worth`` against the baseline's, as the user reads the figures (2.0x the tok/s; 0.5x the
        latency)."""
        return self.measure.shown(worth) / self.measure.shown(base)

    @property
    def words(self) -> tuple[str, str]:
        """The verdict's words: ('faster', 'slower'), ('lower', 'higher')."""
        return self.measure.better, self.measure.worse

    def describe(self) -> str:
        """'concurrency 1, 10, 64 (a plan)' / '... weighted 0.6/0.3/0.1' / 'concurrency 1' /
        'goodput up to 64 streams'; the measure ('per GPU', 'lowest TPOT p99'); with latency
        targets, 'under TPOT p99 <= 20 ms'."""
        text = self._levels_text()
        if self.measure.name():
            text += f", {self.measure.name()}"
        if self.slo:
            text += f" under {self.slo.describe()}"
        return text

    def _levels_text(self) -> str:
        text = "concurrency " + ", ".join(map(str, self.ascending))
        if self.context:  # the pairs, spelled as everything else spells them (``core.level``)
            text = (f"concurrency {', '.join(map(str, self.concurrency))} x context "
                    f"{', '.join(map(str, self.context))} tokens: levels {', '.join(map(str, self.ascending))}")
        if self.weights:
            text += " weighted " + "/".join(f"{self.weights[lv]:g}" for lv in self.ascending)
        return text

    def identity(self) -> dict[str, Any] | None:
        """What of the objective makes a study another study (None for the default: a study recorded
        before objectives existed keeps its identity). Latency targets are part of it: what a trial was
        told depends on them, and goodput measures by them."""
        measure = self.measure.identity()
        if tuple(self.concurrency) == (1,) and self.weights is None and self.goodput is None \
                and not self.slo and not self.context and measure is None and self.rate is None:
            return None
        out: dict[str, Any] = {"concurrency": sorted(self.concurrency),
                               "weights": {str(k): round(v, 12) for k, v in sorted(self.weights.items())}
                               if self.weights else None}
        if self.goodput is not None:
            out["goodput"] = {"max_concurrency": self.goodput}
        if self.rate is not None:
            out["goodput"] = self.rate.identity()
        if self.context:
            out["context"] = sorted(self.context)
        if self.slo:
            out["slo"] = self.slo.to_record()
        if measure is not None:
            out["measure"] = measure
        return out


def _rebuild(cls: Kind, fields: dict[str, Any]) -> Objective:
    out = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(out, name, value)
    return out
