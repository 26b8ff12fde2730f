"""Exported configurations: what to paste into production, with where it came from.

``export(job, rows, fmt, top=1)`` renders the ``top`` best configs (``history.best_rows``:
COMPLETE, counted, never a config that failed the correctness gate) as

- ``env``        KEY=VALUE lines for ``docker run --env-file`` and systemd ``EnvironmentFile``:
                 the job's fixed ``env`` plus the config's environment delta (what the
                 backend's ``launch_spec`` sets). Its first line says it is the environment
                 half and names what the launch command carries besides (``tp_size``,
                 ``graph_capture``, backend flags).
- ``yaml``/``json`` one document per config: ``config`` (the exact flat config, readable
                 back by ``load_config_file`` for ``ncclsweep bench --config``), ``env`` and
                 ``provenance``. ``--top K``: K YAML documents, or a JSON list of K objects.
- ``cmd``        the deploy artifact (``ncclsweep export``'s default format): a ``sh`` script of
                 the full shell-quoted launch command (env assignments, then argv), its header
                 saying the address it listens on (``host``/``port``, default 0.0.0.0:8000:
                 every interface).
- ``nccl-tuner`` a rules file for NCCL's example tuner plugin: rules per measured size range
                 from the pre-screen's sweep where it ran at the winner's TP, else one rule
                 from the winner's settings (``results.tuner_rules``, which makes them); the
                 NCCL release and the tuner API in its comments.

Line formats (env, cmd, nccl-tuner) carry provenance in ``#`` comments; with ``--top K``
they hold K numbered blocks of which only the first is active and the others are
commented out (an env file or a first-match rules file cannot hold alternatives). Whatever
a study's strings hold (a version, a path, a host name, a param value), every physical line
is a comment or what the format says: a comment is one line (``_comment``), every line of
a commented alternative is commented, an env line is one ``KEY=VALUE`` (a name or value that
cannot be one is left out, and said so), and a launch line's words are shell-quoted.

Provenance of every export: backend kind and version, NCCL/CUDA/driver versions, GPU
model and topology (from the trial's ``nccl`` and ``node`` records when present), model
path, study, storage, trial number, the figure and its ratio to the baseline, the decode prompts it
was measured on (``prompts``: hash, count, lengths; None for a trial recorded before), for a
speculative config what the server counted: ``acceptance_rate`` and ``mean_accepted_length``
(None for a config that reported none), and what the engine said of the measured launch:
``engine_notices`` (every "... is disabled because ..." it logged, whatever asked for it) and
``engine_fallbacks`` (each value of the config it turned off, with what it ran instead:
``allreduce.backend=custom (the engine ran nccl: Custom allreduce is disabled because ...)``),
and what the node said of its own measuring client: ``client_notices`` (only where there is one:
the client fell behind and its decode figures may be overstated, ``core.client_bound``), each a
header line of the line formats too.

The figure (``figure``, ``value_tok_s``) is the median over every launch of the config
(``study.launches``: its trials, the study's relaunches and race launches, the launches
``compare`` made), with their count, where a fresh launch should measure (95%, from the study's
launch noise), and the verdict against the baseline over launches, its ratio (``point``,
``x_baseline``) the estimate its interval is built on (``verdict``: one estimator for both). Where
that verdict is not beyond noise (``compare``'s fresh launches can make it so) or there is no
interval to give one (the launch noise unknown: "not shown", never "within noise"), where the race
of the finalists could not break a tie (``study.race``: which configs tied), where the box drifted
during the study (``core.drift``: the figure will not repeat at another time), the header says so
in a line of its own and ``notes`` gives the lines the command line prints.

Which config is "best" (``choose``): for a job of one level, today's best (``history.best_rows``);
``level=N`` (``--concurrency N``), the best at level N of the objective (``study.plan``);
``mix=True`` (``--mix``), the best for the job's weighted traffic mix; a plan exported with
neither, the mix's best when the job has weights, else the best at its lowest level. Whenever
a level or the mix decided, the provenance says which (``objective``), and the line formats
name it in their header. Where the race left that level (or the mix) tied, the tie is broken by
what else is known, not by the higher median (``ranked``, ``study.plan.break_tie``): the tied
config that serves every other level (``study.plan.one_for_all``, the race's tie standing for
the comparison at this one), then the one with fewer settings changed from the baseline; the
header says which rule broke it (``tie broken: ...``), the provenance too (``tie_break``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

import yaml

import orchestrator
from orchestrator.backends import allreduce, get_backend_class
from orchestrator.backends.base import Backend
from orchestrator.config import prompts as decode_prompts
from orchestrator.config.yaml_input import load_yaml_documents, read_text_bounded
from orchestrator.core import verdict
from orchestrator.core.client_bound import NOTICE as CLIENT_NOTICE
from orchestrator.core.errors import BadInput, RuntimeFailure, brief
from orchestrator.core.golden_check import disputed
from orchestrator.core.launch import env_value_problem, server_environment
from orchestrator.core.level import context_of, streams
from orchestrator.core.level import key as level_key
from orchestrator.core.level import parse as parse_level
from orchestrator.core.measurement import LATENCY_KINDS, QUANTILES
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.core.slo import LABELS as slo_labels
from orchestrator.core.slo import Targets
from orchestrator.core.slo import breaches as slo_breaches
from orchestrator.node.startup import NOTICE
from orchestrator.results import tuner_rules
from orchestrator.results.figure import ExportDocument, Figure, Provenance, RaceStanding, Verdict
from orchestrator.study.evidence.goodput import goodput_answer
from orchestrator.study.evidence.history import baseline_row, best_rows, short_params
from orchestrator.study.evidence.launches import COMPARE, HEADLINE, MIX, Evidence, mix_figure
from orchestrator.study.evidence.plan import TieBreak, best_at, best_for_mix, break_tie, build_plan, one_for_all
from orchestrator.study.search import race as races
from orchestrator.study.storage import objective as objectives

FORMATS = ("env", "yaml", "json", "cmd", "nccl-tuner")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ExportJob(Protocol):
    """The job fields export and report read (``orchestrator.config.job.Job`` has them)."""

    study: str
    storage: str
    backend: Any  # BackendSpec(kind, settings) or a Backend instance
    env: dict[str, str]


# ---- backend & provenance ------------------------------------------------------------------------
def resolve_backend(job: Any, backend: Any = None):
    """A Backend instance for the job: ``backend`` if given, ``job.backend`` if it already is
    one, else built from ``job.backend.kind``/``settings``. None when it cannot be built."""
    if isinstance(backend, Backend):
        return backend
    spec = getattr(job, "backend", None)
    if isinstance(spec, Backend):
        return spec
    if callable(getattr(job, "backend_obj", None)):  # orchestrator.config.job.Job builds and caches it
        try:
            return job.backend_obj()
        except Exception:  # noqa: BLE001 - fall back to building it here
            pass
    kind = getattr(spec, "kind", None)
    if not kind:
        return None
    try:
        path = getattr(job, "path", None)
        return get_backend_class(kind)(dict(getattr(spec, "settings", None) or {}), str(path) if path else None)
    except Exception:  # noqa: BLE001 - provenance then says "unknown"; cmd export refuses
        return None


def _backend_kind(job: Any, backend: Any) -> str | None:
    if backend is not None and getattr(backend, "kind", None):
        return backend.kind
    return getattr(getattr(job, "backend", None), "kind", None)


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "", [], {})), None)


def _model_of(backend: Any, job: Any) -> Any:
    settings = dict(getattr(backend, "settings", None)
                    or getattr(getattr(job, "backend", None), "settings", None) or {})
    return _first(*(settings.get(k) for k in ("model", "model_path", "model-path", "preset")))


def _safe_version(backend: Any) -> str | None:
    try:
        return backend.version() if backend is not None else None
    except Exception:  # noqa: BLE001 - a version probe must not break an export
        return None


@dataclass(frozen=True)
class Choice:
    """What "best" means for this export (module docstring): ``level`` (a level of the
    objective) or ``mix``, and what chose it; neither: the job's one number, as always."""

    level: int | None = None
    weights: dict[int, float] | None = None  # the mix
    chosen_by: str = ""  # "--concurrency 10", "--mix", or why the default
    slo: Targets | None = None  # the objective's latency targets: a level's best holds them there

    @property
    def is_mix(self) -> bool:
        """Best for the traffic mix (``--mix``)."""
        return bool(self.weights)

    @property
    def named(self) -> bool:
        return self.level is not None or self.is_mix

    def rank(self, rows: list[TrialRow], k: int) -> list[TrialRow]:
        if self.weights:
            return best_for_mix(rows, self.weights, k)
        if self.level is not None:
            return best_at(rows, self.level, k, slo=self.slo)
        return best_rows(rows, k)

    def describe(self) -> str:
        if self.weights:
            return "the traffic mix " + ", ".join(f"{lv}: {w:g}" for lv, w in self.weights.items())
        level = self.level or 1
        at = f" with prompts of about {context_of(level)} tokens" if context_of(level) else ""
        if streams(level) == 1:
            return f"concurrency {level} (single-request decode tok/s{at})"
        return f"concurrency {level} (total tok/s with {streams(level)} concurrent streams{at})"


