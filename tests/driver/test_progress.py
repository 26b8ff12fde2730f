"""What a run prints (driver/progress.py): the final line states the best's figure over its
launches and its ratio to the baseline with its interval over launches, "beyond noise" only when
that interval excludes 1.0 (launches of the H200 8b study's configs), no verdict while the launch
noise is unknown, and the study's launch noise for a config launched once (the text says so);
relaunches and the race say what they launch, why and what it costs."""

from __future__ import annotations

import dataclasses
import io
import statistics
import time
from dataclasses import replace

import pytest

from conftest import write_job
from logtext import log_lines
from orchestrator.config.job import Objective, load_job
from orchestrator.core import logs
from orchestrator.core.records import COMPLETE, PRUNED, TrialResult, TrialRow, config_key
from orchestrator.driver.progress import Progress, RunSummary, plan_lines, vs_baseline_words
from orchestrator.node.phases import TrialPhase
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.evidence.plan import build_plan


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
    # one launch each and no config launched twice: no launch noise, so no verdict however far apart, and
    # nothing "within noise" of a noise nobody measured (issue 48): not shown, and why
    words = vs_baseline_words(BEST_L[0], base, Evidence([BEST_L[0], base]))
    assert words == "1.91x the baseline, not shown: launch noise unknown (no config launched twice)"
    words = vs_baseline_words(best, base, Evidence(EAGER_L + BEST_L))  # four degrees of freedom: not trusted yet
    assert words.endswith("x the baseline, not shown: launch noise unknown yet (6 launches of 2 config(s) launched "
                          "more than once; a verdict needs 8)") and "within noise" not in words


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
    return job, Progress(job, trials=4, timeout_s=None, out=out), out


def test_the_last_line_of_a_plan(tmp_path):
    job, p, _ = progress(tmp_path, concurrency=[1, 10], weights={1: 0.5, 10: 0.5})
    plan = build_plan(ROWS, job.objective)
    best = p.best_summary(ROWS[1], ROWS[0], plan=plan, rows=ROWS, objective=job.objective)
    said = plan_lines(best["plan"])
    assert said[0].startswith("plan: at 1 #1 433.9 decode tok/s (3 launches) = 4.5")
    assert "x faster (95% CI 4." in said[0]
    assert all("x faster (95% CI " in line and ", launch noise +-" in line for line in said[:2])  # over launches
    assert said[1].startswith("plan: at 10 #2 3600.0 total tok/s (3 launches) = 4.79x faster (95% CI 4.73-4.85x")
    assert said[2].startswith("plan: the best at 1 (#1) does 690.0 at 10 (0.19") and "x slower (95% CI 0.1" in said[2]
    assert said[3].startswith("plan: best for the mix #2 = ") and said[3].endswith("than the baseline")
    lines = p.next_steps(RunSummary("budget reached", best=best), ROWS)
    assert lines[:4] == said and lines[4].startswith("next: `ncclsweep report ")
    assert lines[5:] == [f"next: `ncclsweep compare {job.path} --plan`",
                         f"next: `ncclsweep export {job.path} --concurrency N --format cmd` (or --mix)"]
    # an interval over launches makes a level's line longer than a log's width: the log wraps it, and a reader
    # (``logtext.log_lines``) takes it back whole
    wrapped = "\n".join(piece for line in said for piece in logs.fit(line, logs.LOG_WIDTH))
    assert all(len(piece) <= logs.LOG_WIDTH for piece in wrapped.splitlines()) and log_lines(wrapped) == said
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
    assert second.startswith("  #4 -> pruned: first round below the pruning threshold at every level (...) | "
                             "best at 1 #1")


