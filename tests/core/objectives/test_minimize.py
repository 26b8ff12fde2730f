"""``minimize: tpot_p99``: the lowest recorded percentile wins, in ms, told to Optuna as minimize."""

from __future__ import annotations

import math

import pytest

from orchestrator.core.measurement import Latency as Percentiles
from orchestrator.core.measurement import LevelResult, Measurement
from orchestrator.core.objectives import Latency, Objective
from orchestrator.core.records import TrialResult


def at32(tok_s: float, tpot_p99: float) -> TrialResult:
    got = Measurement(levels={32: LevelResult(level=32, samples=(tok_s,),
                                              tpot=Percentiles(p50=tpot_p99 / 2, p90=tpot_p99, p99=tpot_p99, n=64))})
    return TrialResult(outcome="COMPLETE", config={}, value=got.value, measurement=got)


def test_the_lowest_p99_is_worth_most_whatever_the_throughput():
    obj = Objective(concurrency=(32,), measure=Latency("tpot_p99"))
    fast_but_jittery, steady = at32(5000.0, 0.012), at32(900.0, 0.003)
    worth = [obj.worth(r.measurement.at(32)) for r in (fast_but_jittery, steady)]
    assert worth[1] > worth[0]  # every comparison reads worth: higher is better
    assert obj.shown(worth[1]) == pytest.approx(3.0) and obj.unit(32) == "ms TPOT p99"


def test_optuna_is_told_the_latency_in_ms_under_minimize_and_a_failure_is_the_worst():
    obj = Objective(concurrency=(32,), measure=Latency("tpot_p99"))
    assert obj.directions() == ["minimize"] and obj.told(at32(900.0, 0.003)) == [pytest.approx(3.0)]
    assert obj.failed() == [math.inf] and obj.words == ("lower", "higher")
    assert obj.describe() == "concurrency 32, lowest TPOT p99" and obj.minimize == "tpot_p99"
    assert obj.identity() == {"concurrency": [32], "weights": None, "measure": {"minimize": "tpot_p99"}}


def test_a_level_without_the_percentile_is_not_worth_a_number():
    obj = Objective(concurrency=(32,), measure=Latency("ttft_p90"))
    with pytest.raises(ValueError):
        obj.told(TrialResult(outcome="COMPLETE", config={}, value=100.0))  # a bare tok/s says nothing of a latency
    assert obj.worth(LevelResult(level=32, samples=(1.0,))) is None


def test_an_unknown_percentile_is_refused():
    with pytest.raises(ValueError, match="one of ttft_p50"):
        Latency("tpot_p95")