def choose(job: Any, level: int | str | None = None, mix: bool = False) -> Choice:
    """Which best to export for ``--concurrency`` / ``--mix`` (module docstring); BadInput
    for a level the objective lacks (``--concurrency N``, or ``N@CONTEXT`` with a context axis:
    ``core.level``), or ``--mix`` without weights."""
    obj = objectives.of(getattr(job, "objective", None))
    levels = objectives.levels(obj)
    if level is not None and mix:
        raise BadInput("--concurrency and --mix each choose the config to export: give one of them", key="--mix")
    if level is not None:
        try:
            wanted: int | None = parse_level(level)
        except ValueError:
            wanted = None
        if wanted is None or wanted not in levels:
            axes = "objective.concurrency x objective.context, N@CONTEXT" if obj.context else "objective.concurrency"
            raise BadInput(f"{wanted if wanted is not None else brief(level)} is not a level of the study's objective "
                           f"({axes}: {', '.join(map(str, levels))})", key="--concurrency")
        return Choice(level=wanted, chosen_by=f"--concurrency {wanted}", slo=obj.slo)
    if mix:
        if not obj.weights:
            raise BadInput("the job's objective has no traffic mix (objective.weights, e.g. {1: 0.6, 10: 0.4}); "
                           "export one level with --concurrency N", key="--mix")
        return Choice(weights=dict(obj.weights), chosen_by="--mix")
    if not obj.by_level:
        return Choice()
    if obj.weights:
        return Choice(weights=dict(obj.weights),
                      chosen_by="the default for a weighted objective, the mix; --concurrency N exports one level")
    return Choice(level=levels[0], chosen_by=f"the default for a plan, its lowest level; --concurrency N exports "
                                             f"another of {', '.join(map(str, levels))}", slo=obj.slo)


def exported(job: Any, rows: list[TrialRow], top: int, level: int | str | None = None, mix: bool = False
             ) -> tuple[Choice, list[TrialRow], TieBreak | None]:
    """What any export format exports: the choice (``choose``), its ``top`` configs best first and
    the tie-break (``ranked``). BadInput for ``top < 1``; RuntimeFailure when no trial completed or
    the golden reference is disputed (no config is then best, the baseline included)."""
    if not isinstance(top, int) or top < 1:
        raise BadInput(f"--top must be a positive integer, not {brief(top)}", key="--top")
    choice = choose(job, level, mix)
    best, tie = ranked(job, rows, choice, top)
    if not best:
        why = disputed(rows)
        if why:
            raise RuntimeFailure(f"nothing to export: {why}; no config is exported as best while the golden "
                                 "reference is in question")
        raise RuntimeFailure("no completed trial to export")
    return choice, best, tie


