"""export --format benchmark-report (issue 50): llm-d Benchmark Reports v0.2.1 from real recorded
studies, one per config and level, validated against llm-d-benchmark's published JSON Schema
(tests/fixtures/benchmark_report, its source in the README there) and its unit rules, read the way
llm-d-prism's importer reads them, their figures the study's own (status's per level, export's
over launches)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import statistics
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.cli import main
from orchestrator.config.job import load_job
from orchestrator.core.level import streams
from orchestrator.results import benchmark_report as br
from orchestrator.results.export import export
from orchestrator.study.evidence import history
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.storage import storage

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests/fixtures/benchmark_report/br_v0_2_1_json_schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
RECORDED = {  # a study and the job that recorded it
    # the demos (jobs/demo.yaml, jobs/demo-plan.yaml) as `ncclsweep run` recorded them, levels with their latencies'
    # means and their requests' lengths
    "demo": ("tests/data/recorded/demo/study.journal", "tests/data/recorded/demo/job.yaml"),
    "demo-plan": ("tests/data/recorded/demo-plan/study.journal", "tests/data/recorded/demo-plan/job.yaml"),
    # an H200 vLLM study recorded before levels kept them: no latency means, no lengths
    "h200-vllm-1b-race": ("docs/gpu/h200-vllm-1b-race/study.journal", "jobs/h200-vllm-1b-race.yaml"),
}
# the units llm-d-benchmark's pydantic models allow per statistic (base.py UNITS_*, schema_v0_2.py check_units,
# schema_v0_2_1.py UNIT_RULES), which the JSON Schema cannot say
TIME, GEN_LATENCY, QUANTITY = {"ms", "s"}, {"ms/token", "s/token"}, {"count", "pixels"}
UNIT_RULES = {"latency": {"time_to_first_token": TIME, "request_latency": TIME, "time_per_output_token": GEN_LATENCY,
                          "normalized_time_per_output_token": GEN_LATENCY, "inter_token_latency": GEN_LATENCY},
              "throughput": {"input_token_rate": {"tokens/s"}, "output_token_rate": {"tokens/s"},
                             "total_token_rate": {"tokens/s"}, "request_rate": {"queries/s"}},
              "requests": {"input_length": QUANTITY, "output_length": QUANTITY}}


def recorded(tmp_path: Path, name: str):
    """The recorded study's job, its study in a copy of the journal: (job file, job, rows)."""
    journal, job_file = RECORDED[name]
    src = REPO / job_file
    doc = yaml.safe_load(src.read_text())
    doc["space"] = str((src.parent / doc["space"]).resolve())
    doc.pop("output_dir", None)
    doc["report_dir"], doc["storage"] = str(tmp_path), f"journal:{tmp_path / 'study.journal'}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / journal, tmp_path / "study.journal")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    job = load_job(path)
    return path, job, history.trial_rows(storage.open_study(job, create=False))


def valid(doc: dict) -> None:
    """The schema, its unit rules, and times that are ISO 8601 with a zone."""
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]
    assert not errors, errors
    aggregate = doc["results"]["request_performance"]["aggregate"]
    for group, rules in UNIT_RULES.items():
        for name, stats in (aggregate.get(group) or {}).items():
            if isinstance(stats, dict) and name in rules:
                assert stats["units"] in rules[name], (group, name, stats["units"])
    for when in (doc["run"].get("time") or {}).get("start"), (doc["run"].get("time") or {}).get("end"):
        assert when is None or dt.datetime.fromisoformat(when).tzinfo is not None


def prism_reads(doc: dict) -> dict:
    """What llm-d-prism's importer (src/utils/benchmarkReportV02Parser.js: parseReportV02, and the
    checks of benchmarkValidator.js) takes from a report, or the reason it would refuse it."""
    assert str(doc["version"]).startswith("0.2."), "not a v0.2 report"
    stack = doc["scenario"]["stack"]
    primary = next(c for c in stack if c["standardized"].get("kind") == "inference_engine")["standardized"]
    load = doc["scenario"]["load"]["standardized"]
    agg = doc["results"]["request_performance"]["aggregate"]
    latency = agg.get("latency") or {}
    got = {"model": primary["model"]["name"], "hardware": primary["accelerator"]["model"],
           "tp": primary["accelerator"]["parallelism"]["tp"], "harness": load["tool"],
           "isl": load["input_seq_len"]["value"], "osl": (load.get("output_seq_len") or {}).get("value"),
           "concurrency": load["concurrency"], "stage": load["stage"], "label": doc["run"]["description"],
           "throughput": agg["throughput"]["output_token_rate"]["mean"],
           "total_requests": agg["requests"]["total"], "failures": agg["requests"]["failures"]}
    for key, name in (("ttft", "time_to_first_token"), ("tpot", "time_per_output_token"),
                      ("itl", "inter_token_latency"), ("e2e", "request_latency")):
        for stat in ("mean", "p50", "p99"):  # prism takes them for seconds and shows milliseconds
            got[f"{key}_{stat}_ms"] = 1000 * latency[name][stat]
    # its validator refuses a stage without a throughput or an end-to-end latency, or with a negative one
    assert got["throughput"] is not None and got["throughput"] >= 0 and got["e2e_mean_ms"] >= 0
    return got


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return recorded(tmp_path_factory.mktemp("demo"), "demo")


