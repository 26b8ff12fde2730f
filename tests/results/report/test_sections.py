"""The report's sections (sections.py): from a real journal study, the content that answers
the morning questions (headline, top configs, failures, NCCL verification, concurrency
comparison, ceiling, by node, which knobs mattered), runners-up only within the noise of the
best, verdicts only beyond noise, and compare files interrupted or from older versions."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import recorded_study as fx  # a real journal study with every outcome
from written_report import COMPARE, EXPECTED, ROUNDS, one_trial_study, section, write_demo_report

from conftest import TESTS
from orchestrator.backends.command import CommandBackend
from orchestrator.core.records import COMPLETE, TrialRow
from orchestrator.results.compare_file import CompareFile
from orchestrator.results.export import notes as export_notes
from orchestrator.results.report import document as doc
from orchestrator.results.report import write_report
from orchestrator.results.report.sections import build_blocks
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage import storage

DISTS = {k: optuna.distributions.CategoricalDistribution(v) for k, v in fx.CHOICES.items()}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return write_demo_report(tmp_path_factory.mktemp("report"))


def test_markdown_answers_the_morning_questions(report):
    job, _ = report
    md = (job.report_dir / "report.md").read_text()
    head = section(md, "Headline")
    # figures over launches: the baseline's config was launched twice (20 and 15 tok/s), the best once; one
    # config launched twice is too little launch noise for a verdict. The ratio is the one its interval is of
    # (of the geometric means, 57 / sqrt(20 x 15)), and says so, not the medians' 3.26x
    assert "**Best: trial 2, 57.00 tok/s (the median of 1 launch), 3.29x the baseline** (trial 0, 17.50 tok/s, " \
           "the median of 2 launches; the ratio by the geometric means over launches)" in head
    assert "Too few launches to tell whether this exceeds the noise (no interval: launch noise unknown yet (2 " \
           "launches" in head and "NCCL_PROTO Simple -> LL" in head and "within noise" not in head
    top = section(md, "Top")
    assert "| 1 | 2 | 57.00 | +-1.0% | 3.29x | not shown: launch noise unknown | 1 |" in top
    ranked = [int(line.split("|")[2]) for line in top.splitlines() if re.match(r"\| \d+ \|", line)]
    assert ranked[0] == 2 and 3 not in ranked and 10 not in ranked  # never a failure, never the garbage config
    fails = section(md, "Failures")
    for kind in ("wrong-output: 1", "start-crash: 1", "interrupted: 1", "pruned: 1"):
        assert kind in fails, kind
    assert "greedy output differs at char 3" in fails and "server exited with code 1" in fails
    assert "NCCL_PROTO=LL requested but NCCL used Simple" in section(md, "NCCL verification")
    comp = section(md, "Concurrency comparison")
    assert "| Concurrency | baseline | best | Improvement |" in comp
    assert "| 10 | 154.5 tok/s (150.0-158.0, 4 rounds) | 129.1 tok/s (127.0-131.0, 4 rounds) | " \
           "**0.837x slower (95% CI 0.825-0.848x)** |" in comp
    assert "SLOWER than the baseline beyond noise at concurrency 10 (0.837x, 95% CI 0.825-0.848x)." in comp
    assert "faster than the baseline beyond noise at concurrency 1, 2." in comp
    assert "Within noise at concurrency 64: 4 round(s) cannot tell the two apart" in comp
    assert "VIOLATED" in comp
    ceiling = section(md, "Ceiling")
    assert "ceiling at TP=2" in ceiling and "8 all-reduces per step x 20.0 us" in ceiling
    assert re.search(r"best config reaches \d+% of the ceiling", ceiling)
    node = section(md, "By node")
    assert "node nodeB's baseline (15.00 tok/s) differs from nodeA's (20.00 tok/s) beyond noise" in node
    imp = section(md, "Which knobs mattered")
    assert "env.NCCL_PROTO" in imp and "not rated (one value in every measured trial)" in imp
    assert "optuna-dashboard " in md
    # what the study did not measure beside its best (the values of the recorded study's space never
    # measured working, or seen only in configs far below the best)
    unexplored = section(md, "Not explored")
    assert "`ncclsweep run JOB --trials N` launches there first" in unexplored
    assert re.search(r"^- \S+=\S+.*: (never measured working|seen only at 0\.\d\dx the best)", unexplored, re.M)


def test_compare_section_shows_other_trials_beside_the_best(report):
    job, _ = report
    comp = section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    assert "| Concurrency | baseline | best | Improvement | trial 1 |" in comp
    assert re.search(r"\*\*0.837x slower \(95% CI [0-9.-]+x\)\*\* \| "
                     r"160.8 tok/s; vs best 1.245x faster \(95% CI ", comp)
    assert re.search(r"\| 64 \| 291.4 tok/s \(285.0-305.0, 4 rounds\) \| 299.5 tok/s \(298.0-303.7, 4 rounds\) \| "
                     r"1.02x, within noise \(95% CI [0-9.-]+x\) \| 300.5 tok/s; vs best 1.00", comp)
    assert "Trial 1: `graph_capture=1 tp_size=2`." in comp


def test_report_of_a_study_where_everything_failed(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.failed(fx.BASE, "start-crash", "exit 1"), baseline=True)
    fx.record(study, policy, fx.BEST, fx.ok(fx.BEST, 50.0, at=60))
    paths = write_report(job, study=study)
    assert {p.name for p in paths} == EXPECTED
    md = (job.report_dir / "report.md").read_text()
    assert "No ratio: the baseline is FAIL (start-crash: exit 1)" in md
    assert "need at least 3 measured trials" in md
    assert "Not computed: the GPUs' memory bandwidth is unknown" in section(md, "Ceiling")
    assert "Concurrency comparison" not in md and "## By node" not in md


def test_runners_up_within_the_noise_of_the_best_are_named(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    near = {**fx.BEST, "env.NCCL_ALGO": "Tree"}
    far = {**fx.BASE, "graph_capture": True}
    fx.record(study, policy, fx.BASE, fx.ok(fx.BASE, 20.0), baseline=True)
    fx.record(study, policy, fx.BEST, fx.ok(fx.BEST, 57.0, at=60))
    fx.record(study, policy, near, fx.ok(near, 56.6, at=120))
    fx.record(study, policy, far, fx.ok(far, 42.7, at=180))
    for config, value in ((fx.BASE, 20.3), (fx.BEST, 57.4), (near, 56.2), (fx.BASE, 19.8), (fx.BEST, 56.9),
                          (near, 56.6)):  # each relaunched twice: the launch noise
        storage.add_uncounted_trial(study, fx.ok(config, value, at=240), config, fx.config_key(config),
                                    DISTS, {storage.ATTR_LAUNCH_ROLE: "relaunch"})
    write_report(job, study=study)
    top = section((job.report_dir / "report.md").read_text(), "Top")
    assert "Within the launch noise of the best (trial 1): trial(s) 2 (56.60-56.60 tok/s), differing from it in " \
           "env.NCCL_ALGO." in top
    assert "3 (" not in top.split("Within the launch noise", 1)[1]  # 42.7 is beyond the noise


def test_a_best_beyond_the_noise_of_the_rest_names_no_runner_up(report):
    job, _ = report
    assert "Within the noise of the best" not in (job.report_dir / "report.md").read_text()


def test_failures_section_when_trials_were_only_stopped_early(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.ok(fx.BASE, 20.0), baseline=True)
    pruned = fx.TrialResult(outcome="PRUNED", config=dict(fx.BEST), value=5.0, failure_reason="first repeat low",
                            metrics={"decode_tok_s": 5.0, "repeats": 1}, started_at=fx.T0 + 70,
                            ended_at=fx.T0 + 90, node=fx.node("nodeA"), timing={"total_s": 20.0})
    fx.record(study, policy, fx.BEST, pruned)
    write_report(job, study=study)
    failures = section((job.report_dir / "report.md").read_text(), "Failures")
    assert "No trial failed; the trials below were stopped early." in failures
    assert "By kind" not in failures and "first repeat low" in failures


def test_ceiling_takes_the_prescreened_latency_of_the_best_setting(tmp_path):
    job, _study = fx.build_study(tmp_path)
    job.report_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"tp_size": 2, "env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "Simple", "ok": True, "latency_us": 30.0},
            {"tp_size": 2, "env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "LL", "ok": True, "latency_us": 12.5}]
    (job.report_dir / "prescreen.json").write_text(json.dumps({"rows": rows}))
    write_report(job, bandwidth_bytes_s=50e9)
    ceiling = section((job.report_dir / "report.md").read_text(), "Ceiling")
    # the best config (trial 2) is TP=2 Ring/LL: its pre-screened 12.5 us, not Simple's 30
    assert "x 12.5 us (measured by `ncclsweep prescreen` for this setting)" in ceiling
    assert "unknown latency" not in ceiling


def test_fresh_launches_by_compare_join_the_headlines_verdict(tmp_path):
    """Repeats inside one launch do not see a launch that is slow as a whole (vLLM's cold first start
    on 2x H200 decoded 40% slower for its whole launch, CV 0.2%): the headline's verdict is over
    launches. Launches ``compare`` made are recorded in the study: with them the best is within noise
    of the baseline, and the headline says so, with how many of the launches were compare's."""
    job, study = fx.build_study(tmp_path)
    for i, (config, value) in enumerate([(fx.BEST, 45.0), (fx.BASE, 40.0), (fx.BEST, 48.0), (fx.BASE, 42.0),
                                         (fx.BEST, 46.0), (fx.BASE, 41.0)]):
        storage.add_uncounted_trial(study, fx.ok(config, value, at=900 + 60 * i), config, fx.config_key(config),
                                    DISTS, {storage.ATTR_LAUNCH_ROLE: "compare"})
    write_report(job)
    head = section((job.report_dir / "report.md").read_text(), "Headline")
    assert "**Best: trial 2, 47.00 tok/s (the median of 4 launches), 1.68x the baseline**" in head  # geometric means
    assert "The difference is within the launch noise (95% CI " in head
    assert "(6 of them fresh launches by `ncclsweep compare`): the best is **not** shown to beat the baseline" in head
    assert "fresh launches put trial 2 within noise of the baseline: 1.68x, within noise (95% CI" in head


