"""study.relaunch: the baseline or an incumbent (fewest launches first) relaunched while relaunches
stay within their share of the search's launch time, by each config's measured cost, never crowding
the search's first launches; back to back once the search is over until the launch noise is known;
none once the share is 0."""

from __future__ import annotations

from launch_rows import launch, noise_rows

from orchestrator.config.job import Objective
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.search.relaunch import candidates, next_relaunch


def test_the_first_relaunch_is_the_baselines_once_its_share_of_the_search_allows_it():
    assert next_relaunch([launch(0, "base", 100.0, baseline=True)], None, 1.0) is None  # one config: nothing to pair
    rows = [launch(0, "base", 100.0, baseline=True, cost=60.0), launch(1, "b", 150.0, cost=60.0)]
    # budget 2: the search's first launch is its own; 120 s of search allow 24 s of relaunches at a fifth
    assert next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), budget=2) is None
    rows += [launch(n, f"c{n}", 90.0, cost=60.0) for n in range(2, 5)]  # 300 s: 60 s allowed, no gain in 3
    due = next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), budget=8)
    assert due.key == "base" and due.why == "the baseline" and due.launches == 1
    assert next_relaunch(rows, None, 0.0, budget=8) is None  # budget.relaunch: 0
    assert next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), in_flight=["base"], budget=8) is None  # its cost


def test_relaunches_never_crowd_the_first_launches_of_the_search():
    """Issue 49: a relaunch after every search launch until the noise was known made six of a night's
    first thirteen launches relaunches; now the search's first launches and any stretch in which it
    keeps finding better configs are its own, and relaunches come in a fifth of its time after."""
    rows = [launch(0, "base", 100.0, baseline=True, cost=60.0)]
    kinds = []
    for n in range(1, 31):
        due = next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), budget=30)
        if due is not None:
            rows.append(launch(n + 100, due.key, 100.0 + n % 3, role="relaunch", cost=60.0))
            kinds.append("relaunch")
        value = 100.0 + 10 * n if n <= 16 else 150.0  # better and better for 16 launches, then flat
        rows.append(launch(n, f"c{n}", value, cost=60.0))
        kinds.append("search")
    first = kinds.index("relaunch")
    assert kinds[:first].count("search") == 19  # 16 improving launches, then three without a gain
    assert 5 <= kinds.count("relaunch") <= 7  # a fifth of 30 search launches' time in all


def test_the_search_keeps_a_budgets_first_half_to_itself():
    rows = [launch(0, "base", 100.0, baseline=True, cost=60.0)] + [launch(n, f"c{n}", 90.0, cost=60.0)
                                                                    for n in range(1, 5)]
    assert next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), budget=12) is None  # 5 of its first 6
    assert next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), budget=10) is not None
    assert next_relaunch(rows, None, 0.2, LaunchCost.fit(rows)) is None  # no budget: its first 12


def test_once_the_search_is_over_relaunches_go_on_until_the_launch_noise_is_known():
    rows = [launch(0, "base", 100.0, baseline=True, cost=20.0), launch(1, "b", 150.0, cost=10.0),
            launch(2, "base", 101.0, role="relaunch", cost=20.0), launch(3, "c", 90.0, cost=10.0)]
    order = []
    for n in range(4, 20):  # once the search is over, back to back
        due = next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), search_over=True)
        if due is None:
            break
        order.append(due.key)
        assert next_relaunch(rows, None, 0.2, LaunchCost.fit(rows), in_flight=[due.key], search_over=True) is None
        value = 100.0 + n % 3 if due.key == "base" else 150.0 - n % 3
        rows.append(launch(n, due.key, value, role="relaunch", cost=20.0 if due.key == "base" else 10.0))
    assert order == ["b", "b", "base", "b", "base"]  # fewest launches, the cheaper on a tie: 6 degrees of freedom
    assert next_relaunch(rows, None, 1.0, search_over=True) is None  # known: the race relaunches from here


def test_later_relaunches_keep_within_their_share_of_the_search_time():
    rows = [launch(0, "base", 100.0, baseline=True), launch(1, "b", 150.0),
            launch(2, "base", 101.0, role="relaunch")] + noise_rows(30)  # the launch noise is known
    # 120 s of search, 60 s of relaunches: a second relaunch (60 s more) is over a fifth
    assert next_relaunch(rows, None, 0.2, budget=8) is None
    more = rows + [launch(n, f"c{n}", 90.0) for n in range(3, 12)]  # 660 s of search: 132 s allowed
    model = LaunchCost.fit(more)
    due = next_relaunch(more, None, 0.2, model, budget=8)
    assert due.key == "b" and due.why == "the incumbent" and due.expected_s == 60.0  # fewest launches first
    assert next_relaunch(more, None, 0.2, model, in_flight=["b"], budget=8) is None  # its cost counts while it runs


def test_an_expensive_incumbent_is_relaunched_less_often():
    cheap = [launch(0, "base", 100.0, baseline=True, cost=30.0), launch(1, "b", 150.0, cost=480.0),
             launch(2, "base", 101.0, role="relaunch", cost=30.0)]
    cheap += [launch(n, f"c{n}", 90.0, cost=30.0) for n in range(3, 12)]  # 780 s of search, 156 s allowed
    cheap += noise_rows(30)
    model = LaunchCost.fit(cheap)
    assert model.predict({"k": "b"}) > 200
    assert next_relaunch(cheap, None, 0.2, model, budget=8) is None  # b's 8 minutes do not fit; 30 s of base would
    again = [r for r in cheap if r.number != 2]  # without the baseline's relaunch, it is the baseline's turn
    assert next_relaunch(again, None, 0.2, model, budget=8).key == "base"


def test_a_plan_relaunches_the_incumbent_of_every_level():
    rows = [launch(0, "base", {1: 100.0, 8: 500.0}, baseline=True), launch(1, "solo", {1: 150.0, 8: 400.0}),
            launch(2, "batch", {1: 90.0, 8: 900.0})]
    got = [(r.config_key, why) for r, why in candidates(rows, Objective(concurrency=(1, 8)))]
    assert got == [("base", "the baseline"), ("solo", "the incumbent at 1"), ("batch", "the incumbent at 8")]
