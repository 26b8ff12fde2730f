"""The pre-screen as a user reads it: the table ``ncclsweep prescreen`` and the run print
(``format_prescreen``), and ``prescreen-sweep.csv``, one line per setting and message size
(``sweep_csv``), both from the record alone."""

from __future__ import annotations

from orchestrator.core.prescreened import Prescreen
from orchestrator.driver.prescreen_paths import standing, winners

KB = 1024


def format_prescreen(data: Prescreen) -> str:
    levels = ", ".join(f"{size} B at {level} stream{'s' if level != '1' else ''}"
                       for level, size in data.decode_sizes.items())
    lines = [f"All-reduce of {data.message_bytes} bytes (the decode message at the objective's first level"
             + (f"; decode sizes: {levels}" if levels else "") + f"), "
             f"{data.allreduces_per_step} per decode step, on {data.device}:", "",
             "| setting | latency (median) | predicted decode tok/s | probe time | notes |", "|---|---|---|---|---|"]
    for r in data.rows:
        label = " ".join([f"tp_size={r.tp_size}", *(f"{k.removeprefix('env.')}={v}" for k, v in r.env.items())])
        if r.ok:
            pred = f"{r.predicted_tok_s:.1f}" if r.predicted_tok_s else "-"
            note = "; ".join(r.warnings) or ("in a CUDA graph" if r.graph else "eager")
            lines.append(f"| {label} | {r.latency_us:.1f} us | {pred} | {r.seconds:.1f}s | {note} |")
        else:
            lines.append(f"| {label} | FAIL {r.kind} | - | {r.seconds:.1f}s | {r.reason} |")
    for r in data.custom:
        if r.ok:
            lines.append(f"| tp_size={r.tp_size} custom all-reduce | {r.latency_us:.1f} us | - | "
                         f"{r.seconds:.1f}s | torch's symmetric-memory one-shot all-reduce |")
        else:
            lines.append(f"| tp_size={r.tp_size} custom all-reduce | {r.kind} | - | - | {r.reason} |")
    for tp in data.ok_tps():
        won = winners(data, tp)
        if len(won) > 1:
            lines += ["", f"Fastest path per size at tp_size={tp} (sweep of {len(won)} sizes; 'within noise': no "
                          f"path clearly fastest):"]
            runs: list[list] = []
            for b, label, _, clear in won:
                name = label if clear else "within noise"
                if runs and runs[-1][2] == name:
                    runs[-1][1] = b
                else:
                    runs.append([b, b, name])
            lines += [f"  {_kb(lo)}{'' if lo == hi else '-' + _kb(hi)}: {name}" for lo, hi, name in runs]
    for c in data.crossovers:
        what = "custom all-reduce against NCCL's fastest" if c.custom else "crossover"
        lines.append(f"tp_size={c.tp_size} {what}: {c.below} up to about {_kb(c.nbytes)}, {c.above} "
                     f"above (between the measured {_kb(c.between[0])} and {_kb(c.between[1])})")
    return "\n".join(lines)


def sweep_csv(data: Prescreen) -> str:
    """The sweep's table: ``tp_size,setting,bytes,latency_us,ci_lo_us,ci_hi_us,algo,proto,fastest``
    (the median's 95% interval; algo and proto as NCCL logged its choice, where it did; fastest:
    ``1`` clearly fastest at that size, ``tie`` within the noise of the fastest, else ``0``)."""
    lines = ["tp_size,setting,bytes,latency_us,ci_lo_us,ci_hi_us,algo,proto,fastest"]
    for row in (*data.rows, *data.custom):
        if not row.ok:
            continue
        for p in row.sweep:
            latency, lo, hi = p.interval
            rank = standing(data, row.tp_size, p.nbytes, row.label)
            lines.append(f"{row.tp_size},{row.label},{p.nbytes},{latency:.3f},{lo:.3f},{hi:.3f},"
                         f"{p.algo or ''},{p.proto or ''},{rank}")
    return "\n".join(lines) + "\n"


def _kb(nbytes: int) -> str:
    return f"{nbytes / KB:g} KB" if nbytes < 1024 * KB else f"{nbytes / (1024 * KB):g} MB"
