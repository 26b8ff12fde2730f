"""export: every format from a real study; yaml/json round-trip through load_config_file."""

from __future__ import annotations

import json
import math
import shlex
import statistics
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import recorded_study as fx  # a real journal study with every outcome
import yaml
from plan_rows import PLAN, UP_TO_64, race_tied_at_one

from conftest import write_job
from orchestrator.backends.command import CommandBackend
from orchestrator.backends.refserver import RefServerBackend
from orchestrator.config.job import load_job
from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.core.verdict import t_quantile
from orchestrator.results.export import FORMATS, choose, export, load_config_file, notes
from orchestrator.study.evidence import history
from orchestrator.study.evidence.launches import Evidence
from orchestrator.study.storage import storage


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One study for the module: exports only read it."""
    job, study = fx.build_study(tmp_path_factory.mktemp("export"))
    return job, history.trial_rows(study)


def _env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_env(built):
    job, rows = built
    text = export(job, rows, "env")
    env = _env_lines(text)
    assert env == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    blob = "\n".join(comments)
    for needle in ("study demo, trial 2", "# value: 57.000 tok/s single-request decode, the median of 1 launch",
                   "+-1.0%", "# vs baseline trial 0 (17.50): 3.29x, not shown: launch noise unknown yet (2 launches",
                   "# trial 2 is NOT SHOWN to beat the baseline", "refserver",
                   "NCCL 2.21.5", "CUDA 12.4", "driver 550.54.15", "NVIDIA H200", "model: tiny",
                   "graph_capture=1 tp_size=2 max_batch=8"):
        assert needle in blob, needle
    assert all(line.startswith("#") or "=" in line for line in text.splitlines() if line)


def test_cmd_is_the_backends_launch_line(built):
    job, rows = built
    text = export(job, rows, "cmd", host="127.0.0.1", port=9000)
    cmd = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(cmd) == 1
    want = RefServerBackend({"model": "tiny"}).launch_spec(fx.BEST, "127.0.0.1", 9000)
    words = shlex.split(cmd[0])
    assert words[:3] == ["NCCL_ALGO=Ring", "NCCL_NVLS_ENABLE=0", "NCCL_PROTO=LL"]
    assert words[3:] == want.argv


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_yaml_json_round_trip(built, tmp_path, fmt):
    job, rows = built
    text = export(job, rows, fmt)
    path = tmp_path / f"best.{fmt}"
    path.write_text(text)
    assert load_config_file(path) == fx.BEST
    doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    prov = doc["provenance"]
    assert prov["trial"] == 2 and prov["study"] == "demo" and prov["value_tok_s"] == 57.0
    # the figures are medians over launches: the baseline's config was launched twice (20 and 15 tok/s); the
    # ratio is the one its interval is of, of the geometric means (issue 48: one estimator for both)
    assert prov["spread"] == pytest.approx(0.01) and prov["x_baseline"] == pytest.approx(57 / math.sqrt(20 * 15))
    vs = prov["figure"]["vs_baseline"]
    assert prov["figure"]["launches"] == 1 and vs["verdict"] == "not shown" and vs["point"] == vs["ratio"]
    assert prov["backend"] == {"kind": "refserver", "version": "refserver 0.1.0"}
    assert prov["nccl_version"] == "2.21.5" and prov["cuda_version"] == "12.4"
    assert prov["driver_version"] == "550.54.15" and prov["gpu_model"] == "NVIDIA H200" and prov["model"] == "tiny"
    assert doc["env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    # bool and int types survive
    again = load_config_file(path)
    assert again["graph_capture"] is True and again["tp_size"] == 2


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_top_k_documents(built, tmp_path, fmt):
    job, rows = built
    text = export(job, rows, fmt, top=3)
    path = tmp_path / f"top.{fmt}"
    path.write_text(text)
    docs = json.loads(text) if fmt == "json" else list(yaml.safe_load_all(text))
    assert [d["provenance"]["trial"] for d in docs] == [2, 1, 9]
    assert [d["rank"] for d in docs] == [1, 2, 3]
    assert load_config_file(path) == fx.BEST
    assert load_config_file(path, rank=2) == {**fx.BASE, "graph_capture": True}
    with pytest.raises(BadInput, match="rank 4"):
        load_config_file(path, rank=4)


def test_top_k_line_formats_keep_one_active_block(built):
    job, rows = built
    text = export(job, rows, "env", top=2)
    assert "# ===== 1 of 2: trial 2 (active) =====" in text
    assert "# ===== 2 of 2: trial 1" in text
    assert _env_lines(text) == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "0"}
    assert "# NCCL_PROTO=Simple" in text  # the alternative, commented out
    cmd = export(job, rows, "cmd", top=2)
    assert sum(1 for line in cmd.splitlines() if line and not line.startswith("#")) == 1


def test_nccl_tuner(built):
    job, rows = built
    text = export(job, rows, "nccl-tuner")
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == ["allreduce,0,4294967295,ring,ll,-1,1,2"]
    assert "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks" in text
    assert all(len(line) < 200 for line in text.splitlines())  # the plugin reads 256-byte lines


def test_nccl_tuner_without_nccl_settings_is_a_comment(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    cfg = {"tp_size": 1, "graph_capture": True}
    fx.record(study, policy, cfg, fx.ok(cfg, 12.0), baseline=True)
    text = export(job, history.trial_rows(study), "nccl-tuner")
    assert all(line.startswith("#") for line in text.splitlines() if line)
    assert "nothing to export" in text


def test_no_completed_trial(tmp_path):
    job = fx.make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    fx.record(study, policy, fx.BASE, fx.failed(fx.BASE, "start-crash", "exit 1"))
    rows = history.trial_rows(study)
    for fmt in ("env", "yaml", "json", "cmd", "nccl-tuner"):
        with pytest.raises(RuntimeFailure, match="no completed trial to export"):
            export(job, rows, fmt)


def test_bad_arguments(built):
    job, rows = built
    with pytest.raises(BadInput, match="format must be one of"):
        export(job, rows, "toml")
    with pytest.raises(BadInput, match="--top"):
        export(job, rows, "env", top=0)


def test_load_config_file_plain_mapping_and_errors(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("tp_size: 2\nenv.NCCL_PROTO: LL\ngraph_capture: true\ncapture_sizes: '1,2,4,8'\n")
    assert load_config_file(plain) == {"tp_size": 2, "env.NCCL_PROTO": "LL", "graph_capture": True,
                                       "capture_sizes": "1,2,4,8"}
    nested = tmp_path / "nested.yaml"
    nested.write_text("env:\n  NCCL_PROTO: LL\n")
    with pytest.raises(BadInput, match="env.NCCL_PROTO: LL"):
        load_config_file(nested)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_config_file(broken)
    with pytest.raises(BadInput, match="cannot read"):
        load_config_file(tmp_path / "missing.yaml")


# An exported speculative config carries what the server counted when it was measured:
# acceptance rate and mean accepted length, in the YAML/JSON provenance and the comment header of
# the line formats; a config without speculation says nothing about it.
SETTINGS = {"argv": ["{python}", "-m", "server", "--port", "{port}", "--spec", "{speculative.method}",
                     "--k", "{speculative.num_tokens}"], "defaults": {"speculative.method": "none",
                                                                      "speculative.num_tokens": 0}}


def rows(**best) -> list[TrialRow]:
    return [TrialRow(number=0, state=COMPLETE, value=500.0, counted=True, is_baseline=True, config_key="a"),
            TrialRow(number=1, state=COMPLETE, value=760.0, counted=True, config_key="b",
                     params={"speculative.method": "ngram", "speculative.num_tokens": 4}, **best)]


JOB = SimpleNamespace(study="s", storage="journal:x", backend=SimpleNamespace(kind="command", settings=SETTINGS),
                      env={})


def test_the_provenance_carries_acceptance():
    backend = CommandBackend(SETTINGS, "job.yaml")
    doc = json.loads(export(JOB, rows(acceptance_rate=0.766, mean_accepted_length=3.74), "json", backend=backend))
    assert doc["provenance"]["acceptance_rate"] == 0.766 and doc["provenance"]["mean_accepted_length"] == 3.74
    cmd = export(JOB, rows(acceptance_rate=0.766, mean_accepted_length=3.74), "cmd", backend=backend)
    assert "# speculative decoding: 76.6% of drafted tokens accepted, 3.74 tokens per target step" in cmd
    assert "--spec ngram --k 4" in cmd


def test_no_speculation_says_nothing():
    backend = CommandBackend(SETTINGS, "job.yaml")
    doc = json.loads(export(JOB, rows(), "json", backend=backend))
    assert doc["provenance"]["acceptance_rate"] is None and doc["provenance"]["mean_accepted_length"] is None
    assert "speculative decoding" not in export(JOB, rows(), "env", backend=backend)


# export of a plan (results/export.py): ``--concurrency N`` exports the best at level N in
# every format with provenance naming the level, ``--mix`` the best for the traffic mix; with
# neither, a single-level job exports today's best and a plan names the level it chose; a level
# the objective lacks, or a mix without weights, is one line with exit code 2.
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
        assert f"# chosen for level {level} (--concurrency {level})" in text and " total tok/s, the median of " in text
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
           "1, 10, 64): 433.900 decode tok/s, 4.58x the baseline\n" in text
    assert "# value: 433.900 decode tok/s, the median of 1 launch" in text
    assert "# vs baseline trial 0 (94.70): 4.58x, not shown: launch noise unknown (no config launched twice)" in text
    assert "within noise" not in text and "WITHIN NOISE" not in text
    text = export(mix, ROWS, "json")
    obj = json.loads(text)["provenance"]["objective"]
    assert obj["mix"] == {"1": 0.2, "10": 0.4, "64": 0.4} and obj["level"] is None
    assert json.loads(text)["config"] == LARGE and obj["chosen_by"].startswith("the default for a weighted objective")
    assert "x_baseline_interval" not in obj  # one launch each: no launch noise, no interval
    relaunched = ROWS + [replace(row(3 + i, params, {1: [v * 1.01] * 3, 10: [v * 8.02] * 3, 64: [v * 40.3] * 3}),
                                 counted=False, launch_role="relaunch")
                         for i, (params, v) in enumerate([(EAGER, 95.0), (EAGER, 94.2), (LARGE, 362.0), (LARGE, 364.0),
                                                          (SMALL, 430.0), (SMALL, 428.0), (EAGER, 94.6)])]
    obj = json.loads(export(mix, relaunched, "json"))["provenance"]["objective"]
    assert obj["launches"] == 3 and obj["x_baseline_interval"][0] < obj["x_baseline"] < obj["x_baseline_interval"][1]
    assert env_of(export(mix, ROWS, "env", mix=True))["NCCL_PROTO"] == "Simple"
    # one level: today's export, nothing named
    plain = export(one, ROWS, "json")
    assert "objective" not in json.loads(plain)["provenance"] and json.loads(plain)["config"] == SMALL


def test_a_tie_the_race_left_is_exported_as_the_config_for_every_level_and_says_so():
    """The race could not tell graphs up to 8 (#2, the higher median at one stream) from up to 64 (#1,
    the best at 10 and 64 by far; the plan's one config for every level): level 1's export names #1,
    not the higher median, and says which rule broke the tie, in the header and the documents."""
    job = SimpleNamespace(**vars(JOB), objective=PLAN)
    raced = race_tied_at_one()
    backend = CommandBackend(SETTINGS, "job.yaml")
    said = ("tie broken: the race left #2 and #1 tied at 1: #1 is exported, one config for every level (the best at "
            "10 and 64); #2 only has the higher median at 1")
    for fmt in ("env", "cmd"):
        text = export(job, raced, fmt, backend=backend)
        assert f"# {said}\n" in text and "# study s, trial 1," in text
        assert "could not tell trial 1 from trial 2" in text  # the tie itself, as before
    for fmt in ("json", "yaml"):
        text = export(job, raced, fmt, backend=backend)
        doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
        assert doc["config"] == UP_TO_64 and doc["provenance"]["trial"] == 1
        tie = doc["provenance"]["tie_break"]
        assert tie["rule"] == "one config for every level" and tie["chosen_trial"] == 1
        assert tie["tied_trials"] == [2, 1] and tie["higher_median_trial"] == 2
        race = doc["provenance"]["figure"]["race"]
        assert not race["decided"] and race["tied_trials"] == [2]
    assert notes(job, raced)[-1] == said
    at_ten = json.loads(export(job, raced, "json", level=10, backend=backend))["provenance"]  # decided there
    assert at_ten["trial"] == 1 and at_ten["tie_break"] is None and "tie broken" not in export(job, raced, "env",
                                                                                                 level=10)


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


# Issue 38: an exported file runs nothing but what it says, whatever the study's strings hold.
# Every string a study holds (settings, params, env values, the version, paths, what its records
# say of the node and NCCL) is made hostile: command substitution, backticks, `;`, quotes and line
# breaks that would each create a file named PWNED if a shell ran them. The `cmd` and `nccl-tuner`
# exports are executed by a real shell in a sandbox whose server is a stand-in that records what it
# was given; the `env` export is read as docker reads it, one KEY=VALUE per line.
PWN = "touch PWNED"
HOSTILE = [f"$({PWN})", f"`{PWN}`", f"x; {PWN}", "it's \"quoted\" \\", f"a\n{PWN}\n#", f"'; {PWN}; echo '",
           f"#\r{PWN}\u2028{PWN}"]
ONE_LINE = [h for h in HOSTILE if "\n" not in h and "\r" not in h and "\u2028" not in h]
STAND_IN = """#!{python}
import json, os, sys
with open({record!r}, "w") as fh:
    json.dump({{"argv": sys.argv[1:], "env": {{k: v for k, v in os.environ.items() if k.startswith("H_")}}}}, fh)
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A real job (the command backend) and a real journal study, hostile everywhere it can be."""
    import sys

    root = tmp_path_factory.mktemp("hostile")
    sandbox = root / "sandbox"
    (sandbox / "bin").mkdir(parents=True)
    server = sandbox / "bin" / "server"
    server.write_text(STAND_IN.format(python=sys.executable, record=str(sandbox / "record.json")))
    server.chmod(0o755)
    space = {"params": {"tp_size": {"choices": [1]}, "backend.mode": {"choices": HOSTILE},
                        "env.H_TUNED": {"choices": ONE_LINE}}}
    settings = {"argv": ["{python}", "--note", *HOSTILE, "--mode", "{backend.mode}", "--host", "{host}",
                         "--port", "{port}"],
                "python": str(server), "version": f"1.0\n{PWN} #", "model_name": f"m\n{PWN}",
                "health_path": f"/h$({PWN})", "defaults": {"backend.mode": "plain"}}
    path = write_job(root, study="hostile", space_text=yaml.safe_dump(space),
                     report_dir=str(root / f"reports $({PWN}) `{PWN}`;{PWN}\n#"),
                     backend={"kind": "command", "settings": settings},
                     env={f"H_{i}": v for i, v in enumerate(ONE_LINE)}, baseline=None)
    job = load_job(path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    choices = {"tp_size": [1], "backend.mode": HOSTILE, "env.H_TUNED": ONE_LINE}
    for i, mode in enumerate([HOSTILE[4], HOSTILE[6], HOSTILE[0]]):  # the first two hold line breaks
        config = {"tp_size": 1, "backend.mode": mode, "env.H_TUNED": ONE_LINE[i]}
        nccl = {"version": f"2.21\n{PWN}", "topology": HOSTILE, "transports": f"`{PWN}`"}
        fx.record(study, policy, config, fx.ok(config, 100.0 - i, on=f"node\n{PWN}\r#", nccl=nccl),
                  baseline=i == 2, choices=choices)
    return job, history.trial_rows(study), sandbox


def test_a_hostile_study_name_is_refused_at_validate(tmp_path):
    for name in (f"a$({PWN})", "a;b", "a\nb", "x" * 300):
        with pytest.raises(BadInput, match="study"):
            load_job(write_job(tmp_path, study=name))


def test_an_env_value_with_a_line_break_is_refused_at_validate(tmp_path):
    with pytest.raises(BadInput, match=r"env\.H: .*must be one line"):
        load_job(write_job(tmp_path, env={"H": f"a\n{PWN}"}))
    space = yaml.safe_dump({"params": {"env.H": {"choices": ["ok", f"a\r{PWN}"]}}})
    with pytest.raises(BadInput, match=r"params\.env\.H\.choices\[1\]: .*must be one line"):
        load_job(write_job(tmp_path, space_text=space, baseline=None))
    with pytest.raises(BadInput, match=r"baseline\.env\.H: .*must be one line"):
        load_job(write_job(tmp_path, space_text=yaml.safe_dump({"params": {"env.H": {"choices": ["ok"]}}}),
                           baseline={"env.H": f"a\n{PWN}"}))


@pytest.mark.parametrize("fmt", ["cmd", "nccl-tuner"])
@pytest.mark.parametrize("top", [1, 3])
def test_an_executed_export_runs_nothing_but_what_it_says(hostile, fmt, top):
    import subprocess

    job, rows, sandbox = hostile
    text = export(job, rows, fmt, top=top)
    script = sandbox / f"export-{fmt}-{top}.sh"
    script.write_text(text)
    record = sandbox / "record.json"
    record.unlink(missing_ok=True)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    subprocess.run(["sh", str(script)], cwd=sandbox, capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert not list(sandbox.rglob("PWNED")), text  # no hostile string ran
    if fmt == "nccl-tuner":
        assert not record.exists()
        lines = [ln for ln in text.splitlines() if ln]
        assert all(ln.startswith("#") for ln in lines), text  # nothing to tune: every line a comment
        return
    ran = json.loads(record.read_text())  # the one command ran, with exactly the words it says
    spec = job.backend_obj().launch_spec(rows[0].params, "0.0.0.0", 8000)
    assert ran["argv"] == spec.argv[1:] and spec.argv[0] == str(sandbox / "bin" / "server")
    assert ran["argv"][ran["argv"].index("--mode") + 1] == HOSTILE[4]  # a value spanning lines, kept whole
    assert ran["env"] == {**{f"H_{i}": v for i, v in enumerate(ONE_LINE)}, "H_TUNED": ONE_LINE[0]}


@pytest.mark.parametrize("top", [1, 3])
def test_every_line_of_the_env_export_is_a_comment_or_one_assignment(hostile, top):
    import re

    job, rows, _ = hostile
    text = export(job, rows, "env", top=top)
    lines = text.split("\n")
    assert lines[0].startswith("# the environment half of trial ") and "--format cmd" in lines[0]
    assignments = {}
    for line in lines:  # split as a shell or docker splits: at \n only; and no other line break in a line
        assert not re.search("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029\x00]", line), repr(line)
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), repr(line)
            assert key not in assignments, "an alternative's line is live"
            assignments[key] = value
    assert assignments == {**{f"H_{i}": v for i, v in enumerate(ONE_LINE)}, "H_TUNED": ONE_LINE[0]}


BREAKS = "[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029\x00]"


def test_every_comment_of_the_tuner_rules_is_one_line(hostile):
    import re

    job, rows, _ = hostile
    text = export(job, rows, "nccl-tuner", top=3)
    assert any("1.0 | touch PWNED #" in ln for ln in text.split("\n"))  # the version, shown, on its one line
    assert all(ln.startswith("#") and not re.search(BREAKS, ln) for ln in text.split("\n") if ln)


def test_a_commented_alternative_launch_line_is_commented_on_every_line(hostile):
    """The provenance is one comment line per field; an alternative launch line whose quoted
    value spans lines has each of its lines commented, and uncommented it is its config's
    command, word for word."""
    import re

    job, rows, _ = hostile
    text = export(job, rows, "cmd", top=3)
    blocks = re.split(r"^# ===== \d of 3: trial \d+ .*$\n", text, flags=re.M)
    assert len(blocks) == 4
    for i, block in enumerate(blocks[1:]):
        lines = block.rstrip("\n").split("\n")
        start = next(n for n, ln in enumerate(lines) if ln.startswith(("H_0=", "# H_0=")))  # the launch line
        header, shell = lines[:start], lines[start:]
        assert "# backend: command 1.0 | touch PWNED #; model: unknown" in header
        assert not any(re.search(BREAKS, ln) for ln in header)
        if i:  # an alternative: every physical line commented
            assert all(ln.startswith("# ") for ln in shell), [ln for ln in shell if not ln.startswith("# ")]
            shell = [ln[2:] for ln in shell]
        spec = job.backend_obj().launch_spec(rows[i].params, "0.0.0.0", 8000)
        words = shlex.split("\n".join(shell))
        assert words[-len(spec.argv):] == spec.argv


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_the_documents_carry_the_hostile_strings_as_data(hostile, fmt, tmp_path):
    job, rows, _ = hostile
    text = export(job, rows, fmt, top=3)
    path = tmp_path / f"best.{fmt}"
    path.write_text(text)
    docs = json.loads(text) if fmt == "json" else list(yaml.safe_load_all(text))
    assert [load_config_file(path, rank=i + 1) for i in range(3)] == [r.params for r in rows[:3]]
    assert docs[0]["provenance"]["backend"]["version"] == f"1.0\n{PWN} #"
    assert docs[0]["provenance"]["storage"] == job.storage


def test_the_cmd_export_says_where_it_listens_and_takes_host_and_port(tmp_path, capsys):
    """`export --format cmd`, what `export` writes without --format, is a sh script whose header says
    the address it binds (0.0.0.0:8000 by default: every interface); --host/--port write it for
    another address."""
    from orchestrator.cli import main

    job_path = write_job(tmp_path, study="where")
    job = load_job(job_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = fx.SearchPolicy(study, fx.Space(), lambda c: dict(c), baseline=None, budget=None)
    config = {"tp_size": 1, "backend.threads": 1}
    fx.record(study, policy, config, fx.ok(config, 20.0), baseline=True,
              choices={"tp_size": [1], "backend.threads": [1]})
    assert main(["export", str(job_path), "--format", "cmd"]) == 0
    cmd = capsys.readouterr().out
    assert main(["export", str(job_path)]) == 0  # no --format: the deploy artifact (issue 50)
    assert capsys.readouterr().out == cmd
    lines = cmd.splitlines()
    assert lines[0] == "#!/bin/sh" and "the deploy artifact" in lines[1]
    assert lines[2].startswith("# the server listens on 0.0.0.0:8000 (every network interface of this machine)")
    argv = shlex.split([ln for ln in lines if ln and not ln.startswith("#")][0])
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8000"
    assert main(["export", str(job_path), "--format", "cmd", "--host", "127.0.0.1", "--port", "9001"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("# the server listens on 127.0.0.1:9001;")
    argv = shlex.split([ln for ln in lines if ln and not ln.startswith("#")][0])
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "9001"
    for bad_args in (["--port", "0"], ["--port", "70000"], ["--host", "a b"], ["--host", ""]):
        assert main(["export", str(job_path), "--format", "cmd", *bad_args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("--port must be 1-65535" in err[0] or "--host must be an address" in err[0]), err


# The latency the exported config measured, per level, and with a goodput objective where it held the
# SLO (the header of the line formats says it; the provenance carries it whole) (issue 35).
def test_the_provenance_carries_latency_per_level_the_slo_and_goodputs_crossing():
    from orchestrator.config.job import Objective
    from orchestrator.core.measurement import GoodputResult, Latency, LevelResult, Measurement
    from orchestrator.core.slo import Slo, Targets

    def probed(number, params, curve, holds, breaks, **kw):
        levels = {c: LevelResult(c, samples=(v,), ttft=Latency(0.01, 0.02, 0.03, 8), tpot=Latency(t / 2, t, t, 8),
                                 prefix_cache_hit_rate=0.0 if c == 32 else None) for c, (v, t) in curve.items()}
        m = Measurement(levels=levels, goodput=GoodputResult(32, tuple(curve), holds, breaks))
        return TrialRow(number=number, state=COMPLETE, value=m.value, counted=True, config_key=config_key(params),
                        params=params, measurement=m, **kw)

    measured = [probed(0, {"speculative.method": "none"}, {1: (400.0, 0.004), 32: (900.0, 0.03), 16: (850.0, 0.019),
                                                           17: (860.0, 0.021)}, 16, 17, is_baseline=True),
                probed(1, {"speculative.method": "ngram", "speculative.num_tokens": 4},
                       {1: (800.0, 0.002), 32: (4000.0, 0.012)}, 32, None)]
    job = SimpleNamespace(**vars(JOB), objective=Objective(goodput=32, slo=Targets(every=(Slo.named("tpot_p99",
                                                                                                     0.020),))))
    backend = CommandBackend(SETTINGS, "job.yaml")
    prov = json.loads(export(job, measured, "json", backend=backend))["provenance"]
    assert prov["trial"] == 1 and prov["goodput"]["holds"] == 32 and prov["goodput"]["baseline"]["holds"] == 16
    assert prov["latency"]["32"]["tpot"]["p99"] == 0.012 and prov["slo"]["breaches"] == []
    env = export(job, measured, "env", backend=backend)
    assert "# goodput: #1 holds the SLO up to 32 stream(s) at 4000 tok/s (all 32 tried); the baseline #0 up to 16 " \
           "at 850.0 tok/s\n" in env  # the answer once, not the config's crossing and then the same again
    assert "# value: 4000.000 tok/s total within the SLO" in env
    assert "# latency at 32 (ms p50/p90/p99): TTFT 10.0/20.0/30.0 (prefix-cache hits 0%), TPOT 6.0/12.0/12.0" in env
    assert "# latency at 1 (ms p50/p90/p99): TTFT 10.0/20.0/30.0, TPOT" in env  # not counted there: not shown
    assert prov["prefix_cache_hit_rate"] == {"32": 0.0}
    assert "# slo TPOT p99 <= 20 ms: holds them at every level measured" in env
    plain = json.loads(export(JOB, rows(), "json", backend=backend))["provenance"]
    assert plain["latency"] == {} and "goodput" not in plain and "slo" not in plain  # a study without them


def test_the_export_carries_the_capacity_curve_its_price_and_the_whole_runs_tok_s():
    """Issue 47: the capacity point with its curve (every measured load), $ per million output tokens
    and tok/s per GPU with the job's cost, and at each level N the whole run's tok/s beside the steady
    state's (what ``vllm bench serve`` counts)."""
    from orchestrator.config.job import Objective
    from orchestrator.core.capacity import Probe, result
    from orchestrator.core.measurement import Latency, LevelResult, Measurement
    from orchestrator.core.price import Cost, Pricing
    from orchestrator.core.slo import Slo, Targets

    targets = Targets(every=(Slo.named("tpot_p99", 0.020),))
    curve = {1: (200.0, 0.005), 64: (19037.0, 0.003), 65: (7923.0, 0.008), 128: (12743.0, 0.010)}
    levels = {c: LevelResult(c, samples=(v,), tpot=Latency(t / 2, t, t, 8), whole_run_tok_s=0.8 * v if c > 1 else None)
              for c, (v, t) in curve.items()}
    m = Measurement(levels=levels, goodput=result(128, list(curve), {c: Probe(c, v, True) for c, (v, _) in
                                                                     curve.items()}, targets=targets))
    row = TrialRow(number=0, state=COMPLETE, value=m.value, counted=True, config_key=config_key({}), params={},
                   measurement=m, is_baseline=True)
    job = SimpleNamespace(**vars(JOB), objective=Objective(goodput=128, slo=targets),
                          pricing=lambda: Pricing(Cost(gpu_hour=2.5), 8, lambda config: 1))
    backend = CommandBackend(SETTINGS, "job.yaml")
    prov = json.loads(export(job, [row], "json", backend=backend))["provenance"]
    assert prov["goodput"]["holds"] == 64 and [p["load"] for p in prov["goodput"]["curve"]] == [1, 64, 65, 128]
    assert prov["goodput"]["price"]["tok_s_per_gpu"] == 19037.0 and prov["goodput"]["cost"] == {"gpu_hour": 2.5}
    assert prov["throughput"]["64"] == {"tok_s": 19037.0, "whole_run_tok_s": 0.8 * 19037}
    env = export(job, [row], "env", backend=backend)
    assert "# cost at its capacity point: $0.0365 per million output tokens at $2.5 a GPU-hour, 19037 tok/s per GPU" \
           in env
    assert "# curve (streams: total tok/s, whole run, SLO): 1: 200.0, -, holds, 64: 19037, 15230, holds, 65: " in env


# Found on a real vLLM: an eager baseline over a 10 ms TPOT target at one stream holds the SLO
# nowhere (0 tok/s within it). The export said "WITHIN NOISE of the baseline: n/a (not measured)" of
# a config holding it up to 128 streams: there is no ratio to a 0, and nothing to be within noise of.
def test_a_baseline_holding_the_slo_nowhere_is_no_ratio_and_no_within_noise(capsys):
    from orchestrator.config.job import Objective
    from orchestrator.core.measurement import GoodputResult, Latency, LevelResult, Measurement
    from orchestrator.core.slo import Slo, Targets

    def probed(number, params, curve, holds, breaks, **kw):
        levels = {c: LevelResult(c, samples=(v,), tpot=Latency(t / 2, t, t, 8)) for c, (v, t) in curve.items()}
        m = Measurement(levels=levels, goodput=GoodputResult(128, tuple(curve), holds, breaks))
        return TrialRow(number=number, state=COMPLETE, value=m.value, counted=True, config_key=config_key(params),
                        params=params, measurement=m, **kw)

    measured = [probed(0, {"graph_capture": False}, {1: (91.0, 0.0143)}, None, 1, is_baseline=True),
                probed(1, {"graph_capture": True}, {1: (802.0, 0.0019), 128: (18755.0, 0.0094)}, 128, None)]
    job = SimpleNamespace(**vars(JOB), objective=Objective(goodput=128, slo=Targets(every=(Slo.named("tpot_p99",
                                                                                                      0.010),))))
    backend = CommandBackend(SETTINGS, "job.yaml")
    prov = json.loads(export(job, measured, "json", backend=backend))["provenance"]
    assert prov["trial"] == 1 and prov["figure"]["value"] == 18755.0
    assert prov["figure"]["vs_baseline"]["no_ratio"] and prov["figure"]["vs_baseline"]["beyond_noise"] is None
    for fmt in ("env", "cmd"):
        text = export(job, measured, fmt, backend=backend)
        assert "WITHIN NOISE" not in text
        assert "# goodput: #1 holds the SLO up to 128 stream(s) at 18755 tok/s (all 128 tried); the baseline #0 " \
               "breaks the SLO at 1 stream(s) already" in text
    assert notes(job, measured) == []


def test_the_engines_notices_of_the_measured_launch_are_in_the_header_and_provenance():
    """vLLM said, in the speculative launch, that it disabled async scheduling and fell back to its
    V1 runner: what a user deploys changes more than the config says, so the export says it too
    (each notice one comment line, whatever it holds)."""
    said = ["engine notice: Async scheduling not supported with ngram-based speculative decoding and will be disabled.",
            "engine notice: two\nlines; touch X", "a warning that is no notice"]
    measured = rows(warnings=said)
    backend = CommandBackend(SETTINGS, "job.yaml")
    prov = json.loads(export(JOB, measured, "json", backend=backend))["provenance"]
    assert prov["trial"] == 1 and prov["engine_notices"] == [said[0][len("engine notice: "):], "two\nlines; touch X"]
    for fmt in ("cmd", "env"):
        text = export(JOB, measured, fmt, backend=backend)
        assert "# engine notice: Async scheduling not supported with ngram-based speculative decoding and will be " \
               "disabled.\n" in text and "# engine notice: two | lines; touch X\n" in text
        assert "no notice" not in text


def test_a_measurement_the_client_may_have_distorted_says_so_in_the_header_and_provenance():
    """The node measured a level twice and its client was still behind: the trial's notice travels
    with the export (the figure may be overstated), beside the engine's notices; an export of a
    launch without one has no such key."""
    said = ["client notice: the measuring client fell behind by 83.9 ms (p99) at 1 stream: its decode figures "
            "may be overstated by up to 50% (its event loop was 81.3 ms late at the median request's first token)"]
    backend = CommandBackend(SETTINGS, "job.yaml")
    prov = json.loads(export(JOB, rows(warnings=said), "json", backend=backend))["provenance"]
    assert prov["client_notices"] == [said[0][len("client notice: "):]] and prov["engine_notices"] == []
    for fmt in ("cmd", "env"):
        assert f"# {said[0]}\n" in export(JOB, rows(warnings=said), fmt, backend=backend)
    assert "client_notices" not in json.loads(export(JOB, rows(), "json", backend=backend))["provenance"]


# ---- issue 48: one estimator for a ratio's point and its interval ------------------------------------------
def test_the_kept_h200_race_study_exports_one_estimate_and_its_interval(tmp_path):
    """The kept H200 race study (docs/gpu/h200-vllm-1b-race) exported `5.56x faster (95% CI 3.92-6.64x)`: a
    ratio of medians (point 5.557) beside an interval centred on the geometric means' (5.102); relaunched and
    measured by `vllm bench serve` the pair gave 4.86x. Its export now prints the estimate its interval is of,
    for the config it names at one stream (#1: the race left it tied with #3 there, and it is the best at 10 and
    64, so the tie is broken for it) and for the runner-up (#3, the one the issue quoted)."""
    repo = Path(__file__).resolve().parents[2]
    src = repo / "jobs" / "h200-vllm-1b-race.yaml"
    doc = yaml.safe_load(src.read_text())
    doc["space"] = str((src.parent / doc["space"]).resolve())
    doc.pop("output_dir", None)
    doc["report_dir"], doc["storage"] = str(tmp_path), f"journal:{tmp_path / 'study.journal'}"
    (tmp_path / "study.journal").write_bytes((repo / "docs/gpu/h200-vllm-1b-race/study.journal").read_bytes())
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    job = load_job(tmp_path / "job.yaml")
    rows = history.trial_rows(storage.open_study(job, create=False))
    provs = [d["provenance"] for d in yaml.safe_load_all(export(job, rows, "yaml", top=2)) if d]
    assert [p["trial"] for p in provs] == [1, 3] and provs[0]["tie_break"]["rule"] == "one config for every level"
    ev = Evidence(rows)
    said = {}
    for prov in provs:
        vs = prov["figure"]["vs_baseline"]
        # one estimate: the point is the interval's own, the ratio of the launches' geometric means at the centre of
        # the t interval over the launch noise, which the launches' ranks may only widen
        best, base = (next(r for r in rows if r.number == n) for n in (prov["trial"], prov["figure"]["baseline_trial"]))
        logs = [[math.log(v) for v in ev.values(r.config_key, 1)] for r in (base, best)]
        assert vs["point"] == vs["ratio"] == prov["x_baseline"] == pytest.approx(math.exp(statistics.fmean(logs[1])
                                                                                          - statistics.fmean(logs[0])))
        noise = vs["launch_noise"]
        half = t_quantile(0.975, noise["df"]) * noise["sd"] * math.sqrt(1 / len(logs[0]) + 1 / len(logs[1]))
        assert vs["lo"] <= vs["point"] * math.exp(-half) * (1 + 1e-9) and vs["hi"] >= vs["point"] * math.exp(half) \
            * (1 - 1e-9) and vs["verdict"] == "faster"
        said[prov["trial"]] = f"{vs['point']:.2f}x faster (95% CI {vs['lo']:.2f}-{vs['hi']:.2f}x"
        assert vs["text"].startswith(said[prov["trial"]])
    # the runner-up is the figure: its interval is the t interval itself, and its point the 5.10x at its centre
    third = provs[1]["figure"]["vs_baseline"]
    assert third["point"] == pytest.approx(math.sqrt(third["lo"] * third["hi"])) == pytest.approx(5.102, abs=0.001)
    assert said[3] == "5.10x faster (95% CI 3.92-6.64x" and said[1] == "5.35x faster (95% CI 3.78-6.99x"
    base = provs[0]["figure"]["baseline_trial"]
    for fmt in ("env", "cmd"):  # the header's line and its "chosen for" line: the same estimate, never 5.56x
        text = export(job, rows, fmt, top=2)
        for trial, point in ((1, "5.35"), (3, "5.10")):
            assert f"# vs baseline trial {base} (87.16): {said[trial]}" in text and f", {point}x the baseline" in text
        assert "5.56x" not in text


VLLM_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
CUSTOM_OFF = ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
              "this warning, specify disable_custom_all_reduce=True explicitly.")


