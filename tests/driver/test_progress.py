"""What a run prints (driver/progress.py): the final line states the best's figure over its
launches and its ratio to the baseline with its interval over launches, "beyond noise" only when
that interval excludes 1.0 (launches of the H200 8b study's configs), no verdict while the launch
noise is unknown, and the study's launch noise for a config launched once (the text says so);
relaunches and the race say what they launch, why and what it costs."""

from __future__ import annotations

import io
import statistics
from dataclasses import replace

from conftest import write_job
from orchestrator.config.job import Objective, load_job
from orchestrator.core.records import COMPLETE, PRUNED, TrialResult, TrialRow, config_key
from orchestrator.driver.progress import Progress, RunSummary, plan_said, vs_baseline_words
from orchestrator.study.launches import Evidence
from orchestrator.study.plan import build_plan


def _launches(first: int, key: str, figures: list[float]) -> list[TrialRow]:
    """A config's trial and its relaunches, each launch one figure (three repeats around it)."""
    out = []
    for i, v in enumerate(figures):
        samples = [v * 0.997, v, v * 1.003]
        r = TrialRow(number=first + i, state="COMPLETE", params={"k": key}, value=v, config_key=key, counted=i == 0,
                     metrics={"decode_tok_s": v, "decode_samples": samples})
        out.append(r if i == 0 else replace(r, launch_role="relaunch"))
    return out


# Launches of the H200 8b study's configs (docs/gpu/h200-refserver-8b): eager, graphs 1..64 with 64
# slots, graphs 1,2,4,8; relaunches of one config agree within ~1% (issue 34: 0.85% over five).
EAGER_L = _launches(0, "eager", [101.5, 99.8, 103.0])
BEST_L = _launches(10, "graphs", [193.6, 192.1, 194.9])
NEAR_L = _launches(20, "graphs-1-8", [192.7, 194.0, 193.1])
MORE_L = _launches(40, "graphs-1-16", [180.2, 182.1])  # six degrees of freedom in all


def test_the_runs_final_line_says_beyond_noise_only_beyond_launch_noise():
    rows = EAGER_L + BEST_L + NEAR_L + MORE_L
    ev = Evidence(rows)
    base, best, near = EAGER_L[0], BEST_L[0], NEAR_L[0]
    words = vs_baseline_words(best, base, ev)
    assert words.startswith("1.9") and "x the baseline, beyond noise, 95% CI 1." in words and "within" not in words
    assert words.endswith(", 3 vs 3 launches, launch noise +-1.0%")  # over launches, with the study's noise
    # a best within a percent of another config over their launches: the ratio is stated, no verdict
    words = vs_baseline_words(best, near, ev)
    assert words.startswith("1.00") and "x the baseline, within noise of the baseline, 95% CI 0.9" in words
    # the baseline itself, and no baseline
    assert vs_baseline_words(base, base, ev) == "the baseline itself"
    assert vs_baseline_words(best, None, ev) is None
    # a config measured on one launch gets the study's launch noise in its interval, and says so
    once = _launches(30, "once", [150.0])
    words = vs_baseline_words(once[0], base, Evidence(rows + once))
    assert "beyond noise" in words and "3 vs 1 launches (one launch: the study's launch noise +-1.0%)" in words
    # one launch each and no config launched twice: no launch noise, so no verdict however far apart
    words = vs_baseline_words(BEST_L[0], base, Evidence([BEST_L[0], base]))
    assert words.endswith("x the baseline, within noise of the baseline, no interval: launch noise not measured yet "
                          "(no config launched twice)")
    words = vs_baseline_words(best, base, Evidence(EAGER_L + BEST_L))  # four degrees of freedom: not trusted yet
    assert "within noise of the baseline, no interval: launch noise not measured well enough yet (6 launches of 2 " \
           "config(s) launched more than once; a verdict needs 8)" in words


# What a run of a plan says (driver/progress.py): each trial's line gives every level with its
# ratio to the baseline and the best at each level so far; the last line gives the plan (per
# level the best, its verdict against the baseline, what the best at the lowest level loses
# elsewhere, the mix) and the commands that act on it; a job of one level keeps its lines.
EAGER, SMALL, LARGE = {"capture": "none"}, {"capture": "8"}, {"capture": "64"}


def row(number: int, params: dict, levels: dict[int, list[float]], baseline: bool = False) -> TrialRow:
    recs = {str(lv): {"value": statistics.median(s), "samples": list(s)} for lv, s in levels.items()}
    return TrialRow(number=number, state=COMPLETE, params=params, value=recs["1"]["value"], counted=True,
                    is_baseline=baseline, config_key=config_key(params), levels=recs,
                    metrics={"decode_samples": levels[1], "levels": recs})


