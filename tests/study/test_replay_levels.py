"""The replay harness on per-level (plan) tables (study/replay.py): the table format with one
``samples@N`` column per level and its one-line errors, a replay that counts launches until the
plan's best at every level is within the target, single-level and random search on the same
table, a finished plan study written back as a table, and the plan tables in docs/tables (the
synthetic ones regenerate byte for byte)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from orchestrator.config.job import Objective
from orchestrator.core.errors import BadInput
from orchestrator.study.policy import SearchPolicy
from orchestrator.study.replay import (
    SamplerSpec,
    TableError,
    TableSpace,
    _replay_levels,
    format_summary,
    format_table,
    load_table,
    replay_once,
    run_simulation,
    table_from_frame,
    table_from_study,
)

REPO = Path(__file__).resolve().parents[2]
TABLES = REPO / "docs" / "tables"
# the best config differs by level: solo/2 at 1, batch/2 at 8; batch/1 is the runner-up at 8
TABLE = """\
mode,size,samples@1,samples@8,failure,baseline,note
solo,1,100;101;99,200;201;199,,1,
solo,2,250;251;249,240;241;239,,,
batch,1,120;121;119,600;601;599,,,
batch,2,130;131;129,700;701;699,,,
mega,1,,,start-crash,,
mega,2,90;91;89,300;301;299,,,
"""


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_plan_table_has_one_sample_column_per_level(tmp_path):
    t = load_table(write(tmp_path, TABLE))
    assert t.levels == (1, 8) and t.is_plan and len(t.rows) == 6
    assert t.best_at(1) == 250 and t.best_at(8) == 700
    solo2 = next(r for r in t.rows if r.params == {"mode": "solo", "size": 2})
    assert solo2.median_at(8) == 240 and solo2.samples == [250, 251, 249]  # `samples`: the lowest level's
    old = load_table(TABLES / "h200-graphs-small.csv")  # a table of one level reads as before
    assert old.levels == () and not old.is_plan and old.rows[0].median_at(1) == old.rows[0].median


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


def test_sampler_specs_name_the_levels_the_search_is_told(tmp_path):
    t = load_table(write(tmp_path, TABLE))
    assert SamplerSpec.parse("tpe").objective(t) == Objective(concurrency=(1, 8))
    assert SamplerSpec.parse("tpe:levels=1").objective(t) == Objective(concurrency=(1,))
    mix = SamplerSpec.parse("tpe:weights=3+1").objective(t)
    assert mix.weights == {1: 0.75, 8: 0.25}
    for spec, needle in (("tpe:levels=10", "level(s) 10 not in t.csv"), ("tpe:weights=1", "2 positive numbers"),
                         ("tpe:levels=1+x", "levels must look like 1+10+64")):
        with pytest.raises(ValueError, match=None) as err:
            SamplerSpec.parse(spec).objective(t)
        assert needle in str(err.value)
    with pytest.raises(ValueError, match="need a table with samples@N columns"):
        SamplerSpec.parse("tpe:levels=1+8").objective(load_table(TABLES / "h200-graphs-small.csv"))


def test_a_plan_replay_counts_launches_until_every_levels_best_is_within_target(tmp_path):
    t = load_table(write(tmp_path, TABLE))
    for spec in ("tpe", "tpe:levels=1", "random", "nsga2"):
        run = replay_once(t, spec, 0, budget=6)
        assert run.launches_to_target is not None, (spec, run)  # within the budget: the whole table
        assert run.best_ratio == pytest.approx(1.0, abs=0.02)  # the worst level's pick, against its best
    short = replay_once(t, "tpe", 0, budget=2)  # the baseline and one more cannot hold both bests
    assert short.launches_to_target is None and short.best_ratio < 0.9


def test_run_simulation_reports_every_level_against_single_level_and_random(tmp_path):
    res = run_simulation(write(tmp_path, TABLE), "tpe,tpe:levels=1,random", seeds=3)
    assert res.levels == (1, 8) and res.level_bests == {1: 250, 8: 700}
    text = format_table(res)
    assert "over concurrency 1, 8, best 250 at 1, 700 at 8; target: the plan's best within 2% at every level" in text
    assert "| tpe:levels=1 |" in text and "launches to within 2% at every level" in text
    assert "t.csv (every level of 1, 8)" in format_summary([res])


def test_a_finished_plan_study_becomes_a_plan_table(tmp_path):
    t = load_table(write(tmp_path, TABLE))
    study = optuna.create_study(directions=["maximize", "maximize"])
    space = TableSpace(t)
    policy = SearchPolicy(study, space, space.normalize, baseline=None, budget=None,
                          objective=Objective(concurrency=(1, 8)))
    rng = random.Random(0)
    while (p := policy.next()) is not None:
        policy.record(p, p.cached if p.cached else _replay_levels(t.by_key()[p.key], p.config, rng, 3, None),
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
        assert t.is_plan and t.baseline is not None
        bests = {lv: max(t.rows, key=lambda r, lv=lv: r.median_at(lv) or 0).key for lv in t.levels}
        assert len(set(bests.values())) == 3  # by construction a different config is best at each level
    copy = tmp_path / "gen"
    copy.mkdir()
    (copy / "generate_plan.py").write_bytes((TABLES / "generate_plan.py").read_bytes())
    subprocess.run([sys.executable, str(copy / "generate_plan.py")], check=True, timeout=120)
    for name in ("plan-h200-vllm-graphs.csv", "plan-pcie-8gpu.csv"):
        assert (copy / name).read_bytes() == (TABLES / name).read_bytes(), name