def test_a_job_of_one_level_keeps_its_lines(tmp_path):
    job, p, out = progress(tmp_path)
    assert job.objective == Objective()
    best = p.best_summary(ROWS[1], ROWS[0], rows=ROWS, objective=job.objective)
    assert "plan" not in best and best["launches"] == 3
    lines = p.next_steps(RunSummary("budget reached", best=best), ROWS)
    assert lines[0].startswith("best #1 433.9 tok/s (median of 3 launches) = 4.5")
    assert "x the baseline, beyond noise" in lines[0]
    assert lines[1] == "  #1 config: capture=8"
    assert [line.split("`")[1].split()[1] for line in lines[2:]] == ["report", "compare", "export"]
    assert not any("--plan" in line or "--concurrency" in line for line in lines)


def test_launches_under_very_different_load_are_said_in_the_last_line(tmp_path):
    from orchestrator.core.measurement import HostLoad

    job, p, _ = progress(tmp_path)
    busy = HostLoad(cpus=2, wall_s=10.0, host_cpu_s=19.0, server_cpu_s=0.5, client_cpu_s=0.5)
    quiet = HostLoad(cpus=2, wall_s=10.0, host_cpu_s=4.0, server_cpu_s=3.0, client_cpu_s=0.8)
    rows = [replace(r, measurement=replace(r.measurement, host=busy if r.number == 1 else quiet)) for r in ROWS]
    best = p.best_summary(rows[1], rows[0], rows=rows, objective=job.objective)
    lines = p.next_steps(RunSummary("budget reached", best=best), rows)
    assert lines[2].startswith("the launches ran under very different load: 1 while other work took at least half the "
                               "host's CPUs (up to 1.8 of 2: #1), 8 on a quiet host")


def test_under_latency_targets_the_last_line_reports_a_baseline_that_breaks_them_and_nothing_stops(tmp_path):
    job, p, out = progress(tmp_path)
    broke = dataclasses.replace(ROWS[0], metrics={**ROWS[0].metrics, "slo_excess": 0.3,
                                                  "slo_violations": ["breaks the SLO: TPOT p99 26 ms at 1, over the "
                                                                     "20 ms target by 30%"]})
    rows = [broke, *ROWS[1:]]
    lines = p.next_steps(RunSummary("budget reached", best=p.best_summary(rows[1], broke)), rows)
    assert lines[0].startswith("best #1 433.9 tok/s (median of 1 launch) = ")
    assert "; the baseline breaks the SLO: TPOT p99 26 ms at 1" in lines[0]
    nobody = [dataclasses.replace(r, metrics={**r.metrics, "slo_violations": ["breaks the SLO: ..."]}) for r in rows]
    lines = p.next_steps(RunSummary("budget reached", best=None), nobody)
    assert lines[0].startswith("no config holds the latency targets (slo) yet: #0 (baseline): breaks the SLO: ...")


def test_a_goodput_trial_and_the_last_line_say_where_the_slo_stopped_holding(tmp_path):
    from orchestrator.core.measurement import GoodputResult, LevelResult, Measurement
    from orchestrator.study.evidence.goodput import goodput_answer

    job = load_job(write_job(tmp_path, objective={"goodput": {"max_concurrency": 32}}, slo={"tpot_p99": "20ms"}))
    out = io.StringIO()
    p = Progress(job, trials=4, timeout_s=None, out=out)
    m = Measurement(levels={1: LevelResult(1, samples=(700.0,)), 16: LevelResult(16, samples=(858.8,))},
                    goodput=GoodputResult(32, (1, 32, 16, 17), 16, 17))
    p.ended(0, TrialResult(outcome=COMPLETE, config={}, value=m.value, measurement=m), None, None)
    assert out.getvalue().startswith("  #0 -> holds the SLO up to 16 stream(s) (breaks at 17) at 858.8 total tok/s")
    row0 = TrialRow(number=0, state=COMPLETE, value=m.value, counted=True, is_baseline=True, config_key="a",
                    measurement=m)
    best = p.best_summary(row0, row0, answers=goodput_answer([row0], job.objective).section())
    lines = p.next_steps(RunSummary("space exhausted", best=best), [row0])
    assert lines[0].startswith("goodput: the baseline #0 is the best: it holds the SLO up to 16 stream(s) at 858.8 "
                               "tok/s")
    assert [line.split("`")[1].split()[1] for line in lines if line.startswith("next:")] == ["report", "export"]


