"""study.race: the incumbent and the configs within launch noise of it are raced in interleaved
rounds (A B C A B C ...); after every whole round a finalist beyond noise slower than the leader
leaves; the race ends decided or tied when its budget is spent; everything is recomputed from the
stored race launches, so a stopped race continues where it was, nothing launched twice."""

from __future__ import annotations

import datetime

from launch_rows import launch, noise_rows

from orchestrator.config.job import Objective
from orchestrator.study.search.race import MAX_FINALISTS, RACE, outcomes, plan_race, race_state, said, trial_numbers


def search(noise: float = 0.0) -> list:
    """A finished search: the baseline and a close rival (each relaunched once), a slow config."""
    return [launch(0, "base", 100.0, baseline=True), launch(1, "fast", 104.0), launch(2, "slow", 40.0),
            launch(3, "base", 101.0 + noise, role="relaunch"), launch(4, "fast", 103.0, role="relaunch")] + \
        noise_rows(5, [100.0, 104.0, 97.0, 102.0, 98.0, 103.0, 96.0])  # the launch noise known: +-3%


def race(rows: list, budget: int, figures: dict[str, list[float]], race_id: int = 3,
         objective: Objective | None = None) -> list:
    """Run the race on ``rows`` as the driver does: each next launch measures the next of its config's figures."""
    rows = list(rows)
    left = {k: list(v) for k, v in figures.items()}
    while True:
        state = race_state(rows, objective, budget, race_id)
        key = state.next()
        if key is None:
            return rows
        rows.append(launch(len(rows), key, left[key].pop(0), role=RACE, race=state.plan.record(state.round)))


def test_the_finalists_are_the_incumbent_and_the_configs_within_noise_of_it():
    plan = plan_race(search(), None, 8, race_id=3)
    [contest] = plan.contests
    assert contest.finalists == ("fast", "base")  # the incumbent first; 40 tok/s is beyond noise of it
    # 8 launches over 2 finalists: four rounds, judged once (after the fourth, ``MIN_ROUNDS``)
    assert plan.order == ("fast", "base") and plan.looks == 1
    unknown = plan_race(search()[:5], None, 8, race_id=3)  # no launch noise yet: no config is beyond it...
    assert len(unknown.contests[0].finalists) == 2 and unknown.contests[0].left_out == 1  # ...but 8 race two
    assert len(plan_race(search()[:5], None, 12, race_id=3).contests[0].finalists) == 3
    many = [launch(0, "base", 100.0, baseline=True)] + [launch(n, f"c{n}", 100.0 + n) for n in range(1, 8)]
    capped = plan_race(many, None, 16, race_id=8).contests[0]
    assert len(capped.finalists) == MAX_FINALISTS and capped.left_out == 8 - MAX_FINALISTS
    assert capped.finalists[0] == "c7"


def test_rounds_interleave_and_a_clear_loser_leaves_after_enough_rounds():
    rows = race(search(), 12, {"fast": [130.0, 131.0, 129.5, 130.5], "base": [100.5, 99.8, 100.2, 100.1]})
    raced = [(r.config_key, r.race["round"]) for r in rows if r.launch_role == RACE]
    # A B | B A | A B | B A: a drift falls on both alike, first on one then on the other; decided after the
    # fourth round (``MIN_ROUNDS`` pairs), four launches of the budget left unspent
    assert raced == [("fast", 0), ("base", 0), ("base", 1), ("fast", 1), ("fast", 2), ("base", 2),
                     ("base", 3), ("fast", 3)]
    state = race_state(rows, None, 12, 3)
    assert state.over() and state.rounds_done == 4 and state.eliminated == [("1", "base", 3)]
    [o] = outcomes(rows, None)
    assert o.decided and o.winner == "fast" and not o.tied and o.launches == 8 and not o.drift
    assert said([o], trial_numbers(rows)) == "raced (8 launches, 4 round(s)): at 1 #1 decided beyond noise over #0"


def test_a_tie_the_budget_cannot_break_is_a_tie():
    rows = race(search(), 6, {"fast": [101.0, 99.0, 100.5], "base": [100.0, 101.5, 99.5]})
    [o] = outcomes(rows, None)
    assert not o.decided and o.tied == ("base",) and o.finished and o.launches == 6
    assert "tied with #0: the race's launches did not tell them apart" in said([o], trial_numbers(rows))


def test_a_stopped_race_continues_where_it_was_nothing_launched_twice():
    figures = {"fast": [130.0, 131.0, 129.5, 130.5], "base": [100.5, 99.8, 100.2, 100.1]}
    whole = race(search(), 8, figures)
    stopped = whole[:12 + 3]  # the driver died after the race's third launch (its fourth never stored)
    state = race_state(stopped, None, 8, 3)
    assert state.launched == 3 and state.round == 1 and state.next() == "fast"  # round 2 (B A)'s second launch
    assert state.next(["fast"]) is None  # in flight: nothing else may start in this round
    resumed = race(stopped, 8, {"fast": figures["fast"][1:], "base": figures["base"][2:]})
    assert [(r.config_key, r.race.get("round")) for r in resumed] == \
        [(r.config_key, r.race.get("round")) for r in whole]
    assert outcomes(resumed, None)[0].winner == outcomes(whole, None)[0].winner == "fast"


def test_a_plan_races_each_level_with_one_set_of_launches():
    rows = [launch(0, "base", {1: 100.0, 8: 500.0}, baseline=True), launch(1, "solo", {1: 150.0, 8: 420.0}),
            launch(2, "batch", {1: 95.0, 8: 900.0}), launch(3, "base", {1: 99.0, 8: 510.0}, role="relaunch")]
    plan = plan_race(rows, Objective(concurrency=(1, 8)), 8, race_id=3)
    by_name = {c.name: c.finalists for c in plan.contests}
    assert by_name["1"][0] == "solo" and by_name["8"][0] == "batch"  # each level's incumbent leads its contest
    assert set(plan.order) == set(by_name["1"]) | set(by_name["8"])  # a launch measures every level


def test_the_race_costs_each_finalists_own_launches():
    rows = search()
    state = race_state(rows, None, 8, 3)
    assert state.launch_seconds("fast", None) == 60.0  # the median of its own launches' costs
    assert state.expected_seconds(None) == 8 * 60.0


def test_a_box_that_drifts_is_raced_in_pairs_and_said_to_drift():
    """Issue 48: every launch 2% slower than the one before (a box warming up, a neighbour ramping), two
    configs 6% apart, no relaunch before the race (both finalists). Over launches the drift is noise and
    the race ended tied; read as pairs, round by round, the faster one is decided, and the race says the
    box drifted."""
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    clock = iter(range(100))

    def at(key: str, speed: float, n: int, **kw) -> object:
        i = next(clock)  # one launch a minute, each 2% slower
        return launch(n, key, speed * 0.98 ** i, ended_at=(t0 + datetime.timedelta(minutes=i)).isoformat(), **kw)

    rows = [at("base", 100.0, 0, baseline=True), at("fast", 106.0, 1)]
    while True:
        state = race_state(rows, None, 8, 2)
        key = state.next()
        if key is None:
            break
        rows.append(at(key, {"fast": 106.0, "base": 100.0}[key], len(rows), role=RACE,
                       race=state.plan.record(state.round)))
    [o] = outcomes(rows, None)
    assert o.launches == 8 and o.rounds == 4
    assert o.decided and o.winner == "fast" and not o.tied
    assert o.drift.startswith("the box drifted: launches of one config measured 2.0% slower per minute")
    text = said([o], trial_numbers(rows))
    assert "#1 decided beyond noise over #0" in text and "the box drifted" in text
