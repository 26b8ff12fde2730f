"""The all-reduce pre-screen: seconds per NCCL setting instead of minutes per server launch.

A 744B model takes minutes to load; an NCCL setting can be judged in seconds by the latency of
the collective the decode step repeats (``allreduce_probe``). ``run_prescreen(job)`` measures each
distinct (tp_size, NCCL env) of the job's space, and the custom path at each TP where torch can
run it, in two rounds, the second in the other order (``merge_rounds``: a size's interval spans
both launches, so a path is clearly faster there only if it was in both: on a busy host launches
drift by more than their own intervals say); predicts decode tok/s where a measured trial gives
"the rest" of a step (1 / (all-reduces per step x latency + rest)); and writes ``prescreen.json``
(``core.prescreened``) and ``prescreen-sweep.csv`` (``prescreen_table``) into the report folder.

The sizes decode uses: the message is hidden size x tokens in flight x bytes per element, and at
concurrency N there are N tokens in flight, so each level of the job's objective has its own size
(``decode_sizes``: GLM-5 at 1 and 10 streams: 12 KB and 120 KB). The probe sweeps
``sweep_sizes``: every 16 KB up to 512 KB (4, 8 and 12 KB below 16 KB), 768 KB and 1 MB, and each
decode size, so each path is measured where the crossovers on PCIe sit (48-120 KB as reported by
others, ``prescreen_paths``) and the NCCL tuner export (``results.export``) gets one measured point
per 16 KB bin. What the study drops or tries late is ``prescreen_drop``'s.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from orchestrator.core import files, prescreened
from orchestrator.core.errors import BadInput
from orchestrator.core.prescreened import Point, Prescreen, Probed
from orchestrator.core.records import config_key
from orchestrator.driver.allreduce_probe import measure_setting
from orchestrator.driver.prescreen_paths import crossovers
from orchestrator.driver.prescreen_table import sweep_csv
from orchestrator.study.storage import objective as objectives

# ---- what to measure ----------------------------------------------------------------------------

def settings_of(job) -> list[dict[str, Any]]:
    """Distinct (tp_size, NCCL env) pairs of the space at TP > 1 (NCCL is idle at TP=1)."""
    backend = job.backend_obj()
    seen: dict[str, dict[str, Any]] = {}
    for config in job.space.enumerate() or []:
        full = backend.normalize({**backend.default_config(), **config})
        tp = int(full.get("tp_size", 1))
        if tp < 2:
            continue
        setting = {"tp_size": tp, **{k: v for k, v in sorted(full.items()) if k.startswith("env.NCCL_")}}
        seen.setdefault(config_key(setting), setting)
    return list(seen.values())


KB = 1024
SWEEP_STEP = 16 * KB  # the sweep's step up to SWEEP_FINE_UP_TO: no bin of the tuner export is wider
SWEEP_FINE_UP_TO = 512 * KB
SWEEP_MAX = 64 * 1024 * KB


def decode_sizes(hidden: int, dtype_bytes: int, levels: tuple[int, ...] | list[int]) -> dict[int, int]:
    """{level: bytes of the decode all-reduce there}: hidden size x tokens in flight (one per
    stream at concurrency N) x bytes per element."""
    return {int(level): int(hidden) * int(level) * int(dtype_bytes) for level in sorted(levels)}


def sweep_sizes(decode: dict[int, int] | list[int], element_bytes: int = 1) -> list[int]:
    """The sizes the probe sweeps (module docstring), each a multiple of 16 bytes (the engines'
    custom kernels take no other) and of ``element_bytes``."""
    grid = {4 * KB, 8 * KB, 12 * KB, *range(SWEEP_STEP, SWEEP_FINE_UP_TO + 1, SWEEP_STEP), 768 * KB, 1024 * KB}
    decoded = list(decode.values()) if isinstance(decode, dict) else list(decode)
    size = 2048 * KB
    while decoded and size < max(decoded) and size <= SWEEP_MAX:
        grid.add(size)
        size *= 2
    unit = max(16, int(element_bytes))
    grid |= {max(unit, -(-int(d) // unit) * unit) for d in decoded}
    return sorted(g for g in grid if g <= SWEEP_MAX)


def custom_runnable(device: str) -> str | None:
    """Why torch cannot run the custom path here, or None (CUDA; whether P2P works is the probe's
    to find out: it fails with the reason)."""
    if device != "cuda":
        return (f"torch's symmetric-memory one-shot all-reduce needs CUDA devices with P2P; this job runs on "
                f"{device}: not runnable here")
    return None


def require_device(job, device: str) -> None:
    """The probes run here, on this machine: a CUDA job needs CUDA here (else every probe
    would fail after a minute of start-ups); BadInput, one line, at once."""
    if device != "cuda":
        return
    try:
        import torch  # heavy: imported only where a measurement runs on the device

        available = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no usable torch is no CUDA
        available = False
    if not available:
        raise BadInput(f"the job runs on CUDA (gpus_per_node: {job.gpus_per_node}) but this machine has no "
                       "CUDA device (torch.cuda.is_available() is false); the pre-screen times NCCL all-reduces "
                       "on the machine it runs on: run it on a GPU node of the job", file=str(job.path))


def merge_rounds(runs: list[Probed]) -> Probed:
    """One row from a setting's probe launches: failed if any failed (the first failure), else
    each size's median the median of the launches' medians and its interval the union of theirs,
    so launches that disagree leave their sizes within the noise; every sample kept."""
    failed = [r for r in runs if not r.ok]
    if failed or len(runs) == 1:
        return failed[0] if failed else runs[0]
    by_size: dict[int, list[Point]] = {}
    for run in runs:
        for point in run.sweep:
            by_size.setdefault(point.nbytes, []).append(point)
    sweep = []
    for size, points in sorted(by_size.items()):
        lows, highs = zip(*(p.interval[1:] for p in points))
        sweep.append(Point(size, statistics.median(p.latency_us for p in points), ci_us=(min(lows), max(highs)),
                           rounds_us=tuple(p.latency_us for p in points), algo=points[0].algo,
                           proto=points[0].proto))
    return dataclasses.replace(runs[0], latency_us=statistics.median(r.latency_us for r in runs),
                               samples_us=tuple(x for r in runs for x in r.samples_us),
                               seconds=sum(r.seconds or 0.0 for r in runs), rounds=len(runs), sweep=tuple(sweep),
                               warnings=tuple(dict.fromkeys(w for r in runs for w in r.warnings)))


def run_prescreen(job, *, iters: int = 400, measured: dict[int, tuple[dict, float]] | None = None,
                  say=print, rounds: int | None = None) -> Prescreen:
    """Measure every setting of the job's space over the sweep, ``rounds`` times (default the
    job's ``prescreen.rounds``) in alternating order (``merge_rounds``); predict decode tok/s
    where possible.

    ``measured`` maps tp_size -> (a measured config, its decode tok/s): the step time left
    after its all-reduces is "the rest" the prediction adds to the others' latencies.
    """
    backend = job.backend_obj()
    device = backend.device()
    require_device(job, device)
    facts = backend.model_facts()
    element = 2 if device == "cuda" else 4  # bf16 on GPUs, float32 on CPU (the probe's dtypes)
    hidden = int(facts.get("hidden_size", 4096))
    decode = decode_sizes(hidden, int(facts.get("dtype_bytes", element)), objectives.levels(job.objective))
    leading = list(dict.fromkeys(decode.values()))  # the decode sizes, the objective's first level first
    message = leading[0]
    sizes = [*leading, *(b for b in sweep_sizes(decode, element) if b not in leading)]
    per_step = int(facts.get("allreduces_per_step", 0))
    rounds = rounds or job.prescreen.rounds
    why_not = custom_runnable(device)
    settings = settings_of(job)
    tps = sorted({int(setting["tp_size"]) for setting in settings})
    probes = [(setting, False) for setting in settings] + ([] if why_not else [({"tp_size": tp}, True) for tp in tps])
    results: dict[int, list[Probed]] = {i: [] for i in range(len(probes))}
    for turn in range(max(1, rounds)):  # each round in the other order: a drift of the host hits every path
        order = range(len(probes)) if turn % 2 == 0 else reversed(range(len(probes)))
        for i in order:
            setting, custom_path = probes[i]
            if results[i] and not results[i][-1].ok:
                continue  # failed once: a failure is the row (a second launch would fail the same)
            row = measure_setting(setting, device=device, message_bytes=sizes, env=dict(job.env),
                                  timeout_s=job.timeouts.startup_s, iters=iters, custom=custom_path, full=len(leading))
            results[i].append(row)
            label = "custom all-reduce at tp_size=" + str(setting["tp_size"]) if custom_path else \
                " ".join(f"{k}={v}" for k, v in setting.items())
            say(f"prescreen {label} (round {turn + 1} of {rounds}): "
                + (f"{row.latency_us:.1f} us per all-reduce of {message} B, {len(sizes)} sizes" if row.ok
                   else f"{row.kind}: {row.reason}"))
    rows = [merge_rounds(results[i]) for i, (_, custom_path) in enumerate(probes) if not custom_path]
    custom = [merge_rounds(results[i]) for i, (_, custom_path) in enumerate(probes) if custom_path]
    if why_not:
        custom = [Probed(tp_size=tp, kind="not-runnable", reason=why_not, custom=True) for tp in tps]
    for tp, (config, tok_s) in (measured or {}).items():
        rows = predicted(rows, tp, config, tok_s, per_step)
    versions = sorted({r.nccl_version for r in rows if r.nccl_version})
    data = Prescreen(message_bytes=message, allreduces_per_step=per_step, device=device, rows=tuple(rows),
                     decode_sizes={str(level): size for level, size in decode.items()}, sizes=tuple(sizes),
                     custom=tuple(custom), nccl_version=versions[-1] if versions else None)
    data = dataclasses.replace(data, crossovers=crossovers(data))
    prescreened.write(job.dir.prescreen, data)
    files.write_whole(job.dir.prescreen_sweep, sweep_csv(data))
    return data


def predicted(rows: list[Probed], tp: int, config: dict[str, Any], tok_s: float, per_step: int) -> list[Probed]:
    """``rows`` with the decode tok/s each setting at ``tp`` predicts: ``config`` measured
    ``tok_s``, so a step's time beside its ``per_step`` all-reduces is the rest, the same for every
    setting. Unchanged where ``config``'s setting was not measured or nothing says."""
    same = [r for r in rows if r.ok and r.tp_size == tp
            and all(r.env.get(k) == v for k, v in config.items() if k.startswith("env.NCCL_"))]
    if not same or not per_step or not tok_s:
        return rows
    rest = 1.0 / tok_s - per_step * same[0].latency_us * 1e-6
    return [dataclasses.replace(r, predicted_tok_s=1.0 / (per_step * r.latency_us * 1e-6 + rest))
            if r.ok and r.tp_size == tp else r for r in rows]