def test_fresh_launches_within_noise_are_said_beside_a_verdict_over_every_launch_that_is_not(tmp_path):
    """The study launched the best at ~2.8x the baseline four times each; then ``compare`` launched both
    three times on a machine where they are equal. Over every launch the best is still beyond noise;
    what compare's launches alone say is said beside it, and the headline does not claim a win now."""
    job, study = fx.build_study(tmp_path)
    launches = [(fx.BEST, 56.0, "relaunch"), (fx.BASE, 20.2, "relaunch"), (fx.BEST, 58.0, "relaunch"),
                (fx.BASE, 19.8, "relaunch"), (fx.BEST, 57.0, "relaunch"), (fx.BASE, 20.1, "relaunch"),
                (fx.BASE, 20.0, "compare"), (fx.BEST, 20.3, "compare"), (fx.BEST, 20.4, "compare"),
                (fx.BASE, 20.1, "compare"), (fx.BASE, 20.05, "compare"), (fx.BEST, 20.35, "compare")]
    for i, (config, value, role) in enumerate(launches):
        storage.add_uncounted_trial(study, fx.ok(config, value, at=900 + 60 * i), config, fx.config_key(config),
                                    DISTS, {storage.ATTR_LAUNCH_ROLE: role})
    write_report(job)
    head = " ".join(section((job.report_dir / "report.md").read_text(), "Headline").split())
    assert "Over every launch the difference is beyond the launch noise (95% CI " in head
    assert "(6 of them fresh launches by `ncclsweep compare`), but `ncclsweep compare`'s fresh launches alone put " \
           "it within noise (1.01x, within noise (95% CI " in head
    assert "the best is **not** shown to beat the baseline now" in head
    assert "fresh launches put trial 2 within noise of the baseline: 1.01x, within noise (95% CI" in head
    notes = export_notes(job, trial_rows(study))
    assert len(notes) == 1 and notes[0].startswith("trial 2 is WITHIN NOISE of the baseline on the 6 launches fresh "
                                                   "from `ncclsweep compare`: 1.01x, within noise (95% CI ")
    assert "(over every launch: " in notes[0] and "x faster (95% CI " in notes[0]


