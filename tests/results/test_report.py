"""write_report: every file of the report from a real journal study, from a study where nothing
ran, and the journal still opens with Optuna's own loader afterwards."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import optuna
import pytest
import recorded_study as fx  # a real journal study with every outcome
from written_report import EXPECTED, write_demo_report

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core.measurement import Latency, LevelResult
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.results.compare import format_compare_plan
from orchestrator.results.compare_file import CompareFile
from orchestrator.results.report import write_report
from orchestrator.study.storage import storage


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of a real journal study with every outcome (written once for the module)."""
    return write_demo_report(tmp_path_factory.mktemp("report"))



def test_all_files_written(report):
    job, paths = report
    assert {p.name for p in paths} == EXPECTED
    for p in paths:
        assert p.parent == job.report_dir and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_storage_still_opens_with_optunas_loader(report):
    """What optuna-dashboard does with the journal file path: the report must not disturb it."""
    job, _ = report
    backend = optuna.storages.journal.JournalFileBackend(str(storage.journal_path(job.storage)))
    study = optuna.load_study(study_name=job.study, storage=optuna.storages.JournalStorage(backend))
    assert len(study.trials) == 13


def test_report_of_an_empty_study(tmp_path):
    job = fx.make_job(tmp_path)
    optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    paths = write_report(job)
    assert {p.name for p in paths} == EXPECTED
    assert "no trials yet" in (job.report_dir / "report.md").read_text()


# The report of a plan (results/report/): the motivating case's table shape with levels as
# rows (the baseline, the best at 1, the best at this level, the ratios with verdicts beyond
# noise), the plan's configs, the Pareto set and its plot, the mix, and ``compare --plan``'s
# relaunched rounds (results/compare.py: paired per round, every level); a job of one level
# gets none of it.
EAGER = {"tp_size": 1, "backend.max_batch": 1}
SMALL = {"tp_size": 1, "backend.max_batch": 8}
LARGE = {"tp_size": 1, "backend.max_batch": 64}
SPACE = "params:\n  backend.max_batch: {choices: [1, 8, 64]}\n"


def row(number: int, params: dict, levels: dict[int, list[float]], baseline: bool = False) -> TrialRow:
    recs = {str(lv): {"value": statistics.median(s), "samples": list(s)} for lv, s in levels.items()}
    return TrialRow(number=number, state=COMPLETE, params=params, value=recs["1"]["value"], counted=True,
                    is_baseline=baseline, config_key=config_key(params), levels=recs,
                    metrics={"decode_samples": levels[1], "levels": recs})


ROWS = [row(0, EAGER, {1: [94.7, 95.0, 94.1], 10: [788, 701, 750], 64: [4500, 3514, 4000]}, baseline=True),
        row(1, SMALL, {1: [413, 433.9, 440], 10: [692, 685, 690], 64: [3789, 3542, 3600]}),
        row(2, LARGE, {1: [363.8, 360, 365], 10: [3438, 3874, 3600], 64: [13757, 15673, 14000]})]
# each config relaunched once (``study.relaunch``), a few percent from its trial: the launch noise
RELAUNCHED = ROWS + [replace(row(3 + i, params, levels), counted=False, launch_role="relaunch") for i, (params, levels)
                     in enumerate([(EAGER, {1: [96.0] * 3, 10: [730] * 3, 64: [4100] * 3}),
                                   (SMALL, {1: [428.0] * 3, 10: [760] * 3, 64: [3700] * 3}),
                                   (LARGE, {1: [366.0] * 3, 10: [3500] * 3, 64: [14500] * 3}),
                                   (EAGER, {1: [95.5] * 3, 10: [760] * 3, 64: [3900] * 3}),
                                   (SMALL, {1: [431.0] * 3, 10: [740] * 3, 64: [3500] * 3}),
                                   (LARGE, {1: [364.0] * 3, 10: [3700] * 3, 64: [14100] * 3})])]


