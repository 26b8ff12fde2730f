"""The plan (study/evidence/plan.py): per level the best config with its figure over launches, its ratio
to the baseline and verdict beyond the launch noise, how the best at the lowest level does at the
others, the Pareto set and the best for a traffic mix; on issue 24's own measured table (one H200,
vLLM 0.26.0, the `1b` checkpoint: eager, graphs captured up to 8, up to 64), each config relaunched
as a study relaunches them (issue 34's launch-to-launch spread, a few percent), and on rows a
study records."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from plan_rows import EAGER, PLAN, UP_TO_8, UP_TO_64, race_tied_at_one, raced, relaunch, row, tied_at_one

from orchestrator.config.job import Objective
from orchestrator.core.records import FAIL, TrialRow, config_key
from orchestrator.core.slo import Slo, Targets
from orchestrator.core.verdict import FASTER, NOT_SHOWN, SAME_CONFIG, SLOWER, WITHIN_NOISE
from orchestrator.study.evidence.history import best_rows
from orchestrator.study.evidence.plan import (
    best_at,
    best_for_mix,
    break_tie,
    build_plan,
    format_plan,
    format_verdict,
    level_value,
    mix_of,
    one_for_all,
    pareto,
    prune_thresholds,
)


def issue_table(relaunched: bool = True) -> list[TrialRow]:
    """Issue 24's measurements, two rounds each at 10 and 64; level 1 as reported (eager and
    up to 64: the median; up to 8: its range 413-567 and median); with ``relaunched``, each config
    launched again (within 2-6% of its first launch) as the study's relaunches and race do."""
    rows = [row(0, EAGER, {1: [94.7, 94.7], 10: [788, 701], 64: [4500, 3514]}, baseline=True),
            row(1, UP_TO_8, {1: [413, 433.9, 567], 10: [692, 685], 64: [3789, 3542]}),
            row(2, UP_TO_64, {1: [363.8, 363.8], 10: [3438, 3874], 64: [13757, 15673]})]
    if relaunched:
        rows += [relaunch(3, EAGER, {1: [97.1, 97.0], 10: [690, 700], 64: [3500, 3700]}),
                 relaunch(4, UP_TO_8, {1: [440, 425, 450], 10: [740, 735], 64: [3300, 3500]}),
                 relaunch(5, UP_TO_64, {1: [370, 371], 10: [3300, 3500], 64: [13000, 13400]}),
                 relaunch(6, EAGER, {1: [93.0, 93.5], 10: [800, 790], 64: [4500, 4700]}),
                 relaunch(7, UP_TO_8, {1: [430, 445, 438], 10: [690, 700], 64: [3900, 3700]}),
                 relaunch(8, UP_TO_64, {1: [366, 368], 10: [3700, 3600], 64: [14800, 15400]})]
    return rows


def test_one_launch_each_is_no_verdict_launch_noise_unknown():
    """Repeats within one launch are not what a relaunch measures: with every config launched once
    the launch noise is unknown, so no level's verdict is shown (neither beyond nor within a noise nobody
    measured), the text says why, and its ratio is the interval's own estimate."""
    plan = build_plan(issue_table(relaunched=False), PLAN)
    for lv in (1, 10, 64):
        vs = plan.at(lv).vs_baseline
        assert vs.verdict == NOT_SHOWN and not vs.interval.bounded and "within noise" not in vs.text
        assert vs.text.endswith("x, not shown: launch noise unknown (no config launched twice)")
        assert vs.point == vs.interval.ratio and vs.to_dict()["point"] == vs.interval.ratio
        assert plan.at(lv).best_launches == 1 and plan.at(lv).best_fresh is None


