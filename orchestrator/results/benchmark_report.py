"""The study's measurements as llm-d Benchmark Reports (schema v0.2.1): one report per measured
config and level, for llm-d-prism's dashboards and every tool that reads the format.

The schema is llm-d-benchmark's (``llmdbenchmark/analysis/benchmark_report``, its JSON Schema
``br_v0_2_1_json_schema.json``; the copy the tests validate against is under
``tests/fixtures/benchmark_report``). Which configs: the baseline, the best (``export.choose`` and
``export.ranked``, so ``--concurrency N``, ``--mix`` and ``--top K`` choose as for every export)
and each ``--trial N``; which levels: every level the config's trial measured (the objective's, and
those its outcome constraints read). Each report holds

- ``run``: a ``uid`` of its own (a UUID5 of the study's storage, name, trial and level: exporting
  again writes the same ids), an ``eid`` shared by the reports of one config (llm-d: "stages of the
  same run share it; treatments of a sweep do not"), the trial's start and end, and a
  ``description`` in llm-d's default form ``<model> [<study> trial N (role)]``, the label
  llm-d-prism shows;
- ``scenario.stack``: the server as the trial ran it: the engine (``tool``: the backend kind), its
  version as recorded, the model, the accelerator (the GPU model the node recorded, and the GPUs
  the config occupies, TP x PP; on a CPU run ``cpu`` and 0), TP and PP; ``native`` the recorded
  argv (``args.argv``), the environment the tool set for it (``envars``: the job's ``env`` and the
  config's variables, the rest being the node's own) and the flat config (``config.params``);
- ``scenario.load``: this tool as the load generator: the level's streams (``concurrency``; a
  closed loop, no ``rate_qps``), the prompt and output lengths (``input_seq_len``: the lengths of
  its prompts as the server counted them; ``output_seq_len``: the tokens every request asked for,
  or those it returned where they varied), ``stage``: the level's place among the config's levels;
- ``results.request_performance.aggregate``: what the trial's own launch measured at that level:
  ``throughput.output_token_rate`` over its samples (at one stream the decode tok/s of each
  request, (n - 1) / (t_last - t_first), the time to the first token left out; at N streams the
  total output tok/s of each round's steady-state window), its ``p50`` the level's figure as
  ``status`` prints it; ``latency`` TTFT, TPOT, ITL and end-to-end (mean, p50, p90, p99; seconds,
  seconds per token); ``requests`` the requests measured (no failures: a failed request fails a
  trial) and their prompt and output tokens;
- ``results.observability.ncclsweep`` (the schema's open object, where harnesses keep their own
  metrics): this tool's figure of the config at that level over every launch of it (``export``'s
  ``figure``: the median, the launches and their values, where a fresh launch should measure, the
  launch noise, the verdict against the baseline, the race, a drift), the study, trial, role and
  config, and the level's other figures (the whole run's tok/s as ``vllm bench serve`` counts it,
  the steady-state window, the prefix cache's share, ...).

A value the study did not record is absent, never invented: a latency recorded without its mean
(before levels kept it) is left out of ``latency`` (the schema needs a mean) and kept in the
extension; lengths recorded before levels kept them leave ``scenario.load`` out (its input length
is required). Units are the schema's: seconds (``s``, ``s/token``), ``tokens/s``, ``count``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import orchestrator
from orchestrator.core.errors import BadInput, brief
from orchestrator.core.files import write_whole
from orchestrator.core.level import context_of, streams
from orchestrator.core.measurement import LATENCY_KINDS, Distribution, Latency, LevelResult
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.results import export as exports
from orchestrator.study.evidence.history import baseline_row, short_params

FORMAT = "benchmark-report"
VERSION = "0.2.1"
TOOL = "ncclsweep"
# the schema's field for each latency this tool records, and its unit (the schema's checks: a time,
# or a time per token)
LATENCY_FIELDS = {"ttft": ("time_to_first_token", "s"), "tpot": ("time_per_output_token", "s/token"),
                  "itl": ("inter_token_latency", "s/token"), "e2e": ("request_latency", "s")}
_NAMESPACE = uuid.UUID("6b1d3f5e-2c4a-5e8f-9a7b-0c1d2e3f4a5b")  # this tool's reports' UUID5 namespace
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Measured:
    """One launch to report: its row (a config's trial, or a launch ``--trial`` named) and what it
    is to this export (``baseline``, ``best``, ``rank 2``, ``trial``: one or more)."""

    row: TrialRow
    roles: tuple[str, ...]

    @property
    def role(self) -> str:
        return "+".join(self.roles)


def chosen(job: Any, rows: list[TrialRow], *, top: int = 1, level: int | str | None = None, mix: bool = False,
           trials: Sequence[int] = ()) -> list[Measured]:
    """The configs to report, in order: the baseline, the ``top`` best (as ``export`` chooses
    them), then each of ``trials`` (a trial number of the study: any launch that completed with a
    measurement, a relaunch of a config included: its own launch is reported). A trial met twice is
    reported once, its roles joined. BadInput for a trial the study has not measured; RuntimeFailure
    where nothing is best (as ``export``)."""
    _, best, _ = exports.exported(job, rows, top, level, mix)  # the configs every format exports
    measured = {r.number: r for r in rows if r.state == COMPLETE and r.levels and r.cached_from is None}
    picked: list[tuple[TrialRow, str]] = []
    base = baseline_row(rows)
    if base is not None and base.number in measured:
        picked.append((base, "baseline"))
    picked += [(row, "best" if i == 0 else f"rank {i + 1}") for i, row in enumerate(best)]
    for number in trials:
        if number not in measured:
            have = ", ".join(str(n) for n in sorted(measured)) or "none"
            raise BadInput(f"trial {brief(number)} is not a measured trial of study {getattr(job, 'study', '?')} "
                           f"(trials with a measurement: {have})", key="--trial")
        picked.append((measured[number], "trial"))
    out: dict[int, tuple[TrialRow, list[str]]] = {}
    for row, role in picked:
        got = out.setdefault(row.number, (row, []))
        if role not in got[1]:
            got[1].append(role)
    return [Measured(row, tuple(roles)) for row, roles in out.values()]


def reports(job: Any, rows: list[TrialRow], *, top: int = 1, level: int | str | None = None, mix: bool = False,
            trials: Sequence[int] = (), backend: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """(file name, report) for every chosen config (``chosen``) and level its row measured; a study by
    request rate, which measured no level, is refused in one line (BadInput), not answered with none."""
    if getattr(getattr(job, "objective", None), "rate", None) is not None:
        raise BadInput(f"--format {FORMAT} writes a report per closed-loop level, and this study measured request "
                       "rates (objective.goodput.max_rate), no level; --format yaml or json states each config's "
                       "capacity by rate with every rate probed", key="--format")
    backend = exports.resolve_backend(job, backend)
    out = []
    for item in chosen(job, rows, top=top, level=level, mix=mix, trials=trials):
        for stage, (lv, got) in enumerate(item.row.levels.items()):
            doc = report(job, rows, item, lv, got, stage, backend)
            out.append((file_name(job, item, lv, stage), doc))
    return out


def render(job: Any, rows: list[TrialRow], **kw: Any) -> str:
    """The reports as one YAML stream (a document each), for stdout."""
    return yaml.safe_dump_all([doc for _, doc in reports(job, rows, **kw)], sort_keys=False,
                              default_flow_style=False, allow_unicode=True)


def write(job: Any, rows: list[TrialRow], folder: str | Path, **kw: Any) -> list[Path]:
    """Each report as a YAML file in ``folder`` (created), each written whole (``core.files``);
    the paths written. BadInput where ``folder`` is a file."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"-o {folder}: --format {FORMAT} writes one file per config and level into a folder, "
                       "and this is a file", key="-o")
    docs = reports(job, rows, **kw)
    return [write_whole(folder / name, yaml.safe_dump(doc, sort_keys=False, default_flow_style=False,
                                                      allow_unicode=True)) for name, doc in docs]


