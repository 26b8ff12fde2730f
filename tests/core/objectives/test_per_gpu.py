"""``per_gpu: true``: tok/s divided by the GPUs a config occupies (TP x PP)."""

from __future__ import annotations

import pytest

from orchestrator.core.measurement import LevelResult, Measurement
from orchestrator.core.objectives import Objective, PerGpu
from orchestrator.core.records import TrialResult


def run(tp: int, tok_s: float, level: int = 1) -> TrialResult:
    got = Measurement(levels={level: LevelResult(level=level, samples=(tok_s,))})
    return TrialResult(outcome="COMPLETE", config={"tp_size": tp}, value=got.value, measurement=got)


def test_tp4_at_six_tenths_of_tp8_wins_per_gpu_by_a_fifth():
    obj = Objective(concurrency=(1,), measure=PerGpu())
    tp8, tp4 = obj.told(run(8, 100.0))[0], obj.told(run(4, 60.0))[0]
    assert (tp8, tp4) == (12.5, 15.0) and tp4 / tp8 == pytest.approx(1.2)
    assert obj.unit(1) == "decode tok/s per GPU" and obj.unit(8) == "total tok/s per GPU"
    assert obj.describe() == "concurrency 1, per GPU" and obj.per_gpu and obj.directions() == ["maximize"]


def test_pipeline_stages_count_and_a_bare_value_is_divided_too():
    obj = Objective(concurrency=(8, 64), measure=PerGpu())
    assert obj.told(TrialResult(outcome="COMPLETE", config={"tp_size": 2, "pp_size": 2},
                                measurement=Measurement(levels={8: LevelResult(level=8, samples=(400.0,)),
                                                                64: LevelResult(level=64, samples=(800.0,))})))\
        == [100.0, 200.0]
    assert obj.headline_worth(None, 90.0, {"tp_size": 3}) == 30.0


def test_the_gpus_a_config_occupies_are_tp_times_pp():
    assert PerGpu.gpus({"tp_size": 4, "pp_size": 2}) == 8 and PerGpu.gpus({}) == 1 and PerGpu.gpus(None) == 1


def test_per_gpu_is_part_of_the_studys_identity():
    assert Objective(measure=PerGpu()).identity() == {"concurrency": [1], "weights": None,
                                                      "measure": {"per_gpu": True}}