def test_the_issues_table_is_a_plan_not_one_number():
    plan = build_plan(issue_table(), PLAN)
    assert plan.anchor.number == 1  # single-request decode crowns "captured up to 8"
    assert [plan.at(lv).best.number for lv in (1, 10, 64)] == [1, 2, 2]
    # ... which is no faster than eager at 10 and 64: within noise of the baseline there, never "faster"
    for lv in (10, 64):
        assert plan.at(lv).anchor_vs_baseline.verdict == WITHIN_NOISE
        assert plan.at(lv).anchor_vs_best.verdict == SLOWER  # and the plan's config there beats it beyond noise
        assert plan.at(lv).vs_baseline.verdict == FASTER
    assert plan.at(1).anchor_vs_best.verdict == SAME_CONFIG
    assert plan.at(1).vs_baseline.verdict == FASTER and plan.at(1).vs_baseline.interval.lo > 3
    assert [r.number for r in plan.pareto] == [1, 2]  # eager is dominated; both graph configs are on the front
    # each figure is the median over the config's launches, and a fresh launch's range brackets it
    assert plan.baseline.number == 0
    assert plan.at(10).baseline_value == pytest.approx(statistics.median([(788 + 701) / 2, 695, 795]))
    assert plan.at(1).best_launches == 3
    assert plan.at(1).best_value == pytest.approx(438.0)  # the median of 433.9, 440, 438
    lo, hi = plan.at(1).best_fresh
    assert lo < plan.at(1).best_value < hi and plan.at(1).noise.known and plan.at(1).noise.df == 6
    assert ", 3 vs 3 launches, launch noise +-1.4%)" in plan.at(1).vs_baseline.text  # over launches, with the noise
    assert [r.number for r in plan.configs] == [1, 2]
    assert plan.roles(plan.configs[1]) == ["best at 10", "best at 64"]


def test_format_plan_is_the_status_table():
    text = format_plan(build_plan(issue_table(), PLAN))
    lines = text.splitlines()
    assert lines[0].startswith("plan over concurrency 1, 10, 64 (baseline #0; the best at 1 is #1)")
    by_level = {line.split()[0]: line for line in lines[2:5]}
    assert "#2 3650.0 (3 launches)" in by_level["10"] and "slower" in by_level["10"] and "faster" in by_level["10"]
    assert "same config" in by_level["1"]
    assert lines[5].startswith("launch noise: at 1 +-") and "; at 64 +-" in lines[5]
    assert lines[6] == "pareto set (medians at 1/10/64): #1 438.0/695.0/3665.5, #2 367.0/3650.0/14715"


def test_the_mix_ranks_by_the_weighted_geometric_mean_of_the_ratios():
    rows = issue_table()
    single = {1: 1.0}
    mostly_one = {1: 0.9, 10: 0.05, 64: 0.05}
    mostly_load = {1: 0.2, 10: 0.4, 64: 0.4}
    assert best_for_mix(rows, single)[0].number == 1
    assert best_for_mix(rows, mostly_one)[0].number == 1
    assert best_for_mix(rows, mostly_load)[0].number == 2
    base, best = rows[0], rows[2]
    expect = 1.0
    for lv, w in mostly_load.items():
        expect *= (level_value(best, lv) / level_value(base, lv)) ** w
    assert mix_of(best, mostly_load) / mix_of(base, mostly_load) == pytest.approx(expect)
    plan = build_plan(rows, Objective(concurrency=(1, 10, 64), weights=mostly_load))
    iv = plan.mix_vs_baseline.interval  # over launches: each launch's weighted geometric mean
    assert iv.bounded and iv.lo < iv.ratio < iv.hi and iv.launches == (3, 3)
    assert plan.mix.number == 2 and plan.mix_vs_baseline.verdict == FASTER and plan.mix_launches == 3
    assert "best for the mix (1: 0.2, 10: 0.4, 64: 0.4): #2" in format_plan(plan)


def test_a_config_never_best_is_not_in_the_plan_at_any_level():
    rows = issue_table()
    wrong = row(3, {"graph_capture": True, "capture_sizes": "64"}, {1: [900, 910], 10: [9000, 9100],
                                                                    64: [30000, 31000]},
                correctness={"ok": False, "reason": "text differs"})
    failed = row(4, {"graph_capture": True, "capture_sizes": "32"}, {1: [500, 510], 10: [5000, 5100],
                                                                     64: [20000, 21000]}, state=FAIL)
    cached = row(5, UP_TO_64, {1: [999, 999], 10: [9999, 9999], 64: [99999, 99999]}, cached_from=2)
    plan = build_plan(rows + [wrong, failed, cached], PLAN)
    assert {plan.at(lv).best.number for lv in (1, 10, 64)} == {1, 2}
    assert 3 not in {r.number for r in plan.pareto}