def file_name(job: Any, item: Measured, level: int, stage: int) -> str:
    """``benchmark_report_v0.2.1_<study>_trial<N>_<role>_stage<i>_c<streams>[-ctx<tokens>].yaml``:
    llm-d-benchmark's prefix (its tools glob ``benchmark_report_v0.2*``) and the stage number
    llm-d-prism reads from a file name."""
    study = _UNSAFE.sub("-", str(getattr(job, "study", "study"))).strip("-") or "study"
    role = _UNSAFE.sub("-", item.role.replace("+", "-")).strip("-")
    ctx = f"-ctx{context_of(level)}" if context_of(level) else ""
    return f"benchmark_report_v{VERSION}_{study}_trial{item.row.number}_{role}_stage{stage}_c{streams(level)}{ctx}.yaml"


# ---- one report ----------------------------------------------------------------------------------
def report(job: Any, rows: list[TrialRow], item: Measured, level: int, got: LevelResult, stage: int,
           backend: Any = None) -> dict[str, Any]:
    """The v0.2.1 report of ``item``'s config at ``level`` (module docstring)."""
    row = item.row
    model = _model(job, backend)
    study = getattr(job, "study", None)
    doc: dict[str, Any] = {"version": VERSION, "run": _run(job, row, item, level, model)}
    scenario: dict[str, Any] = {"stack": [_engine(job, row, backend, model)]}
    load = _load(job, row, item, level, got, stage)
    if load is not None:
        scenario["load"] = load
    doc["scenario"] = scenario
    figure = exports.figure_of(job, rows, row, exports.Choice(level=level)).to_record()
    doc["results"] = {"request_performance": {"aggregate": _aggregate(got)},
                      "observability": {TOOL: _own(study, row, item, level, got, figure)}}
    return _plain(doc)


