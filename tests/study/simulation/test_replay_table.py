"""Replay tables: the format read and typed (wildcards, the baseline, the best), every bad table one
line naming the rule, plan tables with one column per level, start-up and noise cells, a finished
study written back as a table, a table written and read back, and the shipped tables in docs/tables
(the synthetic ones regenerate byte for byte)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from tiny_table import COSTLY, PLAN, TINY, write

from orchestrator.config.job import Objective
from orchestrator.core.errors import BadInput
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.simulation.replay import TableSpace, replay_launch, replay_levels
from orchestrator.study.simulation.replay_table import (
    TableError,
    load_table,
    table_from_frame,
    table_from_study,
    write_table,
)

TABLES = Path(__file__).resolve().parents[3] / "docs" / "tables"
# the motivating space (672 configs), the table behind docs/benchmarks.md's "Search strategies"
SPACE_TABLE = "motivating-space.csv"


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text(TINY)
    return path


def test_load_table_types_wildcards_and_best(tiny):
    t = load_table(tiny)
    assert len(t.rows) == 8 and t.best == 20.0
    assert t.choices == {"tp_size": [1, 2, 4], "graph": [False, True], "proto": ["LL", "Simple", "LL128"]}
    assert t.baseline.params == {"tp_size": 2, "graph": False, "proto": "LL"}
    assert t.rows[0].params == {"tp_size": 1, "graph": False}  # empty cell: does not matter
    assert t.lookup({"tp_size": 1, "graph": False, "proto": "LL128"}) is t.rows[0]
    assert t.lookup({"tp_size": 4, "graph": False, "proto": "LL"}) is None
    assert [r.params["proto"] for r in t.within(0.02)] == ["LL"]


@pytest.mark.parametrize("text, message", [
    ("a,samples\n1,\n", "needs at least one sample"),
    ("a,samples,failure\n1,,crashed\n", "failure must be empty or one of start-crash"),
    ("a,samples,failure\n1,,interrupted\n", "failure must be empty or one of"),
    ("a,samples\n1,3;x\n", "samples must be numbers"),
    ("a,samples\n1,-3\n", "positive"),
    ("a\n1\n", "needs a 'samples' column"),
    ("samples\n3\n", "at least one parameter column"),
    ("a,b,samples\n1,,3\n1,2,4\n", "describe the same configuration"),
    ("a,samples,baseline\n1,3,1\n2,4,1\n", "at most one row"),
    ("a,samples,failure\n1,,start-crash\n", "every row fails"),
])
def test_bad_tables_are_refused_with_the_rule(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TableError, match=message):
        load_table(path)


def test_table_from_study_round_trip(tiny):
    t = load_table(tiny)
    space = TableSpace(t)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    base = {p: t.baseline.params.get(p, v[0]) for p, v in t.choices.items()}
    policy = SearchPolicy(study, space, space.normalize, baseline=base, budget=None, seed=0)
    rng = random.Random(0)
    rows = t.by_key()
    while (p := policy.next()) is not None:
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        policy.record(p, replay_launch(rows[p.key], p.config, rng, 3, None))
    df = table_from_study(study)
    assert len(df) == 8
    again = table_from_frame(df, "from-study")
    assert {r.key for r in again.rows} == set(rows)
    assert again.baseline.params == t.baseline.params
    assert sorted(r.failure for r in again.rows if r.failure) == ["start-crash", "wrong-output"]
    for r in again.rows:
        if not r.failure:
            assert set(r.samples) <= set(rows[r.key].samples)


def test_shipped_tables_are_valid():
    case = load_table(TABLES / "motivating-case.csv")
    assert len(case.rows) == 84 and sum(r.failure is not None for r in case.rows) == 48
    assert case.baseline.params == {"tp_size": 8, "graph_mode": "eager", "env.NCCL_PROTO": "Simple",
                                    "env.NCCL_ALGO": "Ring"}
    assert case.baseline.median == pytest.approx(20.0, rel=0.05)  # published enforce-eager figure
    assert case.best == pytest.approx(57.0, rel=0.03)  # published "~57 after NCCL tuning"
    small = load_table(TABLES / "h200-graphs-small.csv")
    assert len(small.rows) < 24


def test_a_plan_table_has_one_sample_column_per_level(tmp_path):
    t = load_table(write(tmp_path, PLAN))
    assert t.levels == (1, 8) and t.by_level and len(t.rows) == 6
    assert t.best_at(1) == 250 and t.best_at(8) == 700
    solo2 = next(r for r in t.rows if r.params == {"mode": "solo", "size": 2})
    assert solo2.median_at(8) == 240 and solo2.samples == [250, 251, 249]  # `samples`: the lowest level's
    old = load_table(TABLES / "h200-graphs-small.csv")  # a table of one level reads as before
    assert old.levels == () and not old.by_level and old.rows[0].median_at(1) == old.rows[0].median


@pytest.mark.parametrize("text,needle", [
    ("a,samples,samples@8,failure\nx,1,2,\n", "either a 'samples' column or one samples@N"),
    ("a,samples@x,failure\nx,1,\n", "column 'samples@x': a level column is samples@N with N >= 1"),
    ("a,samples@0,failure\nx,1,\n", "samples@N with N >= 1"),
    ("a,samples@1,samples@8,failure\nx,1,,\n", "line 2: a row without a failure needs samples at every level "
                                               "(samples@8 is empty)"),
    ("a,samples@1,samples@8,failure\nx,1,-3,\n", "line 2: samples@8 must be positive tok/s"),
    ("a,failure\nx,\n", "or one samples@N column per concurrency level"),
])
def test_a_bad_plan_table_is_one_line(tmp_path, text, needle):
    with pytest.raises(TableError, match=None) as err:
        load_table(write(tmp_path, text))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, BadInput) and err.value.exit_code == 2


def test_a_finished_plan_study_becomes_a_plan_table(tmp_path):
    t = load_table(write(tmp_path, PLAN))
    study = optuna.create_study(directions=["maximize", "maximize"])
    space = TableSpace(t)
    policy = SearchPolicy(study, space, space.normalize, baseline=None, budget=None,
                          objective=Objective(concurrency=(1, 8)))
    rng = random.Random(0)
    while (p := policy.next()) is not None:
        policy.record(p, p.cached if p.cached else replay_levels(t.by_key()[p.key], p.config, rng, 3, None),
                      counted=p.cached is None)
    frame = table_from_study(study)
    assert [c for c in frame.columns if c.startswith("samples")] == ["samples@1", "samples@8"]
    back = table_from_frame(frame, name="back")
    assert back.levels == (1, 8) and len(back.rows) == len(t.rows)
    for row in back.rows:
        want = next(r for r in t.rows if r.params == row.params)
        assert row.failure == want.failure
        if not want.failure:
            assert set(row.levels[8]) <= set(want.levels[8])  # every sample drawn from the table's own


def test_the_plan_tables_in_docs_load_and_the_synthetic_ones_regenerate(tmp_path):
    real = load_table(TABLES / "plan-h200-vllm-1b.csv")
    assert real.levels == (1, 10, 64) and len(real.rows) == 3
    for name in ("plan-h200-vllm-graphs.csv", "plan-pcie-8gpu.csv"):
        t = load_table(TABLES / name)
        assert t.by_level and t.baseline is not None
        bests = {lv: max(t.rows, key=lambda r, lv=lv: r.median_at(lv) or 0).key for lv in t.levels}
        assert len(set(bests.values())) == 3  # by construction a different config is best at each level
    copy = tmp_path / "gen"
    copy.mkdir()
    (copy / "generate_plan.py").write_bytes((TABLES / "generate_plan.py").read_bytes())
    subprocess.run([sys.executable, str(copy / "generate_plan.py")], check=True, timeout=120)
    for name in ("plan-h200-vllm-graphs.csv", "plan-pcie-8gpu.csv"):
        assert (copy / name).read_bytes() == (TABLES / name).read_bytes(), name


def test_a_bad_start_up_cell_is_one_line(tmp_path):
    bad = COSTLY.replace("2,true,LL,20;20;20,,,300,", "2,true,LL,20;20;20,,,soon,")
    with pytest.raises(TableError, match="line 3: startup_s must be seconds"):
        load_table(write(tmp_path, bad))


def test_the_motivating_space_regenerates_and_has_the_properties_it_stands_for(tmp_path):
    """docs/tables/generate.py writes the table byte for byte; the table is the 672-config space of
    the motivating job with its unsafe NCCL values: 6 optimal configs, TP4xPP2 with the same NCCL
    settings 2.2% slower, NVLS and PAT refused at start with a log naming them, LL128 wrong text
    after a full start, 1% noise per sample and launch noise, GLM-5-like start-up costs."""
    copy = tmp_path / "gen"
    copy.mkdir()
    (copy / "generate.py").write_bytes((TABLES / "generate.py").read_bytes())
    subprocess.run([sys.executable, str(copy / "generate.py"), "--out", str(copy)], check=True, timeout=120)
    assert (copy / SPACE_TABLE).read_bytes() == (TABLES / SPACE_TABLE).read_bytes()
    t = load_table(TABLES / SPACE_TABLE)
    assert len(t.rows) == 672 and len(t.optimal()) == 6 and t.best == 57.0
    assert {r.params["tp_size"] for r in t.rows if r.key in t.optimal()} == {8}
    nccl = {"env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Ring", "env.NCCL_P2P_DISABLE": 0}  # the optimal configs'
    assert all(all(r.params[k] == v for k, v in nccl.items()) for r in t.rows if r.key in t.optimal())
    runner_up = max(r.median or 0 for r in t.rows if r.params["tp_size"] == 4
                    and all(r.params[k] == v for k, v in nccl.items()))
    assert runner_up == pytest.approx(0.978 * t.best)  # TP4xPP2, the same NCCL settings: 2.2% slower
    assert sorted({r.median for r in t.rows if r.median})[-2] == runner_up  # the next best of the table
    crashes = [r for r in t.rows if r.params["env.NCCL_ALGO"] in ("NVLS", "PAT")]
    assert all(r.failure == "nccl-invalid" and r.params["env.NCCL_ALGO"] in r.log for r in crashes)
    wrong = [r for r in t.rows if r.params["env.NCCL_PROTO"] == "LL128" and r not in crashes]
    assert wrong and all(r.failure == "wrong-output" and r.startup_s > 200 for r in wrong)
    working = [r for r in t.rows if not r.failure]
    assert {(r.noise, r.launch_noise) for r in working} == {(0.01, 0.005)}
    tp8_graphs = [r.startup_s for r in working if r.params["tp_size"] == 8 and r.params["graph_capture"]]
    assert t.has_costs and max(tp8_graphs) == 450.0  # GLM-5 on 8 PCIe GPUs: 7.5 minutes with vLLM's default graphs
    assert t.baseline.params["graph_capture"] is False and t.baseline.median == pytest.approx(20.0, rel=0.01)


@pytest.mark.parametrize("column, raw", [("noise", "2"), ("launch_noise", "-0.1"), ("noise", "lots")])
def test_a_bad_noise_cell_is_one_line(tmp_path, column, raw):
    with pytest.raises(TableError, match=f"line 2: {column} must be a coefficient of variation"):
        load_table(write(tmp_path, f"a,samples,{column}\nx,10,{raw}\n"))


def test_a_written_table_reads_back_as_the_same_rows(tiny, tmp_path):
    t = load_table(tiny)
    write_table(t, tmp_path / "again.csv")
    again = load_table(tmp_path / "again.csv")
    assert [(r.params, r.samples, r.failure, r.baseline) for r in again.rows] == \
        [(r.params, r.samples, r.failure, r.baseline) for r in t.rows]
    costly = load_table(write(tmp_path, COSTLY))
    write_table(costly, tmp_path / "costly-again.csv")
    back = load_table(tmp_path / "costly-again.csv")
    assert [(r.startup_s, r.compile_s) for r in back.rows] == [(r.startup_s, r.compile_s) for r in costly.rows]