def test_a_config_measured_twice_is_ranked_by_the_median_of_its_launches_at_each_level():
    rows = issue_table(relaunched=False) + [row(3, UP_TO_64, {1: [360, 362], 10: [3000, 3100],
                                                              64: [20000, 21000]})]
    got = best_at(rows, 64)[0]
    assert got.number == 2 and got.n_measurements == 2  # represented by its lower trial: the lucky 20000+ is not
    at10 = best_at(rows, 10)[0]  # there trial 3 is the lower one, and still the best config at 10
    assert at10.number == 3 and at10.n_measurements == 2
    # a relaunch of the config (uncounted) is one more launch of its figure
    more = rows + [relaunch(4, UP_TO_64, {1: [361, 361], 10: [3100, 3200], 64: [14000, 14500]})]
    assert best_at(more, 64)[0].n_measurements == 3
    assert build_plan(more, PLAN).at(64).best_value == pytest.approx(statistics.median([14715, 20500, 14250]))


def test_a_single_level_plan_is_todays_best_and_threshold():
    rows = issue_table(relaunched=False)
    plan = build_plan(rows, Objective())
    assert plan.levels == (1,) and plan.at(1).best.number == best_rows(rows, 1)[0].number
    assert prune_thresholds(rows, (1,), 0.8) == {1: pytest.approx(0.8 * best_rows(rows, 1)[0].value)}
    assert prune_thresholds(rows, (1, 10, 64), 0.5) == {1: pytest.approx(433.9 / 2), 10: pytest.approx(3656 / 2),
                                                       64: pytest.approx(14715 / 2)}
    assert prune_thresholds([], (1,), 0.8) is None


def test_nothing_ranked_is_no_plan():
    plan = build_plan([row(0, EAGER, {1: [1.0]}, baseline=True, state=FAIL)], PLAN)
    assert not plan.found and plan.baseline is None
    assert format_plan(plan) == "plan over concurrency 1, 10, 64: no config may be called best yet"
    assert pareto([], (1, 10)) == []


# ---- latency targets: infeasible at a level only (issue 35) ------------------------------------------
def timed(number: int, params: dict, levels: dict[int, tuple[list[float], float]], **kw) -> TrialRow:
    """A row whose levels carry a TPOT p99 (seconds) beside their samples."""
    base = row(number, params, {lv: s for lv, (s, _) in levels.items()}, **kw)
    recs = {str(lv): {**base.at(lv).to_record(), "tpot": {"p50": t / 2, "p90": t * 0.9, "p99": t, "n": 8}}
            for lv, (_, t) in levels.items()}
    return TrialRow(number=number, state=base.state, params=params, value=base.value, counted=True,
                    is_baseline=base.is_baseline, config_key=base.config_key, levels=recs,
                    metrics={"levels": recs})


def slo_table() -> list[TrialRow]:
    """A: best at 1 and the most tok/s at 32, but its TPOT at 32 is 31 ms; B: slower at 1, holds at 32."""
    lane = {"mode": "lane"}
    return [timed(0, {"mode": "base"}, {1: ([100, 101, 99], 0.010), 32: ([900, 910], 0.030)}, baseline=True),
            timed(1, lane, {1: ([400, 405, 395], 0.0025), 32: ([2600, 2650], 0.0312)}),
            timed(2, {"mode": "batch"}, {1: ([200, 201, 199], 0.005), 32: ([2400, 2380], 0.012)})]


SLO_PLAN = Objective(concurrency=(1, 32), slo=Targets(every=(Slo.named("tpot_p99", 0.020),)))


