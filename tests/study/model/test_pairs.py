"""The arithmetic of a pairwise design (study/model/pairs.py): which value pairs launches carried
together, how many new ones a config adds, values that always go together counted as one setting."""

from __future__ import annotations

from orchestrator.study.model.coverage import companions
from orchestrator.study.model.pairs import covered, new_pairs

NAMES = ["a", "b", "c"]


def test_a_config_adds_the_pairs_no_launch_carried():
    launched = [{"a": 0, "b": 0, "c": 0}]
    configs = [{"a": 0, "b": 0, "c": 0}, {"a": 0, "b": 0, "c": 1}, {"a": 0, "b": 1, "c": 1},
               {"a": 1, "b": 1, "c": 1}]
    assert new_pairs(configs, launched, NAMES, {}) == [0, 2, 3, 3]
    assert new_pairs(configs, [], NAMES, {}) == [3, 3, 3, 3]


def test_values_that_always_go_together_are_one_setting():
    """TP=8 comes only with PP=1 and TP=4 only with PP=2: their pair is forced, not evidence."""
    space = [{"tp": t, "pp": 8 // t, "x": x} for t in (4, 8) for x in (0, 1)]
    names = ["pp", "tp", "x"]
    together = companions(space, names)
    assert len(covered([space[0]], names, together)) == 1  # (tp=4 & pp=2) with x=0
    assert new_pairs(space, [space[0]], names, together) == [0, 1, 1, 1]
