"""study.coverage: what a study has not explored, in the order the search goes there: values never
measured working, values seen only far below the best and never beside it, pairs of the parameters
that moved the speed most never measured together."""

from __future__ import annotations

from orchestrator.core.records import COMPLETE, FAIL, TrialRow
from orchestrator.study.model.coverage import companions, coverage, describe, settings_apart

CHOICES = {"tp": [4, 8], "graphs": [False, True], "proto": ["LL", "Simple"], "algo": ["Ring", "Tree"]}


def row(n, value, state=COMPLETE, **params):
    return TrialRow(number=n, state=state, params=params, counted=True, value=value,
                    failure_kind="start-crash" if state == FAIL else None)


def gaps(rows, **kw):
    return {(g.values, g.why.split(" (")[0].split(",")[0]) for g in coverage(rows, CHOICES, **kw).gaps}


def test_a_value_seen_only_in_a_slow_config_is_a_gap_until_tried_beside_the_best():
    rows = [row(0, 20.0, tp=8, graphs=False, proto="Simple", algo="Ring"),  # the baseline: TP=8 only here
            row(1, 100.0, tp=4, graphs=True, proto="LL", algo="Ring")]
    found = gaps(rows)
    assert ((("tp", 8),), "seen only at 0.20x the best") in found
    assert ((("algo", "Tree"),), "never measured working") in found
    assert ((("graphs", False),), "seen only at 0.20x the best") in found
    beside = rows + [row(2, 60.0, tp=8, graphs=True, proto="LL", algo="Ring")]  # tried beside the best: explored
    assert not any(g[0] == (("tp", 8),) for g in gaps(beside))


def test_a_value_tried_beside_a_config_near_the_best_stays_explored_when_the_best_moves():
    rows = [row(0, 20.0, tp=8, graphs=False, proto="Simple", algo="Ring"),  # the baseline: eager only here
            row(1, 100.0, tp=4, graphs=True, proto="LL", algo="Ring"),
            row(2, 45.0, tp=4, graphs=False, proto="LL", algo="Ring")]  # eager, tried beside the best
    assert not any(g[0] == (("graphs", False),) for g in gaps(rows))
    # a new best two settings away, 5% faster: eager was seen beside a config within 10% of it
    moved = rows + [row(3, 105.0, tp=8, graphs=True, proto="LL", algo="Tree")]
    assert not any(g[0] == (("graphs", False),) for g in gaps(moved))
    # ... but not when the config it was tried beside is far below the new best
    jumped = rows + [row(3, 150.0, tp=8, graphs=True, proto="LL", algo="Tree")]
    assert ((("graphs", False),), "seen only at 0.30x the best") in gaps(jumped)


def test_a_suspect_or_banned_value_is_not_a_gap():
    rows = [row(0, 20.0, tp=8, graphs=False, proto="Simple", algo="Ring"),
            row(1, 100.0, tp=4, graphs=True, proto="LL", algo="Ring"),
            row(2, None, FAIL, tp=4, graphs=True, proto="LL", algo="Tree")]  # Tree: the one untried value
    assert not any(g[0] == (("algo", "Tree"),) for g in gaps(rows))
    assert not any(("proto", "Simple") in g[0] for g in gaps(rows, bans=[("proto", "Simple")]))


def test_pairs_of_the_values_that_matter_most_never_measured_together_are_gaps():
    rows = [row(0, 20.0, tp=8, graphs=False, proto="Simple", algo="Ring"),
            row(1, 90.0, tp=4, graphs=True, proto="Simple", algo="Ring"),
            row(2, 100.0, tp=4, graphs=True, proto="LL", algo="Ring"),
            row(3, 95.0, tp=8, graphs=True, proto="Simple", algo="Ring")]
    cov = coverage(rows, CHOICES)
    assert cov.important[0] == "graphs" and cov.best["proto"] == "LL"
    pairs = [g.values for g in cov.gaps if len(g.values) == 2]
    assert (("proto", "LL"), ("tp", 8)) in pairs or (("tp", 8), ("proto", "LL")) in pairs
    lines = describe(cov)
    assert lines[0].startswith("not explored (") and "`run --trials N` goes there first" in lines[0]
    assert any("never measured together" in line for line in lines)


def test_settings_apart_counts_values_that_go_together_and_switched_parameters_once():
    configs = [{"tp": tp, "pp": 8 // tp, "graphs": False} for tp in (4, 8)]
    configs += [{"tp": tp, "pp": 8 // tp, "graphs": True, "capture": c} for tp in (4, 8) for c in ("small", "large")]
    names = ["capture", "graphs", "pp", "tp"]
    together = companions(configs, names)
    assert settings_apart(configs[2], configs[1], names, together) == 2  # the layout, graphs (capture with it)
    assert settings_apart(configs[4], configs[1], names, together) == 1  # graphs on, its capture list with it
