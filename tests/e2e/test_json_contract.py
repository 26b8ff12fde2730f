"""Issue 50, item 4: the contract an agent calls. Every command that takes ``--json`` (validate, run,
status, export, compare, doctor, bench) run for real, as a process, on a study of real server
processes (tests/fake_openai_server.py through the command backend: a config's token delay is its
speed, 50 ms for the baseline and 10 ms for the other config); its whole standard output is one JSON
document that validates against the command's documented schema (``core.json_schemas``), and the
fields a user checks say what the study found: the answer, the best trial and its figure. Errors under
``--json`` keep their exit codes and are a record too, the one line on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import FAKE_OPENAI, REPO, write_job
from orchestrator.core.json_schemas import IDS, schema

pytestmark = pytest.mark.slow

PROMPT = "Explain how a ring all-reduce works across eight GPUs."
SLOW, FAST = "0.050", "0.010"  # a busy box adds ~10 ms a token to both: the ratio stays above 2


def ncclsweep(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=600)


def record(res: subprocess.CompletedProcess, command: str) -> dict:
    """The one JSON document ``res`` printed, validated against ``command``'s schema."""
    data = json.loads(res.stdout)  # the whole of stdout: nothing else is printed there
    jsonschema.Draft202012Validator(schema(command)).validate(data)
    assert data["schema"] == IDS[command] == f"ncclsweep.{command}/1"
    return data


def fake_job(tmp_path: Path, study: str, **sections) -> Path:
    argv = ["{python}", str(FAKE_OPENAI), "--host", "{host}", "--port", "{port}", "--model", "fake",
            "--token-delay", "{backend.delay}"]
    return write_job(tmp_path, study=study, space_text=f'params:\n  backend.delay: {{choices: ["{SLOW}", "{FAST}"]}}\n',
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline={"backend.delay": SLOW}, budget={"trials": 2},
                     bench={"prompt": PROMPT, "output_tokens": 10, "warmup": 1, "repeats": 2, "max_repeats": 2,
                            "concurrency": [1]},
                     correctness={"check_tokens": 8, "prompts": ["The quick brown fox"], "logprobs": False},
                     **sections)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """``run --json`` on a two-config study (a fresh local Ray, as a user's run has): (job, its
    process)."""
    job = fake_job(tmp_path_factory.mktemp("json-contract"), "contract")
    return job, ncclsweep("run", str(job), "--json")


def test_run_json_is_its_last_lines_as_one_record(study, no_leftover_servers):
    job, res = study
    assert res.returncode == 0, res.stderr
    run = record(res, "run")
    assert run["status"] == "finished" and run["exit_code"] == 0 and run["reason"] in ("budget reached",
                                                                                       "space exhausted")
    assert run["job"] == str(job) and run["study"] == "contract" and run["trials_counted"] == 2
    best = run["best"]
    assert best["config"]["backend.delay"] == FAST and best["unit"] == "decode tok/s"
    assert best["baseline"]["trial"] == 0 and best["trial"] != 0
    assert best["value"] > 2 * best["baseline"]["value"]  # 10 ms a token against 50 ms
    assert best["vs_baseline"] > 2 and best["verdict"].startswith(f"{best['vs_baseline']:.2f}x the baseline")
    assert run["plan"] is None and run["goodput"] is None
    # the answer is the run's last lines as printed (progress and those lines on stderr, as without --json)
    assert run["answer"][0].startswith(run["reason"] + ": 2 trials counted")
    assert any(line.startswith(f"best #{best['trial']} ") for line in run["answer"])
    printed = " ".join(res.stderr.split())  # a line wider than the log's 120 columns is wrapped there
    assert all(" ".join(line.split()) in printed for line in run["answer"]), (run["answer"], res.stderr)
    assert f"ncclsweep export {job} --format cmd" in run["next"] and run["export"] == f"ncclsweep export {job} " \
                                                                                      "--format cmd"


def test_status_json_has_every_trial_and_the_same_best(study):
    job, res = study
    best = json.loads(res.stdout)["best"]
    got = ncclsweep("status", str(job), "--json")
    assert got.returncode == 0, got.stderr
    status = record(got, "status")
    trials = {t["number"]: t for t in status["trials"]}
    assert sorted(trials) == [0, best["trial"]] and all(t["state"] == "COMPLETE" for t in trials.values())
    assert trials[0]["is_baseline"] and trials[best["trial"]]["params"]["backend.delay"] == FAST
    assert status["best"]["trial"] == best["trial"] and status["best"]["value"] == best["value"]
    assert status["best"]["verdict"] == best["verdict"]


def test_export_json_carries_the_artifact_and_what_it_exports(study, tmp_path):
    job, res = study
    best = json.loads(res.stdout)["best"]
    got = ncclsweep("export", str(job), "--json")  # the deploy artifact, the default format
    assert got.returncode == 0, got.stderr
    export = record(got, "export")
    assert export["format"] == "cmd" and export["output"] is None and export["artifact"].startswith("#!/bin/sh\n")
    [first] = export["exported"]
    assert first["rank"] == 1 and first["trial"] == best["trial"] and first["config"]["backend.delay"] == FAST
    assert first["provenance"]["value_tok_s"] == pytest.approx(best["value"])
    assert f"--token-delay {FAST}" in export["artifact"]
    out = tmp_path / "best.env"
    got = ncclsweep("export", str(job), "--format", "env", "-o", str(out), "--json")
    assert got.returncode == 0, got.stderr
    export = record(got, "export")
    assert export["format"] == "env" and export["output"] == str(out) and out.read_text() == export["artifact"]
    assert export["files"] == [str(out)]
    # the benchmark reports: a file per config and level in the folder, named in the record
    folder = tmp_path / "reports"
    got = ncclsweep("export", str(job), "--format", "benchmark-report", "-o", str(folder), "--json")
    assert got.returncode == 0, got.stderr
    export = record(got, "export")
    written = sorted(str(p) for p in folder.iterdir())
    assert export["format"] == "benchmark-report" and sorted(export["files"]) == written and len(written) >= 2
    assert all(Path(f).read_text() in export["artifact"] for f in written)


