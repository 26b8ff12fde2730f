"""Latency targets: which a level breaks and by how much (one rule), a level's own target in
place of every level's, and what the targets say of one launch for each kind of objective."""

from __future__ import annotations

import pytest

from orchestrator.core.measurement import GoodputResult, Latency, LevelResult, Measurement
from orchestrator.core.slo import NAMES, RequestSlo, Slo, Targets, breaches, breaches_at, holds, judge


def level(n: int, *, tpot_p99: float | None = None, ttft_p99: float | None = None, value: float = 100.0) -> LevelResult:
    def lat(p99: float | None) -> Latency | None:
        return None if p99 is None else Latency(p50=p99 / 2, p90=p99 * 0.9, p99=p99, n=10)
    return LevelResult(n, samples=(value,), tpot=lat(tpot_p99), ttft=lat(ttft_p99))


TPOT_20MS = Targets(every=(Slo.named("tpot_p99", 0.020),))


def test_a_breach_is_the_measured_percentile_above_the_target_and_says_by_how_much():
    got = breaches(level(32, tpot_p99=0.0312), TPOT_20MS.at(32))
    assert len(got) == 1 and got[0].excess == pytest.approx(0.56)
    assert got[0].describe() == "TPOT p99 31.2 ms at 32, over the 20 ms target by 56%"
    assert breaches(level(32, tpot_p99=0.020), TPOT_20MS.at(32)) == []  # at the target: holds
    assert holds(level(32, tpot_p99=0.019), TPOT_20MS) and not holds(level(32, tpot_p99=0.021), TPOT_20MS)


def test_a_latency_not_recorded_breaks_nothing():
    assert breaches(level(8), TPOT_20MS.at(8)) == []  # an older record without percentiles: unknown
    assert breaches(None, TPOT_20MS.at(8)) == []


def test_a_levels_own_target_replaces_every_levels_of_the_same_name():
    targets = Targets(every=(Slo.named("tpot_p99", 0.020), Slo.named("ttft_p99", 1.0)),
                      per_level={64: (Slo.named("tpot_p99", 0.050),)})
    assert {s.describe() for s in targets.at(64)} == {"TPOT p99 <= 50 ms", "TTFT p99 <= 1 s"}
    assert {s.describe() for s in targets.at(8)} == {"TPOT p99 <= 20 ms", "TTFT p99 <= 1 s"}
    assert breaches(level(64, tpot_p99=0.040), targets.at(64)) == []
    assert targets.describe() == "TPOT p99 <= 20 ms, TTFT p99 <= 1 s; at 64: TPOT p99 <= 50 ms"
    assert Targets.from_record(targets.to_record()) == targets


def test_every_target_name_reads_and_another_is_refused():
    assert len(NAMES) == 12 and {Slo.named(n, 1.0).name for n in NAMES} == set(NAMES)
    with pytest.raises(ValueError, match="unknown SLO"):
        Slo.named("tpot_p95", 1.0)


def test_worst_breach_first():
    targets = Targets(every=(Slo.named("tpot_p99", 0.020), Slo.named("ttft_p99", 0.100)))
    got = breaches(level(4, tpot_p99=0.030, ttft_p99=0.400), targets.at(4))
    assert [b.slo.name for b in got] == ["ttft_p99", "tpot_p99"]


def test_a_plan_is_infeasible_only_where_every_level_breaks():
    m = Measurement(levels={1: level(1, tpot_p99=0.005), 32: level(32, tpot_p99=0.031)})
    got = judge(m, TPOT_20MS, (1, 32), each_level=True)
    assert set(got.breaches) == {32} and not got.infeasible  # counts at 1
    everywhere = Measurement(levels={1: level(1, tpot_p99=0.025), 32: level(32, tpot_p99=0.031)})
    got = judge(everywhere, TPOT_20MS, (1, 32), each_level=True)
    assert got.infeasible and got.excess == pytest.approx(0.25)  # the level closest to holding
    assert got.why.startswith("breaks the SLO at every level: TPOT p99 25 ms at 1")


def test_one_level_or_a_mix_is_infeasible_at_one_breach():
    m = Measurement(levels={1: level(1, tpot_p99=0.005), 32: level(32, tpot_p99=0.031)})
    got = judge(m, TPOT_20MS, (1, 32), each_level=False)
    assert got.infeasible and got.excess == pytest.approx(0.55)
    assert judge(m, TPOT_20MS, (1,), each_level=False).infeasible is False  # only the objective's levels count
    assert judge(m, None, (1, 32), each_level=False) == judge(m, Targets(), (1, 32), each_level=False)


def test_goodput_is_infeasible_only_when_no_concurrency_held():
    held = Measurement(levels={1: level(1, tpot_p99=0.005), 64: level(64, tpot_p99=0.030)},
                       goodput=GoodputResult(64, (1, 64), holds=1, breaks=64))
    got = judge(held, TPOT_20MS, (), each_level=False, goodput=True)
    assert not got.infeasible and set(got.breaches) == {64}
    none = Measurement(levels={1: level(1, tpot_p99=0.025)}, goodput=GoodputResult(64, (1,), holds=None, breaks=1))
    got = judge(none, TPOT_20MS, (), each_level=False, goodput=True)
    assert got.infeasible and got.excess == pytest.approx(0.25) and "at 1 stream(s) already" in got.why


def test_breaches_at_leaves_out_the_levels_that_hold():
    levels = {1: level(1, tpot_p99=0.005), 8: level(8, tpot_p99=0.021)}
    assert list(breaches_at(levels, TPOT_20MS)) == [8]
    assert breaches_at(levels, None) == {}


def test_per_request_targets_and_their_attainment_are_kept_beside_the_percentile_targets():
    targets = Targets(every=(Slo.named("tpot_p99", 0.02),), per_request=(RequestSlo("ttft", 0.2),), attainment=0.99)
    assert targets and Targets(per_request=(RequestSlo("e2e", 2.0),), attainment=0.5)
    assert targets.describe() == "TTFT <= 200 ms for 99% of requests; TPOT p99 <= 20 ms"
    assert targets.to_record() == {"ttft": 0.2, "attainment": 0.99, "tpot_p99": 0.02}
    assert Targets.from_record(targets.to_record()) == targets
    assert Targets(every=(Slo.named("tpot_p99", 0.02),)).to_record() == {"tpot_p99": 0.02}  # as every study had it
    assert holds(LevelResult(8, samples=(1.0,)), Targets(per_request=(RequestSlo("ttft", 0.2),), attainment=0.9))