def test_a_compare_of_the_baseline_with_itself_warns_of_nothing(tmp_path):
    """The demo's case: the baseline was never beaten, so compare relaunched one config against
    itself. 8 real rounds on the loaded CPU box (single launches up to 2x apart): no SLOWER
    warning, no verdict, the intervals shown as the noise between launches."""
    job, study = one_trial_study(tmp_path)
    rounds = json.loads((TESTS / "data" / "verdict" / "self-compare-cpu-8-rounds.json").read_text())["rounds"]
    data = CompareFile.from_record({"concurrency": [1, 2, 10], "baseline_trial": 0, "best_trial": 0,
                                    "same_config": True, "rounds_planned": 8, "complete": True, "others": [],
                                    "rounds": rounds, "failures": []}).to_record()
    (job.report_dir / "compare.json").write_text(json.dumps(data))
    write_report(job, study=study)
    comp = section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    table = [line for line in comp.splitlines() if line.startswith("| ")]
    assert "SLOWER" not in comp and "Warning" not in comp and not any("slower" in line for line in table)
    assert comp.count("the same config, its launches ") == 3 and "within noise" not in comp
    assert "Baseline and best are the same config (trial #0): no verdict" in comp
    # the rule alone, without knowing the two are one config, says the same on these rounds
    (job.report_dir / "compare.json").write_text(json.dumps({**data, "best_trial": 1, "same_config": False}))
    write_report(job, study=study)
    comp = section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    assert "SLOWER" not in comp and comp.count(", within noise (95% CI ") == 3