@pytest.mark.parametrize("name,levels", [("demo", {1}), ("demo-plan", {1, 4})])
def test_the_demo_exports_one_valid_report_per_config_and_level_with_the_studys_figures(name, levels, tmp_path,
                                                                                      capsys):
    """The acceptance: `export --format benchmark-report -o out/` after the demo writes a file per config (the
    baseline and the best) and level (the demo's trials measure level 1: bench.concurrency is compare's; the
    plan demo's 1 and 4), each valid, each with the figures `status` prints for the trial at that level and
    `export` gives for the config over its launches, read as llm-d-prism reads them."""
    path, job, rows = recorded(tmp_path / "study", name)
    assert main(["export", str(path), "--format", "benchmark-report", "-o", str(tmp_path / "out")]) == 0
    written = capsys.readouterr().out.split()
    assert sorted(written) == sorted(str(p) for p in (tmp_path / "out").iterdir())
    best = yaml.safe_load(export(job, rows, "yaml"))["provenance"]
    by_number = {r.number: r for r in rows}
    base = by_number[best["baseline_trial"]]
    expected = {(n, lv) for n in (base.number, best["trial"]) for lv in by_number[n].levels}
    assert {lv for _, lv in expected} == levels and len(written) == len(expected) == 2 * len(levels)
    evidence = Evidence(rows)
    seen = set()
    for file in written:
        doc = yaml.safe_load(Path(file).read_text())
        valid(doc)
        own = doc["results"]["observability"]["ncclsweep"]
        row, level = by_number[own["trial"]], int(own["level"])
        seen.add((row.number, level))
        assert own["roles"] == (["baseline"] if row.number == base.number else ["best"])
        got = row.at(level)
        agg = doc["results"]["request_performance"]["aggregate"]
        rate = agg["throughput"]["output_token_rate"]
        assert rate["p50"] == got.value and rate["units"] == "tokens/s"  # status's figure at that level
        assert rate["min"] == min(got.samples) and rate["max"] == max(got.samples)
        assert agg["requests"] == {**agg["requests"], "total": got.requests, "failures": 0} and got.requests > 0
        assert agg["requests"]["output_length"]["max"] <= job.bench.output_tokens
        for kind, (field, units) in br.LATENCY_FIELDS.items():
            lat = got.latency(kind)
            assert agg["latency"][field] == {"units": units, "mean": lat.mean, "p50": lat.p50, "p90": lat.p90,
                                             "p99": lat.p99}  # seconds, as recorded
        load = doc["scenario"]["load"]["standardized"]
        assert load["concurrency"] == streams(level) and load["output_seq_len"] == {
            "distribution": "fixed", "value": job.bench.output_tokens}
        assert load["input_seq_len"]["min"] == got.input_length.low and load["stage"] == sorted(row.levels).index(level)
        engine = doc["scenario"]["stack"][0]
        assert engine["standardized"]["accelerator"]["parallelism"]["tp"] == row.params["tp_size"]
        assert engine["native"]["config"]["params"] == row.params and engine["native"]["args"]["argv"] == \
            row.server["argv"]
        reads = prism_reads(doc)
        assert reads["model"] == "tiny" and reads["hardware"] == "cpu" and reads["concurrency"] == streams(level)
        assert reads["label"] == f"tiny [{name} trial {row.number} ({own['roles'][0]})]"
        over = own["over_launches"]  # the config's figure at this level over every launch of it
        assert over["value"] == statistics.median(evidence.values(row.config_key, level))
        assert over["launches"] == len(evidence.values(row.config_key, level)) >= 2
        if row.number == best["trial"] and level == 1:  # the exported figure and its verdict, as export says them
            assert over["value"] == best["figure"]["value"] and over["launches"] == best["figure"]["launches"]
            assert over["vs_baseline"]["text"] == best["figure"]["vs_baseline"]["text"]
            assert over["vs_baseline"]["point"] == best["figure"]["vs_baseline"]["point"]
            assert over["launch_noise"]["launches"] >= 2
    assert seen == expected
    # a config's reports share an experiment id, and no two reports share a uid
    docs = [yaml.safe_load(Path(f).read_text()) for f in written]
    assert len({d["run"]["uid"] for d in docs}) == len(docs) and len({d["run"]["eid"] for d in docs}) == 2


