"""study.suite: the stand-in boxes the search is judged on, each the structure it claims (the
interaction, the failures, the size), the shipped table among them, variants by seed, random boxes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.study.simulation import suite
from orchestrator.study.simulation.replay_table import TableError, load_table, write_table

TABLES = Path(__file__).resolve().parents[3] / "docs" / "tables"


def truth(table):
    return {r.key: (r.median, r.failure, r.startup_s, r.compile_s, r.baseline, r.log) for r in table.rows}


def test_the_motivating_box_is_the_shipped_table_row_for_row():
    assert truth(suite.stand_in("motivating")) == truth(load_table(TABLES / "motivating-space.csv"))


@pytest.mark.parametrize("name", [*suite.NAMES, "random-0", "random-5"])
def test_every_box_is_a_users_box_in_size_with_a_working_baseline_and_values_that_fail(name):
    table = suite.stand_in(name)
    assert 200 <= len(table.rows) <= 1000, len(table.rows)
    assert table.baseline is not None and table.baseline.median is not None
    assert table.baseline.median < table.best  # room to improve
    assert name == "near-ties" or any(r.failure for r in table.rows)


def value(table, **params):
    rows = [r for r in table.rows if all(r.params.get(k) == v for k, v in params.items())]
    return max(r.median or 0.0 for r in rows)


def test_the_glm5_box_is_fastest_at_tp8_only_with_ll_over_a_ring():
    t = suite.stand_in("glm5-combination")
    best = max(t.rows, key=lambda r: r.median or 0.0)
    assert {k: best.params[k] for k in ("tp_size", "env.NCCL_PROTO", "env.NCCL_ALGO", "env.NCCL_P2P_DISABLE")} \
        == {"tp_size": 8, "env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Ring", "env.NCCL_P2P_DISABLE": 0}
    assert value(t, tp_size=4, **{"env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Ring"}) == pytest.approx(
        0.978 * t.best, rel=1e-3)  # the runner-up, 2.2% below
    # what is slow is the combination: Tree costs TP=8 far more than TP=4
    tree8 = value(t, tp_size=8, **{"env.NCCL_ALGO": "Tree"}) / value(t, tp_size=8, **{"env.NCCL_ALGO": "Ring"})
    tree4 = value(t, tp_size=4, **{"env.NCCL_ALGO": "Tree"}) / value(t, tp_size=4, **{"env.NCCL_ALGO": "Ring"})
    assert tree8 < 0.7 < 0.85 < tree4
    crashes = [r for r in t.rows if r.failure == "start-crash"]  # a capture list too large for TP=2: a combination
    assert crashes and all(r.params["tp_size"] == 2 for r in crashes)
    assert value(t, tp_size=2) > 0 and value(t, capture_sizes="1,2,4,8,16,32,64") > 0


def test_the_synergy_box_holds_a_value_slow_alone_and_fastest_with_one_other():
    t = suite.stand_in("synergy-threads-channels")
    best = max(t.rows, key=lambda r: r.median or 0.0)
    assert best.params["env.NCCL_NTHREADS"] == 512 and best.params["env.NCCL_MIN_CTAS"] == 8
    alone = value(t, **{"env.NCCL_NTHREADS": 512, "env.NCCL_MIN_CTAS": 4})
    assert alone < value(t, **{"env.NCCL_NTHREADS": 256, "env.NCCL_MIN_CTAS": 4}) < best.median


def test_the_graphs_box_falls_off_a_cliff_above_the_largest_captured_size():
    t = suite.stand_in("graphs-capture-load")
    full = {"backend.cudagraph_mode": "FULL_AND_PIECEWISE", "max_num_seqs": 64, "enable_chunked_prefill": True,
            "gpu_memory_utilization": 0.9}
    assert value(t, max_capture_size=64, **full) > 1.5 * value(t, max_capture_size=32, **full)


def test_a_seed_redraws_the_effect_sizes_not_the_structure():
    a, b = suite.stand_in("glm5-combination"), suite.stand_in("glm5-combination", seed=3)
    assert b.name == "glm5-combination~3" and {r.key for r in a.rows} == {r.key for r in b.rows}
    assert [r.failure for r in a.rows] == [r.failure for r in b.rows]
    assert any(not math.isclose(x.median or 0, y.median or 0) for x, y in zip(a.rows, b.rows))
    assert suite.stand_in("glm5-combination", seed=3).rows[5].median == b.rows[5].median  # seeded: the same again
    # the published anchors stay where they are on every variant of the motivating box
    m = suite.stand_in("motivating", seed=7)
    assert value(m, graph_capture=False) / m.best == pytest.approx(20.0 / 42.7, rel=0.01)


@pytest.mark.parametrize("name", ["synergy-threads-channels", *(f"random-{n}" for n in range(6))])
def test_the_best_carries_a_value_slow_alone_beside_its_partner(name):
    box = suite.box(name)
    t = box.table()
    (p, v), (q, w) = box.synergy
    best = max(t.rows, key=lambda r: r.median or 0.0)
    assert best.params[p] == v and best.params[q] == w
    # without its partner the value is slower than the parameter's other values
    alone = _mean(t, lambda r: r.params[p] == v and r.params[q] != w)
    others = _mean(t, lambda r: r.params[p] != v and r.params[q] != w)
    assert alone < others, (alone, others)


def _mean(t, where):
    xs = [math.log(r.median) for r in t.rows if r.median and where(r)]
    return sum(xs) / len(xs)


def test_stand_ins_write_as_tables_that_read_back_the_same(tmp_path):
    for name in ("proto-p2p-load", "random-2"):
        t = suite.stand_in(name)
        write_table(t, tmp_path / "t.csv")
        assert truth(load_table(tmp_path / "t.csv")) == truth(t)


def test_an_unknown_box_is_refused_with_the_names_allowed():
    with pytest.raises(TableError, match="unknown stand-in 'nope'; allowed: motivating, glm5-combination"):
        suite.box("nope")