def test_an_interrupted_compare_shows_its_finished_rounds(tmp_path):
    job, study = one_trial_study(tmp_path)
    data = {**copy.deepcopy(COMPARE), "rounds": [r for r in ROUNDS if r["round"] < 2] + [ROUNDS[6]],
            "complete": False, "stopped": "KeyboardInterrupt", "rounds_planned": 5}
    (job.report_dir / "compare.json").write_text(json.dumps(CompareFile.from_record(data).to_record()))
    write_report(job, study=study)
    comp = section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    # rounds 0 and 1 whole, round 2 cut after the baseline's launch: the ratio pairs rounds 0 and 1
    assert re.search(r"\| 1 \| 20.0 tok/s \(19.8-20.2, 3 rounds\) \| 42.6 tok/s \(42.5-42.7, 2 rounds\) \| "
                     r"2.1\d+x faster \(95% CI", comp)
    assert ("compare stopped after 2 of 5 rounds (KeyboardInterrupt): the table shows the finished launches "
            "only.") in comp


def test_an_older_compare_file_without_rounds_is_judged_unpaired(tmp_path):
    """A compare.json written before rounds were kept (2 samples each): its 0.84x at
    concurrency 10 is no longer a warning (nor its constraint VIOLATED): two launches on each
    side cannot carry it."""
    job, study = one_trial_study(tmp_path)
    old = {"concurrency": [1, 10], "baseline_trial": 0, "best_trial": 2,
           "baseline": {"1": 20.0, "10": 154.0}, "best": {"1": 42.7, "10": 128.7},
           "baseline_samples": {"1": [19.8, 20.2], "10": [150.0, 158.0]},
           "best_samples": {"1": [42.5, 42.9], "10": [128.0, 129.4]}, "rounds": [], "failures": [],
           "constraints": [{"concurrency": 10, "min_ratio": 0.9, "ratio": 0.84, "ok": False, "measured": True}]}
    (job.report_dir / "compare.json").write_text(json.dumps(old))
    write_report(job, study=study)
    comp = section((job.report_dir / "report.md").read_text(), "Concurrency comparison")
    assert "SLOWER" not in comp
    assert ("| 10 | 154.0 tok/s (150.0-158.0, 2 rounds) | 128.7 tok/s (128.0-129.4, 2 rounds) | "
            "0.84x, within noise (95% CI ") in comp
    assert "2.14x faster (95% CI" in comp
    assert "VIOLATED" not in comp and "the best must reach 0.9x the baseline; measured 0.84x (95% CI " in comp \
        and "): within noise of the limit." in comp


