"""report: every file from a real journal study, the content that answers the morning questions,
and (with Chromium installed) a screenshot that shows the plots."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import shutil
from pathlib import Path

import optuna
import pandas as pd
import pytest

from orchestrator.results.compare import summarize
from orchestrator.results.report import write_report
from orchestrator.study import storage

_HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("_history_fixture", _HERE / "test_history.py")
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)

EXPECTED = {"trials.csv", "history.png", "params.png", "importance.png", "timeline.png", "startup.png", "report.md",
            "report.html"}

def _rounds(per_config: dict[str, dict[str, list[float]]]) -> list[dict]:
    """compare.json's rounds from {label: {concurrency: [tok/s per round]}}, alternating order."""
    labels = list(per_config)
    n = max(len(v) for levels in per_config.values() for v in levels.values())
    return [{"round": r, "config": label, "trial": 0,
             "levels": {c: {"total_tok_s": vals[r]} for c, vals in per_config[label].items() if r < len(vals)}}
            for r in range(n) for label in (labels if r % 2 == 0 else labels[::-1])]


# The motivating case's figures, measured in 4 rounds: graphs win at 1 and 2, lose at 10 beyond
# noise, and tie at 64.
ROUNDS = _rounds({
    "baseline": {"1": [20.0, 19.8, 20.2, 20.1], "2": [38.2, 38.0, 38.4, 38.3], "10": [154.0, 150.0, 158.0, 155.0],
                 "64": [292.9, 290.0, 305.0, 285.0]},
    "best": {"1": [42.7, 42.5, 42.9, 42.8], "2": [71.5, 71.0, 72.0, 71.2], "10": [128.7, 127.0, 131.0, 129.5],
             "64": [303.7, 300.0, 299.0, 298.0]},
    "trial-1": {"1": [42.0, 41.8, 42.3, 42.1], "2": [70.0, 69.1, 70.3, 70.2], "10": [160.6, 158.0, 163.0, 161.0],
                "64": [300.0, 301.0, 302.5, 299.0]},
})
COMPARE = {
    "concurrency": [1, 2, 10, 64], "baseline_trial": 0, "best_trial": 2, "same_config": False,
    "rounds_planned": 4, "complete": True, "rounds_done": 4,
    "baseline": {"1": 20.05, "2": 38.25, "10": 154.5, "64": 291.45},
    "best": {"1": 42.75, "2": 71.35, "10": 129.1, "64": 299.5},
    "others": [{"trial": 1, "label": "trial-1", "params": {"tp_size": 2, "graph_capture": True},
                "median": {"1": 42.05, "10": 160.8}}],
    "rounds": ROUNDS, "failures": [],
    "constraints": [{"concurrency": 10, "min_ratio": 0.9, "ratio": 0.84, "lo": 0.82, "hi": 0.85, "ok": False,
                     "state": "VIOLATED", "measured": True, "text": "95% CI 0.82-0.85x"}],
}
summarize(COMPARE)  # the per-level intervals, as compare writes them


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    job, _study = fx.build_study(tmp_path_factory.mktemp("report"))
    job.report_dir.mkdir(parents=True, exist_ok=True)
    (job.report_dir / "compare.json").write_text(json.dumps(COMPARE))
    paths = write_report(job, bandwidth_bytes_s=50e9, allreduce_latency_s=20e-6)  # loads the study from storage
    return job, paths