def ranked(job: Any, rows: list[TrialRow], choice: Choice, k: int) -> tuple[list[TrialRow], TieBreak | None]:
    """The ``k`` configs to export for ``choice``, best first, and how a tie the race left at its
    level (or mix) was broken (``plan.break_tie``: the config that serves every level, then the one
    with fewer settings changed from the baseline), which decides the first."""
    best = choice.rank(rows, k)
    tie = tie_break(job, rows, choice)
    if tie is None or not best:
        return best, tie
    others = [r for r in best if r.config_key != tie.chosen.config_key]
    return [tie.chosen, *others][:k], tie


def tie_break(job: Any, rows: list[TrialRow], choice: Choice) -> TieBreak | None:
    """How the tie the race left in ``choice``'s contest is broken; None where it left none."""
    objective = getattr(job, "objective", None)
    obj = objectives.of(objective)
    if obj.by_capacity:
        return None
    level = level_of(choice, obj)
    contest = MIX if level is None else str(level)
    found = next((o for o in races.outcomes(rows, objective) if o.contest.name == contest and o.tied and o.winner),
                 None)
    if found is None or found.winner is None:
        return None
    members = {found.winner, *found.tied}
    tied = [r for r in choice.rank(rows, len(rows)) if r.config_key in members]
    if len(tied) < 2:
        return None
    plan = build_plan(rows, objective) if obj.by_level and level is not None else None
    # the config that serves the other levels, the race's tie standing for the comparison at this one
    # (two finalists get no interval before enough rounds: the plan's own line may then name none)
    everywhere = one_for_all(plan.per_level, plan.evidence, plan.slo, tie=(level, members)) \
        if plan is not None and plan.evidence is not None and level is not None else None
    where = "for the mix" if level is None else f"at {level}"
    return break_tie(tied, where, everywhere, baseline_row(rows))


def _objective_provenance(choice: Choice, figure: Figure) -> dict[str, Any]:
    """What the chosen level (or mix) measured for this config, against the baseline (``figure``)."""
    vs = figure.vs_baseline
    out: dict[str, Any] = {"mix": {str(k): v for k, v in choice.weights.items()} if choice.weights else None,
                           "level": level_key(choice.level) if choice.level is not None else None,
                           "context": context_of(choice.level) if choice.level is not None else None,
                           "unit": figure.unit, "spread": figure.spread,
                           "value": figure.value, "launches": figure.launches,
                           "baseline_value": figure.baseline_value, "x_baseline": vs.point if vs else None,
                           "chosen_by": choice.chosen_by}
    if vs is not None and vs.lo is not None:
        out["x_baseline_interval"] = [vs.lo, vs.hi]
    return out


def figure_of(job: Any, rows: list[TrialRow], row: TrialRow, choice: Choice | None = None) -> Figure:
    """The exported figure of ``row``'s config (module docstring): its median over launches at the
    chosen level (the objective's for a job of one level) or for the mix, their count, where a
    fresh launch should measure, the launch noise, the verdict against the baseline over launches,
    how many of those launches ``compare`` made, and how the race of the finalists ended for it."""
    choice = choice or Choice()
    obj = objectives.of(getattr(job, "objective", None))
    ev = Evidence(rows)
    key = row.config_key
    base = baseline_row(rows)
    base = base if base is not None and base.state == COMPLETE and base.value is not None else None
    if choice.weights:
        weights = choice.weights
        values, noise, drift = ev.mix_values(key, weights), ev.mix_noise(weights), ev.mix_drift(weights)
        fresh = ev.mix_fresh(key, weights)
        base_value = ev.mix_median(base.config_key, weights) if base is not None else None
        iv = ev.mix_interval(base.config_key, key, weights) if base is not None else None
        unit, contest = obj.measure.mix_unit(), MIX
    else:
        level = choice.level if choice.level is not None else HEADLINE if obj.by_capacity else \
            objectives.levels(obj)[0]
        values, noise, fresh = ev.values(key, level), ev.noise(level), ev.fresh(key, level)
        drift = ev.drift(level)
        base_value = ev.median(base.config_key, level) if base is not None else None
        iv = ev.interval(base.config_key, key, level) if base is not None else None
        unit, contest = obj.export_unit(level, choice.level is not None), str(level)
    value = statistics.median(values) if values else row.worth
    shown = obj.shown
    vs, fresh_vs = None, None
    if base is not None and not choice.is_mix and level is HEADLINE and base_value == 0:
        vs = _against_no_goodput(base)
    elif base is not None and iv is not None:
        same = base.config_key == key
        word = verdict.verdict(iv, same_config=same)
        vs = Verdict(obj.measure.compared(iv, same_config=same), obj.measure.word(word),
                     word in (verdict.FASTER, verdict.SLOWER),
                     obj.measure.oriented(iv),  # the figures' own ratio (a latency's: inverted), its own estimate
                     verdict.estimate_text(iv), same,
                     sum(1 for r in ev.launches(base.config_key) if r.launch_role == COMPARE))
        fresh_iv = ev.compared(base.config_key, key, level) if not choice.is_mix and not same else None
        if fresh_iv is not None:  # what compare's launches alone say (``launches.Evidence.compared``)
            fresh_word = verdict.verdict(fresh_iv)
            fresh_vs = Verdict(obj.measure.compared(fresh_iv), obj.measure.word(fresh_word),
                               fresh_word in (verdict.FASTER, verdict.SLOWER), obj.measure.oriented(fresh_iv),
                               compare_launches=None)
    at = level_of(choice, obj)
    return Figure(
        value=shown(value), unit=unit, direction=obj.direction, launch_values=tuple(shown(v) for v in values),
        fresh_launch_95=obj.measure.shown_range(*fresh) if fresh else None, launch_noise=noise,
        drift=drift.to_dict() if drift.drifted else None, spread=_spread(row, choice.level),
        baseline_trial=base.number if base is not None else None, baseline_value=shown(base_value),
        compare_launches=sum(1 for r in ev.launches(key) if r.launch_role == COMPARE),
        compare_values=tuple(shown(v) for v in _compare_values(ev, key, choice, at)),
        baseline_compare_values=tuple(shown(v) for v in _compare_values(ev, base.config_key, choice, at))
        if base is not None else (),
        race_launches=sum(1 for r in ev.launches(key) if r.launch_role == races.RACE),
        vs_baseline=vs, fresh_vs_baseline=fresh_vs, race=_race_standing(job, rows, key, contest))