# The report on a speculative study: the top configs carry the acceptance the server counted,
# and the ceiling section tells the one-token-per-step bandwidth ceiling from what speculation
# reaches (tokens per weight pass x that ceiling): a best above the one-token ceiling is
# explained, never called impossible, unless it is above even that.
BANDWIDTH = 4.8e12  # bytes/s; with 2 GB read per token: a one-token ceiling of 2400 tok/s


def backend() -> CommandBackend:
    return CommandBackend({**CommandBackend.example_settings(), "model_facts": {"bytes_per_token": 2e9}}, "job.yaml")


def row(number: int, value: float, params: dict, **kw) -> TrialRow:
    return TrialRow(number=number, state=COMPLETE, params=params, value=value, counted=True,
                    config_key=f"k{number}", metrics={"decode_tok_s": value, "decode_samples": [value] * 3}, **kw)


NGRAM = {"speculative.method": "ngram", "speculative.num_tokens": 4}


def spec_report(tmp_path: Path, best: TrialRow) -> tuple[str, dict]:
    rows = [row(0, 500.0, {}, is_baseline=True), best]
    job = SimpleNamespace(study="s", storage=f"journal:{tmp_path}/study.journal", report_dir=tmp_path,
                          backend=SimpleNamespace(kind="command", settings={}), env={})
    blocks, summary = build_blocks(job, rows, tmp_path, backend=backend(), bandwidth_bytes_s=BANDWIDTH)
    return doc.render_markdown(blocks), summary




def test_a_speculative_best_above_the_one_token_ceiling_is_explained(tmp_path):
    md, summary = spec_report(tmp_path, row(1, 3000.0, NGRAM, acceptance_rate=0.766, mean_accepted_length=3.74))
    ceiling = section(md, "Ceiling")
    assert "ceiling at TP=1: 2400.00 tok/s" in ceiling and "reaches 125% of the ceiling" in ceiling
    assert "3.74 tokens per weight pass" in ceiling and "77% of drafted tokens accepted" in ceiling
    assert "3.74 x 2400.00 = **8976.00 tok/s**" in ceiling and "reaches 33%" in ceiling
    assert "explained: speculation yields several tokens per weight pass" in ceiling
    assert "wrong" not in ceiling
    assert summary["ceiling"]["speculative_ceiling_tok_s"] == 8976.0
    top = section(md, "Top 2 configs")
    assert "| Speculation |" in top and "77% accepted, 3.74 tokens/step" in top


def test_without_speculation_above_the_ceiling_is_wrong_facts(tmp_path):
    md, _ = spec_report(tmp_path, row(1, 3000.0, {"tp_size": 1}))
    ceiling = section(md, "Ceiling")
    assert "exceeds the ceiling: the declared bandwidth or the model facts are wrong" in ceiling
    assert "Speculation" not in section(md, "Top 2 configs")  # no column where nothing speculated


def test_above_even_the_speculative_ceiling_is_wrong_facts(tmp_path):
    md, _ = spec_report(tmp_path, row(1, 9500.0, NGRAM, acceptance_rate=0.9, mean_accepted_length=3.0))
    assert "exceeds even the speculative ceiling" in section(md, "Ceiling")


def test_a_speculative_best_without_counters_is_not_called_impossible(tmp_path):
    md, _ = spec_report(tmp_path, row(1, 3000.0, NGRAM))
    ceiling = section(md, "Ceiling")
    assert "tokens per weight pass are unknown" in ceiling and "speculation explains that" in ceiling
    assert "wrong" not in ceiling