def compare_data() -> dict:
    """What `compare --plan` writes: three rounds of the baseline and the plan's two configs (its facts)."""
    rounds = []
    for r, (b, s, lg) in enumerate([((95, 760), (430, 690), (362, 3600)), ((96, 740), (436, 700), (365, 3700)),
                                    ((94, 770), (428, 680), (360, 3550))]):
        for label, trial, (one, ten) in (("baseline", 0, b), ("trial-1", 1, s), ("trial-2", 2, lg)):
            rounds.append({"round": r, "config": label, "trial": trial, "levels": {"1": one, "10": ten}})
    data = {"plan": True, "concurrency": [1, 10], "rounds_planned": 3, "complete": True, "baseline_trial": 0,
            "anchor_trial": 1, "rounds": rounds, "failures": [],
            "configs": [{"label": "baseline", "trial": 0, "params": EAGER, "roles": []},
                        {"label": "trial-1", "trial": 1, "params": SMALL, "roles": ["best at 1"]},
                        {"label": "trial-2", "trial": 2, "params": LARGE, "roles": ["best at 10"]}]}
    return data


def test_compare_plan_pairs_rounds_at_every_level_and_says_what_the_plan_wins():
    record = CompareFile.from_record(compare_data())
    data = record.to_record()  # as written: the medians and intervals beside the rounds
    assert record.rounds_done == data["rounds_done"] == 3
    small, large = data["configs"][1], data["configs"][2]
    assert small["median"] == {"1": 430, "10": 690} and large["median"]["10"] == 3600
    assert small["vs_baseline"]["1"]["verdict"] == "faster" and small["vs_baseline"]["10"]["verdict"] == "slower"
    assert large["vs_anchor"]["10"]["verdict"] == "faster" and small["vs_anchor"]["1"]["verdict"] == "same config"
    text = format_compare_plan(record)
    assert "| Concurrency | baseline | trial-1 (best at 1) | trial-2 (best at 10) |" in text
    assert "At concurrency 10 the plan's config (trial #2) against the best at 1 (trial #1): 5.2" in text
    assert "faster (95% CI" in text.splitlines()[-1]


def test_compare_plan_prints_each_configs_latency_per_level_against_the_jobs_targets():
    """Each launch's latency percentiles (its typed record): per level and config, TTFT / TPOT p99
    as the median over the launches, and with the job's SLO what each broke there."""
    data = compare_data()
    for rnd in data["rounds"]:
        ms = {"baseline": 13.0, "trial-1": 3.0, "trial-2": 6.0}[rnd["config"]] + rnd["round"]
        if rnd["config"] == "trial-1":
            ms += 20  # the config best at 1 queues at 10 streams
        rnd["records"] = {lv: LevelResult(int(lv), (v,), ttft=Latency(0.02, 0.03, 0.04, 8),
                                          tpot=Latency(ms / 2000, ms / 1000, (ms if lv == "10" else 2) / 1000,
                                                       8)).to_record()
                          for lv, v in rnd["levels"].items()}
    text = format_compare_plan(CompareFile.from_record(data))
    assert "p99 latency, TTFT / TPOT in ms (median over the launches)" in text
    assert "| 10 | 40.0 / 14.0 | 40.0 / 24.0 | 40.0 / 7.0 |" in text
    data["slo"] = {"tpot_p99": 0.010}
    text = format_compare_plan(CompareFile.from_record(data))
    assert "latency targets: TPOT p99 <= 10 ms" in text
    assert "| 10 | 40.0 / 14.0 (breaks TPOT p99 14.0 ms) | 40.0 / 24.0 (breaks TPOT p99 24.0 ms) | " \
           "40.0 / 7.0 (holds the SLO) |" in text
    before = CompareFile.from_record(compare_data())  # launches recorded before latency was
    assert "p99 latency" not in format_compare_plan(before)


