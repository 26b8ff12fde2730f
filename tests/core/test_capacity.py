"""The capacity search over the load axis (core/capacity.py): a coarse sweep with the engine's regime
marks, refinement above the best feasible point and around each crossing, never assuming throughput
or latency is monotone in load; at most 12 loads a launch."""

from __future__ import annotations

import random
from collections.abc import Callable

from orchestrator.core.capacity import (
    CONFIRM_STINTS,
    MAX_CONFIRMS,
    MAX_PROBES,
    Probe,
    capacity_point,
    coarse,
    curve,
    mark_between,
    merge_marks,
    next_probe,
    next_step,
    result,
)
from orchestrator.core.measurement import BATCH, GRAPHS, KV_CACHE, Latency, LevelResult, Measurement, RegimeMark
from orchestrator.core.slo import Slo, Targets

Server = Callable[[int], tuple[float, bool]]  # load -> (total tok/s, every target held)


def search(server: Server, top: int, marks: tuple[RegimeMark, ...] = ()) -> tuple[list[int], int | None]:
    """The loads the search measures on ``server``, in order, and its capacity point."""
    seen: dict[int, Probe] = {}
    order: list[int] = []
    nxt = next_probe(seen, top, marks)
    while nxt is not None:
        assert nxt not in seen and 1 <= nxt <= top
        value, held = server(nxt)
        seen[nxt] = Probe(nxt, value, held)
        order.append(nxt)
        nxt = next_probe(seen, top, marks)
    return order, capacity_point(seen)