def test_a_gate_warning_is_not_called_an_nccl_one(tmp_path):
    # the best passed the gate with a server that disowns its scores (vLLM 0.26.0 with a draft model)
    gate = ("this config's server scores text with log-probabilities that are not its model's: they drift 27.2 "
            "nats/token from the reference's on prompt 1")
    nccl_said = "requested NCCL_PROTO=LL but NCCL reports NCCL_PROTO=Simple"
    md, _ = spec_report(tmp_path, row(1, 700.0, NGRAM, warnings=[gate, nccl_said]))
    head = section(md, "Headline")
    assert f"NCCL settings could not be verified: {nccl_said}" in head and "trial warned: this config's" in head
    assert nccl_said in section(md, "NCCL verification") and gate not in section(md, "NCCL verification")
    assert gate in section(md, "Other trial warnings")
    md, _ = spec_report(tmp_path, row(1, 700.0, NGRAM, nccl={"version": "2.21.5"}))
    assert "Other trial warnings" not in md and "No warnings" in section(md, "NCCL verification")


def test_a_measurement_the_client_may_have_distorted_is_said_where_the_trials_warnings_are(tmp_path):
    """The best config's launch was measured by a client that fell behind (``core.client_bound``): the
    headline says its trial warned, with the notice, and the notice is among the trial warnings, never
    among NCCL's."""
    said = ("client notice: the measuring client fell behind by 83.9 ms (p99) at 1 stream: its decode figures may "
            "be overstated by up to 50% (its event loop was 81.3 ms late at the median request's first token)")
    md, _ = spec_report(tmp_path, row(1, 700.0, NGRAM, warnings=[said]))
    assert f"trial warned: {said}" in section(md, "Headline")
    assert said in section(md, "Other trial warnings") and said not in section(md, "NCCL verification")


def test_a_path_the_engine_turned_off_is_reported_as_what_ran_and_credits_no_effect(tmp_path):
    """vLLM turned its custom all-reduce off in both configs that asked for it (issue 48): the report
    says what ran instead, for which trials, every trial's notice is among its warnings, and the
    knobs table shows custom as what ran with no effect from the 2-3% its single launches measured."""
    said = ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
            "this warning, specify disable_custom_all_reduce=True explicitly.")
    fell = {"fallbacks": [{"param": "allreduce.backend", "asked": "custom", "ran": "nccl", "ran_value": "nccl",
                           "said": said, "text": f"allreduce.backend=custom (the engine ran nccl: {said})"}]}
    base = {"tp_size": 8, "allreduce.backend": "nccl", "env.NCCL_PROTO": "Simple"}
    ll = {**base, "env.NCCL_PROTO": "LL"}
    notice = [f"engine notice: {said}"]
    rows = [dataclasses.replace(row(0, 100.0, base, is_baseline=True), config_key="base"),
            dataclasses.replace(row(1, 102.0, {**base, "allreduce.backend": "custom"}, warnings=notice, server=fell),
                                config_key="custom"),
            dataclasses.replace(row(2, 130.0, ll), config_key="ll"),
            dataclasses.replace(row(3, 133.0, {**ll, "allreduce.backend": "custom"}, warnings=notice, server=fell),
                                config_key="custom-ll")]
    job = SimpleNamespace(study="s", storage=f"journal:{tmp_path}/study.journal", report_dir=tmp_path,
                          backend=SimpleNamespace(kind="command", settings={}), env={})
    md = doc.render_markdown(build_blocks(job, rows, tmp_path, backend=backend(), bandwidth_bytes_s=BANDWIDTH)[0])
    ran = section(md, "What the engine ran instead")
    assert f"| allreduce.backend=custom (the engine ran nccl: {said}) | 1, 3 **(best config)** |" in ran
    assert said in section(md, "Other trial warnings")
    knobs = next(line for line in section(md, "Which knobs mattered").splitlines()
                 if line.startswith("| allreduce.backend |"))
    assert "custom vs nccl: no effect shown (2 matched pairs: 2 ran alike (the engine turned the value off))" in knobs
    assert "custom (the engine ran nccl in 2 of 2 config(s)): 117.5 (n=2)" in knobs