def test_the_report_of_a_plan_has_its_table_configs_pareto_set_and_plot(tmp_path):
    job = load_job(write_job(tmp_path, study="plan", space_text=SPACE,
                             objective={"concurrency": [1, 10, 64], "weights": {1: 0.2, 10: 0.4, 64: 0.4}}))
    job.dir.root.mkdir(parents=True, exist_ok=True)
    job.dir.compare_plan.write_text(json.dumps(compare_data()))
    paths = write_report(job, rows=RELAUNCHED, bandwidth_bytes_s=4.8e12, allreduce_latency_s=0.0)
    names = {p.name for p in paths}
    assert "pareto.png" in names and (job.report_dir / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    md = (job.report_dir / "report.md").read_text()
    section = md.split("## Plan: the best config per concurrency level", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0] == ("| Concurrency | Unit | baseline (trial 0) | best at 1 | best at this level | best at 1 vs "
                        "baseline | best here vs baseline | best at 1 vs best here |")
    one, ten, sixty_four = lines[1], lines[2], lines[3]
    # figures over each config's two launches, with where a fresh launch of the best should measure
    assert one.startswith("| 1 | decode tok/s | 95.5 | 431.0 | 431.0 (trial 1, 3 launches; a fresh launch should "
                          "measure ") and "same config" in one
    assert ten.startswith("| 10 | total tok/s | 750.0 | 740.0 | 3600.0 (trial 2, 3 launches; ")
    # the best at 1 is no faster than eager at 10 (within noise); the plan's config there is, and beats it
    assert "within noise" in ten.split("|")[6] and "faster" in ten.split("|")[7] and "slower" in ten.split("|")[8]
    assert sixty_four.startswith("| 64 | total tok/s | 4000.0 | 3600.0 | 14100 (trial 2, 3 launches; ")
    assert "## Launch noise and the race of the finalists" in md and "| 10 | launch noise +-" in md
    assert "| 1 | best at 1 | tp_size=1 max_batch=8 |" in section
    assert "| 2 | best at 10, best at 64, the mix | tp_size=1 max_batch=64 |" in section
    assert "Pareto set (2 config(s)" in section
    assert "Best for the traffic mix (1: 0.2, 10: 0.4, 64: 0.4): trial 2 = " in section
    assert "![Pareto plot: each level against the lowest](pareto.png)" in section
    assert "### The plan relaunched (`compare --plan`)" in section
    html = (job.report_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5  # the four plots and the Pareto plot, embedded


def test_the_report_of_one_level_has_no_plan(tmp_path):
    job = load_job(write_job(tmp_path, study="one", space_text=SPACE))
    paths = write_report(job, rows=RELAUNCHED, bandwidth_bytes_s=4.8e12, allreduce_latency_s=0.0)
    assert "pareto.png" not in {p.name for p in paths}
    md = (job.report_dir / "report.md").read_text()
    assert "## Plan" not in md and "pareto" not in md
    assert (job.report_dir / "report.html").read_text().count("data:image/png;base64,") == 4


def test_a_plan_without_weights_names_no_mix(tmp_path):
    job = load_job(write_job(tmp_path, study="plan", space_text=SPACE, objective={"concurrency": [1, 10, 64]}))
    write_report(job, rows=ROWS, bandwidth_bytes_s=4.8e12, allreduce_latency_s=0.0)
    md = (job.report_dir / "report.md").read_text()
    assert "## Plan: the best config per concurrency level" in md and "traffic mix" not in md
    assert "compare --plan`)" not in md  # not run: no relaunched section


def test_a_plan_whose_bests_differ_says_so_before_its_single_level_headline(tmp_path):
    """The headline ranks by the lowest level; a plan whose levels have different bests warns
    at once that the load decides, naming each level's best, so nobody deploys the level-1 best
    for a busy server by reading the first paragraph alone."""
    job = load_job(write_job(tmp_path, study="plan", space_text=SPACE, objective={"concurrency": [1, 10, 64]}))
    write_report(job, rows=ROWS, bandwidth_bytes_s=4.8e12, allreduce_latency_s=0.0)
    md = (job.report_dir / "report.md").read_text()
    lead = md.split("## Headline", 1)[1].split("## Plan", 1)[0]
    assert "The best config depends on the load: at 1 trial 1, " in lead
    assert "; at 10 trial 2, " in lead and "; at 64 trial 2, " in lead and "--concurrency N" in lead
    one_best = [ROWS[0], ROWS[2]]  # eager and the large capture: the large one is best at every level
    write_report(job, rows=one_best, bandwidth_bytes_s=4.8e12, allreduce_latency_s=0.0)
    assert "depends on the load" not in (job.report_dir / "report.md").read_text()


def test_a_plan_whose_best_at_one_level_is_only_tied_names_one_config_for_every_level(tmp_path):
    """The H200 race study's shape (tests/study/evidence/test_plan.py's ``tied_at_one``): the report says
    which single config serves every level, and how to export it."""
    from plan_rows import tied_at_one

    job = load_job(write_job(tmp_path, study="plan", space_text=SPACE, objective={"concurrency": [1, 10, 64]}))
    write_report(job, rows=tied_at_one(), bandwidth_bytes_s=4.8e12, allreduce_latency_s=0.0)
    md = (job.report_dir / "report.md").read_text()
    assert "**One config serves every level on this evidence: trial 1**, the best at 10, 64, and within launch " \
           "noise of the best at the others (at 1: " in md
    assert "`ncclsweep export JOB --concurrency 10` exports it." in md