def search_confirming(server: Callable[[int, int], tuple[float, bool]], top: int,
                      marks: tuple[RegimeMark, ...] = ()) -> tuple[list[int], list[int], int | None]:
    """As ``search`` with confirmation (``next_step``): ``server(load, k)`` answers the k-th
    measurement of a load; a load measured again reads the median of its measurements, as a level
    measured over more rounds does. (the loads searched, the loads confirmed, the capacity point)"""
    seen: dict[int, Probe] = {}
    reads: dict[int, list[tuple[float, bool]]] = {}
    order: list[int] = []
    confirmed: list[int] = []
    step = next_step(seen, top, marks, confirmed)
    while step is not None:
        load, confirming = step
        assert (load in seen) == confirming and load not in confirmed
        for _ in range(CONFIRM_STINTS if confirming else 1):
            reads.setdefault(load, []).append(server(load, len(reads.get(load, []))))
        values = sorted(v for v, _ in reads[load])
        seen[load] = Probe(load, values[len(values) // 2], sum(h for _, h in reads[load]) * 2 > len(reads[load]))
        (confirmed if confirming else order).append(load)
        step = next_step(seen, top, marks, confirmed)
    return order, confirmed, capacity_point(seen)


def graphs_to_64(load: int) -> tuple[float, bool]:
    """vLLM's graphs up to 64 on one H100 (issue 47): 19,037 tok/s at 64, 7,923 at 68, 12,743 at 128;
    TPOT p99 within the target everywhere."""
    if load <= 64:
        return 19037.0 * load / 64, True
    return 7923.0 * load / 68 * (0.75 if load > 100 else 1.0), True


def test_the_coarse_sweep_is_1_a_4x_grid_the_top_and_each_regime_mark_with_the_load_above_it():
    assert coarse(128) == [1, 4, 16, 64, 128]
    assert coarse(24) == [1, 4, 16, 24] and coarse(1) == [1]
    assert coarse(128, (RegimeMark(64, GRAPHS),)) == [1, 4, 16, 64, 65, 128]
    marks = (RegimeMark(48, GRAPHS), RegimeMark(96, BATCH), RegimeMark(300, KV_CACHE))  # 300: beyond the top
    assert coarse(128, marks) == [1, 8, 48, 49, 64, 96, 97, 128]  # every 8x: the marks keep their room
    got = coarse(1024, (RegimeMark(48, GRAPHS), RegimeMark(96, BATCH), RegimeMark(700, KV_CACHE)))
    assert len(got) <= 8 and {1, 48, 49, 96, 97, 700, 701, 1024} == set(got)  # a coarser grid leaves room


def test_a_cliff_at_the_largest_captured_graph_is_the_capacity_not_the_most_streams():
    """The bisection probed 1 and 128, saw the SLO hold at both and answered 128 at 13,101 tok/s."""
    order, best = search(graphs_to_64, 128, (RegimeMark(64, GRAPHS, "capture_sizes"),))
    assert best == 64 and {64, 65} <= set(order) and len(order) <= MAX_PROBES
    order, best = search(graphs_to_64, 128)  # the engine says nothing: the sweep and refinement find the edge
    assert best == 64 and len(order) <= MAX_PROBES
    assert min(x for x in order if x > 64) <= 64 + 64 // 10  # the cliff bracketed within a step


def test_a_crossing_of_the_target_is_refined_to_a_step():
    def rising(load: int) -> tuple[float, bool]:  # throughput rises with load; TPOT breaks the target above 100
        return 100.0 * load, load <= 100

    order, best = search(rising, 128)
    assert 100 - 10 <= best <= 100 and len(order) <= MAX_PROBES
    assert min(x for x in order if x > best) - best <= max(1, best // 10)

    def tight(load: int) -> tuple[float, bool]:  # holds up to 16 streams, breaks at 17 (tests/e2e)
        return 50.0 * load, load <= 16

    order, best = search(tight, 24)
    assert best == 16 and 17 in order and order[:4] == [1, 4, 16, 24]


def test_latency_that_is_not_monotone_in_load_is_not_assumed_to_be():
    def odd(load: int) -> tuple[float, bool]:  # breaks at 4 and 16 (a regime change), holds again at 64
        return 10.0 * load, load in (1, 64, 65) or load > 40

    order, best = search(odd, 128)
    assert best == 128 and 64 in order  # the sweep measured past the first breach
    none, best = search(lambda load: (10.0 * load, False), 128)
    assert best is None and none == [1, 4, 16, 64, 128]  # nothing held anywhere the sweep looked


def test_never_more_than_12_loads_a_launch_whatever_the_curve():
    rng = random.Random(7)
    for _ in range(200):
        top = rng.choice([8, 24, 64, 128, 512])
        table = {n: (rng.uniform(1, 100), rng.random() < 0.6) for n in range(1, top + 1)}
        marks = tuple(RegimeMark(rng.randint(1, top), kind) for kind in (GRAPHS, BATCH, KV_CACHE)
                      if rng.random() < 0.5)
        order, best = search(table.__getitem__, top, marks)
        assert len(order) <= MAX_PROBES and len(set(order)) == len(order)
        held = [n for n in order if table[n][1]]
        assert best == (max(held, key=lambda n: (table[n][0], -n)) if held else None)


def test_the_record_keeps_every_verdict_the_capacity_point_and_what_broke_above_it():
    seen = {1: Probe(1, 20.0, True), 4: Probe(4, 80.0, True), 16: Probe(16, 300.0, False), 8: Probe(8, 150.0, True),
            12: Probe(12, 200.0, False)}
    got = result(16, [1, 4, 16, 8, 12], seen, (RegimeMark(64, GRAPHS), RegimeMark(8, BATCH)),
                 Targets(every=(Slo.named("tpot_p99", 0.02),)))
    assert (got.holds, got.breaks, got.held) == (8, 12, (True, True, False, True, False))
    assert got.highest_held == 8 and [m.streams for m in got.marks] == [8]  # 64: above the most asked
    assert got.targets == ("tpot_p99",) and not got.bisection
    assert got.describe(150.0) == "serves the most within the SLO at 8 stream(s): 150.0 total tok/s (breaks at 12)"
    nothing = result(16, [1], {1: Probe(1, 20.0, False)})
    assert (nothing.holds, nothing.breaks) == (None, 1)


def test_the_engines_log_replaces_what_the_config_asked_for_kind_by_kind():
    asked = [RegimeMark(64, GRAPHS, "capture_sizes"), RegimeMark(256, BATCH, "--max-num-seqs 256")]
    logged = [RegimeMark(0, GRAPHS, "the engine's log"), RegimeMark(8000, KV_CACHE, "the engine's log")]
    assert merge_marks(asked, logged) == (RegimeMark(256, BATCH, "--max-num-seqs 256"),
                                          RegimeMark(8000, KV_CACHE, "the engine's log"))  # 0: no graph captured
    assert mark_between(asked, 64, 65) == asked[0] and mark_between(asked, 65, 128) is None


def test_the_curve_is_every_measured_load_with_its_verdict_and_the_targeted_percentiles():
    levels = {n: LevelResult(n, samples=(v,), tpot=Latency(t / 2, t, t, 8), whole_run_tok_s=0.9 * v if n > 1 else None)
              for n, (v, t) in {1: (20.0, 0.01), 64: (1000.0, 0.03), 128: (900.0, 0.05)}.items()}
    targets = Targets(every=(Slo.named("tpot_p99", 0.04),))
    m = Measurement(levels=levels, goodput=result(128, [1, 64, 128], {1: Probe(1, 20.0, True),
                                                                      64: Probe(64, 1000.0, True),
                                                                      128: Probe(128, 900.0, False)},
                                                  targets=targets))
    got = [p.to_record() for p in curve(m)]
    assert got[1] == {"load": 64, "tok_s": 1000.0, "whole_run_tok_s": 900.0, "held": True,
                      "latency": {"tpot_p99": 0.03}}
    assert [p["held"] for p in got] == [True, True, False] and got[0]["whole_run_tok_s"] is None
    old = Measurement(levels=levels, goodput=m.goodput.__class__(128, (1, 64, 128), 64, 128))  # the bisection's
    assert [p.held for p in curve(old, targets)] == [True, True, False]  # judged again with the job's targets
    assert [p.held for p in curve(old)] == [None, None, None] and curve(Measurement(levels=levels)) == []


def test_a_fall_that_one_stall_made_is_measured_again_and_a_real_cliff_falls_again():
    """A 2-core box kept busy stalled for a moment while 24 streams were measured once: they read
    below 16 on a server whose throughput rises with every stream, and the search answered 22. A
    fall is measured twice more before it is believed (the median of three); a cliff is still one."""
    def stalled_once(load: int, k: int) -> tuple[float, bool]:  # the first read of 24 streams: 40% low
        return 50.0 * load * (0.6 if (load, k) == (24, 0) else 1.0), True

    order, confirmed, best = search_confirming(stalled_once, 24)
    assert best == 24 and order == [1, 4, 16, 24] and confirmed == [24]
    order, best = search(lambda load: stalled_once(load, 0), 24)  # believed at once: the answer moves
    assert best != 24

    order, confirmed, best = search_confirming(lambda load, k: graphs_to_64(load), 128, (RegimeMark(64, GRAPHS),))
    assert best == 64 and confirmed == [65] and len(order) <= MAX_PROBES  # the cliff at 65 measured three times,
    # the loads above it, slower still, not again: the regime the cliff begins


def test_the_limit_the_answer_names_is_measured_three_times_and_a_breach_that_goes_away_moves_it():
    def tight(load: int, k: int) -> tuple[float, bool]:  # holds up to 16; 17 read as a breach once, by a stall
        return 50.0 * load, load <= 16 or (load == 17 and k > 0) or load == 18 and k > 0

    order, confirmed, best = search_confirming(tight, 24)
    assert best >= 17 and best in order and set(confirmed) >= {17}  # the breach at 17 did not hold up
    assert len(confirmed) <= MAX_CONFIRMS
    steady, confirmed, best = search_confirming(lambda load, k: (50.0 * load, load <= 16), 24)
    assert best == 16 and confirmed == [17]  # one limit, confirmed once: two more rounds in all

    rng = random.Random(11)
    for _ in range(100):  # whatever the curve: each load confirmed once at most, at most MAX_CONFIRMS
        top = rng.choice([8, 24, 64, 128])
        table = {(n, k): (rng.uniform(1, 100), rng.random() < 0.6) for n in range(1, top + 1) for k in range(3)}
        order, confirmed, _ = search_confirming(lambda load, k, table=table: table[load, k], top)
        assert len(order) <= MAX_PROBES and len(set(confirmed)) == len(confirmed) <= MAX_CONFIRMS
        assert set(confirmed) <= set(order)