def test_nccl_verification_is_not_applicable_where_nccl_never_ran(tmp_path):
    """Issue 39: a CPU study's report said every NCCL setting was confirmed; NCCL never ran."""
    md, _ = spec_report(tmp_path, row(1, 700.0, {"env.NCCL_PROTO": "LL"}))
    said = section(md, "NCCL verification")
    assert "Not applicable: NCCL ran in none of the trials" in said and "confirmed" not in said
    md, _ = spec_report(tmp_path, row(1, 700.0, {"env.NCCL_PROTO": "LL"}, nccl={"version": "2.21.5"}))
    assert "confirmed in the logs of the 1 of 2 trials where NCCL ran (NCCL 2.21.5)" in section(md, "NCCL verification")


def test_the_ceiling_takes_the_quietest_bandwidth_and_says_when_it_was_measured_under_load(tmp_path):
    """Issue 39: "4 GB/s (measured on vm)" came from a copy under load where quiet ones measured 13 GB/s."""
    def measured(number: int, gb_s: float, load1: float) -> TrialRow:
        return row(number, 500.0 + number, {"k": number}, node="vm", is_baseline=number == 0,
                   node_info={"memory_bandwidth_bytes_s": gb_s * 1e9,
                              "memory_bandwidth_load": {"load1": load1, "cpus": 2}})

    job = SimpleNamespace(study="s", storage=f"journal:{tmp_path}/study.journal", report_dir=tmp_path,
                          backend=SimpleNamespace(kind="command", settings={}), env={})
    rows = [measured(0, 4.0, 3.1), measured(1, 13.0, 0.4), measured(2, 12.5, 0.6)]
    ceiling = section(doc.render_markdown(build_blocks(job, rows, tmp_path, backend=backend())[0]), "Ceiling")
    assert "13 GB/s (measured on vm, the highest of 3 measurements, 4-13 GB/s)" in ceiling
    assert "under load" not in ceiling
    loaded = [measured(0, 4.0, 3.1), measured(1, 4.2, 2.5)]
    ceiling = section(doc.render_markdown(build_blocks(job, loaded, tmp_path, backend=backend())[0]), "Ceiling")
    assert "4 GB/s (measured on vm; under load: a 1-minute load of 2.5 on 2 CPUs when measured" in ceiling


def test_the_night_between_two_runs_is_neither_wall_clock_nor_idle(tmp_path):
    # a study resumed the next morning: each run's trials 100 s long, 20 s apart; 6 h between the runs
    def ran(number: int, start: str, end: str, run: str | None, **kw) -> TrialRow:
        return row(number, 500.0 + number, {"k": number}, node="vm", run=run, started_at=f"2026-12-02T{start}+00:00",
                   ended_at=f"2026-12-02T{end}+00:00", **kw)
    rows = [ran(0, "00:00:00", "00:01:40", "night", is_baseline=True), ran(1, "00:02:00", "00:03:40", "night"),
            ran(2, "06:00:00", "06:01:40", "morning"), ran(3, "06:02:00", "06:03:40", "morning")]
    job = SimpleNamespace(study="s", storage=f"journal:{tmp_path}/study.journal", report_dir=tmp_path,
                          backend=SimpleNamespace(kind="command", settings={}), env={})
    md = doc.render_markdown(build_blocks(job, rows, tmp_path, backend=backend())[0])
    summary = section(md, "Summary")
    assert "wall clock 7.3 min over 2 runs of `ncclsweep run`; trials busy 6.7 min" in summary, summary
    assert "idle between trials: vm 40s" in summary
    # trials recorded before runs were stored: one span from the first start to the last end, as before
    old = [dataclasses.replace(r, run=None) for r in rows]
    md = doc.render_markdown(build_blocks(job, old, tmp_path, backend=backend())[0])
    assert "wall clock 363.7 min; trials busy 6.7 min" in section(md, "Summary")
