"""Issue 49's end-to-end acceptance on CPU: a real study of a stand-in whose optimum is an interaction
(tests/standin_server.py --interaction under the command backend: decode speed a product of
per-value factors, but Tree, slow alone, is the fastest algorithm with LL; NVLS/PAT-like values crash
at start naming themselves, an LL128-like value gives wrong text fast) launches the optimum as the
issue's target reads: a median of 15 launches of any kind (the search's, the relaunches and the race
counted) over 3 seeds and none later than 25 (the target's p90), with the default search (a job whose
``sampler:`` names none). Not "15 on every seed": that is the search's p90 on this stand-in (the replay,
``ncclsweep simulate --suite standin-interaction --budget 15 --seeds 40``: median 12, p90 16), so on
a loaded box, where the launches' timings break the search's ties differently, a seed passes 15 now
and then. Each launch is measured as a job measures it by default (3 timed rounds, the median): with
2 rounds the launches' noise on a loaded 2-core box was half as large again and one seed in six passed
15, two of three in one CI run (docs/benchmarks.md). The three studies run at once, each in its own
process (one process's threads would share its interpreter lock: a client starved of it reads a
server's tokens late and in a burst, and measures them faster than they came), so the test costs one
study's time."""

from __future__ import annotations

import io
import itertools
import multiprocessing
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from conftest import run_in_process, write_job
from orchestrator.config.job import load_job
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.search.race import RACE
from orchestrator.study.search.relaunch import RELAUNCH
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

STANDIN = str(Path(__file__).resolve().parents[1] / "standin_server.py")
SPACE = """\
params:
  backend.layout: {choices: [tp8, tp4pp2, tp2pp4]}
  backend.graphs: {choices: [eager, full]}
  backend.capture: {choices: [small, large], when: {backend.graphs: full}}
  backend.proto: {choices: [LL, Simple, LL128]}
  backend.algo: {choices: [Ring, Tree, NVLS, PAT]}
  backend.p2p: {choices: [direct, host]}
"""
OPTIMAL = {"backend.layout": "tp8", "backend.graphs": "full", "backend.proto": "LL", "backend.algo": "Tree",
           "backend.p2p": "direct"}  # either capture list: Tree with LL, the interaction
BUDGET = 25  # search launches: the target's p90 (a median of 15 is asked of the seeds)


def first_optimal_launch(tmp_path: Path, seed: int) -> tuple[int | None, list]:
    argv = ["{python}", STANDIN, "--host", "{host}", "--port", "{port}", "--model", "fake", "--interaction"]
    argv += [f"--{name}" if i == 0 else "{backend." + name + "}" for name in
             ("layout", "graphs", "capture", "proto", "algo", "p2p") for i in range(2)]
    job = load_job(write_job(
        tmp_path, study=f"standin-{seed}", space_text=SPACE, budget={"trials": BUDGET}, max_consecutive_failures=BUDGET,
        backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake",
                                                 "defaults": {"backend.capture": "none"}}},
        baseline={"backend.layout": "tp8", "backend.graphs": "eager", "backend.proto": "Simple",
                  "backend.algo": "Ring", "backend.p2p": "direct"},
        bench={"prompt": "Write a detailed explanation of a ring all-reduce.", "output_tokens": 32, "warmup": 1},
        pruning={"enabled": True}, sampler={"seed": seed}))
    out = io.StringIO()
    run_in_process(job, out=out)
    rows = trial_rows(open_study(job, create=False))
    launched = [r for r in rows if r.counted and r.cached_from is None and not r.skipped]
    every = sorted((r for r in rows if (r in launched or r.launch_role in (RELAUNCH, RACE))), key=lambda r: r.number)
    hit = next((i for i, r in enumerate(every, 1) if all(r.params.get(k) == v for k, v in OPTIMAL.items())), None)
    return hit, launched


def test_the_default_search_launches_the_interaction_optimum_within_15_launches_of_any_kind(tmp_path):
    seeds = range(3)
    for seed in seeds:
        (tmp_path / str(seed)).mkdir()
    with ProcessPoolExecutor(len(seeds), mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = dict(zip(seeds, pool.map(first_optimal_launch, [tmp_path / str(seed) for seed in seeds], seeds)))
    for seed, (_, launched) in runs.items():
        assert {r.enqueued_by for r in launched[1:]} <= {"model", "gap"}, (seed, launched)
        crashing = [r for r in launched if r.params.get("backend.algo") in ("NVLS", "PAT")]
        wrong = [r for r in launched if r.failure_kind == "wrong-output"]
        assert all(r.state == "FAIL" for r in crashing) and len(wrong) <= 2, launched
    # status ends with what the study did not measure beside its best (25 launches of 216 configs)
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", str(tmp_path / "0" / "job.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    after = status.stdout[status.stdout.index("not explored ("):].splitlines()
    # the section's header and its indented lines (a note of the host's load may follow them)
    gaps = after[:1] + list(itertools.takewhile(lambda g: g.startswith("  "), after[1:]))
    assert "`run --trials N` goes there first" in gaps[0] and len(gaps) > 1
    line = re.compile(r"  (\.\.\. and \d+ more|backend\.\w+=\S+(?: with backend\.\w+=\S+)?: \w)")
    assert all(line.match(g) for g in gaps[1:]), gaps
    hits = {seed: hit for seed, (hit, _) in runs.items()}
    print(f"first optimal launch by seed: {hits}")  # shown with -s: the figure docs/benchmarks.md quotes
    assert all(h is not None and h <= BUDGET for h in hits.values()), hits
    assert sorted(hits.values())[len(hits) // 2] <= 15, hits
