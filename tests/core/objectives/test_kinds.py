"""One class per kind: what each tells Optuna for a launch, and how it describes itself."""

from __future__ import annotations

import math

import pytest

from orchestrator.core.measurement import GoodputResult, Latency, LevelResult, Measurement, RateProbe, RateResult
from orchestrator.core.objectives import Goodput, Mix, Objective, Plan, RateGoodput
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.records import TrialResult
from orchestrator.core.slo import RequestSlo, Slo, Targets


def result(levels: dict[int, LevelResult], goodput: GoodputResult | None = None) -> TrialResult:
    got = Measurement(levels=levels, goodput=goodput)
    return TrialResult(outcome="COMPLETE", config={}, value=got.value, measurement=got)


def level(lv: int, tok_s: float, tpot_p99: float = 0.01) -> LevelResult:
    return LevelResult(level=lv, samples=(tok_s,), tpot=Latency(p50=tpot_p99 / 2, p90=tpot_p99, p99=tpot_p99, n=10))


def test_a_plan_tells_one_value_per_level_and_the_worst_where_a_target_breaks():
    plan = Objective(concurrency=(32, 1), slo=Targets(every=(Slo.named("tpot_p99", 0.02),)))
    assert isinstance(plan, Plan) and plan.directions() == ["maximize", "maximize"]
    assert plan.told(result({1: level(1, 50.0), 32: level(32, 900.0, tpot_p99=0.05)})) == [50.0, 0.0]
    assert plan.intermediate(result({1: level(1, 50.0)})) is None  # Optuna takes none for several values
    with pytest.raises(ValueError, match="level.s. 32 missing"):
        plan.told(result({1: level(1, 50.0)}))
    assert plan.describe() == "concurrency 1, 32 (a plan) under TPOT p99 <= 20 ms" and plan.by_level
    assert not plan.searches_load  # its levels are measured, not searched


def test_a_mix_tells_the_weighted_geometric_mean():
    mix = Objective(concurrency=(1, 64), weights={1: 0.5, 64: 0.5})
    assert isinstance(mix, Mix) and mix.directions() == ["maximize"] and mix.by_level and not mix.value_per_level
    got = mix.told(result({1: level(1, 100.0), 64: level(64, 400.0)}))
    assert got == [pytest.approx(200.0)]
    assert mix.describe() == "concurrency 1, 64 weighted 0.5/0.5"


def test_goodput_tells_the_capacity_and_zero_where_no_load_held():
    obj = Objective(goodput=32, slo=Targets(every=(Slo.named("tpot_p99", 0.02),)))
    assert isinstance(obj, Goodput) and obj.headline is None and obj.by_capacity
    held = GoodputResult(max_concurrency=32, probes=(1, 8), holds=8, breaks=None)
    assert obj.told(result({1: level(1, 50.0), 8: level(8, 300.0)}, held)) == [300.0]
    none = GoodputResult(max_concurrency=32, probes=(1,), holds=None, breaks=1)
    assert obj.told(result({1: level(1, 50.0, tpot_p99=0.05)}, none)) == [0.0]
    assert obj.describe().startswith("goodput up to 32 streams")
    assert obj.searches_load  # each launch searches the concurrencies (node.measure asks the plan's kind)
    assert not obj.open_loop and obj.axis == "concurrency"  # closed loop: compare answers it, the report per stream


def test_goodput_by_rate_tells_the_tok_s_at_the_highest_rate_that_held_and_zero_where_none_did():
    slo = Targets(per_request=(RequestSlo("ttft", 0.2),), attainment=0.99)
    obj = Objective(rate=RateAxis(40), slo=slo)
    assert isinstance(obj, RateGoodput) and obj.by_capacity and obj.headline is None and not obj.by_level
    assert not obj.searches_load  # its probes are open-loop rates, not loads of streams
    assert obj.open_loop and obj.axis == "request rate"  # node.trial probes rates; compare refuses it
    assert not any(Objective(concurrency=c).open_loop for c in ((1,), (1, 64)))
    assert Objective().axis == "concurrency"
    assert obj.export_unit(obj.headline, named=False) == "output tok/s within the SLO"
    assert Objective(goodput=32, slo=slo).export_unit(None, named=False) == "tok/s total within the SLO"
    probes = (RateProbe(5, 100, 100, True, tok_s=320.0), RateProbe(10, 100, 90, False, tok_s=560.0))
    got = Measurement(rate=RateResult(40, 5, probes, holds=5, breaks=10, attainment=0.99))
    assert obj.told(TrialResult(outcome="COMPLETE", config={}, value=got.value, measurement=got)) == [320.0]
    none = Measurement(rate=RateResult(40, 5, probes[1:], holds=None, breaks=10, attainment=0.99))
    assert obj.told(TrialResult(outcome="COMPLETE", config={}, value=none.value, measurement=none)) == [0.0]
    judged = obj.judged(none)
    assert judged.infeasible and judged.why == "breaks the SLO at 10 req/s already (attainment 90.0%)"
    assert judged.excess == pytest.approx(0.09) and not obj.judged(got).infeasible
    assert obj.describe() == ("goodput up to 40 req/s (Poisson arrivals, 100 requests a probe) under TTFT <= 200 ms "
                              "for 99% of requests")


def test_identity_keeps_every_earlier_study_and_names_what_changed():
    assert Objective(concurrency=(1, 10)).identity() == {"concurrency": [1, 10], "weights": None}
    assert Objective(goodput=8).identity()["goodput"] == {"max_concurrency": 8}
    assert not math.isnan(Objective().failed()[0])