def _race_standing(job: Any, rows: list[TrialRow], key: str, contest: str) -> RaceStanding | None:
    """How the finalists' race of ``contest`` ended for the config ``key`` (None: not a finalist)."""
    numbers = {r.config_key: r.number for r in sorted(rows, key=lambda r: (not r.counted, r.number))[::-1]}
    out = None
    for o in races.outcomes(rows, getattr(job, "objective", None)):
        if o.contest.name == contest and key in o.contest.finalists:
            tied = [k for k in (o.winner, *o.tied) if k] if o.tied else []  # the configs it could not tell apart
            out = RaceStanding(key not in tied, numbers.get(o.winner or ""),
                               tuple(numbers.get(k) for k in tied if k != key) if key in tied else (),
                               tuple(numbers.get(k) for k in o.contest.finalists), o.launches, o.rounds,
                               o.confidence, o.finished)
    return out


def _against_no_goodput(base: TrialRow) -> Verdict:
    """The verdict against a baseline that held the SLO at no concurrency it tried: its goodput is
    0 tok/s, so there is no ratio to give, and no noise to be within; the goodput answer says what
    each config held."""
    return Verdict(f"no ratio: the baseline #{base.number} holds the SLO at no concurrency it tried (0 tok/s "
                   f"within the SLO)", None, None)


def level_of(choice: Choice, objective: Any) -> int | None:
    """The level a figure is of (None: the mix)."""
    if choice.weights:
        return None
    return choice.level if choice.level is not None else objectives.levels(objective)[0]


def _compare_values(ev: Evidence, key: str, choice: Choice, level: int | None) -> list[float]:
    """The figures of the launches ``compare`` made of a config."""
    launches = [r for r in ev.launches(key) if r.launch_role == COMPARE]
    if level is None:
        return [v for r in launches if (v := mix_figure(r, choice.weights or {})) is not None]
    return [v for r in launches if (v := r.worth_at(level)) is not None]


def _spread(row: TrialRow, level: int | None) -> float | None:
    """The relative spread of the trial's own median (at ``level``)."""
    got = row.at(level) if level is not None else None
    return got.spread if got is not None else row.spread


def notes(job: Any, rows: list[TrialRow], level: int | None = None, mix: bool = False) -> list[str]:
    """What the command line says beside an export: the exported config within noise of the
    baseline (with how many fresh launches by ``compare``) or not shown to beat it (no interval), a
    tie the race could not break and how it was broken, a box that drifted."""
    choice = choose(job, level, mix)
    best, tie = ranked(job, rows, choice, 1)
    if not best:
        return []
    fig = figure_of(job, rows, best[0], choice)
    return _warning_lines(fig, best[0].number) + ([f"tie broken: {tie.text()}"] if tie is not None else [])


def _warning_lines(fig: Figure, trial: int, *, said: bool = False) -> list[str]:
    """The export's warnings (``said``: the verdict's text is on a line above): within noise of the
    baseline over every launch, or on ``compare``'s fresh launches alone; no interval to judge it by
    (the launch noise unknown); a tie the race left; a box that drifted (its figure unrepeatable)."""
    out = []
    vs, fresh_vs = fig.vs_baseline, fig.fresh_vs_baseline
    fresh = (vs.compare_launches or 0 if vs is not None else 0) + fig.compare_launches
    by = f" ({fresh} of the launches fresh from `ncclsweep compare`)" if fresh else ""
    what = "" if said else f": {vs.text if vs is not None else None}"
    word = vs.verdict if vs is not None else None
    if word == verdict.WITHIN_NOISE:  # not a same config, nor no figure to compare (no ratio)
        out.append(f"trial {trial} is WITHIN NOISE of the baseline{what}{by}: it is not shown to beat the baseline")
    elif word == verdict.NOT_SHOWN:  # no interval: nothing is shown either way
        out.append(f"trial {trial} is NOT SHOWN to beat the baseline{what}{by}")
    elif fresh_vs is not None and not fresh_vs.beyond_noise:
        out.append(f"trial {trial} is WITHIN NOISE of the baseline on the {fresh} launches fresh from `ncclsweep "
                   f"compare`: {fresh_vs.text} (over every launch: {vs.text if vs is not None else None}); the "
                   "machine may have changed since the study: it is not shown to beat the baseline now")
    race = fig.race
    if race is not None and race.tied_trials:
        tied = ", ".join(f"trial {n}" for n in race.tied_trials)
        out.append(f"TIE: the race of the finalists ({race.launches} launches) could not tell trial {trial} from "
                   f"{tied}; any of them is as good on this evidence")
    if fig.drift_text:
        out.append(fig.drift_text)
    return out