def test_a_capacity_trial_says_where_it_serves_the_most_within_the_slo(tmp_path):
    """Issue 47: a launch of the capacity search names its capacity point and its tok/s there, and that
    the SLO held above it (it is where the throughput peaked, not where the SLO stopped holding)."""
    from orchestrator.core.measurement import GoodputResult, LevelResult, Measurement

    job = load_job(write_job(tmp_path, objective={"goodput": {"max_concurrency": 128}}, slo={"tpot_p99": "20ms"}))
    out = io.StringIO()
    p = Progress(job, trials=4, timeout_s=None, out=out)
    m = Measurement(levels={n: LevelResult(n, samples=(v,)) for n, v in {1: 20.0, 64: 1022.0, 65: 414.0,
                                                                          128: 679.0}.items()},
                    goodput=GoodputResult(128, (1, 64, 65, 128), 64, None, held=(True,) * 4))
    p.ended(0, TrialResult(outcome=COMPLETE, config={}, value=m.value, measurement=m), None, None)
    assert out.getvalue().startswith("  #0 -> serves the most within the SLO at 64 stream(s): 1022.0 total tok/s "
                                     "(holds it up to 128)"), out.getvalue()


def test_a_trials_line_too_long_loses_a_clause_not_its_figures(tmp_path):
    """Held up to the most streams asked: the clause saying so goes before the tok/s and the ratio
    (the line once ended '(the most asked, o... | best #0 12949.5 tok/s')."""
    from orchestrator.core.measurement import GoodputResult, LevelResult, Measurement

    job = load_job(write_job(tmp_path, objective={"goodput": {"max_concurrency": 128}}, slo={"tpot_p99": "20ms"}))
    out = io.StringIO()
    p = Progress(job, trials=4, timeout_s=None, out=out)
    m = Measurement(levels={1: LevelResult(1, samples=(700.0,)), 128: LevelResult(128, samples=(12949.5,))},
                    goodput=GoodputResult(128, (1, 128), 128, None))
    best = TrialRow(number=0, state=COMPLETE, value=12949.5, counted=True, is_baseline=True, config_key="a",
                    measurement=m)
    p.ended(1, TrialResult(outcome=COMPLETE, config={}, value=m.value, measurement=m), best, 6674.0)
    line = out.getvalue().rstrip("\n")
    assert len(line) <= logs.LOG_WIDTH
    said, tail = line.split(" | ")
    assert tail.startswith("best #0 12949.5 tok/s = 1.94x baseline")
    assert said == "  #1 -> holds ... 128 stream(s) ... 12949.5 total tok/s", line  # the figures whole, words cut


def test_a_failures_line_keeps_its_outcome_whole_and_shortens_its_reason(tmp_path):
    """The demo's garbage config once read 'FAIL: ... 0 at ... 0: got ...': the words that say what
    happened went first, as any word without a figure."""
    from orchestrator.core.records import FAIL

    job = load_job(write_job(tmp_path))
    out = io.StringIO()
    p = Progress(job, trials=4, timeout_s=None, out=out)
    best = TrialRow(number=1, state=COMPLETE, value=120.0, counted=True, is_baseline=True, config_key="a")
    reason = ("output differs from the golden reference at prompt 0: got 'the the the the the the' expected "
              "'Paris is the capital of France' (token 3 of 32; log-probability drift 12.3 > 0.5)")
    p.ended(3, TrialResult(outcome=FAIL, config={}, failure_kind="wrong-output", failure_reason=reason,
                           metrics={"decode_tok_s_ignored": 312.4}), best, 100.0)
    line = out.getvalue().rstrip("\n")
    assert len(line) <= logs.LOG_WIDTH
    assert line.startswith("  #3 -> FAIL wrong-output (its 312.4 tok/s do not count): output"), line
    assert " | best #1 120.0 tok/s" in line