def test_a_config_that_breaks_the_slo_at_a_level_is_ranked_nowhere_there_but_best_where_it_holds():
    rows = slo_table()
    plan = build_plan(rows, SLO_PLAN)
    assert plan.at(1).best.number == 1 and plan.at(32).best.number == 2  # without the SLO, #1 would win at 32 too
    assert build_plan(rows, Objective(concurrency=(1, 32))).at(32).best.number == 1
    broken = plan.at(32).broken
    assert [r.number for r, _ in broken] == [1] and broken[0][1][0].excess == pytest.approx(0.56)
    text = format_plan(plan)
    assert "slo: TPOT p99 <= 20 ms" in text
    assert "#1 (the best at the lowest level) breaks the SLO at 32: TPOT p99 31.2 ms at 32, over the 20 ms target " \
           "by 56%" in text
    assert "the baseline #0 breaks the SLO at 32: TPOT p99 30 ms at 32" in text  # reported, not a stop
    said = plan.to_dict()
    assert said["slo"] == {"tpot_p99": 0.020} and len(said["slo_lines"]) == 2
    assert said["per_level"][1]["anchor_breaches"][0]["excess"] == pytest.approx(0.56)
    assert [r.number for r in plan.pareto] == [1, 2]  # #1 counts nothing at 32, but is the best at 1
    assert best_at(rows, 32, slo=SLO_PLAN.slo)[0].number == 2
    assert prune_thresholds(rows, (1, 32), 0.8, SLO_PLAN.slo)[32] == pytest.approx(0.8 * 2390)


def test_one_config_within_noise_of_the_best_everywhere_is_named_for_every_level():
    """Deploying one config is what a user wants: when the best at 1 is only tied (within launch
    noise) with the config best at 10 and 64, the plan says that config serves every level."""
    plan = build_plan(tied_at_one(), PLAN)
    assert [plan.at(lv).best.number for lv in (1, 10, 64)] == [2, 1, 1]
    one = plan.everywhere
    assert one is not None and one.row.number == 1 and one.best_at == (10, 64)
    ((level, vs),) = one.within
    assert level == 1 and vs.other.number == 2 and vs.verdict == WITHIN_NOISE and vs.interval.bounded
    line = next(ln for ln in format_plan(plan).splitlines() if ln.startswith("one config for every level: "))
    assert line.startswith("one config for every level: #1, the best at 10 and 64, and at 1 within launch noise "
                           "of #2 (")
    assert plan.to_dict()["one_config"]["trial"] == 1


def test_a_race_too_short_for_a_verdict_leaves_a_tie_the_config_for_every_level_breaks():
    """The kept H200 race study's shape: its race ended after two rounds, too few for a verdict between
    its finalists (``verdict.round_interval``), so the plan claims no config within launch noise of the
    best at 1; the race still left up to 8 (#2) and up to 64 (#1) tied there, and #1 is the best at 10
    and 64 by far: the race's tie stands for the comparison at 1 and the tie is broken for #1."""
    up_to_8, up_to_64 = config_key(UP_TO_8), config_key(UP_TO_64)
    rows = raced(tied_at_one(), PLAN, {up_to_8: [{1: v, 10: 900.0, 64: 5000.0} for v in (470.0, 455.0)],
                                       up_to_64: [{1: v, 10: 3500.0, 64: 14000.0} for v in (450.0, 480.0)]}, budget=4)
    plan = build_plan(rows, PLAN)
    assert [plan.at(lv).best.number for lv in (1, 10, 64)] == [2, 1, 1]
    assert plan.evidence.interval(up_to_8, up_to_64, 1).why.startswith("2 round(s) measured both")
    assert plan.everywhere is None and "one config for every level" not in format_plan(plan)  # no interval at 1
    one = one_for_all(plan.per_level, plan.evidence, plan.slo, tie=(1, {up_to_8, up_to_64}))
    assert one.row.number == 1 and one.best_at == (10, 64) and one.within == ()
    assert one.text() == "#1, the best at 10 and 64, and at 1 tied with #2 in the race"
    tie = break_tie([plan.at(1).best, one.row], "at 1", one, plan.baseline)
    assert tie.chosen.number == 1 and tie.rule == "one config for every level"
    assert tie.text().endswith("#1 is exported, one config for every level (the best at 10 and 64); #2 only has the "
                               "higher median at 1")
    # a tie #1 is not in: #2 is slower beyond noise at 10 and 64, so nothing serves every level
    assert one_for_all(plan.per_level, plan.evidence, plan.slo, tie=(1, {up_to_8, config_key(EAGER)})) is None


