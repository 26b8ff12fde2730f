"""study.launches: every launch of a config is evidence (its trials, relaunches, race and compare
launches; not a cached answer, not the baseline on another node, never a config found wrong), its
figure the median over them, the launch noise pooled over configs launched more than once, and
launches that ran under very different load said so."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import replace

import pytest
from launch_rows import launch, noise_rows

from orchestrator.core.measurement import HostLoad
from orchestrator.core.records import TrialRow
from orchestrator.core.verdict import FASTER, NOT_SHOWN, WITHIN_NOISE, describe, verdict
from orchestrator.study.evidence.history import best_rows
from orchestrator.study.evidence.launches import Evidence, load_note, measured_launches


def test_every_launch_of_a_config_is_evidence_and_nothing_else_is():
    rows = [launch(0, "a", 100.0, baseline=True), launch(1, "b", 120.0),
            launch(2, "a", 104.0, role="relaunch"), launch(3, "b", 118.0, role="race"),
            launch(4, "b", 121.0, role="compare"),
            replace(launch(5, "b", 500.0), cached_from=1),  # an answer from the cache: no launch
            launch(6, "a", 900.0, role="repeat"),  # the baseline on another node measures that node
            launch(7, "w", 999.0), replace(launch(8, "w", 0.0), state="FAIL", failure_kind="wrong-output",
                                           correctness={"ok": False})]  # a config found wrong has none
    by_key = measured_launches(rows)
    assert {k: [r.number for r in v] for k, v in by_key.items()} == {"a": [0, 2], "b": [1, 3, 4]}
    ev = Evidence(rows)
    assert ev.median("b", 1) == 120.0 and ev.count("a", 1) == 2 and ev.values("w", 1) == []
    noise = ev.noise(1)
    assert noise.df == 3 and noise.configs == 2 and noise.launches == 5 and not noise.known  # too few: no verdict
    assert not ev.interval("a", "b", 1).bounded and ev.fresh("b", 1) is None
    ev = Evidence(rows + noise_rows(20))  # the study's relaunches of another config: six more degrees of freedom
    iv = ev.interval("a", "b", 1)
    assert ev.noise(1).df == 9 and iv.launches == (2, 3) and verdict(iv) == FASTER
    lo, hi = ev.fresh("b", 1)
    assert lo < ev.median("b", 1) < hi


def test_the_noise_and_the_figures_are_per_level_and_for_the_mix():
    rows = [launch(0, "a", {1: 100.0, 8: 800.0}, baseline=True), launch(1, "a", {1: 101.0, 8: 640.0}, role="relaunch"),
            launch(2, "b", {1: 90.0, 8: 1600.0}), launch(3, "b", {1: 91.0, 8: 1300.0}, role="race"),
            launch(4, "a", {1: 99.0, 8: 720.0}, role="race"), launch(5, "b", {1: 90.5, 8: 1450.0}, role="race"),
            launch(6, "a", {1: 100.5, 8: 760.0}, role="race"), launch(7, "b", {1: 89.5, 8: 1500.0}, role="race")]
    ev = Evidence(rows)
    assert ev.noise(8).df == 6
    assert ev.noise(1).relative < 0.02 < 0.05 < ev.noise(8).relative  # a busier level spreads more
    weights = {1: 0.5, 8: 0.5}
    each = [(100.0 * 800.0) ** 0.5, (101.0 * 640.0) ** 0.5, (99.0 * 720.0) ** 0.5, (100.5 * 760.0) ** 0.5]
    assert ev.mix_median("a", weights) == pytest.approx(statistics.median(each))  # each launch's mix, their median
    assert ev.mix_interval("a", "b", weights).launches == (4, 4)
    assert verdict(ev.interval("a", "b", 8)) == FASTER and verdict(ev.interval("b", "a", 1)) == FASTER


def test_two_finalists_of_a_race_are_judged_on_its_rounds_at_its_confidence():
    race = {"id": 2, "round": 0, "looks": 4, "contests": {"1": ["a", "b"]}}
    rows = [launch(0, "a", 100.0, baseline=True), launch(1, "b", 101.0), launch(2, "c", 50.0),
            launch(3, "a", 100.5, role="race", race=race), launch(4, "b", 103.5, role="race", race=race),
            launch(5, "b", 102.5, role="race", race={**race, "round": 1}),
            launch(6, "a", 99.5, role="race", race={**race, "round": 1})]
    ev = Evidence(rows)
    assert ev.looks("1", "a", "b") == 4 and ev.looks("1", "a", "c") == 1
    raced = ev.interval("a", "b", 1)
    assert raced.confidence == pytest.approx(0.9875) and raced.paired and raced.n == 2
    assert verdict(raced) == NOT_SHOWN  # two rounds: no verdict between finalists before four
    assert ev.interval("a", "c", 1).confidence == 0.95
    # four rounds, each a pair (the search's launch of b is no part of it): 3% apart in every round, beyond
    # the rounds' spread pooled with the launch noise the study measured (each config's launches agree within 2%)
    rows += [launch(7 + 2 * i + j, k, v * (1 - 0.01 * i), role="race", race={**race, "round": 2 + i})
             for i in range(2) for j, (k, v) in enumerate([("a", 100.0), ("b", 103.0)])]
    raced = Evidence(rows).interval("a", "b", 1)
    assert raced.n == 4 and verdict(raced) == FASTER and raced.ratio == pytest.approx(1.03, abs=0.002)
    assert "4 rounds paired" in describe(raced)
    # the same rounds where the study measured launches 10% apart: four rounds alike prove nothing more
    noisy = [replace(r, measurement=launch(r.number, r.config_key, 93.0).measurement, value=93.0)
             if r.number == 1 else r for r in rows]
    assert verdict(Evidence(noisy).interval("a", "b", 1)) != FASTER


def test_launches_under_very_different_load_are_said():
    busy = HostLoad(cpus=2, wall_s=10.0, host_cpu_s=19.0, server_cpu_s=0.5, client_cpu_s=0.5)  # others: 1.8 CPUs
    quiet = HostLoad(cpus=2, wall_s=10.0, host_cpu_s=4.0, server_cpu_s=3.0, client_cpu_s=0.8)  # others: 0.02
    rows = [launch(0, "a", 100.0, baseline=True, host=quiet), launch(1, "b", 60.0, host=busy),
            launch(2, "a", 98.0, role="relaunch", host=quiet)]
    note = load_note(rows)
    assert note.startswith("the launches ran under very different load: 1 while other work took at least half "
                           "the host's CPUs (up to 1.8 of 2: #1), 2 on a quiet host")
    assert load_note([r for r in rows if r.number != 1]) is None
    assert load_note([launch(0, "a", 1.0)]) is None  # not recorded: nothing said


def test_what_compares_fresh_launches_alone_say():
    """The best measured at 1.5x the baseline on four launches each during the study, then three fresh
    launches of each by ``compare`` on a machine where they are equal: over every launch the t interval
    may still clear 1.0, the fresh launches alone are within noise."""
    rows = [launch(i, k, v, baseline=k == "base", role=None if i < 2 else "relaunch")
            for i, (k, v) in enumerate([("base", 66.2), ("best", 100.2), ("base", 66.7), ("best", 98.9),
                                        ("base", 66.6), ("best", 99.9), ("base", 65.3), ("best", 99.9)])]
    rows += [launch(8 + i, k, v, role="compare")
             for i, (k, v) in enumerate([("base", 66.6), ("best", 66.5), ("best", 66.6), ("base", 66.5),
                                         ("base", 66.3), ("best", 66.5)])]
    ev = Evidence(rows)
    fresh = ev.compared("base", "best", 1)
    assert fresh is not None and fresh.launches == (3, 3) and verdict(fresh) == WITHIN_NOISE
    assert fresh.ratio == pytest.approx(1.0, abs=0.01)
    assert ev.compared("base", "best", 1) is not None and Evidence(rows[:8]).compared("base", "best", 1) is None


def test_a_box_that_drifts_is_read_at_one_time():
    """Issue 48: a box 2% slower every minute; the baseline launched early, the best (1.6x it) late, each
    four or five times. Over launches as measured the later launches make the best look 1.3x; read at one time (the
    slope fitted within each config's own launches) it is 1.6x, and the interval says the drift was removed.
    The ranking reads the same: a config 3% faster but launched later is not ranked below one launched early."""
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    def at(n: int, key: str, speed: float, minute: float, **kw) -> TrialRow:
        return launch(n, key, speed * 0.98 ** minute, ended_at=(t0 + datetime.timedelta(minutes=minute)).isoformat(),
                      **kw)

    rows = [at(i, "base", 100.0 * (1.005 if i % 2 else 0.995), 2 * i, baseline=i == 0, role=None if i == 0 else
               "relaunch") for i in range(5)]
    rows += [at(5 + i, "best", 160.0 * (0.995 if i % 2 else 1.005), 10 + 2 * i, role=None if i == 0 else "relaunch")
             for i in range(4)]
    ev = Evidence(rows)
    drift = ev.drift(1)
    assert drift.drifted and drift.rate() == (pytest.approx(-0.02, abs=0.002), "minute")
    iv = ev.interval("base", "best", 1)
    assert iv.ratio == pytest.approx(1.6, rel=0.01) and iv.drift_removed and verdict(iv) == FASTER
    assert ev.median("best", 1) / ev.median("base", 1) < 1.4  # the figures printed stay as measured
    assert describe(iv).endswith(", 5 vs 4 launches, launch noise +-0.6%, the box's drift removed)")
    # ranking: "late" is 3% faster than "early" but launched ten minutes later (its medians 15% lower)
    ranked = rows + [at(9 + i, "early", 100.0, 1 + 2 * i, role="relaunch") for i in range(3)] + \
        [replace(at(12, "early", 100.0, 0.5), launch_role=None, counted=True)] + \
        [at(13 + i, "late", 103.0, 11 + 2 * i, role="relaunch") for i in range(3)] + \
        [replace(at(16, "late", 103.0, 10.5), launch_role=None, counted=True)]
    order = [r.config_key for r in best_rows(ranked, 4)]
    assert order[:2] == ["best", "late"] and order.index("late") < order.index("early")
    assert Evidence(ranked).median("late", 1) < Evidence(ranked).median("early", 1)
