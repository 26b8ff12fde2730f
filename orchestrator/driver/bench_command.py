"""``ncclsweep bench``: measure one configuration once, without a study.

The config is the backend's defaults, then the job's baseline, then ``--config FILE``
(an export), then ``--set`` pairs. Both are checked like the job's ``baseline:``
(parameter names with did-you-mean, values the space allows, NCCL values, unsafe NCCL
values refused unless ``allow_unsafe_nccl``), then by the space's constraints and the
backend: ``bench`` measures nothing ``validate`` would refuse. It runs the same trial
lifecycle as a study trial, in this process, with its own server log per run
(``bench-logs/bench-<time>-<pid>.log``). When the job's study already holds a golden
reference, the output goes through the same correctness gate as a study trial. While it
runs, its phases are a status line in a terminal and event lines elsewhere, as a study's.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from orchestrator.config.job_checks import config_mapping, raw_message
from orchestrator.core import correctness, nccl, outcome, rate_search
from orchestrator.core.errors import BadInput, ConfigRejected, NcclsweepError
from orchestrator.core.measurement import cache_text, level_text
from orchestrator.core.records import FailureKind, TrialResult
from orchestrator.core.slo import Targets
from orchestrator.driver.progress import Progress
from orchestrator.node.spec import TrialSpec, check_plan
from orchestrator.node.trial import run_trial
from orchestrator.study.storage.storage import GOLDEN_ATTR, load_study


def check_overrides(job, overrides: dict[str, Any], source: str) -> dict[str, Any]:
    """``overrides`` (from ``source``: "--set" or the config file) checked one by one like the
    job's ``baseline:``; BadInput names the pair (``--set tp=2: unknown parameter ...``)."""
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        try:
            out.update(config_mapping({name: value}, str(job.path), "_", job.allow_unsafe_nccl, space=job.space))
        except BadInput as exc:
            raise BadInput(f"{source} {name}={value}: {raw_message(exc)}") from None
    return out