@pytest.mark.parametrize("asked", [{"allreduce.backend": "custom"}, {}], ids=["allreduce.backend", "default"])
def test_an_all_reduce_path_the_engine_turned_off_is_in_the_header_and_the_documents(asked):
    """vLLM 0.33.0 on four PCIe-only GPUs turned its custom all-reduce off (its own line, once per
    worker), asked for by allreduce.backend=custom or by its default (custom_all_reduce: true, which
    a normalized config carries): the trial's notices and fallbacks, read from that log as a trial
    reads them, are in every export: the header names what ran instead, json/yaml carry both."""
    from orchestrator.backends.vllm import VllmBackend
    from orchestrator.node import startup

    backend = VllmBackend({"model": "/models/m", "version": "0.33.0"}, "job.yaml")
    log = (VLLM_FIXTURES / "vllm-0.33.0-4xpcie-tp4-custom-disabled.lines.log").read_text()
    config = backend.normalize({"tp_size": 4, **asked})
    measured = [TrialRow(number=0, state=COMPLETE, value=500.0, counted=True, is_baseline=True, config_key="a",
                         params=backend.normalize({"tp_size": 4, "allreduce.backend": "nccl"})),
                TrialRow(number=1, state=COMPLETE, value=760.0, counted=True, config_key="b", params=config,
                         warnings=startup.notices(log) + backend.allreduce_warnings(config, log),
                         server={"fallbacks": backend.engine_fallbacks(config, log)})]
    job = SimpleNamespace(study="s", storage="journal:x", backend=backend, env={})
    shown = f"{'allreduce.backend=custom' if asked else 'custom_all_reduce=true'} (the engine ran nccl: {CUSTOM_OFF})"
    for fmt in ("cmd", "env"):
        text = export(job, measured, fmt, backend=backend)
        assert f"# engine notice: {CUSTOM_OFF}\n" in text
        assert f"# engine fallback: {shown}\n" in text
    for fmt in ("json", "yaml"):
        text = export(job, measured, fmt, backend=backend)
        prov = (json.loads(text) if fmt == "json" else yaml.safe_load(text))["provenance"]
        assert prov["trial"] == 1 and prov["engine_notices"] == [CUSTOM_OFF]
        (fell,) = prov["engine_fallbacks"]
        assert fell["ran"] == "nccl" and fell["said"] == CUSTOM_OFF and fell["text"] == shown
        assert fell["param"] == ("allreduce.backend" if asked else "custom_all_reduce")
