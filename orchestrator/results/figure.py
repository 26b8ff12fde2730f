"""The export's figure and its provenance as typed records: what ``export`` computes once
(``export.figure_of``, ``export.provenance``) and every format, the benchmark report and the command
line's notes read by attribute.

An export document (``yaml``/``json``) stores them (``to_record``); ``ExportDocument.from_record``
reads one back, every version (``ncclsweep_export``):

- 1: the only version so far; its provenance's ``figure`` may lack ``vs_baseline`` (no baseline),
  ``fresh_vs_baseline`` (no launch by ``compare``) and ``race`` (no race), and older exports lack
  ``prompts``, ``engine_notices`` and ``engine_fallbacks`` (None, empty); ``client_notices`` is
  written only where there is one (a measurement the measuring client may have distorted,
  ``core.client_bound``), so its absence reads as none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.objectives import MAXIMIZE  # an export written before directions were stored: higher was better
from orchestrator.core.verdict import LaunchNoise, RatioInterval

EXPORT_VERSION = 1


def _interval(rec: Mapping[str, Any]) -> RatioInterval:
    """A stored interval (``RatioInterval.to_dict``) read back."""
    noise = rec.get("launch_noise")
    launches = rec.get("launches")
    return RatioInterval(rec.get("ratio"), rec.get("lo"), rec.get("hi"), int(rec.get("n") or 0),
                         bool(rec.get("paired")), rec.get("confidence", 0.95),
                         (int(launches[0]), int(launches[1])) if isinstance(launches, list) else None,
                         _noise(noise) if isinstance(noise, Mapping) else None, rec.get("why"),
                         bool(rec.get("drift_removed")))


def _noise(rec: Mapping[str, Any]) -> LaunchNoise:
    return LaunchNoise(rec.get("sd"), int(rec.get("df") or 0), int(rec.get("configs") or 0),
                       int(rec.get("launches") or 0))


@dataclass(frozen=True)
class Verdict:
    """What the launches say of a config against the baseline (``core.verdict``): the interval of
    the ratio (None: no ratio to give, the baseline held the SLO nowhere), its word and sentence."""

    text: str
    verdict: str | None
    beyond_noise: bool | None
    interval: RatioInterval | None = None
    estimate: str | None = None  # how the ratio is estimated (``verdict.estimate_text``)
    same_config: bool = False
    compare_launches: int | None = 0  # the baseline's launches by ``compare`` (None: a fresh-only verdict)

    @property
    def point(self) -> float | None:
        """The ratio: the interval's own estimate."""
        return self.interval.ratio if self.interval is not None else None

    @property
    def lo(self) -> float | None:
        return self.interval.lo if self.interval is not None else None

    @property
    def hi(self) -> float | None:
        return self.interval.hi if self.interval is not None else None

    def to_record(self) -> dict[str, Any]:
        if self.interval is None:
            return {"no_ratio": True, "verdict": self.verdict, "beyond_noise": self.beyond_noise,
                    "same_config": self.same_config, "point": None, "text": self.text,
                    "compare_launches": self.compare_launches}
        if self.compare_launches is None:  # compare's launches alone
            return {**self.interval.to_dict(), "verdict": self.verdict, "beyond_noise": self.beyond_noise,
                    "text": self.text}
        return {**self.interval.to_dict(), "point": self.point, "estimate": self.estimate, "verdict": self.verdict,
                "beyond_noise": self.beyond_noise, "same_config": self.same_config, "text": self.text,
                "compare_launches": self.compare_launches}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], fresh: bool = False) -> Verdict:
        interval = None if rec.get("no_ratio") else _interval(rec)
        return cls(text=str(rec.get("text") or ""), verdict=rec.get("verdict"), beyond_noise=rec.get("beyond_noise"),
                   interval=interval, estimate=rec.get("estimate"), same_config=bool(rec.get("same_config")),
                   compare_launches=None if fresh else int(rec.get("compare_launches") or 0))


@dataclass(frozen=True)
class RaceStanding:
    """How the finalists' race ended for the config (trial numbers)."""

    decided: bool
    winner_trial: int | None
    tied_trials: tuple[int | None, ...]
    finalists: tuple[int | None, ...]
    launches: int
    rounds: int
    confidence: float
    finished: bool

    def to_record(self) -> dict[str, Any]:
        return {"decided": self.decided, "winner_trial": self.winner_trial, "tied_trials": list(self.tied_trials),
                "finalists": list(self.finalists), "launches": self.launches, "rounds": self.rounds,
                "confidence": self.confidence, "finished": self.finished}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RaceStanding:
        return cls(bool(rec.get("decided")), rec.get("winner_trial"), tuple(rec.get("tied_trials") or ()),
                   tuple(rec.get("finalists") or ()), int(rec.get("launches") or 0), int(rec.get("rounds") or 0),
                   float(rec.get("confidence") or 0.0), bool(rec.get("finished")))