def resolve_config(job, overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults + baseline + (already checked) overrides, as the space and the backend see it."""
    backend = job.backend_obj()
    config = job.space.active({**backend.default_config(), **(job.baseline or {}), **overrides})
    why = job.space.feasible(config)
    if why is not None:
        raise BadInput(f"the space's constraints refuse this config ({why}); allowed: the configs of "
                       f"{job.space.file}", file=str(job.path))
    try:
        backend.check_config(dict(config))
    except ConfigRejected as exc:
        raise BadInput(f"the {job.backend.kind} backend cannot run this config: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise BadInput(f"the {job.backend.kind} backend cannot run this config {config}: {exc}") from None
    return backend.normalize(config)


def study_golden(job) -> correctness.Golden | None:
    """The golden reference the job's study captured, if the study exists and has one."""
    if not job.correctness.enabled:
        return None
    try:
        data = load_study(job).user_attrs.get(GOLDEN_ATTR)
    except NcclsweepError:
        return None
    return correctness.Golden.from_dict(data) if data else None


def bench_config(job, overrides: dict[str, Any], number: int = 0, verify_nccl: bool = False,
                 golden: correctness.Golden | None = None) -> TrialResult:
    """Measure ``overrides`` on top of the baseline once; with ``golden``, gate its output."""
    config = resolve_config(job, overrides)
    spec = TrialSpec.from_job(
        job, number, config, check=check_plan(job, golden.texts, prompts=tuple(golden.prompts)) if golden else None,
        log_dir=job.dir.bench_logs, log_name=f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log",
        extra_env=nccl.debug_env(tuning=True) if verify_nccl else None,  # per-call choices: never a timed trial
        device_check=False, measure_bandwidth=False)
    progress = Progress(job, trials=1, timeout_s=None)
    try:
        result = run_trial(spec, threading.Event(), on_phase=lambda phase: progress.running([("bench", phase)]))
    finally:
        progress.idle()
    if golden is not None:
        result = outcome.gate(result, golden)
    return result


def format_result(result: TrialResult, targets: Targets | None = None) -> str:
    """What ``bench`` prints of its one launch; ``targets``: the job's SLO (a rate search's probes say
    the percentiles it targets)."""
    params = " ".join(f"{k}={v}" for k, v in result.config.items())
    lines = [f"config: {params}"]
    if result.outcome != "COMPLETE":
        lines.append(f"FAIL {result.failure_kind}: {result.failure_reason}")
        if result.failure_kind == FailureKind.WRONG_OUTPUT:
            ignored = result.metrics.get("decode_tok_s_ignored")
            if ignored:
                lines.append(f"(measured {ignored:.1f} tok/s, which does not count: the output is wrong)")
        elif result.log_tail:
            lines.append("server log tail:\n" + "\n".join(result.log_tail.splitlines()[-15:]))
        if result.server.get("log"):
            lines.append(f"server log: {result.server['log']}")
        return "\n".join(lines)
    got = result.measurement
    levels = got.levels if got is not None else {}
    one = levels.get(1)
    if one is not None and one.value is not None:
        samples = ", ".join(f"{s:.1f}" for s in one.samples)
        lines.append(f"decode: {one.value:.1f} tok/s (median of {len(one.samples)}: {samples}; "
                     f"cv {100 * (one.cv or 0):.1f}%)")
    lines.extend(f"level {level_text(lv)}" for lv in levels.values())
    searched = got.capacity if got is not None else None
    if searched is not None:  # a capacity search: its open-loop probes, its answer, where the engine changes regime
        lines.extend(f"rate {rate_search.probe_line(p, targets)}" for p in searched.rate_probes)
        lines.append(f"goodput: {searched.answer(got.value)}")  # type: ignore[union-attr]
        lines.extend(searched.notes())
    if got is not None and got.lengths is not None:
        lines.append(f"lengths: {got.lengths.describe()}")
    verdict = result.correctness
    if verdict:
        drift = verdict.get("max_drift")
        drift_s = (f", log-prob drift {drift:.3g} <= {verdict.get('tolerance'):.3g} nats/token"
                   if drift is not None else "")
        lines.append(f"correctness: passed the study's gate (greedy text matches the golden reference on "
                     f"{verdict.get('text_matches')} prompts{drift_s})")
    head = got.headline if got is not None else None
    if head is not None and (head.acceptance_rate is not None or head.mean_accepted_length is not None):
        rate, length = head.acceptance_rate, head.mean_accepted_length
        lines.append("speculative decoding: " + ", ".join(
            ([f"{100 * rate:.1f}% of drafted tokens accepted"] if rate is not None else [])
            + ([f"{length:.2f} tokens per target step"] if length is not None else [])))
    if one is not None and one.ttft is not None:
        cached = f" ({cache_text(one)})" if cache_text(one) else ""
        lines.append(f"ttft: {1000 * one.ttft.p50:.1f} ms{cached}   end-to-end: {one.e2e_tok_s or 0:.1f} tok/s")
    if got is not None and got.host is not None and got.host.describe():
        lines.append(f"host: {got.host.describe()} while measured")
    t = result.timing
    lines.append("time: " + ", ".join(f"{k[:-2]} {v:.2f}s" for k, v in t.items()))
    if result.nccl.get("version"):
        took = ", ".join(f"{k}={v}" for k, v in sorted((result.nccl.get("env_applied") or {}).items()))
        lines.append(f"nccl: {result.nccl['version']}; took from the environment: {took or 'nothing'}; "
                     f"transports: {', '.join(result.nccl.get('transports') or []) or 'none'}")
    calls = result.nccl.get("per_call") or []
    if calls:
        lines.append("nccl per-call choices (collective, bytes -> algorithm, protocol):")
        lines.extend(f"  {c[0]} {c[1]} B -> {c[2]} {c[3]}" if isinstance(c, (list, tuple)) else f"  {c}"
                     for c in calls[:20])
    for w in result.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
