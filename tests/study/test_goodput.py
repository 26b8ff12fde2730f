"""The goodput answer (study/goodput.py): per config the most streams within the SLO and the
total tok/s there; the best against the baseline in the words users deploy by."""

from __future__ import annotations

from orchestrator.config.job import Objective
from orchestrator.core.measurement import GoodputResult, Latency, LevelResult, Measurement
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.core.slo import Slo, Targets
from orchestrator.study.goodput import format_goodput, goodput_answer

TARGETS = Targets(every=(Slo.named("tpot_p99", 0.020),))
OBJECTIVE = Objective(goodput=64, slo=TARGETS)


def probed(number: int, params: dict, curve: dict[int, tuple[float, float]], holds: int | None,
           breaks: int | None, **kw) -> TrialRow:
    """A goodput trial: each probed concurrency's total tok/s and TPOT p99 (seconds)."""
    levels = {c: LevelResult(c, samples=(v,), tpot=Latency(t / 2, t * 0.9, t, 20)) for c, (v, t) in curve.items()}
    m = Measurement(levels=levels, goodput=GoodputResult(64, tuple(curve), holds, breaks))
    metrics = {"slo_violations": ["breaks the SLO at 1 stream(s) already"], "slo_excess": 0.2} if holds is None else {}
    return TrialRow(number=number, state=COMPLETE, params=params, value=m.value, counted=True,
                    config_key=config_key(params), measurement=m, metrics=metrics, **kw)


def rows() -> list[TrialRow]:
    return [probed(0, {"mode": "lane"}, {1: (700.0, 0.0014), 64: (876.0, 0.078), 32: (885.0, 0.039),
                                         16: (858.8, 0.0194), 17: (862.2, 0.0213)}, 16, 17, is_baseline=True),
            probed(1, {"mode": "batch"}, {1: (198.0, 0.005), 64: (4641.4, 0.0145)}, 64, None),
            probed(2, {"mode": "slow"}, {1: (40.0, 0.024)}, None, 1)]


def test_the_best_holds_the_slo_up_to_the_most_streams_at_the_most_tok_s():
    got = goodput_answer(rows(), OBJECTIVE)
    assert got.best.row.number == 1 and got.baseline.row.number == 0
    assert got.text() == ("#1 holds the SLO up to 64 stream(s) at 4641 tok/s (all 64 tried); the baseline #0 up to "
                          "16 at 858.8 tok/s")
    by = {c.row.number: c for c in got.configs}
    assert (by[0].holds, by[0].breaks) == (16, 17)
    assert by[0].describe().startswith("holds the SLO up to 16 stream(s) at 858.8 tok/s (breaks at 17: TPOT p99 "
                                       "21.3 ms at 17, over the 20 ms target by 6%")
    assert by[2].describe() == "breaks the SLO at 1 stream(s) already: TPOT p99 24 ms at 1, over the 20 ms target " \
                               "by 20%"  # never ranked, still reported
    said = format_goodput(got)
    assert said.splitlines()[0].startswith("goodput under TPOT p99 <= 20 ms: #1 holds") and "#0 (baseline)" in said
    assert got.to_dict()["best"]["holds"] == 64


def test_no_config_holding_the_slo_is_said_so():
    got = goodput_answer(rows()[2:], OBJECTIVE)
    assert got.best is None and got.text() == "no config holds the SLO at any concurrency yet"


def test_a_goodput_verdict_compares_the_totals_where_each_config_held_the_slo():
    from orchestrator.study.history import decode_samples

    base, best = rows()[:2]
    assert decode_samples(base) == [858.8] and decode_samples(best) == [4641.4]  # not their level-1 probes
