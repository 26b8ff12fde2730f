"""export of a plan (results/export.py): ``--concurrency N`` exports the best at level N in
every format with provenance naming the level, ``--mix`` the best for the traffic mix; with
neither, a single-level job exports today's best and a plan names the level it chose; a level
the objective lacks, or a mix without weights, is one line with exit code 2."""

from __future__ import annotations

import json
import statistics

import pytest
import yaml

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.results.export import FORMATS, choose, export, load_config_file

EAGER = {"tp_size": 1, "backend.max_batch": 1, "env.NCCL_PROTO": "Simple"}
SMALL = {"tp_size": 1, "backend.max_batch": 8, "env.NCCL_PROTO": "LL"}
LARGE = {"tp_size": 1, "backend.max_batch": 64, "env.NCCL_PROTO": "Simple"}


def row(number: int, params: dict, levels: dict[int, list[float]], baseline: bool = False) -> TrialRow:
    recs = {str(lv): {"value": statistics.median(s), "samples": list(s), "rel_ci": 0.01} for lv, s in levels.items()}
    return TrialRow(number=number, state=COMPLETE, params=params, value=recs["1"]["value"], counted=True,
                    is_baseline=baseline, config_key=config_key(params), levels=recs, node="vm",
                    metrics={"decode_samples": levels[1], "levels": recs}, ended_at="2026-12-01T00:00:00+00:00")


ROWS = [row(0, EAGER, {1: [94.7, 95.0, 94.1], 10: [788, 701, 750], 64: [4500, 3514, 4000]}, baseline=True),
        row(1, SMALL, {1: [413, 433.9, 440], 10: [692, 685, 690], 64: [3789, 3542, 3600]}),
        row(2, LARGE, {1: [363.8, 360, 365], 10: [3438, 3874, 3600], 64: [13757, 15673, 14000]})]


@pytest.fixture
def jobs(tmp_path):
    space = "params:\n  backend.max_batch: {choices: [1, 8, 64]}\n  env.NCCL_PROTO: {choices: [Simple, LL]}\n"
    plan = load_job(write_job(tmp_path, study="plan", space_text=space, objective={"concurrency": [1, 10, 64]}))
    (tmp_path / "mix").mkdir()
    mix = load_job(write_job(tmp_path / "mix", study="mix", space_text=space,
                             objective={"concurrency": [1, 10, 64], "weights": {1: 0.2, 10: 0.4, 64: 0.4}}))
    (tmp_path / "one").mkdir()
    one = load_job(write_job(tmp_path / "one", study="one", space_text=space))
    return plan, mix, one


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_export_concurrency_n_is_the_best_at_that_level_in_every_format(jobs):
    plan, _, _ = jobs
    assert env_of(export(plan, ROWS, "env", level=1))["NCCL_PROTO"] == "LL"  # captured up to 8 wins one request
    for level in (10, 64):
        text = export(plan, ROWS, "env", level=level)
        assert env_of(text)["NCCL_PROTO"] == "Simple"
        assert f"# chosen for level {level} (--concurrency {level}):" in text and "total tok/s" in text
        assert "study plan, trial 2" in text
    for fmt in FORMATS:
        text = export(plan, ROWS, fmt, level=10)
        if fmt in ("yaml", "json"):
            doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
            obj = doc["provenance"]["objective"]
            assert doc["config"] == LARGE and obj["level"] == 10 and obj["unit"] == "total tok/s"
            assert obj["value"] == 3600 and obj["baseline_value"] == 750
            assert obj["x_baseline"] == pytest.approx(4.8) and obj["chosen_by"] == "--concurrency 10"
        elif fmt == "cmd":
            assert "--max-batch 64" in text and "NCCL_PROTO=Simple" in text
        else:
            assert "# chosen for level 10" in text


def test_an_exported_level_reads_back_for_bench(jobs, tmp_path):
    plan, _, _ = jobs
    path = tmp_path / "best-at-64.yaml"
    path.write_text(export(plan, ROWS, "yaml", level=64))
    assert load_config_file(path) == LARGE


def test_without_an_option_a_plan_names_the_level_it_chose(jobs):
    plan, mix, one = jobs
    text = export(plan, ROWS, "env")
    assert env_of(text)["NCCL_PROTO"] == "LL"
    assert "# chosen for level 1 (the default for a plan, its lowest level; --concurrency N exports another of " \
           "1, 10, 64): 433.900 decode tok/s, 4.58x the baseline" in text
    text = export(mix, ROWS, "json")
    obj = json.loads(text)["provenance"]["objective"]
    assert obj["mix"] == {"1": 0.2, "10": 0.4, "64": 0.4} and obj["level"] is None
    assert json.loads(text)["config"] == LARGE and obj["chosen_by"].startswith("the default for a weighted objective")
    assert obj["x_baseline_interval"][0] < obj["x_baseline"] < obj["x_baseline_interval"][1]
    assert env_of(export(mix, ROWS, "env", mix=True))["NCCL_PROTO"] == "Simple"
    # one level: today's export, nothing named
    plain = export(one, ROWS, "json")
    assert "objective" not in json.loads(plain)["provenance"] and json.loads(plain)["config"] == SMALL


def test_a_level_the_objective_lacks_or_a_mix_without_weights_is_refused(jobs):
    plan, _, one = jobs
    with pytest.raises(BadInput) as err:
        export(plan, ROWS, "env", level=8)
    assert str(err.value) == "--concurrency: 8 is not a level of the study's objective (objective.concurrency: " \
                             "1, 10, 64)" and err.value.exit_code == 2
    with pytest.raises(BadInput, match="no traffic mix"):
        export(plan, ROWS, "env", mix=True)
    with pytest.raises(BadInput, match="give one of them"):
        choose(plan, 10, True)
    with pytest.raises(BadInput, match="not a level"):
        export(one, ROWS, "env", level=10)  # a single-level job measured level 1 only