def _section(md: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", md, re.S | re.M)
    assert m, title
    return m.group(0)


def test_all_files_written(report):
    job, paths = report
    assert {p.name for p in paths} == EXPECTED
    for p in paths:
        assert p.parent == job.report_dir and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_csv_one_row_per_trial(report):
    job, _ = report
    df = pd.read_csv(job.report_dir / "trials.csv")
    assert len(df) == 13 and list(df["number"]) == list(range(13))
    for col in ("state", "value", "spread", "failure_kind", "failure_reason", "node", "started_at", "ended_at",
                "cached_from", "counted", "param.tp_size", "param.env.NCCL_PROTO", "param.graph_capture",
                "metric.decode_tok_s", "metric.cv", "metric.rel_ci", "metric.decode_samples", "timing.launch_s",
                "timing.total_s", "warnings"):
        assert col in df.columns, col
    row3 = df[df["number"] == 3].iloc[0]
    assert row3["state"] == "FAIL" and row3["failure_kind"] == "wrong-output" and pd.isna(row3["value"])
    assert df[df["number"] == 2].iloc[0]["param.env.NCCL_PROTO"] == "LL"
    assert df[df["number"] == 2].iloc[0]["metric.decode_samples"].count(";") == 2
    assert list(df["state"]).count("COMPLETE") == 7


def test_markdown_answers_the_morning_questions(report):
    job, _ = report
    md = (job.report_dir / "report.md").read_text()
    head = _section(md, "Headline")
    assert "**Best: trial 2, 57.00 tok/s (+-1.0%), 2.85x the baseline**" in head
    assert "The difference is beyond the noise of repeats (95% CI 2." in head and "NCCL_PROTO Simple -> LL" in head
    assert "The concurrency comparison below relaunched both side by side." in head  # compare.json is there
    top = _section(md, "Top")
    ranked = [int(line.split("|")[2]) for line in top.splitlines() if re.match(r"\| \d+ \|", line)]
    assert ranked[0] == 2 and 3 not in ranked and 10 not in ranked  # never a failure, never the garbage config
    fails = _section(md, "Failures")
    for kind in ("wrong-output: 1", "start-crash: 1", "interrupted: 1", "pruned: 1"):
        assert kind in fails, kind
    assert "greedy output differs at char 3" in fails and "server exited with code 1" in fails
    assert "NCCL_PROTO=LL requested but NCCL used Simple" in _section(md, "NCCL verification")
    comp = _section(md, "Concurrency comparison")
    assert "| Concurrency | baseline | best | Improvement |" in comp
    assert "| 10 | 154.5 tok/s (150.0-158.0, 4 rounds) | 129.1 tok/s (127.0-131.0, 4 rounds) | " \
           "**0.837x slower (95% CI 0.825-0.848x)** |" in comp
    assert "SLOWER than the baseline beyond noise at concurrency 10 (0.837x, 95% CI 0.825-0.848x)." in comp
    assert "faster than the baseline beyond noise at concurrency 1, 2." in comp
    assert "Within noise at concurrency 64: 4 round(s) cannot tell the two apart" in comp
    assert "VIOLATED" in comp
    ceiling = _section(md, "Ceiling")
    assert "ceiling at TP=2" in ceiling and "8 all-reduces per step x 20.0 us" in ceiling
    assert re.search(r"best config reaches \d+% of the ceiling", ceiling)
    node = _section(md, "By node")
    assert "node nodeB's baseline (15.00 tok/s) differs from nodeA's (20.00 tok/s) beyond noise" in node
    imp = _section(md, "Which knobs mattered")
    assert "env.NCCL_PROTO" in imp and "not rated (one value in every measured trial)" in imp
    assert "optuna-dashboard " in md


def test_compare_section_shows_other_trials_beside_the_best(report):
    job, _ = report
    comp = _section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    assert "| Concurrency | baseline | best | Improvement | trial 1 |" in comp
    assert re.search(r"\*\*0.837x slower \(95% CI [0-9.-]+x\)\*\* \| "
                     r"160.8 tok/s; vs best 1.245x faster \(95% CI ", comp)
    assert re.search(r"\| 64 \| 291.4 tok/s \(285.0-305.0, 4 rounds\) \| 299.5 tok/s \(298.0-303.7, 4 rounds\) \| "
                     r"1.02x, within noise \(95% CI [0-9.-]+x\) \| 300.5 tok/s; vs best 1.00", comp)
    assert "Trial 1: `graph_capture=1 tp_size=2`." in comp


def test_html_is_self_contained(report):
    job, _ = report
    page = (job.report_dir / "report.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == 4
    files = {(job.report_dir / n).read_bytes() for n in ("history.png", "params.png", "importance.png", "timeline.png")}
    assert {base64.b64decode(e) for e in embedded} == files
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere
    assert "2.85x the baseline" in page and "<table>" in page


def test_storage_still_opens_with_optunas_loader(report):
    """What optuna-dashboard does with the journal file path: the report must not disturb it."""
    job, _ = report
    backend = optuna.storages.journal.JournalFileBackend(str(storage.journal_path(job.storage)))
    study = optuna.load_study(study_name=job.study, storage=optuna.storages.JournalStorage(backend))
    assert len(study.trials) == 13


def test_report_of_a_study_where_everything_failed(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx._Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.failed(fx.BASE, "start-crash", "exit 1"), baseline=True)
    fx.record(study, policy, fx.BEST, fx.ok(fx.BEST, 50.0, at=60))
    paths = write_report(job, study=study)
    assert {p.name for p in paths} == EXPECTED
    md = (job.report_dir / "report.md").read_text()
    assert "No ratio: the baseline is FAIL (start-crash: exit 1)" in md
    assert "need at least 3 measured trials" in md
    assert "Not computed: the GPUs' memory bandwidth is unknown" in _section(md, "Ceiling")
    assert "Concurrency comparison" not in md and "## By node" not in md


def test_runners_up_within_the_noise_of_the_best_are_named(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx._Space(), lambda c: dict(c), baseline=None, budget=None)
    near = {**fx.BEST, "env.NCCL_ALGO": "Tree"}
    far = {**fx.BASE, "graph_capture": True}
    fx.record(study, policy, fx.BASE, fx.ok(fx.BASE, 20.0), baseline=True)
    fx.record(study, policy, fx.BEST, fx.ok(fx.BEST, 57.0, at=60))
    fx.record(study, policy, near, fx.ok(near, 56.6, at=120))  # +-1% intervals overlap the best's
    fx.record(study, policy, far, fx.ok(far, 42.7, at=180))
    write_report(job, study=study)
    top = _section((job.report_dir / "report.md").read_text(), "Top")
    assert "Within the noise of the best (trial 1): trial(s) 2 (56.60-56.60 tok/s), differing from it in " \
           "env.NCCL_ALGO." in top
    assert "3 (" not in top.split("Within the noise", 1)[1]  # 42.7 is beyond the noise


def test_a_best_beyond_the_noise_of_the_rest_names_no_runner_up(report):
    job, _ = report
    assert "Within the noise of the best" not in (job.report_dir / "report.md").read_text()


def test_failures_section_when_trials_were_only_stopped_early(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx._Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.ok(fx.BASE, 20.0), baseline=True)
    pruned = fx.TrialResult(outcome="PRUNED", config=dict(fx.BEST), value=5.0, failure_reason="first repeat low",
                            metrics={"decode_tok_s": 5.0, "repeats": 1}, started_at=fx.T0 + 70,
                            ended_at=fx.T0 + 90, node=fx.node("nodeA"), timing={"total_s": 20.0})
    fx.record(study, policy, fx.BEST, pruned)
    write_report(job, study=study)
    section = _section((job.report_dir / "report.md").read_text(), "Failures")
    assert "No trial failed; the trials below were stopped early." in section
    assert "By kind" not in section and "first repeat low" in section


def test_ceiling_takes_the_prescreened_latency_of_the_best_setting(tmp_path):
    job, _study = fx.build_study(tmp_path)
    job.report_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"tp_size": 2, "env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 30.0},
            {"tp_size": 2, "env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 12.5}]
    (job.report_dir / "prescreen.json").write_text(json.dumps({"rows": rows}))
    write_report(job, bandwidth_bytes_s=50e9)
    ceiling = _section((job.report_dir / "report.md").read_text(), "Ceiling")
    # the best config (trial 2) is TP=2 Ring/LL: its pre-screened 12.5 us, not Simple's 30
    assert "x 12.5 us (measured by `ncclsweep prescreen` for this setting)" in ceiling
    assert "unknown latency" not in ceiling


def test_report_of_an_empty_study(tmp_path):
    job = fx.make_job(tmp_path)
    optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    paths = write_report(job)
    assert {p.name for p in paths} == EXPECTED
    assert "no trials yet" in (job.report_dir / "report.md").read_text()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium (apt-get install -y chromium)")
def test_html_screenshot_shows_the_plots(report, tmp_path):
    job, _ = report
    spec = importlib.util.spec_from_file_location("check_report_html", _HERE.parent / "docs" / "check_report_html.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    result = check.check_report_html(job.report_dir / "report.html", tmp_path / "shot.png")
    assert result["ok"], result
    assert result["images"] == 4 and result["missing"] == []
    # the check can fail: the same page with one plot hidden is caught
    page = (job.report_dir / "report.html").read_text()
    hidden = tmp_path / "hidden.html"
    hidden.write_text(page.replace('<img alt="Parameter importance"',
                                   '<img style="display:none" alt="Parameter importance"', 1))
    bad = check.check_report_html(hidden, tmp_path / "hidden.png")
    assert not bad["ok"] and bad["missing"] == [2]


def _one_trial_study(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx._Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.ok(fx.BASE, 20.0), baseline=True)
    job.report_dir.mkdir(parents=True, exist_ok=True)
    return job, study


def test_a_verdict_from_one_launch_each_names_compare(tmp_path):
    """Repeats inside one launch do not see a launch that is slow as a whole (vLLM's cold first start
    on 2x H200 decoded 40% slower for its whole launch, CV 0.2%): before any compare, the headline's
    "beyond noise" tells the user to relaunch the two side by side before acting on the ratio."""
    job, _study = fx.build_study(tmp_path)
    write_report(job)
    head = _section((job.report_dir / "report.md").read_text(), "Headline")
    assert "The difference is beyond the noise of repeats" in head
    assert "one launch each" in head and "`ncclsweep compare JOB` relaunches the two side by side" in head


def test_a_compare_of_the_baseline_with_itself_warns_of_nothing(tmp_path):
    """The demo's case: the baseline was never beaten, so compare relaunched one config against
    itself. 8 real rounds on the loaded CPU box (single launches up to 2x apart): no SLOWER
    warning, no verdict, the intervals shown as the noise between launches."""
    job, study = _one_trial_study(tmp_path)
    rounds = json.loads((_HERE / "data" / "verdict" / "self-compare-cpu-8-rounds.json").read_text())["rounds"]
    data = summarize({"concurrency": [1, 2, 10], "baseline_trial": 0, "best_trial": 0, "same_config": True,
                      "rounds_planned": 8, "complete": True, "others": [], "rounds": rounds, "failures": []})
    (job.report_dir / "compare.json").write_text(json.dumps(data))
    write_report(job, study=study)
    comp = _section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    table = [line for line in comp.splitlines() if line.startswith("| ")]
    assert "SLOWER" not in comp and "Warning" not in comp and not any("slower" in line for line in table)
    assert comp.count(", within noise: same config (95% CI ") == 3
    assert "Baseline and best are the same config (trial #0): no verdict" in comp
    # the rule alone, without knowing the two are one config, says the same on these rounds
    (job.report_dir / "compare.json").write_text(json.dumps({**data, "best_trial": 1, "same_config": False}))
    write_report(job, study=study)
    comp = _section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    assert "SLOWER" not in comp and comp.count(", within noise (95% CI ") == 3


def test_an_interrupted_compare_shows_its_finished_rounds(tmp_path):
    job, study = _one_trial_study(tmp_path)
    data = {**COMPARE, "rounds": [r for r in ROUNDS if r["round"] < 2] + [ROUNDS[6]], "complete": False,
            "stopped": "KeyboardInterrupt", "rounds_planned": 5}
    (job.report_dir / "compare.json").write_text(json.dumps(summarize(data)))
    write_report(job, study=study)
    comp = _section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    # rounds 0 and 1 whole, round 2 cut after the baseline's launch: the ratio pairs rounds 0 and 1
    assert re.search(r"\| 1 \| 20.0 tok/s \(19.8-20.2, 3 rounds\) \| 42.6 tok/s \(42.5-42.7, 2 rounds\) \| "
                     r"2.1\d+x faster \(95% CI", comp)
    assert ("compare stopped after 2 of 5 rounds (KeyboardInterrupt): the table shows the finished launches "
            "only.") in comp


def test_an_older_compare_file_without_rounds_is_judged_unpaired(tmp_path):
    """A compare.json written before rounds were kept (2 samples each): its 0.84x at
    concurrency 10 is no longer a warning (nor its constraint VIOLATED): two launches on each
    side cannot carry it."""
    job, study = _one_trial_study(tmp_path)
    old = {"concurrency": [1, 10], "baseline_trial": 0, "best_trial": 2,
           "baseline": {"1": 20.0, "10": 154.0}, "best": {"1": 42.7, "10": 128.7},
           "baseline_samples": {"1": [19.8, 20.2], "10": [150.0, 158.0]},
           "best_samples": {"1": [42.5, 42.9], "10": [128.0, 129.4]}, "rounds": [], "failures": [],
           "constraints": [{"concurrency": 10, "min_ratio": 0.9, "ratio": 0.84, "ok": False, "measured": True}]}
    (job.report_dir / "compare.json").write_text(json.dumps(old))
    write_report(job, study=study)
    comp = _section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    assert "SLOWER" not in comp
    assert ("| 10 | 154.0 tok/s (150.0-158.0, 2 rounds) | 128.7 tok/s (128.0-129.4, 2 rounds) | "
            "0.84x, within noise (95% CI ") in comp
    assert "2.14x faster (95% CI" in comp
    assert "VIOLATED" not in comp and "the best must reach 0.9x the baseline; measured 0.84x (95% CI " in comp \
        and "): within noise of the limit." in comp