def test_a_config_against_itself_is_the_same_config_with_no_verdict_and_no_interval():
    """Found after issue 48 was merged: where the best at 1 is the best here, the plan printed it against
    itself as '1.00x, within noise: same config (no interval: 2 round(s) measured both; ...)': "within
    noise" with no interval (what item 2 forbids), and rounds of one config paired with themselves. It is
    "the same config", nothing more, in status's plan (and its JSON), with or without a launch noise."""
    up_to_8, up_to_64 = config_key(UP_TO_8), config_key(UP_TO_64)
    rows = raced(tied_at_one(), PLAN, {up_to_8: [{1: v, 10: 900.0, 64: 5000.0} for v in (470.0, 455.0)],
                                       up_to_64: [{1: v, 10: 3500.0, 64: 14000.0} for v in (450.0, 480.0)]}, budget=4)
    for plan in (build_plan(rows, PLAN), build_plan(issue_table(), PLAN)):  # the race's 2 rounds; 3 launches each
        assert plan.at(1).anchor_vs_best.verdict == SAME_CONFIG and plan.at(1).anchor_vs_best.text == "the same config"
        level_1 = next(line for line in format_plan(plan).splitlines() if line.split()[:1] == ["1"])
        assert level_1.endswith("  the same config") and "within noise" not in level_1 and "no interval" not in level_1
        assert plan.to_dict()["per_level"][0]["anchor_vs_best"]["text"] == "the same config"


def test_no_config_for_every_level_when_the_others_are_beyond_noise_or_break_the_slo():
    assert build_plan(issue_table(), PLAN).everywhere is None  # up to 64 is slower at 1 beyond noise
    assert "one config for every level" not in format_plan(build_plan(issue_table(), PLAN))
    # the tie at 1 holds, but up to 64's TPOT there breaks a 3 ms target (up to 8 holds it): it does not
    # serve level 1
    tpot = {EAGER["graph_capture"]: 0.012, UP_TO_8["capture_sizes"]: 0.002}
    rows = []
    for r in tied_at_one():
        t = tpot.get(r.params.get("capture_sizes", False), 0.0035)
        timed_row = timed(r.number, r.params, {lv: ([r.at(lv).value], t if lv == 1 else 0.001) for lv in (1, 10, 64)},
                          baseline=r.is_baseline)
        rows.append(replace(timed_row, counted=r.counted, launch_role=r.launch_role))
    slo = Targets(per_level={1: (Slo.named("tpot_p99", 0.003),)})
    plan = build_plan(rows, Objective(concurrency=(1, 10, 64), slo=slo))
    assert [plan.at(lv).best.number for lv in (1, 10, 64)] == [2, 1, 1] and plan.everywhere is None
    assert build_plan(rows, PLAN).everywhere.row.number == 1  # the same rows without the target: it does


def test_a_tie_the_race_left_is_broken_by_the_config_for_every_level_then_fewer_changes():
    """The race could not tell up to 8 (#2, the higher median at 1) from up to 64 (#1, best at 10 and
    64): the one config for every level breaks it; without one, the config that changes fewer
    settings from the baseline; with nothing else known, the higher median, said as such."""
    rows = race_tied_at_one()
    plan = build_plan(rows, PLAN)
    assert plan.at(1).best.number == 2 and plan.everywhere.row.number == 1
    tied = [plan.at(1).best, plan.everywhere.row]
    base = plan.baseline
    tie = break_tie(tied, "at 1", plan.everywhere, base)
    assert tie.chosen.number == 1 and tie.rule == "one config for every level"
    assert tie.text() == ("the race left #2 and #1 tied at 1: #1 is exported, one config for every level (the best "
                          "at 10 and 64); #2 only has the higher median at 1")
    assert tie.to_dict()["chosen_trial"] == 1 and tie.to_dict()["tied_trials"] == [2, 1]
    fewer = row(9, {"graph_capture": True}, {1: [400.0]})  # one setting changed from eager, not two
    tie = break_tie([tied[0], fewer], "at 1", None, base)
    assert tie.chosen.number == 9 and tie.rule == "fewer settings changed from the baseline"
    assert "(1 against #2's 2); #2 only has the higher median at 1" in tie.text()
    same = break_tie(tied, "at 1", None, base)  # two changes each: nothing else tells them apart
    assert same.chosen.number == 2 and same.rule == "the higher median" and "nothing else tells them apart" in \
        same.text()