@dataclass(frozen=True)
class Figure:
    """A config's exported figure (``export.figure_of``): the median over its launches at the chosen
    level (or mix), their values and count, where a fresh launch should measure, the launch noise and
    drift, the verdict against the baseline over launches and on ``compare``'s alone, the race."""

    value: float | None
    unit: str
    direction: str
    launch_values: tuple[float | None, ...] = ()
    fresh_launch_95: tuple[float, float] | None = None
    launch_noise: LaunchNoise = field(default_factory=LaunchNoise)
    drift: Mapping[str, Any] | None = None  # ``Drift.to_dict`` where the box drifted
    spread: float | None = None
    baseline_trial: int | None = None
    baseline_value: float | None = None
    compare_launches: int = 0
    compare_values: tuple[float | None, ...] = ()
    baseline_compare_values: tuple[float | None, ...] = ()
    race_launches: int = 0
    vs_baseline: Verdict | None = None
    fresh_vs_baseline: Verdict | None = None
    race: RaceStanding | None = None

    @property
    def launches(self) -> int:
        return len(self.launch_values)

    @property
    def drift_text(self) -> str | None:
        return (self.drift or {}).get("text")

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value, "unit": self.unit, "direction": self.direction, "launches": self.launches,
            "launch_values": list(self.launch_values),
            "fresh_launch_95": list(self.fresh_launch_95) if self.fresh_launch_95 else None,
            "launch_noise": self.launch_noise.to_dict(), "drift": dict(self.drift) if self.drift else None,
            "spread": self.spread, "baseline_trial": self.baseline_trial, "baseline_value": self.baseline_value,
            "compare_launches": self.compare_launches, "compare_values": list(self.compare_values),
            "baseline_compare_values": list(self.baseline_compare_values), "race_launches": self.race_launches}
        if self.vs_baseline is not None:
            out["vs_baseline"] = self.vs_baseline.to_record()
        if self.fresh_vs_baseline is not None:
            out["fresh_vs_baseline"] = self.fresh_vs_baseline.to_record()
        if self.race is not None:
            out["race"] = self.race.to_record()
        return out

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Figure:
        fresh, vs, fresh_vs, race = (rec.get(k) for k in ("fresh_launch_95", "vs_baseline", "fresh_vs_baseline",
                                                          "race"))
        return cls(
            value=rec.get("value"), unit=str(rec.get("unit") or ""), direction=str(rec.get("direction") or MAXIMIZE),
            launch_values=tuple(rec.get("launch_values") or ()),
            fresh_launch_95=(fresh[0], fresh[1]) if isinstance(fresh, list) and len(fresh) == 2 else None,
            launch_noise=_noise(rec.get("launch_noise") or {}), drift=rec.get("drift") or None,
            spread=rec.get("spread"), baseline_trial=rec.get("baseline_trial"),
            baseline_value=rec.get("baseline_value"), compare_launches=int(rec.get("compare_launches") or 0),
            compare_values=tuple(rec.get("compare_values") or ()),
            baseline_compare_values=tuple(rec.get("baseline_compare_values") or ()),
            race_launches=int(rec.get("race_launches") or 0),
            vs_baseline=Verdict.from_record(vs) if isinstance(vs, Mapping) else None,
            fresh_vs_baseline=Verdict.from_record(fresh_vs, fresh=True) if isinstance(fresh_vs, Mapping) else None,
            race=RaceStanding.from_record(race) if isinstance(race, Mapping) else None)


