"""``ncclsweep compare``: does the winner hold at higher concurrency?

Relaunches the baseline and the best config interleaved (baseline, best, baseline,
best, ...) so drift over time and a lucky single measurement both show, and measures
total output tok/s at each concurrency. Saves ``compare.json`` (the report renders it)
and returns the markdown table. A best config that loses somewhere says so plainly.

``also`` adds other trials' configs to every round (``"ties"``: the runners-up within the
noise of the best): configs that single-request decode cannot rank may still differ under
load, e.g. by how many requests they batch.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from orchestrator import bench
from orchestrator.errors import BadInput, RuntimeFailure
from orchestrator.trial import prepare_server
from orchestrator.server import ServerError


def measure_levels(job, config: dict, levels: list[int], label: str, round_no: int) -> dict[int, dict[str, Any]]:
    """One launch of ``config``; total output tok/s at each concurrency level."""
    backend = job.backend_obj()
    report_dir = Path(job.report_dir).resolve()
    log_path = report_dir / "compare-logs" / f"{label}-{round_no}.log"
    proc, launch, _ = prepare_server(backend, config, "127.0.0.1", dict(job.env), log_path, str(report_dir / "servers"))
    out: dict[int, dict[str, Any]] = {}
    try:
        proc.start()
        try:
            proc.wait_ready(job.timeouts.startup_s)
        except ServerError as exc:
            raise RuntimeFailure(f"compare: the {label} config did not start ({exc}); log: {log_path}") from None
        bench.measure_decode(launch.base_url, launch.model_name, job.bench.prompt, job.bench.output_tokens,
                             warmup=max(1, job.bench.warmup), repeats=1, timeout_s=job.timeouts.bench_s)
        for level in levels:
            out[level] = bench.measure_concurrency(launch.base_url, launch.model_name, job.bench.prompt,
                                                   job.bench.output_tokens, level, timeout_s=job.timeouts.bench_s)
    finally:
        proc.stop(job.timeouts.teardown_s)
    return out


def run_compare(job, levels: list[int] | None = None, rounds: int = 2, say=print,
                also: list[int] | str | None = None) -> str:
    from orchestrator.history import baseline_row, best_rows, trial_rows
    from orchestrator.study import open_study

    rows = trial_rows(open_study(job, create=False))
    base = baseline_row(rows)
    best = (best_rows(rows, 1) or [None])[0]
    if base is None or best is None:
        raise RuntimeFailure("compare needs a completed baseline and a completed best trial; run the study first")
    others = _also_rows(rows, best, base, also)
    levels = levels or list(job.bench.concurrency)
    configs = [("baseline", base), ("best", best)] + [(f"trial-{r['number']}", r) for r in others]
    per: dict[str, dict[int, list[float]]] = {label: {c: [] for c in levels} for label, _ in configs}
    failures: list[str] = []
    raw_rounds = []
    for r in range(max(1, rounds)):
        for label, row in configs:
            t0 = time.monotonic()
            res = measure_levels(job, row["params"], levels, label, r)
            for level, m in res.items():
                if m.get("total_tok_s"):
                    per[label][level].append(m["total_tok_s"])
                if m.get("failures"):
                    failures.append(f"{label} round {r} c={level}: {m['failures']} failed requests ({m['errors'][:1]})")
            raw_rounds.append({"round": r, "config": label, "trial": row["number"],
                               "seconds": time.monotonic() - t0,
                               "levels": {str(k): v for k, v in res.items()}})
            say(f"compare round {r + 1}/{rounds}: {label} (trial #{row['number']}) measured")
    data = {
        "concurrency": levels,
        "baseline_trial": base["number"], "best_trial": best["number"],
        "baseline": {str(c): _med(v) for c, v in per["baseline"].items()},
        "best": {str(c): _med(v) for c, v in per["best"].items()},
        "baseline_samples": {str(c): v for c, v in per["baseline"].items()},
        "best_samples": {str(c): v for c, v in per["best"].items()},
        "others": [{"trial": row["number"], "params": row["params"],
                    "median": {str(c): _med(v) for c, v in per[label].items()},
                    "samples": {str(c): v for c, v in per[label].items()}}
                   for label, row in configs[2:]],
        "rounds": raw_rounds, "failures": failures,
        "constraints": check_constraints(job, per),
    }
    out = Path(job.report_dir) / "compare.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    return format_compare(data)


def _also_rows(rows: list[dict[str, Any]], best: dict[str, Any], base: dict[str, Any],
               also: list[int] | str | None) -> list[dict[str, Any]]:
    """The rows of the ``also`` trials (numbers, or "ties"), each config once, never baseline/best."""
    from orchestrator.history import TOP_N, best_rows, ties_with_best

    if not also:
        return []
    if also == "ties":
        picked = ties_with_best(best_rows(rows, TOP_N))
    else:
        ranked = {r["number"]: r for r in best_rows(rows, len(rows))}
        by_key = {r["config_key"]: r for r in ranked.values()}
        picked = []
        for n in also:
            row = next((r for r in rows if r["number"] == n), None)
            if row is None or row["config_key"] not in by_key:
                raise BadInput(f"--also: trial {n} is not a measured, ranked trial of this study; "
                               f"ranked trials: {', '.join(str(k) for k in sorted(ranked))}")
            picked.append(by_key[row["config_key"]])
    seen = {best["config_key"], base["config_key"]}
    out = []
    for r in picked:
        if r["config_key"] not in seen:
            seen.add(r["config_key"])
            out.append(r)
    return out


def check_constraints(job, per: dict[str, dict[int, list[float]]]) -> list[dict[str, Any]]:
    """The job's "no worse than min_ratio x baseline at concurrency c" rules."""
    verdicts = []
    for rule in getattr(job, "constraints", ()) or ():
        c, min_ratio = int(rule["concurrency"]), float(rule["min_ratio"])
        b, w = _med(per["baseline"].get(c, [])), _med(per["best"].get(c, []))
        ratio = (w / b) if b and w else None
        verdicts.append({"concurrency": c, "min_ratio": min_ratio, "ratio": ratio,
                         "ok": ratio is not None and ratio >= min_ratio,
                         "measured": c in per["baseline"]})
    return verdicts


