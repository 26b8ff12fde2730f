"""The additive per-value model (study/model/additive.py) that the launch-cost and the value models
share: effects that add up, one outlier that moves a median little, the centre an unseen
config is predicted at, and what can be interpolated."""

from __future__ import annotations

import pytest

from orchestrator.study.model import additive
from orchestrator.study.model.additive import UNSET, ordinal


def test_effects_add_up_to_what_the_points_measured():
    """Two parameters, each adding its own amount, on a full 2 x 2 design: the model gives
    every cell back near what it measured, and a constant parameter gets no effect."""
    points = [({"a": a, "b": b, "c": "same"}, 100.0 + (50.0 if a == "x" else 0.0) + (20.0 if b == "y" else 0.0))
              for a in ("x", "w") for b in ("y", "z") for _ in range(3)]
    median, effects = additive.fit(points)
    assert "c" not in effects
    for cfg, y in points:
        assert additive.predict(median, effects, cfg) == pytest.approx(y, abs=12.0)
    assert effects["a"]["x"] - effects["a"]["w"] == pytest.approx(50.0, rel=0.2)


def test_an_unseen_config_is_predicted_at_the_centre_given():
    points = [({"m": "a"}, 1.0), ({"m": "b"}, 1.0), ({"m": "c"}, 5.0)]
    median, effects = additive.fit(points)
    assert additive.predict(median, effects, {"m": "new"}) == 1.0  # the points' median
    centred, effects = additive.fit(points, center=3.0)
    assert additive.predict(centred, effects, {"m": "new"}) == 3.0
    assert additive.predict(centred, effects, {"m": "c"}) > additive.predict(centred, effects, {"m": "a"})
    assert additive.fit([]) == (None, {})


def test_a_missing_parameter_is_its_own_value_and_ordered_values_interpolate():
    points = [({"tp": 2}, 10.0), ({"tp": 8}, 40.0), ({}, 0.0)]
    median, effects = additive.fit(points)
    assert UNSET in effects["tp"]
    four = additive.predict(median, effects, {"tp": 4})
    assert additive.predict(median, effects, {"tp": 2}) < four < additive.predict(median, effects, {"tp": 8})
    assert additive.effect(effects, "tp", 16) == effects["tp"][8]  # never extrapolated
    assert additive.effect(effects, "nothing", "x") == 0.0


def test_ordinal_places_numbers_booleans_and_size_lists():
    """What can be interpolated: numbers (also as text), booleans, comma lists by length."""
    assert [ordinal(v) for v in (True, False, 4, 2.5, "8", " 16 ", "1,2,4", "1, 2, 4, 8")] == \
           [1.0, 0.0, 4.0, 2.5, 8.0, 16.0, 3.0, 4.0]
    for unordered in ("Ring", "1,x", "FULL_AND_PIECEWISE", None, ["1", "2"]):
        assert ordinal(unordered) is None, unordered