ROWS = [row(0, EAGER, {1: [94.7, 95.0, 94.1], 10: [788, 701, 750]}, baseline=True),
        row(1, SMALL, {1: [413, 433.9, 440], 10: [692, 685, 690]}),
        row(2, LARGE, {1: [363.8, 360, 365], 10: [3438, 3874, 3600]}),
        # each relaunched once (``study.relaunch``): the launch noise every verdict carries
        replace(row(3, EAGER, {1: [96.0, 96.2, 95.9], 10: [760, 740, 770]}), counted=False, launch_role="relaunch"),
        replace(row(4, SMALL, {1: [425, 433.9, 440], 10: [700, 690, 695]}), counted=False, launch_role="relaunch"),
        replace(row(5, LARGE, {1: [362, 364, 366], 10: [3500, 3650, 3600]}), counted=False, launch_role="relaunch"),
        replace(row(6, EAGER, {1: [95.0, 95.3, 94.8], 10: [745, 735, 750]}), counted=False, launch_role="relaunch"),
        replace(row(7, SMALL, {1: [430, 431, 436], 10: [688, 692, 690]}), counted=False, launch_role="relaunch"),
        replace(row(8, LARGE, {1: [365, 361, 363], 10: [3550, 3600, 3700]}), counted=False, launch_role="relaunch")]


def progress(tmp_path, **objective):
    job = load_job(write_job(tmp_path, objective=objective) if objective else write_job(tmp_path))
    out = io.StringIO()
    return job, Progress(job, trials=4, timeout_s=None, timeout_source="-", out=out), out


def test_the_last_line_of_a_plan(tmp_path):
    job, p, _ = progress(tmp_path, concurrency=[1, 10], weights={1: 0.5, 10: 0.5})
    plan = build_plan(ROWS, job.objective)
    best = p.best_summary(ROWS[1], ROWS[0], plan=plan, rows=ROWS, objective=job.objective)
    said = plan_said(best["plan"])
    assert said.startswith("plan: at 1 #1 433.9 decode tok/s (3 launches) = 4.5") and "x faster (95% CI 4." in said
    assert "x faster (95% CI " in said and ", launch noise +-" in said  # every level's interval, over launches
    assert "; at 10 #2 3600.0 total tok/s (3 launches) = 4.8" in said
    assert "the best at 1 (#1) does 690.0 at 10 (0.19" in said and "x slower (95% CI 0.1" in said
    assert "; best for the mix #2 = " in said and said.endswith("than the baseline")
    line = p.next_steps(RunSummary("budget reached", best=best), ROWS)
    assert line.startswith(said + " | next: `ncclsweep report ")
    assert "--plan`" in line and "--concurrency N --format env` (or --mix)" in line
    assert p.final_line(RunSummary("budget reached", launched=3, best=best), 3) == \
        "budget reached: 3 trials counted, 3 launched this run; plan: best at 1 #1, at 10 #2"


def test_each_trial_of_a_plan_says_every_level(tmp_path):
    job, p, out = progress(tmp_path, concurrency=[1, 10])
    plan = build_plan(ROWS, job.objective)
    recs = {"1": {"value": 200.0, "samples": [200.0]}, "10": {"value": 1500.0, "samples": [1500.0]}}
    p.ended(3, TrialResult(outcome=COMPLETE, config={}, value=200.0, metrics={"levels": recs}), ROWS[1], 94.7,
            plan=plan)
    p.ended(4, TrialResult(outcome=PRUNED, config={}, value=50.0, metrics={"levels": recs},
                           failure_reason="first round below the pruning threshold at every level (...)"),
            ROWS[1], 94.7, plan=plan)
    first, second = out.getvalue().splitlines()
    assert first.startswith("  #3 -> 1: 200.0 decode tok/s (2.11x baseline), 10: 1500.0 total tok/s (2.00x) | "
                            "best at 1 #1, at 10 #2 (elapsed ")
    assert second.startswith("  #4 -> pruned after the first round: first round below the pruning threshold at "
                             "every level (...) | best at 1 #1")


def test_a_job_of_one_level_keeps_its_lines(tmp_path):
    job, p, out = progress(tmp_path)
    assert job.objective == Objective()
    best = p.best_summary(ROWS[1], ROWS[0], rows=ROWS, objective=job.objective)
    assert "plan" not in best and best["launches"] == 3
    line = p.next_steps(RunSummary("budget reached", best=best), ROWS)
    assert line.startswith("best #1 433.9 tok/s (median of 3 launches) = 4.5")
    assert "x the baseline, beyond noise" in line
    assert "--plan" not in line and "--concurrency" not in line


def test_launches_under_very_different_load_are_said_in_the_last_line(tmp_path):
    from orchestrator.core.measurement import HostLoad

    job, p, _ = progress(tmp_path)
    busy = HostLoad(cpus=2, wall_s=10.0, host_cpu_s=19.0, server_cpu_s=0.5, client_cpu_s=0.5)
    quiet = HostLoad(cpus=2, wall_s=10.0, host_cpu_s=4.0, server_cpu_s=3.0, client_cpu_s=0.8)
    rows = [replace(r, measurement=replace(r.measurement, host=busy if r.number == 1 else quiet)) for r in ROWS]
    best = p.best_summary(rows[1], rows[0], rows=rows, objective=job.objective)
    line = p.next_steps(RunSummary("budget reached", best=best), rows)
    assert " | the launches ran under very different load: 1 while other work took at least half the host's " \
           "CPUs (up to 1.8 of 2: #1), 8 on a quiet host" in line