def provenance(job: ExportJob, row: TrialRow, rows: list[TrialRow], backend: Any = None,
               rank: int = 1, choice: Choice | None = None, tie: TieBreak | None = None) -> Provenance:
    """Where a config came from and what it measured (JSON-able); with a named ``choice``
    (a level, the mix), what it measured there (``objective``); ``tie``: how the tie the race left
    was broken for it (``tie_break``: None where there was none)."""
    node, nccl = row.node_info or {}, row.nccl or {}
    base = baseline_row(rows)
    headline = figure_of(job, rows, row)
    named = choice is not None and choice.named
    fig = figure_of(job, rows, row, choice) if named else headline
    return Provenance(
        study=getattr(job, "study", None), storage=getattr(job, "storage", None), trial=row.number, rank=rank,
        headline=headline, figure=fig, spread=row.spread, cv=row.cv, rel_ci=row.rel_ci,
        baseline_trial=base.number if base else None,
        tie_break=tie.to_dict() if tie is not None and tie.chosen.config_key == row.config_key else None,
        prompts=row.prompt_set or None,  # the decode prompts the figures were measured on
        acceptance_rate=row.acceptance_rate, mean_accepted_length=row.mean_accepted_length,
        # what the engine said it changed or refused for this config (vLLM: "... is disabled because ..."),
        # and each value it turned off with what it ran instead (``Backend.engine_fallbacks``)
        engine_notices=tuple(w[len(NOTICE):] for w in row.warnings if str(w).startswith(NOTICE)),
        engine_fallbacks=tuple(allreduce.fallbacks_of(row.server)),
        # the measuring client fell behind in this launch: its decode figures may be overstated
        client_notices=tuple(w[len(CLIENT_NOTICE):] for w in row.warnings if str(w).startswith(CLIENT_NOTICE)),
        backend_kind=_backend_kind(job, backend), backend_version=_safe_version(backend),
        model=_model_of(backend, job),
        nccl_version=_first(nccl.get("version"), nccl.get("nccl_version"), node.get("nccl_version")),
        cuda_version=_first(node.get("cuda_version"), nccl.get("cuda_version"), node.get("cuda")),
        driver_version=_first(node.get("driver_version"), nccl.get("driver_version"), node.get("driver")),
        gpu_model=node.get("gpu_model"), gpus=_first(node.get("gpus"), node.get("gpu_count")),
        topology=_first(node.get("topology"), nccl.get("topology"), nccl.get("transports")),
        node=row.node, measured_at=row.ended_at,
        exported_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        ncclsweep_version=_tool_version(),
        objective=_objective_provenance(choice, fig) if named and choice is not None else None,
        measured=_latency_provenance(job, row, rows))


def _latency_provenance(job: Any, row: TrialRow, rows: list[TrialRow]) -> dict[str, Any]:
    """What the config measured besides throughput: each level's latency percentiles (``latency``,
    seconds) and, where the server counted it, the share of its prompt tokens the prefix cache
    answered (``prefix_cache_hit_rate``, per level), and where the job has them, its latency targets
    and what it broke (``slo``), its goodput crossing (``goodput``), the traffic and the lengths
    measured (``traffic``)."""
    obj = objectives.of(getattr(job, "objective", None))
    latency: dict[str, Any] = {}
    for level, got in row.levels.items():
        recorded = {kind: got.latency(kind) for kind in LATENCY_KINDS}
        if any(lat is not None for lat in recorded.values()):
            latency[str(level)] = {kind: lat.to_record() for kind, lat in recorded.items() if lat is not None}
    out: dict[str, Any] = {"latency": latency}
    hits = {str(level): got.prefix_cache_hit_rate for level, got in row.levels.items()
            if got.prefix_cache_hit_rate is not None}
    if hits:
        out["prefix_cache_hit_rate"] = hits
    whole = {str(level): {"tok_s": got.value, "whole_run_tok_s": got.whole_run_tok_s}
             for level, got in row.levels.items() if got.whole_run_tok_s is not None}
    if whole:  # the steady state's total tok/s and the whole run's (as ``vllm bench serve`` counts it)
        out["throughput"] = whole
    if obj.slo:
        out["slo"] = {"targets": obj.slo.to_record(), "text": obj.slo.describe(),
                      "breaches": [b.to_record() for level, got in row.levels.items()
                                   for b in slo_breaches(got, obj.slo.at(level))]}
    if obj.by_capacity:
        pricing = job.pricing() if callable(getattr(job, "pricing", None)) else None
        answer = goodput_answer(rows, obj, pricing)
        mine = next((c for c in answer.configs if c.row.config_key == row.config_key), None)
        out["goodput"] = {**(mine.to_dict() if mine else {}),
                          "baseline": answer.baseline.to_dict() if answer.baseline else None, "answer": answer.text(),
                          "is_best": answer.best is not None and answer.best.row.config_key == row.config_key,
                          "cost": pricing.cost.to_record() if pricing is not None else None}
    bench = getattr(job, "bench", None)
    lengths = row.measurement.lengths if row.measurement is not None else None
    if getattr(bench, "traffic", None) is not None or lengths is not None:
        out["traffic"] = {"requests": getattr(bench, "prompts_from", None),
                          "measured": lengths.to_record() if lengths is not None else None,
                          "text": lengths.describe() if lengths is not None else None}
    return out


def _tool_version() -> str:
    try:
        return version("ncclsweep")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)

        return getattr(orchestrator, "__version__", "unknown")


# what a comment line may not hold: anything that ends a line (for a shell, an env file or a
# reader's editor) or moves the cursor; every other character of a study's strings is shown as is
_NOT_IN_A_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


def _one_line(value: Any, width: int = 160) -> str:
    """``value`` on one physical line (its lines joined with " | "), at most ``width`` characters."""
    if value is None:
        return "unknown"
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    text = " | ".join(part.strip() for part in _NOT_IN_A_LINE.split(str(value)) if part.strip())
    return text if len(text) <= width else text[: width - 3] + "..."


