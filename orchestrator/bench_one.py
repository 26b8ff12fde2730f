"""``ncclsweep bench``: measure one configuration once, without a study.

The config is the backend's defaults, then the job's baseline, then ``--config FILE``
(an export), then ``--set`` pairs. It runs the same trial lifecycle as a study trial,
in this process.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from orchestrator import nccl
from orchestrator.errors import BadInput
from orchestrator.records import TrialResult
from orchestrator.trial import TrialSpec, run_trial


def resolve_config(job, overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults + baseline + overrides, validated like a space config."""
    backend = job.backend_obj()
    config = {**backend.default_config(), **(job.baseline or {}), **overrides}
    for name, value in config.items():
        if name.startswith("env.NCCL_"):
            try:
                nccl.validate_value(name[4:], value)
            except ValueError as exc:
                raise BadInput(str(exc), key=name) from None
    backend.check_config(config)
    return backend.normalize(config)


def bench_config(job, overrides: dict[str, Any], number: int = 0, verify_nccl: bool = False) -> TrialResult:
    config = resolve_config(job, overrides)
    env = dict(job.env)
    if verify_nccl:  # per-call choices: a separate launch, never a timed trial (TUNING logs every call)
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,ENV,TUNING")
    report_dir = Path(job.report_dir).resolve()
    spec = TrialSpec(
        number=number, config=config, backend_kind=job.backend.kind, backend_settings=dict(job.backend.settings),
        job_file=str(job.path), log_dir=str(report_dir / "bench-logs"), registry_dir=str(report_dir / "servers"),
        prompt=job.bench.prompt, output_tokens=job.bench.output_tokens, warmup=job.bench.warmup,
        repeats=job.bench.repeats, max_repeats=job.bench.max_repeats, target_rel_ci=job.bench.target_rel_ci,
        startup_timeout_s=job.timeouts.startup_s, bench_timeout_s=job.timeouts.bench_s,
        teardown_grace_s=job.timeouts.teardown_s, env=env, device_check=False, measure_bandwidth=False)
    return run_trial(spec, threading.Event())


def format_result(result: TrialResult) -> str:
    params = " ".join(f"{k}={v}" for k, v in result.config.items())
    lines = [f"config: {params}"]
    if result.outcome != "COMPLETE":
        lines.append(f"FAIL {result.failure_kind}: {result.failure_reason}")
        if result.log_tail:
            lines.append("server log tail:\n" + "\n".join(result.log_tail.splitlines()[-15:]))
        return "\n".join(lines)
    m = result.metrics
    samples = ", ".join(f"{s:.1f}" for s in m.get("decode_samples", []))
    lines.append(f"decode: {m['decode_tok_s']:.1f} tok/s (median of {m.get('repeats')}: {samples}; "
                 f"cv {100 * (m.get('cv') or 0):.1f}%)")
    if m.get("ttft_s") is not None:
        lines.append(f"ttft: {1000 * m['ttft_s']:.1f} ms   end-to-end: {m.get('e2e_tok_s', 0):.1f} tok/s")
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