def _plain(value: Any) -> Any:
    """JSON's and YAML's types only: tuples as lists, keys as text, a number that is not finite as
    absent (null)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _uuid(*parts: Any) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(str(p) for p in parts)))


def _run(job: Any, row: TrialRow, item: Measured, level: int, model: str | None) -> dict[str, Any]:
    study, storage = getattr(job, "study", None), getattr(job, "storage", None)
    out: dict[str, Any] = {"uid": _uuid(storage, study, row.number, level),
                           "eid": _uuid(storage, study, row.config_key),
                           "description": f"{model or 'model unknown'} [{study} trial {row.number} ({item.role})]"}
    start, end = _when(row.started_at), _when(row.ended_at)
    when: dict[str, Any] = {}
    if start is not None:
        when["start"] = start.isoformat()
    if end is not None:
        when["end"] = end.isoformat()
    if start is not None and end is not None and end >= start:
        when["duration"] = f"PT{(end - start).total_seconds():.3f}S"
    if when:
        out["time"] = when
    return out


def _when(text: str | None) -> _dt.datetime | None:
    """A recorded ISO time with its zone (UTC where it names none), or None."""
    if not text:
        return None
    try:
        at = _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=_dt.timezone.utc)


def _model(job: Any, backend: Any) -> str | None:
    settings = dict(getattr(backend, "settings", None)
                    or getattr(getattr(job, "backend", None), "settings", None) or {})
    got = next((settings[k] for k in ("model", "model_path", "model-path", "preset") if settings.get(k)), None)
    return str(got) if got is not None else None


def _engine(job: Any, row: TrialRow, backend: Any, model: str | None) -> dict[str, Any]:
    """The server as the trial ran it: an ``inference_engine`` component."""
    kind = str(getattr(backend, "kind", None) or getattr(getattr(job, "backend", None), "kind", None) or "unknown")
    version = row.server.get("version")
    if not version and kind == "refserver":  # the embedded server is this tool's own code
        version = f"refserver {orchestrator.__version__}"
    node = row.node_info or {}
    params = dict(row.params)
    on_cpu = node.get("memory_device") == "cpu" or (not node.get("gpu_model") and node.get("gpus") == "")
    try:
        gpus = int(backend.gpus_per_trial(params)) if backend is not None else int(params.get("tp_size", 1))
    except Exception:  # noqa: BLE001 - a backend that cannot count them: TP x PP
        gpus = int(params.get("tp_size", 1) or 1) * int(params.get("pp_size", 1) or 1)
    parallelism = {"tp": _int(params.get("tp_size"), 1), "pp": _int(params.get("pp_size"), 1)}
    native: dict[str, Any] = {"config": {"params": params}}
    if isinstance(row.server.get("argv"), list):
        native["args"] = {"argv": [str(a) for a in row.server["argv"]]}
    if isinstance(row.server.get("env"), dict):
        native["envars"] = {str(k): str(v) for k, v in row.server["env"].items()}
    return {
        "metadata": {"label": kind, "cfg_id": row.config_key,
                     "description": f"trial {row.number}: {short_params(params) or 'the server defaults'}"},
        "standardized": {"kind": "inference_engine", "tool": kind, "tool_version": str(version or "unknown"),
                         "role": "replica", "replicas": 1, "model": {"name": model or "unknown"},
                         "accelerator": {"model": "cpu" if on_cpu else str(node.get("gpu_model") or "unknown"),
                                         "count": 0 if on_cpu else gpus, "parallelism": parallelism}},
        "native": native,
    }


def _int(value: Any, default: int) -> int:
    try:
        got = int(value)
    except (TypeError, ValueError):
        return default
    return got if got >= 1 else default


def _length(dist: Distribution | None) -> dict[str, Any] | None:
    """A ``SequenceLength`` of measured lengths: ``fixed`` where every request had one, else
    ``other`` (its median, and its range)."""
    if dist is None:
        return None
    if dist.low == dist.high:
        return {"distribution": "fixed", "value": int(dist.low)}
    return {"distribution": "other", "value": dist.p50, "min": int(dist.low), "max": max(1, int(dist.high))}


def _load(job: Any, row: TrialRow, item: Measured, level: int, got: LevelResult, stage: int) -> dict[str, Any] | None:
    """This tool as the load generator at ``level``; None where the prompts' lengths were not
    recorded (the schema requires the input length)."""
    measurement = row.measurement
    input_len = _length(got.input_length)
    if input_len is None or measurement is None:
        return None
    standardized: dict[str, Any] = {"tool": TOOL, "tool_version": exports._tool_version(), "parallelism": 1,
                                    "source": "sampled", "stage": stage, "input_seq_len": input_len,
                                    "concurrency": streams(level)}
    fixed = measurement.lengths is None and measurement.output_tokens > 0
    output_len = {"distribution": "fixed", "value": measurement.output_tokens} if fixed else _length(got.output_length)
    if output_len is not None:
        standardized["output_seq_len"] = output_len
    prompts = row.prompt_set or {}
    native: dict[str, Any] = {"config": {"level": str(level), "streams": streams(level), "context": context_of(level),
                                         "rounds": measurement.rounds, "prompts": measurement.prompts,
                                         "output_tokens": measurement.output_tokens,
                                         "prompt_set": dict(prompts) or None}}
    return {"metadata": {"description": f"{getattr(job, 'study', None)} trial {row.number} ({item.role}): "
                                        f"{short_params(row.params) or 'the server defaults'}"},
            "standardized": {k: v for k, v in standardized.items() if v is not None}, "native": native}


def _statistics(values: Sequence[float], units: str, p50: float | None = None) -> dict[str, Any] | None:
    xs = sorted(values)
    if not xs:
        return None
    out: dict[str, Any] = {"units": units, "mean": statistics.fmean(xs)}
    if len(xs) > 1:
        out["stddev"] = statistics.stdev(xs)
    out.update(min=xs[0], p50=p50 if p50 is not None else statistics.median(xs), max=xs[-1])
    return out


def _latency(lat: Latency, units: str) -> dict[str, Any] | None:
    if lat.mean is None:  # recorded before levels kept the mean: the schema needs one
        return None
    return {"units": units, "mean": lat.mean, "p50": lat.p50, "p90": lat.p90, "p99": lat.p99}


def _distribution(dist: Distribution | None) -> dict[str, Any] | None:
    if dist is None:
        return None
    return {"units": "count", "mean": dist.mean, "min": dist.low, "p50": dist.p50, "p90": dist.p90, "p99": dist.p99,
            "max": dist.high}


def _aggregate(got: LevelResult) -> dict[str, Any]:
    """What the launch measured at the level, in the schema's fields and units."""
    out: dict[str, Any] = {}
    if got.requests > 0:
        requests: dict[str, Any] = {"total": got.requests, "failures": 0}  # a failed request fails the trial
        for name, dist in (("input_length", got.input_length), ("output_length", got.output_length)):
            stats = _distribution(dist)
            if stats is not None:
                requests[name] = stats
        out["requests"] = requests
    latency = {}
    for kind in LATENCY_KINDS:
        lat = got.latency(kind)
        name, units = LATENCY_FIELDS[kind]
        stats = _latency(lat, units) if lat is not None else None
        if stats is not None:
            latency[name] = stats
    if latency:
        out["latency"] = latency
    rate = _statistics(got.samples, "tokens/s", p50=got.value)
    if rate is not None:
        out["throughput"] = {"output_token_rate": rate}
    return out


