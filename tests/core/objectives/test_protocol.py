"""The objective's protocol: the kind its fields make, what it tells Optuna, how it reads a launch,
and that it survives the trips a job takes (pickled to a Ray actor, copied, replaced)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from orchestrator.core.measurement import LevelResult, Measurement
from orchestrator.core.objectives import DEFAULT, Goodput, Measure, Mix, Objective, Plan, Single
from orchestrator.core.records import TrialResult


def result(values: dict[int, float], config: dict | None = None, **kw) -> TrialResult:
    got = Measurement(levels={lv: LevelResult(level=lv, samples=(v,)) for lv, v in values.items()})
    return TrialResult(outcome="COMPLETE", config=config or {}, value=got.value, measurement=got, **kw)


@pytest.mark.parametrize("fields,kind", [
    ({}, Single),
    ({"concurrency": (64,)}, Single),
    ({"concurrency": (1, 10)}, Plan),
    ({"concurrency": (1,), "context": (0, 8192)}, Plan),
    ({"concurrency": (1, 10), "weights": {1: 0.5, 10: 0.5}}, Mix),
    ({"goodput": 64}, Goodput),
])
def test_the_fields_make_the_kind(fields, kind):
    obj = Objective(**fields)
    assert type(obj) is kind and isinstance(obj, Objective)


@pytest.mark.parametrize("obj", [Objective(), Objective(concurrency=(1, 10)), Objective(goodput=8),
                                 Objective(concurrency=(1, 10), weights={1: 0.25, 10: 0.75})])
def test_it_survives_pickling_copying_and_replace(obj):
    for back in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
        assert type(back) is type(obj) and back == obj
    assert type(dataclasses.replace(Objective(concurrency=(1, 10), weights={1: 0.5, 10: 0.5}), weights=None)) is Plan


def test_the_default_is_single_request_decode_and_has_no_identity():
    assert DEFAULT == Objective() and DEFAULT.levels == (1,) and DEFAULT.identity() is None
    assert DEFAULT.directions() == ["maximize"] and DEFAULT.failed() == [0.0]
    assert DEFAULT.words == ("faster", "slower") and DEFAULT.unit(1) == "decode tok/s"
    assert DEFAULT.unit(8) == "total tok/s"
    assert DEFAULT.headline == 1 and DEFAULT.describe() == "concurrency 1"


def test_a_single_level_tells_its_median_and_falls_back_on_the_bare_value():
    obj = Objective(concurrency=(10,))
    assert obj.told(result({1: 50.0, 10: 300.0})) == [300.0]
    assert obj.told(TrialResult(outcome="COMPLETE", config={}, value=42.0)) == [42.0]
    with pytest.raises(ValueError):
        obj.told(TrialResult(outcome="COMPLETE", config={}))


def test_an_early_stop_reports_its_first_round_or_the_objectives_level():
    obj = Objective(concurrency=(10,))
    assert obj.intermediate(result({1: 50.0, 10: 300.0})) == 300.0  # lower levels measured too: its own
    assert obj.intermediate(TrialResult(outcome="PRUNED", config={}, value=5.0, metrics={"intermediate": 3.0})) == 3.0


def test_the_base_measure_is_the_median_tok_s():
    got = LevelResult(level=1, samples=(1.0, 2.0, 9.0))
    assert Measure().worth(got) == 2.0 and Measure().worth(None) is None