def test_trial_n_adds_its_config_and_a_trial_the_study_has_not_measured_is_one_line(demo, tmp_path, capsys):
    """--trial N reports trial N's own launch (here a relaunch of the best's config during the study: its own
    figures, the config's over its launches); the best named again is the best's report, its roles joined."""
    path, job, rows = demo
    best = br.chosen(job, rows)[-1].row
    other = next(r for r in rows if r.launch_role == "relaunch" and r.config_key == best.config_key)
    docs = list(yaml.safe_load_all(br.render(job, rows, trials=(other.number, best.number))))
    assert len(docs) == 3
    own = {d["results"]["observability"]["ncclsweep"]["trial"]: d for d in docs}
    valid(own[other.number])
    mine, theirs = (own[n]["results"]["observability"]["ncclsweep"] for n in (other.number, best.number))
    assert mine["roles"] == ["trial"] and theirs["roles"] == ["best", "trial"]
    assert mine["this_launch"]["value"] == other.at(1).value != best.at(1).value
    assert own[other.number]["results"]["request_performance"]["aggregate"]["throughput"]["output_token_rate"][
        "p50"] == other.at(1).value
    for key in ("value", "launches", "launch_values", "launch_noise", "vs_baseline"):  # one config: one figure
        assert mine["over_launches"][key] == theirs["over_launches"][key], key
    assert main(["export", str(path), "--format", "benchmark-report", "--trial", str(other.number)]) == 0
    streamed = list(yaml.safe_load_all(capsys.readouterr().out))  # without -o: a YAML stream on stdout
    assert [d["run"]["uid"] for d in streamed] == [d["run"]["uid"] for d in docs]  # the same reports (one per trial)
    for args in (["--trial", "999"], ["--trial", "1", "--format", "cmd"]):
        assert main(["export", str(path), "--format", "benchmark-report", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--trial" in err[0], err
    (tmp_path / "a-file").write_text("x")
    assert main(["export", str(path), "--format", "benchmark-report", "-o", str(tmp_path / "a-file")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "folder" in err[0] and (tmp_path / "a-file").read_text() == "x"


def test_a_study_recorded_before_levels_kept_means_and_lengths_leaves_them_out_and_still_validates(tmp_path):
    """The H200 race study's levels have percentiles without a mean and no lengths: the schema's latency
    statistics (a mean is required) and its load (an input length is required) are absent, never invented;
    the percentiles stay in this tool's own fields; the throughput and the server are there."""
    _, job, rows = recorded(tmp_path, "h200-vllm-1b-race")
    docs = br.reports(job, rows)
    best = yaml.safe_load(export(job, rows, "yaml"))["provenance"]
    assert {d["results"]["observability"]["ncclsweep"]["trial"] for _, d in docs} == {0, best["trial"]}
    assert len(docs) == 2 * 3  # levels 1, 10 and 64
    for name, doc in docs:
        valid(doc)
        own = doc["results"]["observability"]["ncclsweep"]
        row = next(r for r in rows if r.number == own["trial"])
        got = row.at(int(own["level"]))
        agg = doc["results"]["request_performance"]["aggregate"]
        assert "latency" not in agg and "load" not in doc["scenario"]
        assert own["this_launch"]["latency_s"]["ttft"] == got.ttft.to_record()
        assert agg["throughput"]["output_token_rate"]["p50"] == got.value
        engine = doc["scenario"]["stack"][0]["standardized"]
        assert (engine["tool"], engine["tool_version"], engine["accelerator"]["model"]) == ("vllm", "0.26.0",
                                                                                            "NVIDIA H200")
        assert name == f"benchmark_report_v0.2.1_h200-vllm-1b-race_trial{row.number}_{'-'.join(own['roles'])}_" \
                       f"stage{sorted(row.levels).index(got.level)}_c{got.level}.yaml"
    # --top 2: the runner-up too (export's rank 2), a file per level
    runner_up = yaml.safe_load_all(export(job, rows, "yaml", top=2))
    second = [d for d in runner_up if d][1]["provenance"]["trial"]
    more = {name: doc for name, doc in br.reports(job, rows, top=2)}
    assert len(more) == 3 * 3 and sorted(n for n in more if "_rank-2_" in n) == [
        f"benchmark_report_v0.2.1_h200-vllm-1b-race_trial{second}_rank-2_stage{i}_c{lv}.yaml"
        for i, lv in enumerate((1, 10, 64))]
