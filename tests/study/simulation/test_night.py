"""study.night: a night replayed whole, the search, the relaunches and the race as the driver
schedules them, every launch counted, and the export scored against the table's truth."""

from __future__ import annotations

import pytest

from orchestrator.study.simulation import night
from orchestrator.study.simulation.replay_table import Row, index_table


def table(n=6, best=5):
    """A one-parameter table: config k measures 10 + k tok/s, config ``best`` 100 and the one before
    it 99.5 (a tie for the race), config 0 the baseline; 1% noise per sample and per launch, five
    minutes a start."""
    speed = {best: 100.0, best - 1: 99.5}
    rows = [Row({"k": k}, [speed.get(k, 10.0 + k)], None, baseline=k == 0, line=k + 2, startup_s=300.0,
                noise=0.01, launch_noise=0.01) for k in range(n)]
    return index_table("t", rows, {"k": list(range(n))})


def test_every_launch_is_counted_and_the_first_optimal_one_among_them():
    t = table(n=30, best=29)
    n = night.replay_night(t, "random", seed=3, budget=30, confirm=4)
    assert n.search == 30 and n.launches == n.search + n.relaunches + n.race
    assert n.relaunches >= 1 and 0 < n.race <= 4
    assert n.first_optimal is not None and n.first_optimal >= n.first_optimal_search
    assert n.regret <= 0.0051 and n.exported in (t.rows[28].key, t.rows[29].key)  # as `export` reads it
    assert n.hours == pytest.approx(n.launches * (300 + 30 + 15 * 3) / 3600, rel=0.2)


def test_the_search_keeps_its_first_launches_and_the_regret_is_the_exports_distance_to_the_best():
    t = table(n=8, best=7)
    n = night.replay_night(t, "random", seed=0, budget=4, confirm=0)
    assert n.search == 4 and n.race == 0  # half the budget is the search's alone: relaunches after it
    truth = {r.key: r.median for r in t.rows}
    assert n.regret == pytest.approx(1 - truth[n.exported] / 100.0)


def test_the_suite_result_sums_nights_up():
    t = table(n=10, best=9)
    [r] = night.run_nights([t], ["random"], seeds=3, budget=10, confirm=2)
    assert len(r.nights) == 3 and r.found == 3  # budget = the table: every night measures the best
    assert r.median_first <= 10 + 4 and "| t | random |" in night.format_suite([r])


def test_reached_is_the_best_config_any_launch_ran_and_a_miss_beside_it_is_the_picks_fault():
    t = table(n=10, best=9)
    full = night.replay_night(t, "random", seed=1, budget=10, confirm=2)
    assert full.reached == 0.0  # every config launched: the best among them
    short = night.replay_night(t, "random", seed=0, budget=3, confirm=0)
    assert 0.0 <= short.reached <= short.regret  # the export is one of the configs launched

    def one(regret, reached):
        return night.Night(0, None, None, regret, 1, 1, 0, 0, None, None, None, reached)

    r = night.SuiteResult("t", "s", (one(0.05, 0.0), one(0.05, 0.05), one(0.0, 0.0), one(0.03, 0.01)), 0.0)
    assert r.found == 1 and r.missed_picks == 2  # a launch within 2% in two of the three misses
    assert "| 1/4 | 2/3 |" in night.format_suite([r]) and night.to_dict(r)["missed_picks"] == 2