@dataclass(frozen=True)
class Provenance:
    """Where an exported config came from and what it measured (``export.provenance``): the study,
    the trial, its figure (``headline``: at the job's own level; ``figure``: at the chosen level or
    mix, the headline where none was chosen), the versions and hardware it ran on; ``objective``,
    ``tie_break`` and ``measured`` (latency, SLO, goodput, traffic) as their records."""

    study: str | None
    storage: str | None
    trial: int
    rank: int
    headline: Figure
    figure: Figure
    spread: float | None = None
    cv: float | None = None
    rel_ci: float | None = None
    baseline_trial: int | None = None
    tie_break: Mapping[str, Any] | None = None
    prompts: Mapping[str, Any] | None = None
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    engine_notices: tuple[str, ...] = ()
    engine_fallbacks: tuple[Mapping[str, Any], ...] = ()
    client_notices: tuple[str, ...] = ()  # the measuring client fell behind (``core.client_bound``)
    backend_kind: str | None = None
    backend_version: str | None = None
    model: Any = None
    nccl_version: Any = None
    cuda_version: Any = None
    driver_version: Any = None
    gpu_model: Any = None
    gpus: Any = None
    topology: Any = None
    node: str | None = None
    measured_at: str | None = None
    exported_at: str | None = None
    ncclsweep_version: str | None = None
    objective: Mapping[str, Any] | None = None  # the chosen level or mix: what it measured there
    measured: Mapping[str, Any] = field(default_factory=dict)  # latency, prefix cache, throughput, slo, goodput

    @property
    def value_tok_s(self) -> float | None:
        return self.headline.value

    @property
    def x_baseline(self) -> float | None:
        """The headline's ratio to the baseline: the verdict's own estimate."""
        return self.headline.vs_baseline.point if self.headline.vs_baseline is not None else None

    def to_record(self) -> dict[str, Any]:
        return {
            "study": self.study, "storage": self.storage, "trial": self.trial, "rank": self.rank,
            "value_tok_s": self.value_tok_s, "spread": self.spread, "cv": self.cv, "rel_ci": self.rel_ci,
            "measurements": self.headline.launches, "figure": self.figure.to_record(),
            "baseline_trial": self.baseline_trial, "baseline_tok_s": self.headline.baseline_value,
            "x_baseline": self.x_baseline, "tie_break": dict(self.tie_break) if self.tie_break else None,
            "prompts": dict(self.prompts) if self.prompts else None, "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length, "engine_notices": list(self.engine_notices),
            "engine_fallbacks": [dict(f) for f in self.engine_fallbacks],
            **({"client_notices": list(self.client_notices)} if self.client_notices else {}),
            "backend": {"kind": self.backend_kind, "version": self.backend_version}, "model": self.model,
            "nccl_version": self.nccl_version, "cuda_version": self.cuda_version,
            "driver_version": self.driver_version, "gpu_model": self.gpu_model, "gpus": self.gpus,
            "topology": self.topology, "node": self.node, "measured_at": self.measured_at,
            "exported_at": self.exported_at, "ncclsweep_version": self.ncclsweep_version,
            **({"objective": dict(self.objective)} if self.objective is not None else {}),
            **self.measured,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Provenance:
        """A stored provenance (module docstring). Its headline figure is not stored whole: where a
        level or mix was chosen, the headline's value, launches and ratio are read from its own keys."""
        figure = Figure.from_record(rec.get("figure") or {})
        headline = figure
        if rec.get("objective") is not None:  # the figure is the chosen level's: the headline's own keys
            point = rec.get("x_baseline")
            vs = Verdict("", None, None, RatioInterval(point, None, None, 0, False)) if point is not None else None
            headline = Figure(value=rec.get("value_tok_s"), unit="", direction=figure.direction,
                              launch_values=(rec.get("value_tok_s"),) * int(rec.get("measurements") or 0),
                              baseline_value=rec.get("baseline_tok_s"), vs_baseline=vs)
        backend = rec.get("backend") or {}
        known = {f for f in cls.__dataclass_fields__} | {"value_tok_s", "measurements", "baseline_tok_s",
                                                         "x_baseline", "backend"}
        return cls(
            study=rec.get("study"), storage=rec.get("storage"), trial=int(rec.get("trial") or 0),
            rank=int(rec.get("rank") or 1), headline=headline, figure=figure, spread=rec.get("spread"),
            cv=rec.get("cv"), rel_ci=rec.get("rel_ci"), baseline_trial=rec.get("baseline_trial"),
            tie_break=rec.get("tie_break"), prompts=rec.get("prompts"), acceptance_rate=rec.get("acceptance_rate"),
            mean_accepted_length=rec.get("mean_accepted_length"),
            engine_notices=tuple(rec.get("engine_notices") or ()),
            engine_fallbacks=tuple(rec.get("engine_fallbacks") or ()),
            client_notices=tuple(rec.get("client_notices") or ()), backend_kind=backend.get("kind"),
            backend_version=backend.get("version"), model=rec.get("model"), nccl_version=rec.get("nccl_version"),
            cuda_version=rec.get("cuda_version"), driver_version=rec.get("driver_version"),
            gpu_model=rec.get("gpu_model"), gpus=rec.get("gpus"), topology=rec.get("topology"), node=rec.get("node"),
            measured_at=rec.get("measured_at"), exported_at=rec.get("exported_at"),
            ncclsweep_version=rec.get("ncclsweep_version"), objective=rec.get("objective"),
            measured={k: v for k, v in rec.items() if k not in known})


@dataclass(frozen=True)
class ExportDocument:
    """One exported config as the ``yaml``/``json`` formats write it: its rank, the flat config, the
    environment and the provenance."""

    rank: int
    config: Mapping[str, Any]
    env: Mapping[str, str]
    provenance: Provenance

    def to_record(self) -> dict[str, Any]:
        return {"ncclsweep_export": EXPORT_VERSION, "rank": self.rank, "config": dict(self.config),
                "env": dict(self.env), "provenance": self.provenance.to_record()}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> ExportDocument:
        return cls(rank=int(rec.get("rank") or 1), config=dict(rec.get("config") or {}), env=dict(rec.get("env") or {}),
                   provenance=Provenance.from_record(rec.get("provenance") or {}))