def test_compare_json_is_the_rounds_verdict_with_progress_on_stderr(study, no_leftover_servers):
    job, res = study
    best = json.loads(res.stdout)["best"]
    got = ncclsweep("compare", str(job), "--rounds", "2", "--json")
    assert got.returncode == 0, got.stderr
    compare = record(got, "compare")
    assert compare["mode"] == "best" and compare["complete"] and compare["rounds_done"] == 2
    assert compare["baseline_trial"] == 0 and compare["best_trial"] == best["trial"] and not compare["same_config"]
    assert compare["best"]["1"] > 2 * compare["baseline"]["1"]
    assert compare["intervals"]["1"]["ratio"] > 2 and compare["intervals"]["1"]["verdict"] in ("faster",
                                                                                                "within noise")
    assert "compare round 1/2: baseline" in got.stderr  # what a person reads goes to stderr
    assert compare["file"].endswith("compare.json") and compare["study_verdict"]


def test_bench_json_is_the_trials_record_gated_by_the_study(study, no_leftover_servers):
    job, _ = study
    got = ncclsweep("bench", str(job), "--set", f'backend.delay="{FAST}"', "--json")
    assert got.returncode == 0, got.stderr
    bench = record(got, "bench")
    assert bench["outcome"] == "COMPLETE" and bench["gated"] and bench["correctness"]["ok"]
    assert bench["config"]["backend.delay"] == FAST and bench["value"] > 0
    assert bench["metrics"]["levels"]["1"]["value"] == bench["value"]  # where readers found it before the envelope


def test_validate_and_doctor_json(study):
    job, _ = study
    got = ncclsweep("validate", str(job), "--commands", "--json")
    assert got.returncode == 0, got.stderr
    valid = record(got, "validate")
    assert valid["ok"] and valid["study"] == "contract" and valid["backend"] == "command"
    assert valid["params"] == ["backend.delay"] and valid["configs"] == 2
    assert valid["commands"][0]["label"] == "baseline" and valid["commands"][0]["config"]["backend.delay"] == SLOW
    assert str(FAKE_OPENAI) in valid["commands"][0]["argv"] and valid["commands"][0]["env"]["NCCL_DEBUG"] == "INFO"
    got = ncclsweep("doctor", str(job), "--json")
    assert got.returncode == 0, got.stderr
    doctor = record(got, "doctor")
    assert doctor["job"] == str(job) and doctor["preflight"]["ok"] and doctor["ok"] == (not doctor["warnings"])
    assert any("server command" in check and "found at" in check for check in doctor["preflight"]["checked"])


def test_a_plan_run_status_and_compare_plan_json(tmp_path, no_leftover_servers):
    """An objective of two levels: the answer is a plan, in `run`'s, `status`'s and `compare --plan`'s records."""
    job = fake_job(tmp_path, "contract-plan", objective={"concurrency": [1, 2]})
    res = ncclsweep("run", str(job), "--json")
    assert res.returncode == 0, res.stderr
    run = record(res, "run")
    plan = run["plan"]
    assert [lp["level"] for lp in plan["per_level"]] == [1, 2] == plan["levels"]
    fast = [lp["best_trial"] for lp in plan["per_level"] if lp["best_config"]["backend.delay"] == FAST]
    assert len(fast) == 2, plan
    assert run["export"] == f"ncclsweep export {job} --concurrency N --format cmd"
    got = ncclsweep("status", str(job), "--json")
    status = record(got, "status")
    assert [lp["best_trial"] for lp in status["plan"]["per_level"]] == fast
    got = ncclsweep("compare", str(job), "--plan", "--rounds", "1", "--json")
    assert got.returncode == 0, got.stderr
    compare = record(got, "compare")
    assert compare["mode"] == "plan" and compare["rounds_done"] == 1
    assert [c["trial"] for c in compare["configs"]] == [0, fast[0]]
    assert compare["configs"][1]["median"]["1"] > compare["configs"][0]["median"]["1"]


def test_errors_under_json_keep_their_exit_codes_and_are_records(tmp_path):
    job = fake_job(tmp_path, "contract-errors")
    for argv, code, needle in [
        (("validate", str(tmp_path / "nope.yaml")), 2, "nope.yaml"),
        (("status", str(job)), 1, "ncclsweep run"),  # no study yet
        (("export", str(job), "--top", "0"), 2, "--top"),
        (("bench", str(job), "--set", "backend.delay=0.5"), 2, "backend.delay"),
        (("compare", str(job), "--plan"), 2, "objective.concurrency"),
        (("run", str(job), "--trials", "0"), 2, "--trials"),
        (("doctor", str(tmp_path / "nope.yaml")), 2, "nope.yaml"),
    ]:
        command = argv[0]
        got = ncclsweep(*argv, "--json")
        assert got.returncode == code, (argv, got.stdout, got.stderr)
        said = record(got, command)
        assert said == {"schema": IDS[command], "error": said["error"], "exit_code": code} and needle in said["error"]
        assert got.stderr == f"ncclsweep: error: {said['error']}\n", got.stderr  # the one line, no traceback
    assert not (tmp_path / "reports").exists()  # nothing created