def format_compare(data: dict[str, Any]) -> str:
    others = data.get("others") or []
    extra = [f"trial {o['trial']}" for o in others]
    lines = [f"Baseline (trial #{data['baseline_trial']}) vs best (trial #{data['best_trial']})"
             + (" and " + ", ".join(extra) if extra else "")
             + ", total output tok/s, median of interleaved launches",
             "", "| Concurrency | baseline | best | Improvement |" + "".join(f" {e} |" for e in extra),
             "|---|---|---|---|" + "---|" * len(extra)]
    losses = []
    for c in data["concurrency"]:
        b, w = data["baseline"].get(str(c)), data["best"].get(str(c))
        cells = "".join(f" {vs_best(o['median'].get(str(c)), w)} |" for o in others)
        if b and w:
            ratio = w / b
            mark = " **(slower)**" if ratio < 1.0 else ""
            if ratio < 1.0:
                losses.append(f"c={c} ({ratio:.2f}x)")
            lines.append(f"| {c} | {b:.1f} tok/s | {w:.1f} tok/s | {ratio:.2f}x{mark} |{cells}")
        else:
            lines.append(f"| {c} | {_fmt(b)} | {_fmt(w)} | n/a |{cells}")
    lines.append("")
    if losses:
        lines.append("The best config LOSES to the baseline at " + ", ".join(losses) + ".")
    else:
        lines.append("The best config is at least as fast as the baseline at every measured concurrency.")
    if others:
        lines.append("Other trials: tok/s and their ratio to the best at the same concurrency.")
    for v in data.get("constraints", []):
        state = "met" if v["ok"] else "VIOLATED"
        ratio = f"{v['ratio']:.2f}x" if v["ratio"] is not None else "not measured"
        lines.append(f"Constraint: best >= {v['min_ratio']}x baseline at concurrency {v['concurrency']}: {state} ({ratio}).")
    for f in data.get("failures", []):
        lines.append(f"Failed requests: {f}")
    return "\n".join(lines)


def vs_best(value: float | None, best: float | None) -> str:
    """'3590.0 tok/s (1.14x best)': another trial's total tok/s against the best's."""
    if not value:
        return "failed"
    return f"{value:.1f} tok/s" + (f" ({value / best:.2f}x best)" if best else "")


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(v: float | None) -> str:
    return f"{v:.1f} tok/s" if v else "failed"