# ---- issue 46: a latency objective (``minimize``) read through the same plan, early stop and race ----------
def _latency_launch(number: int, key: str, tpot_p99: float, tok_s: float, *, baseline: bool = False,
                    role: str | None = None) -> TrialRow:
    from orchestrator.core.measurement import Latency as Percentiles
    from orchestrator.core.measurement import LevelResult, Measurement
    from orchestrator.core.objectives import Latency

    level = LevelResult(32, samples=(tok_s,), tpot=Percentiles(p50=tpot_p99 / 2, p90=tpot_p99, p99=tpot_p99, n=64))
    m = Measurement(levels={32: level}, rounds=1)
    return TrialRow(number=number, state="COMPLETE", params={"k": key}, value=m.value, config_key=key,
                    counted=role is None, is_baseline=baseline, measurement=m, launch_role=role,
                    measure=Latency("tpot_p99"))


def _latency_study() -> list[TrialRow]:
    """A (the baseline): 800 tok/s, TPOT p99 ~40 ms; B: 230 tok/s, ~15 ms; each launched four times (six
    degrees of launch noise, +-1%)."""
    rows = []
    for i, (a, b) in enumerate([(0.040, 0.015), (0.0404, 0.0151), (0.0396, 0.0149), (0.0402, 0.0150)]):
        role = None if i == 0 else "relaunch"
        rows += [_latency_launch(2 * i, "A", a, 800.0, baseline=i == 0, role=role),
                 _latency_launch(2 * i + 1, "B", b, 230.0, role=role)]
    return rows


def test_a_latency_plan_crowns_the_lowest_p99_and_says_lower_in_ms():
    from orchestrator.core.objectives import Latency

    obj = Objective(concurrency=(32,), measure=Latency("tpot_p99"))
    rows = _latency_study()
    plan = build_plan(rows, obj)
    lp = plan.at(32)
    assert lp.best.config_key == "B" and best_rows(rows)[0].config_key == "B"  # not A's 3.5x the tok/s
    assert lp.unit == "ms TPOT p99" and lp.shown(lp.best_value) == pytest.approx(15.0, rel=0.01)
    assert lp.vs_baseline.verdict == FASTER  # beyond noise, in the direction that is better ...
    assert lp.vs_baseline.text.startswith("0.375x lower (95% CI 0.3"), lp.vs_baseline.text  # ... said as it is
    assert lp.vs_baseline.to_dict()["verdict"] == "lower" and lp.vs_baseline.to_dict()["point"] < 1
    assert "verdict: best #1 15.0 ms TPOT p99 (median of 4 launches) = 0.375x lower" in format_verdict(plan)


def test_the_early_stop_and_the_race_run_the_latencys_way():
    from orchestrator.core.measurement import LevelResult
    from orchestrator.core.objectives import Latency
    from orchestrator.core.outcome import early_stop
    from orchestrator.study.search.race import plan_race

    obj = Objective(concurrency=(32,), measure=Latency("tpot_p99"))
    rows = _latency_study()
    limits = prune_thresholds(rows, [32], 0.5)  # 0.5 x the best's worth: twice its p99, 30 ms
    assert obj.shown(limits[32]) == pytest.approx(30.0, rel=0.02)
    first = {lv: obj.worth(rows[0].at(lv)) for lv in (32,)}  # A's 40 ms: worse than 30 ms, stopped
    assert early_stop(first, limits)
    assert not early_stop({32: obj.worth(LevelResult(32, tpot=rows[1].at(32).tpot))}, limits)  # B's 15 ms goes on
    race = plan_race(rows, obj, budget=8, race_id=1)
    assert race.contests[0].finalists[0] == "B"  # the incumbent is the lowest latency
    assert "A" not in race.contests[0].finalists  # beyond noise worse: not a finalist