def _comment(text: str) -> str:
    """One comment line, whatever ``text`` holds: a study's strings (a version, a path, a host
    name) never become a live line of an exported file."""
    return "# " + _one_line(text, width=10_000)


def _comment_header(fmt: str, prov: Provenance, total: int) -> list[str]:
    """The provenance of one exported config, as comment lines (each one physical line)."""
    fig = prov.figure
    chosen = []
    obj = prov.objective
    if obj:
        what = (f"level {obj['level']}" if obj["level"] is not None else
                "the traffic mix " + ", ".join(f"{k}: {v:g}" for k, v in obj["mix"].items()))
        got = f"{obj['value']:.3f} {obj['unit']}" if obj["value"] is not None else "not measured"
        vs = f", {obj['x_baseline']:.2f}x the baseline" if obj.get("x_baseline") else ""
        chosen = [f"chosen for {what} ({_one_line(obj['chosen_by'])}): {got}{vs}"]
    measured = prov.measured
    good = measured.get("goodput") or {}
    if good.get("text"):  # the value is the total tok/s at the capacity point within the SLO
        chosen.append(f"goodput: {good.get('answer')}" if good.get("is_best") else
                      f"goodput: {good['text']}; {good.get('answer')}")
    if (good.get("price") or {}).get("text"):
        chosen.append(f"cost at its capacity point: {good['price']['text']}")
    if good.get("search") == "rate" and good.get("probes"):  # every rate probed: the curve by request rate
        chosen.append("curve (req/s: output tok/s, attainment, SLO): " + ", ".join(
            f"{p['rate']:.3g}: {_tok(p['tok_s'])}, "
            f"{'-' if p.get('attainment') is None else format(100 * p['attainment'], '.1f') + '%'}, "
            f"{'holds' if p['held'] else 'breaks'}"
            for p in sorted({p["rate"]: p for p in good["probes"]}.values(), key=lambda p: p["rate"])))
    elif good.get("curve"):  # every load the launch measured: the capacity curve
        chosen.append("curve (streams: total tok/s, whole run, SLO): " + ", ".join(
            f"{pt['load']}: {_tok(pt['tok_s'])}, {_tok(pt['whole_run_tok_s'])}, "
            f"{'holds' if pt['held'] else 'breaks' if pt['held'] is False else '-'}" for pt in good["curve"]))
    slo = measured.get("slo")
    if slo:
        broke = "; ".join(b["text"] for b in slo["breaches"]) or "holds them at every level measured"
        chosen.append(f"slo {slo['text']}: {broke}")
    traffic = measured.get("traffic")
    if traffic and traffic.get("text"):
        chosen.append(f"traffic {traffic['requests']}: measured {traffic['text']}")
    lines = [
        f"ncclsweep {_one_line(prov.ncclsweep_version)} export ({fmt}), rank {prov.rank} of {total}",
        *chosen,
        f"study {_one_line(prov.study)}, trial {prov.trial}, measured {_one_line(prov.measured_at)}"
        f" on {_one_line(prov.node or 'unknown node')}",
        *figure_lines(fig),
        *_warning_lines(fig, prov.trial, said=True),
        *([f"tie broken: {prov.tie_break['text']}"] if prov.tie_break else []),
        *_latency_comment(measured),
        f"measured on the decode prompts: {decode_prompts.describe(dict(prov.prompts) if prov.prompts else None)}",
        f"backend: {_one_line(prov.backend_kind)} {_one_line(prov.backend_version or '(version unknown)')}; "
        f"model: {_one_line(prov.model)}",
        f"NCCL {_one_line(prov.nccl_version)}; CUDA {_one_line(prov.cuda_version)}; "
        f"driver {_one_line(prov.driver_version)}",
        f"GPU: {_one_line(prov.gpu_model)} (devices {_one_line(prov.gpus)}); "
        f"topology: {_one_line(prov.topology, 100)}",
        *_speculation_comment(prov),
        *_notice_comments(prov),
    ]
    return [_comment(line) for line in lines]