def _own(study: Any, row: TrialRow, item: Measured, level: int, got: LevelResult,
         figure: dict[str, Any]) -> dict[str, Any]:
    """This tool's own fields (``results.observability.ncclsweep``): the report's launch at the
    level (``this_launch``: what the schema's fields hold, and the figures the schema has no field
    for) and the config's figure over every launch of it (``over_launches``: ``export``'s figure,
    with the launch noise and the verdict against the baseline)."""
    launch = {
        "value": got.value, "unit": got.unit, "samples": list(got.samples), "spread": got.spread,
        "output_token_rate": ("the decode tok/s of each request, (n - 1) / (t_last - t_first)" if streams(level) == 1
                              else "the total output tok/s of each round's steady-state window"),
        "whole_run_tok_s": got.whole_run_tok_s, "window_s": got.window_s, "e2e_tok_s": got.e2e_tok_s,
        "stream_decode_tok_s": got.stream_decode_tok_s, "prefix_cache_hit_rate": got.prefix_cache_hit_rate,
        "acceptance_rate": got.acceptance_rate, "mean_accepted_length": got.mean_accepted_length,
        "latency_s": {kind: lat.to_record() for kind in LATENCY_KINDS if (lat := got.latency(kind)) is not None},
    }
    return {
        "study": study, "trial": row.number, "roles": list(item.roles), "config": dict(row.params),
        "config_key": row.config_key, "launch_role": row.launch_role,
        "level": str(level), "streams": streams(level), "context": context_of(level),
        "this_launch": {k: v for k, v in launch.items() if v is not None},
        "over_launches": figure,
        "node": row.node, "nccl_version": (row.nccl or {}).get("version"),
        "ncclsweep_version": exports._tool_version(),
    }