# While trials run (issue 39): a phase change is one event line (a request done is none); the
# time to go comes from the study's launch costs, else this run's pace, else a first trial's
# requests; the start line counts this run's launches and the budget apart.
def _phase(name: str, started_ago: float, since_ago: float, trail=(), entered_as: str | None = None,
           **kw) -> TrialPhase:
    """A trial's phase as its reporter sends it; ``trail``: (text, seconds ago) of each phase
    it entered before this one; ``entered_as``: its text when it began (its text now by default)."""
    now = time.time()
    entered = tuple((text, now - ago) for text, ago in trail)
    kw["trail"] = entered + ((entered_as or TrialPhase(0, name, 0, 0, **kw).text(), now - since_ago),)
    return TrialPhase(0, name, now - started_ago, now - since_ago, **kw)


def test_each_phase_change_is_one_event_line(tmp_path):
    _, p, out = progress(tmp_path)
    p.started(0, {"tp_size": 2, "backend.threads": 1}, launch=1, counted=0, is_baseline=True)
    p.running([("#0", _phase("launching", 40, 40))])
    level_1 = (("launching", 40), ("measuring level 1: 0/16 requests", 10))
    at_level_1 = dict(level=1, total=16, trail=level_1[:1], entered_as=level_1[1][0])
    p.running([("#0", _phase("measuring", 40, 10, done=3, **at_level_1))])
    p.running([("#0", _phase("measuring", 40, 10, done=4, **at_level_1))])  # one more request: no line
    p.running([("#0", _phase("measuring", 40, 1, level=8, done=0, total=0, trail=level_1))])
    lines = out.getvalue().splitlines()
    assert lines[0] == "starting #0 (this run's launch 1, the baseline; budget 0/4 used) elapsed 0s"
    assert lines[1] == "  #0 config: tp_size=2 backend.threads=1"
    assert lines[2:] == ["  #0 launching (0s into the trial)",
                         "  #0 measuring level 1: 0/16 requests (30s into the trial)",
                         "  #0 measuring level 8 (39s into the trial)"]


def test_phases_a_late_poll_skipped_and_those_of_a_quick_end_are_each_said_once(tmp_path):
    """A driver that polls every half second under load, or a trial that checks and stops
    between two polls: every phase it entered is still one line, at the time it began."""
    _, p, out = progress(tmp_path)
    p.running([("#0", _phase("launching", 2, 2))])
    entered = (("launching", 30), ("starting", 28), ("warming up", 9))  # two entered since the last poll
    p.running([("#0", _phase("measuring", 30, 5, level=1, done=0, total=4, trail=entered))])
    p.trial_over("#0", [["launching", 0.0], ["starting", 2.0], ["warming up", 21.0],
                        ["measuring level 1: 0/4 requests", 25.0], ["correctness check", 44.0], ["stopping", 46.0]])
    p.trial_over("#0", [["launching", 0.0], ["stopping", 46.0]])  # said once: the label is done
    assert out.getvalue().splitlines() == [
        "  #0 launching (0s into the trial)", "  #0 starting (2s into the trial)",
        "  #0 warming up (21s into the trial)",
        "  #0 measuring level 1: 0/4 requests (25s into the trial)", "  #0 correctness check (44s into the trial)",
        "  #0 stopping (46s into the trial)"]


def test_the_time_to_go_before_anything_finished_comes_from_the_first_trials_requests(tmp_path):
    _, p, _ = progress(tmp_path)  # a budget of 4 trials, nothing finished, no launch costs measured
    assert p._to_go(4, [_phase("starting: weights", 20, 5)]) is None  # nothing to go by yet
    # 40 s in, 4 of 16 requests done in the last 8 s: 24 s more here, then 3 launches of ~64 s each
    to_go = p._to_go(4, [_phase("measuring", 40, 8, level=1, done=4, total=16)])
    assert to_go == pytest.approx(24 + 3 * 64, abs=1)
    p.expected_left = lambda n: 100.0 * n  # the study's measured launch costs win
    assert p._to_go(4, [_phase("measuring", 40, 8, level=1, done=4, total=16)]) == pytest.approx(360, abs=1)
