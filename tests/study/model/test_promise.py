"""What a config should measure (study/model/promise.py), fitted on TrialRows as ``history.trial_rows``
gives them: faster values predicted faster, values that failed predicted slow (never
impossible), untried values like a typical working config, and nothing from launches that say
nothing about the config."""

from __future__ import annotations

import pytest

from orchestrator.config.job import Objective
from orchestrator.core.records import COMPLETE, FAIL, PRUNED, FailureKind, TrialRow
from orchestrator.study.model.promise import FAILURE_RATIO, ValueModel


def row(number, params, value=None, *, state=COMPLETE, kind=None, **kw) -> TrialRow:
    return TrialRow(number=number, state=state, params=params, value=value, failure_kind=kind,
                    counted=kw.pop("counted", True), **kw)


def test_a_value_that_measured_faster_is_predicted_faster_and_an_untried_one_like_a_typical_config():
    rows = [row(0, {"graph": "eager", "proto": "LL"}, 20.0), row(1, {"graph": "full", "proto": "LL"}, 40.0),
            row(2, {"graph": "eager", "proto": "Simple"}, 19.0), row(3, {"graph": "full", "proto": "Simple"}, 41.0)]
    model = ValueModel.fit(rows)
    full, eager = model.predict({"graph": "full", "proto": "LL"}), model.predict({"graph": "eager", "proto": "LL"})
    assert full is not None and eager is not None and full > 1.5 * eager
    untried = model.predict({"graph": "piecewise", "proto": "LL128"})
    assert untried == pytest.approx(30.0, rel=0.2)  # the study's typical working config (geometric)


def test_a_value_that_failed_is_predicted_slow_but_not_impossible():
    rows = [row(0, {"proto": "Simple"}, 20.0), row(1, {"proto": "LL"}, 21.0),
            row(2, {"proto": "LL128"}, state=FAIL, kind=FailureKind.WRONG_OUTPUT),
            row(3, {"proto": "LL128"}, state=FAIL, kind=FailureKind.START_CRASH)]
    model = ValueModel.fit(rows)
    bad = model.predict({"proto": "LL128"})
    assert bad is not None and 0 < bad < 0.5 * model.predict({"proto": "Simple"})
    assert bad >= FAILURE_RATIO * 20.0 * 0.9


def test_launches_that_say_nothing_about_the_config_teach_nothing():
    """A blameless failure, a cached answer, a skipped proposal and an uncounted launch leave the
    model as the two real measurements made it; before anything worked there is no prediction."""
    real = [row(0, {"m": "a"}, 10.0), row(1, {"m": "b"}, 30.0)]
    noise = [row(2, {"m": "c"}, state=FAIL, kind=FailureKind.NODE_LOST),
             row(3, {"m": "a"}, 99.0, cached_from=0), row(4, {"m": "c"}, skipped="infeasible"),
             row(5, {"m": "a"}, 1.0, counted=False)]
    clean, noisy = ValueModel.fit(real), ValueModel.fit(real + noise)
    for m in ("a", "b", "c"):
        assert noisy.predict({"m": m}) == pytest.approx(clean.predict({"m": m}))
    assert ValueModel.fit([row(0, {"m": "a"}, state=FAIL, kind=FailureKind.START_CRASH)]).predict({"m": "a"}) is None
    assert ValueModel.fit([]).predict({"m": "a"}) is None


def test_an_early_stopped_trial_counts_with_what_the_early_stop_saw():
    model = ValueModel.fit([row(0, {"m": "a"}, 30.0), row(1, {"m": "b"}, 10.0, state=PRUNED)])
    assert model.predict({"m": "a"}) > model.predict({"m": "b"})


def test_an_early_stopped_trial_as_the_study_records_it_counts_with_its_first_repeat():
    """``history.trial_rows`` gives a PRUNED trial no value (it is not a measurement to rank):
    what the early stop saw is its ``intermediate`` metric, and that is what it counts with."""
    stopped = row(1, {"m": "b"}, None, state=PRUNED, metrics={"intermediate": 10.0, "decode_samples": [10.0]})
    model = ValueModel.fit([row(0, {"m": "a"}, 30.0), stopped])
    assert model.trials == 2 and model.predict({"m": "a"}) > model.predict({"m": "b"})


def test_failures_can_be_left_to_a_separate_model():
    rows = [row(0, {"proto": "Simple"}, 20.0), row(1, {"proto": "LL"}, 21.0),
            row(2, {"proto": "LL128"}, state=FAIL, kind=FailureKind.WRONG_OUTPUT)]
    assert ValueModel.fit(rows).trials == 3 and ValueModel.fit(rows, failures=False).trials == 2


def test_a_plan_weighs_every_level():
    """For a plan the value is the geometric mean of its levels: a config best at 64 streams and
    poor at 1 can be worth more than one a little better at 1 only."""
    def levels(one, many):
        return {"1": {"value": one}, "64": {"value": many}}
    rows = [row(0, {"g": "small"}, 300.0, levels=levels(300.0, 3000.0)),
            row(1, {"g": "large"}, 280.0, levels=levels(280.0, 9000.0))]
    plan = ValueModel.fit(rows, Objective(concurrency=(1, 64)))
    assert plan.predict({"g": "large"}) > plan.predict({"g": "small"})
    single = ValueModel.fit(rows)
    assert single.predict({"g": "large"}) < single.predict({"g": "small"})
    at_64 = ValueModel.fit(rows, Objective(concurrency=(64,)))  # one level, not level 1: that level's median
    assert at_64.predict({"g": "large"}) > at_64.predict({"g": "small"})