def _tok(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 1000 else f"{value:.1f}"


def _latency_comment(prov: Mapping[str, Any]) -> list[str]:
    """'latency at 1 (ms p50/p90/p99): TTFT 11.2/13.0/15.9, TPOT ...' per level measured, and the
    whole run's tok/s beside the steady state's (commented by ``_comment_header``)."""
    whole = prov.get("throughput") or {}
    out = [f"total tok/s at {level}: {_tok(rec['tok_s'])} in the steady state, {_tok(rec['whole_run_tok_s'])} over "
           "the whole run (as vllm bench serve counts output throughput)" for level, rec in whole.items()
           if not (prov.get("goodput") or {}).get("curve")]  # a goodput export says it in its curve
    hits = prov.get("prefix_cache_hit_rate") or {}
    for level, kinds in (prov.get("latency") or {}).items():
        parts = [f"{slo_labels.get(k, k)} " + "/".join(f"{1000 * rec[f'p{q}']:.1f}" for q in QUANTILES)
                 + (f" (prefix-cache hits {100 * hits[level]:.0f}%)" if k == "ttft" and level in hits else "")
                 for k, rec in kinds.items()]
        if parts:
            out.append(f"latency at {level} (ms p50/p90/p99): {', '.join(parts)}")
    return out


def figure_lines(fig: Figure) -> list[str]:
    """The header's figure: its value over launches, where a fresh launch should measure, and its
    verdict against the baseline over launches (each a line ``_comment_header`` comments)."""
    value, n = fig.value, fig.launches
    got = f"{value:.3f} {fig.unit}" if value is not None else "not measured"
    spread = f" (+-{100 * fig.spread:.1f}% within its trial)" if fig.spread is not None else ""
    lines = [f"value: {got}, the median of {n} launch{'' if n == 1 else 'es'}{spread}"]
    fresh, noise = fig.fresh_launch_95, fig.launch_noise
    if fresh:
        lines.append(f"a fresh launch should measure {fresh[0]:.3f}-{fresh[1]:.3f} (95%; launch noise "
                     f"+-{100 * (noise.relative or 0.0):.1f}% from {noise.launches} launches)")
    else:
        lines.append("no range for a fresh launch yet: the launch noise is not measured")
    vs = fig.vs_baseline
    same = vs is not None and vs.same_config
    if vs is not None and fig.baseline_value:
        what = "the baseline itself" if same else vs.text
        lines.append(f"vs baseline trial {fig.baseline_trial} ({fig.baseline_value:.2f}): {what}")
    if fig.compare_values:
        shown = ", ".join(f"{v:.2f}" for v in fig.compare_values)
        base_values = fig.baseline_compare_values
        beside = f" (the baseline: {', '.join(f'{v:.2f}' for v in base_values)})" if base_values and not same else ""
        lines.append(f"`ncclsweep compare` launched it {len(fig.compare_values)} time(s): {shown}{beside}")
    return lines


def _speculation_comment(prov: Provenance) -> list[str]:
    """What speculative decoding achieved in the measurement, where the server counted it."""
    rate, length = prov.acceptance_rate, prov.mean_accepted_length
    if rate is None and length is None:
        return []
    parts = ([f"{100 * rate:.1f}% of drafted tokens accepted"] if rate is not None else []) + (
        [f"{length:.2f} tokens per target step"] if length is not None else [])
    return [f"speculative decoding: {', '.join(parts)} (the server's counters over the benchmark prompts)"]


def _notice_comments(prov: Provenance) -> list[str]:
    """The engine's notices in the measured launch, and each value it turned off with what it ran
    instead: a config can change more than it says; and where the measuring client fell behind, its
    notice (the figure may be overstated)."""
    return [f"engine notice: {_one_line(n, 10_000)}" for n in prov.engine_notices] + [
        f"engine fallback: {_one_line(f.get('text'), 10_000)}" for f in prov.engine_fallbacks] + [
        f"client notice: {_one_line(n, 10_000)}" for n in prov.client_notices]


# ---- environment & command --------------------------------------------------------------------------
def _launch(backend: Any, config: dict[str, Any], host: str, port: int):
    if backend is None:
        return None
    try:
        return backend.launch_spec(config, host, port)
    except Exception:  # noqa: BLE001 - cmd export reports it; env falls back to env.* params
        return None


def effective_env(job: ExportJob, config: dict[str, Any], backend: Any = None, host: str = "0.0.0.0",
                  port: int = 8000) -> dict[str, str]:
    """The job's fixed env, overridden by the config's env delta (as the trial ran it, less
    the tuner's own NCCL_DEBUG instrumentation)."""
    spec = _launch(backend, config, host, port)
    delta = dict(spec.env) if spec is not None else Backend.env_of(config)
    return server_environment(getattr(job, "env", None) or {}, delta, instrumented=False)


def _non_env(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if not k.startswith("env.")}


def _env_lines(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(``KEY=VALUE`` lines, comments on what could not be one): a name that is not an
    environment variable's, or a value that is not one line, is left out and said so."""
    lines, skipped = [], []
    for key, value in sorted(env.items()):
        problem = None if _ENV_NAME.fullmatch(key) else "not an environment variable name"
        problem = problem or env_value_problem(value)
        if problem:
            skipped.append(_comment(f"skipped {brief(key)}: {problem}"))
        else:
            lines.append(f"{key}={value}")
    return lines, skipped


def _env_block(job: ExportJob, row: TrialRow, backend: Any, host: str, port: int) -> list[str]:
    env = effective_env(job, row.params, backend, host, port)
    lines = []
    rest = _non_env(row.params)
    if rest:
        lines.append(_comment(f"not environment settings (they are in the launch command, --format cmd): "
                              f"{short_params(rest)}"))
    assignments, skipped = _env_lines(env)
    lines += skipped + assignments
    if not env:
        lines.append("# (this config sets no environment variables)")
    return lines


def _cmd_block(job: ExportJob, row: TrialRow, backend: Any, host: str, port: int) -> list[str]:
    """The launch line: env assignments, then the argv, every word shell-quoted (a value spanning
    lines stays inside its quotes); a variable that cannot be assigned on a shell line is left
    out and said so."""
    spec = _launch(backend, row.params, host, port)
    if spec is None:
        raise RuntimeFailure(f"cannot build the launch command: backend {brief(_backend_kind(job, backend))} "
                             "is not available")
    env = effective_env(job, row.params, backend, host, port)
    skipped = [_comment(f"skipped {brief(key)}: not an environment variable name")
               for key in sorted(env) if not _ENV_NAME.fullmatch(key)]
    env = {k: v for k, v in env.items() if _ENV_NAME.fullmatch(k)}
    return skipped + [dataclasses.replace(spec, env=env).shell_line()]


# ---- NCCL tuner plugin rules (``results.tuner_rules``) ------------------------------------------------
def _tuner_block(job: ExportJob, row: TrialRow, backend: Any, host: str, port: int) -> list[str]:
    source, notes, rules = tuner_rules.rules_for(row.params, row.nccl, row.number, tuner_rules.sweep_of(job))
    return [_comment(source)] + [_comment(n) for n in notes] + rules


# ---- the entry point ----------------------------------------------------------------------------------
def _document(job: ExportJob, row: TrialRow, rows: list[TrialRow], backend: Any, rank: int, host: str,
              port: int, choice: Choice | None = None, tie: TieBreak | None = None) -> dict[str, Any]:
    return ExportDocument(rank, dict(row.params), effective_env(job, row.params, backend, host, port),
                          provenance(job, row, rows, backend, rank, choice, tie)).to_record()


def export(job: ExportJob, rows: list[TrialRow], fmt: str, top: int = 1, *, backend: Any = None,
           host: str = "0.0.0.0", port: int = 8000, level: int | None = None, mix: bool = False) -> str:
    """Render the ``top`` best configs in ``fmt`` (see module docstring); text ends with a newline.

    ``level``/``mix``: the best at that level of the objective, or for its traffic mix
    (``choose``). Raises BadInput for an unknown format, ``top < 1``, a level the objective
    lacks or a mix without weights; RuntimeFailure when no trial completed, when the golden
    reference is disputed (``reference.disputed``: no config is then best, the baseline
    included), or when ``cmd`` cannot be built.
    """
    if fmt not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, not {brief(fmt)}", key="--format")
    choice, best, tie = exported(job, rows, top, level, mix)
    backend = resolve_backend(job, backend)
    if fmt in ("yaml", "json"):
        docs = [_document(job, row, rows, backend, i + 1, host, port, choice, tie) for i, row in enumerate(best)]
        if fmt == "json":
            return json.dumps(docs[0] if top == 1 else docs, indent=2, default=str) + "\n"

        return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, allow_unicode=True)
    block = {"env": _env_block, "cmd": _cmd_block, "nccl-tuner": _tuner_block}[fmt]
    out = _preamble(fmt, job, best[0], host, port)
    if len(best) < top:
        out.append(f"# only {len(best)} distinct completed config(s) to export (asked for {top})")
    for i, row in enumerate(best):
        prov = provenance(job, row, rows, backend, i + 1, choice, tie)
        header = _comment_header(fmt, prov, len(best))
        body = block(job, row, backend, host, port)
        if len(best) > 1:
            tag = "active" if i == 0 else "alternative: uncomment to use it instead of 1"
            out.append(f"# ===== {i + 1} of {len(best)}: trial {row.number} ({tag}) =====")
        out.extend(header)
        out.extend(body if i == 0 else _commented_out(body))
        out.append("")
    if fmt == "nccl-tuner":
        out = tuner_rules.fit(out)
    return "\n".join(out).rstrip("\n") + "\n"


def _preamble(fmt: str, job: ExportJob, first: TrialRow, host: str, port: int) -> list[str]:
    """What the file is, in its first lines: the launch command is the whole deploy (a shell
    script, and where it listens); the env file its environment half, naming what the command
    carries besides; the tuner rules, their format."""
    if fmt == "nccl-tuner":
        return list(tuner_rules.PREAMBLE)
    job_file = _one_line(getattr(job, "path", None) or "JOB")
    if fmt == "cmd":
        everywhere = " (every network interface of this machine)" if host in ("0.0.0.0", "::") else ""
        return ["#!/bin/sh",
                _comment(f"the deploy artifact: the server's environment and launch command, as trial {first.number} "
                         f"ran it; run it with sh (it starts the server in the foreground)"),
                _comment(f"the server listens on {_one_line(host)}:{port}{everywhere}; "
                         f"`ncclsweep export {job_file} --format cmd --host H --port P` writes it for another "
                         "address")]
    rest = short_params(_non_env(first.params))
    carries = f" ({rest} and the server's flags)" if rest else " (the server's flags)"
    return [_comment(f"the environment half of trial {first.number}'s config, for docker run --env-file or "
                     f"systemd EnvironmentFile (not a shell script: nothing in it is expanded); the launch command "
                     f"carries the rest{carries}: `ncclsweep export {job_file} --format cmd`")]


def _commented_out(body: list[str]) -> list[str]:
    """An alternative: every physical line of it a comment (a quoted value of a launch line may
    span lines; each of them is commented)."""
    out: list[str] = []
    for text in body:  # a comment of ours is one line already; a live line may span several
        out += [text] if text.startswith("#") else [f"# {line}" for line in text.split("\n")]
    return out


# ---- reading a config back ------------------------------------------------------------------------
_SCALARS = (str, int, float, bool)


def load_config_file(path: str | Path, rank: int = 1) -> dict[str, Any]:
    """The config in a file for ``ncclsweep bench --config``.

    Accepts this module's ``yaml``/``json`` export (the document of ``rank``, default the
    best; a multi-document YAML file or a JSON list), or a plain flat mapping of params
    (``tp_size: 2``, ``env.NCCL_PROTO: LL``). Raises BadInput naming the file.
    """
    path = Path(path)
    text = read_text_bounded(path, file=str(path), what="config")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise BadInput(f"not valid JSON: {why}", file=str(path)) from None
        docs = data if isinstance(data, list) else [data]
    else:
        docs = [d for d in load_yaml_documents(text, file=str(path)) if d is not None]
        if len(docs) == 1 and isinstance(docs[0], list):
            docs = docs[0]
    if not docs:
        raise BadInput("the file holds no configuration", file=str(path))
    if not 1 <= rank <= len(docs):
        raise BadInput(f"rank {rank} asked for, but the file holds {len(docs)} configuration(s)", file=str(path))
    doc = docs[rank - 1]
    if not isinstance(doc, dict):
        raise BadInput(f"expected a mapping of params or an ncclsweep export, found {type(doc).__name__}",
                       file=str(path))
    exported = "config" in doc and ("ncclsweep_export" in doc or isinstance(doc["config"], dict))
    config = doc["config"] if exported else doc
    if not isinstance(config, dict):
        raise BadInput("'config' must be a mapping of params", file=str(path), key="config")
    prefix = "config." if config is not doc else ""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise BadInput(f"param names must be non-empty strings, not {brief(key)}", file=str(path))
        if not isinstance(value, _SCALARS):
            raise BadInput(f"a param value must be a string, number or boolean, not {type(value).__name__}"
                           f" (configs are flat: use 'env.NCCL_PROTO: LL', not nesting)",
                           file=str(path), key=prefix + key)
        out[key] = value
    if not out and config is doc:
        raise BadInput("the configuration is empty", file=str(path))
    return out
