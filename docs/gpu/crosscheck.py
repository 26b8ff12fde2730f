"""The project's measurement against vLLM's own client, and the noise between launches.

    python3 docs/gpu/crosscheck.py JOB [--config FILE] [--set K=V ...] --launches 5 --rounds 2 --out $OUT/xc

Launches a config of the job (``--config``/``--set`` as ``ncclsweep bench`` takes them) ``--launches`` times, each
one a server exactly as a trial starts it (``node.trial.prepare_server``). On each launch, in
``--rounds`` interleaved rounds, it measures every level of the job's objective twice: with the
project's own measurement (``node.measure``, the job's bench settings, one round) and with
``vllm bench serve`` over the same prompts (``--dataset-name custom``, greedy, ``--ignore-eos``,
the job's output length, ``--max-concurrency N``; ``--num-prompts``: at one stream 10, above it the
requests ours sends, N streams x the job's ``bench.waves``, so both whole-run figures count the same
requests with the same ramp-up and drain). Each of vLLM's requests begins with a line of its own, as
ours do (``node.measure.Prefixes``): neither client is answered from the prefix cache. Ours measures
each level alone (a goodput job's capacity search is set aside: the level is what is compared). vLLM's figure
at level 1 is 1000 / median TPOT (what our decode tok/s is for one request), above it its output
throughput. Writes <out>/crosscheck.json (every figure) and prints a table: per level, the median
ratio ours / vLLM's over every round, and the launch-to-launch spread of each client's launch
medians (the noise a verdict must carry).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from orchestrator.cli import parse_sets
from orchestrator.config.job import load_job
from orchestrator.driver.bench_command import check_overrides, resolve_config
from orchestrator.node.measure import Prefixes, measure
from orchestrator.node.spec import TrialSpec
from orchestrator.node.trial import prepare_server
from orchestrator.results.export import load_config_file


def config_of(job, config_file: str | None, sets: list[str]) -> dict:
    """The config ``ncclsweep bench JOB [--config FILE] --set ...`` would measure (FILE: an export,
    ``ncclsweep export JOB --format yaml -o FILE``)."""
    overrides = check_overrides(job, load_config_file(config_file), config_file) if config_file else {}
    overrides.update(check_overrides(job, parse_sets(sets), "--set"))
    return resolve_config(job, overrides)


def vllm_bench(base_url: str, model: str, served: str, prompts: tuple[str, ...], output_tokens: int, level: int,
               out: Path, waves: int) -> dict:
    n = 10 if level == 1 else max(8, waves * level)
    prompts_file = out.with_suffix(".prompts.jsonl")  # n requests, each begun with its own line, as ours
    prompts_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in Prefixes().requests(prompts, n)))
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
           "--base-url", base_url, "--model", model, "--served-model-name", served, "--tokenizer", model,
           "--dataset-name", "custom",
           "--dataset-path", str(prompts_file), "--skip-chat-template", "--custom-output-len", str(output_tokens),
           "--ignore-eos", "--temperature", "0", "--max-concurrency", str(level), "--num-prompts", str(n),
           "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not out.exists():
        return {"error": (done.stderr or done.stdout)[-800:]}
    data = json.loads(out.read_text())
    tpot = data.get("median_tpot_ms")
    figure = (1000.0 / tpot if tpot else None) if level == 1 else data.get("output_throughput")
    return {"figure": figure, "output_throughput": data.get("output_throughput"), "median_tpot_ms": tpot,
            "p99_tpot_ms": data.get("p99_tpot_ms"),
            "p99_itl_ms": data.get("p99_itl_ms"), "median_ttft_ms": data.get("median_ttft_ms"), "prompts": n}


def one_launch(job, config: dict, k: int, rounds: int, out: Path, model: str,
               levels: list[int]) -> dict:
    spec = TrialSpec.from_job(job, 0, config)
    bench = spec.bench  # ours: exactly the study's measurement of a level (its repeats and precision target)
    log = out / f"launch-{k}.log"
    proc, launch, _ = prepare_server(job.backend_obj(), config, "127.0.0.1", dict(job.env), log, str(out / "servers"))
    got: dict = {"launch": k, "rounds": []}
    t0 = time.monotonic()
    try:
        proc.start()
        proc.wait_ready(job.timeouts.startup_s)
        got["ready_s"] = time.monotonic() - t0
        for r in range(rounds):
            for client in (("ours", "vllm") if r % 2 == 0 else ("vllm", "ours")):
                for level in levels:
                    if client == "ours":
                        alone = replace(bench, levels=(level,), constraint_levels=(), goodput=None, rate=None,
                                        arrival_times=None)
                        b = measure(launch.base_url, launch.model_name, alone,
                                    deadline=time.monotonic() + bench.timeout_s)
                        lv = b.measurement.levels.get(level)
                        rec = {"figure": lv.value if lv else None, "error": b.error, "warnings": list(b.warnings),
                               "whole_run_tok_s": lv.whole_run_tok_s if lv else None,
                               "p99_itl_ms": 1000 * lv.itl.p99 if lv and lv.itl else None,
                               "median_tpot_ms": 1000 * lv.tpot.p50 if lv and lv.tpot else None,
                               "p99_tpot_ms": 1000 * lv.tpot.p99 if lv and lv.tpot else None}
                    else:
                        rec = vllm_bench(launch.base_url, model, launch.model_name, bench.prompts, bench.output_tokens,
                                         level, out / f"vllm-{k}-{r}-{level}.json", bench.waves)
                    got["rounds"].append({"round": r, "client": client, "level": level, **rec})
                    why = "" if rec.get("figure") else f" ({str(rec.get('error'))[-300:]})"
                    print(f"launch {k} round {r} {client:5s} level {level}: {rec.get('figure')}"
                          f" whole-run {rec.get('whole_run_tok_s') or rec.get('output_throughput')}{why}", flush=True)
    finally:
        proc.stop(job.timeouts.teardown_s)
    return got


def summary(launches: list[dict], levels: list[int]) -> str:
    lines = ["| level | ours / vLLM (median of rounds) | launches | ours: launch medians (spread) | "
             "vLLM: launch medians (spread) |", "|---|---|---|---|---|"]
    for level in levels:
        ratios, mine, theirs = [], [], []
        for got in launches:
            by = {(x["round"], x["client"]): x.get("figure") for x in got["rounds"] if x["level"] == level}
            rounds = sorted({r for r, _ in by})
            ratios += [by[(r, "ours")] / by[(r, "vllm")] for r in rounds
                       if by.get((r, "ours")) and by.get((r, "vllm"))]
            o = [by[(r, "ours")] for r in rounds if by.get((r, "ours"))]
            v = [by[(r, "vllm")] for r in rounds if by.get((r, "vllm"))]
            if o:
                mine.append(statistics.median(o))
            if v:
                theirs.append(statistics.median(v))

        def spread(xs: list[float]) -> str:
            if len(xs) < 2:
                return "-"
            logs = [math.log(x) for x in xs]
            return f"{100 * statistics.stdev(logs):.1f}% sd, {min(xs):.0f}-{max(xs):.0f}"
        ratio = f"{statistics.median(ratios):.3f}" if ratios else "-"
        lines.append(f"| {level} | {ratio} ({len(ratios)} rounds) | {len(launches)} | "
                     f"{', '.join(f'{x:.0f}' for x in mine)} ({spread(mine)}) | "
                     f"{', '.join(f'{x:.0f}' for x in theirs)} ({spread(theirs)}) |")
    return "\n".join(lines)


def whole_runs(launches: list[dict], levels: list[int]) -> str:
    """Above one stream, the figure `vllm bench serve` prints (output tokens over the whole run) against
    ours counted the same way (``whole_run_tok_s``) and our steady-state window, and TPOT p99 by each
    client: what a capacity point is checked against."""
    lines = ["| level | ours: steady tok/s | ours: whole-run tok/s | vLLM: output throughput | whole-run ours / vLLM "
             "| TPOT p99 ms ours | TPOT p99 ms vLLM |", "|---|---|---|---|---|---|---|"]
    for level in [lv for lv in levels if lv > 1]:
        def med(client: str, key: str, level: int = level) -> float | None:
            xs = [x[key] for got in launches for x in got["rounds"]
                  if x["level"] == level and x["client"] == client and x.get(key)]
            return statistics.median(xs) if xs else None
        steady, whole, theirs = med("ours", "figure"), med("ours", "whole_run_tok_s"), med("vllm", "output_throughput")
        tp_o, tp_v = med("ours", "p99_tpot_ms"), med("vllm", "p99_tpot_ms")

        def f(x: float | None, d: int = 0) -> str:
            return "-" if x is None else f"{x:.{d}f}"
        lines.append(f"| {level} | {f(steady)} | {f(whole)} | {f(theirs)} | "
                     f"{f(whole / theirs, 3) if whole and theirs else '-'} | {f(tp_o, 2)} | {f(tp_v, 2)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--config", help="a config file, e.g. the study's yaml export")
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=540.0, help="no launch starts after this many seconds")
    ap.add_argument("--out", required=True)
    ap.add_argument("--levels", help="streams to measure, comma-separated (default: the objective's levels), "
                                     "e.g. a capacity point and the load above it: 64,68,128")
    a = ap.parse_args()
    job = load_job(Path(a.job))
    config = config_of(job, a.config, a.sets)
    out = Path(a.out)
    (out / "servers").mkdir(parents=True, exist_ok=True)
    model = str(job.backend.settings["model"])
    levels = [int(x) for x in a.levels.split(",")] if a.levels else sorted(job.objective.concurrency)
    t0, launches = time.monotonic(), []
    for k in range(a.launches):
        if launches and time.monotonic() - t0 > a.budget_s:
            print(f"stopping after {k} launches: --budget-s", flush=True)
            break
        launches.append(one_launch(job, config, k, a.rounds, out, model, levels))
        (out / "crosscheck.json").write_text(json.dumps({"config": config, "launches": launches}, indent=1))
    print(summary(launches, levels))
    print(whole_runs(launches, levels))
    if a.config:
        print(against_export(launches, a.config))
    return 0


def against_export(launches: list[dict], config_file: str) -> str:
    """Each launch's own figure (the median of our rounds) at the exported level against the range the
    export printed for a fresh launch: the relaunch check of a winner (issue 34)."""
    import yaml
    prov = (yaml.safe_load(Path(config_file).read_text()) or {}).get("provenance") or {}
    fig, level = prov.get("figure") or {}, (prov.get("objective") or {}).get("level") or 1
    lo, hi = fig.get("fresh_launch_95") or (None, None)
    lines, inside = [f"the export's figure {fig.get('value')} (median of {fig.get('launches')} launches) at "
                     f"level {level}; a fresh launch should measure {lo}-{hi} (95%)"], 0
    for got in launches:
        mine = [x["figure"] for x in got["rounds"] if x["client"] == "ours" and x["level"] == level and x.get("figure")]
        if not mine:
            lines.append(f"launch {got['launch']}: failed")
            continue
        m = statistics.median(mine)
        ok = lo is not None and lo <= m <= hi
        inside += ok
        lines.append(f"launch {got['launch']}: {m:.1f} ({'inside' if ok else 'OUTSIDE'} {lo}-{hi})")
    lines.append(f"{inside} of {len(launches)} fresh launches inside the export's range")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
