"""Jobs: the happy path, defaults, and bad input named by file and key path (the checks across
job, space and backend: test_job_checks.py)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from job_files import BASE_SPACE, bad, in_tmp, needs_nccl, write  # noqa: F401 - in_tmp: autouse, each test in a tmp dir

from conftest import TESTS
from orchestrator.config.job import DEFAULT_CHECK_PROMPTS, SAMPLER_NAMES, Job, load_job
from orchestrator.core.errors import BadInput

DATA = TESTS / "data" / "jobs"


# ---- happy path ----------------------------------------------------------------------------

def test_demo_like_job_loads_with_defaults(tmp_path):
    needs_nccl()
    job = load_job(DATA / "cpu-demo.yaml")
    assert isinstance(job, Job)
    assert job.study == "test-cpu-demo"
    assert job.backend.kind == "refserver" and job.backend.settings == {"model": "tiny", "device": "cpu"}
    assert job.report_dir == (DATA / "reports" / "test-cpu-demo").resolve()  # next to the job file
    assert job.storage == f"journal:{job.report_dir / 'study.journal'}"
    assert job.journal_path == job.report_dir / "study.journal"
    assert job.space_path == (DATA / "cpu-space.yaml").resolve()
    assert job.space.names == ("tp_size", "backend.threads", "backend.dtype", "env.NCCL_PROTO")
    assert job.space.size() == 2 + 2 * 2 * 2  # TP 1: threads; TP 2: threads x dtype x proto
    assert job.baseline_given and job.baseline["tp_size"] == 1 and job.baseline["backend.threads"] == 1
    assert job.budget.trials == 8 and job.budget.timeout_s == 300
    assert job.bench.output_tokens == 32 and job.bench.repeats == 3 and job.bench.max_repeats == 3
    assert job.bench.concurrency == (1, 2, 10, 64) and job.bench.target_rel_ci is None
    assert (job.timeouts.startup_s, job.timeouts.bench_s, job.timeouts.teardown_s) == (120, 60, 10)
    assert job.ray.address is None and job.ray.parallel is None  # one trial per matching node
    assert job.ray.node_selector == {"gpu_model": None, "resources": {}}
    assert job.sampler.name == "tpe" and job.sampler.seed == 0 and job.sampler.n_startup_trials is None
    assert job.correctness.enabled and job.correctness.reference == "baseline"
    assert job.correctness.reference_kind == "baseline"
    assert job.correctness.prompts == DEFAULT_CHECK_PROMPTS and job.correctness.check_tokens == 32
    assert job.env == {"NCCL_NVLS_ENABLE": "0"}
    assert not job.allow_unsafe_nccl and not job.remeasure and job.max_consecutive_failures == 5
    assert job.pruning.enabled and job.pruning.min_ratio == 0.8 and job.constraints == ()
    ctx = job.context()
    assert ctx["gpus_per_node"] == 2 and ctx["gpus"] == 0 and ctx["cpu_job"] and ctx["heads"] == 8
    backend = job.backend_obj()
    assert backend is job.backend_obj() and backend.kind == "refserver"
    assert not (tmp_path / "reports").exists()


def test_job_pickles_and_rebuilds_backend():
    write()
    job = load_job("job.yaml")
    again = pickle.loads(pickle.dumps(job))
    assert again.space.enumerate() == job.space.enumerate()
    assert again.backend_obj().kind == "refserver" and again == job


def test_full_job_with_every_section(tmp_path):
    Path("ref.json").write_text('{"texts": []}')
    path = write({
        "storage": "sqlite:///study.db", "report_dir": "out/r1",
        "baseline": {"tp_size": 2, "backend.threads": 2},
        "budget": {"timeout": "1h30m"},
        "bench": {"prompt": "Hi", "output_tokens": 16, "warmup": 0, "repeats": 2, "max_repeats": 5,
                  "target_rel_ci": 0.05, "concurrency": [1, 4]},
        "timeouts": {"startup": 30, "bench": "2m", "teardown": "5s"},
        "ray": {"address": "auto", "parallel": 2, "node_selector": {"gpu_model": "H200", "resources": {"box": 1}}},
        "sampler": {"name": "random", "seed": None, "n_startup_trials": 3},
        "correctness": {"reference": "ref.json", "prompts": ["a"], "check_tokens": 8, "logprobs": False},
        "env": {"OMP_PROC_BIND": True, "MY_FLAG": 3},
        "remeasure": True, "max_consecutive_failures": 2,
        "pruning": {"enabled": False, "min_ratio": 0.5},
        "constraints": [{"concurrency": 4, "min_ratio": 0.9}],
    })
    job = load_job(path)
    assert job.storage == f"sqlite:///{(tmp_path / 'study.db').resolve()}"  # relative to the job file
    assert job.report_dir == (tmp_path / "out" / "r1").resolve()
    assert job.baseline == {"tp_size": 2, "graph_capture": False, "backend.threads": 2}
    assert job.budget.trials is None and job.budget.timeout_s == 5400
    assert job.bench.max_repeats == 5 and job.bench.concurrency == (1, 4)
    assert job.timeouts.startup_s == 30 and job.timeouts.bench_s == 120
    assert job.ray.node_selector["resources"] == {"box": 1}
    assert job.sampler.seed is None
    assert job.correctness.reference == str((tmp_path / "ref.json").resolve())
    assert job.correctness.reference_kind == "file"
    assert job.env == {"OMP_PROC_BIND": "1", "MY_FLAG": "3"}
    assert job.constraints[0].concurrency == 4 and job.constraints[0].min_ratio == 0.9


def test_output_folder_is_anchored_at_the_job_file_from_any_directory(tmp_path, monkeypatch):
    """Every path of a job is relative to the job file: the same study from any directory."""
    jobs = tmp_path / "project" / "jobs"
    jobs.mkdir(parents=True)
    monkeypatch.chdir(jobs)
    write({"study": "s"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cases = [({}, jobs / "reports" / "s"),
             ({"output_dir": "../out"}, tmp_path / "project" / "out" / "s"),
             ({"report_dir": "../r/here"}, tmp_path / "project" / "r" / "here")]
    for extra, want in cases:
        monkeypatch.chdir(jobs)
        write({"study": "s", **extra})
        for cwd in (jobs, elsewhere, tmp_path):
            monkeypatch.chdir(cwd)
            job = load_job(jobs / "job.yaml")
            assert job.report_dir == want.resolve(), (extra, cwd)
            assert job.storage == f"journal:{want.resolve() / 'study.journal'}"
    monkeypatch.chdir(jobs)
    write({"storage": "sqlite:///db/s.db", "study": "s"})
    monkeypatch.chdir(elsewhere)
    assert load_job(jobs / "job.yaml").storage == f"sqlite:///{(jobs / 'db' / 's.db').resolve()}"
    monkeypatch.chdir(jobs)
    bad("report_dir", "not both", job={"output_dir": "out", "report_dir": "out/s"})


def test_journal_storage_spellings(tmp_path):
    job = load_job(write({"storage": "runs/s.journal"}))
    assert job.storage == f"journal:{(tmp_path / 'runs' / 's.journal').resolve()}"
    job = load_job(write({"storage": "journal:x/y.log"}))
    assert job.storage == f"journal:{(tmp_path / 'x' / 'y.log').resolve()}"


# ---- bad input: at least fifteen cases, each naming file and key path ----------------------

def test_bad_unknown_top_key_did_you_mean():
    bad("budgte", "unknown key 'budgte'", "did you mean 'budget'", "allowed: study", job={"budgte": {"trials": 1}})


def test_bad_unknown_nested_key():
    bad("bench.repeat", "did you mean 'repeats'", "allowed: prompt", job={"bench": {"repeat": 3}})


def test_bad_wrong_type_int():
    bad("gpus_per_node", "must be an integer >= 0", "'two' (a string)", job={"gpus_per_node": "two"})


def test_bad_wrong_type_bool_is_not_int():
    bad("cpus_per_trial", "must be an integer >= 1", "True (a boolean)", job={"cpus_per_trial": True})


def test_bad_wrong_type_section():
    bad("timeouts", "must be a mapping with keys startup, bench, teardown", "[1] (a list)", job={"timeouts": [1]})


def test_bad_missing_required_key():
    bad("space", "missing required key 'space'", drop=("space",))


def test_bad_unknown_nccl_value_in_env():
    needs_nccl()
    bad("env.NCCL_PROTO", "Fast", job={"env": {"NCCL_PROTO": "Fast"}})


def test_bad_unknown_nccl_value_in_space():
    needs_nccl()
    bad("params.env.NCCL_ALGO.choices[1]", "Hypercube", file="space.yaml",
        space={"params": {"tp_size": [1, 2], "env.NCCL_ALGO": ["Ring", "Hypercube"]}})


def test_bad_empty_choices():
    bad("params.tp_size.choices", "non-empty list", file="space.yaml", space={"params": {"tp_size": {"choices": []}}})


def test_bad_missing_space_file():
    bad("space", "search space file not found", "'nope.yaml'", job={"space": "nope.yaml"})


def test_bad_missing_job_file(tmp_path):
    with pytest.raises(BadInput) as info:
        load_job("missing.yaml")
    assert info.value.file == "missing.yaml" and str(info.value).startswith("missing.yaml: job file not found")


def test_bad_not_yaml_not_mapping_empty_duplicate():
    for text, words in [("study: [t\n", "not valid YAML at line"), ("- a\n- b\n", "must be a YAML mapping"),
                        ("", "is empty"), ("study: a\nstudy: b\n", "duplicate key 'study'")]:
        Path("job.yaml").write_text(text)
        with pytest.raises(BadInput) as info:
            load_job("job.yaml")
        assert info.value.file == "job.yaml" and words in str(info.value), str(info.value)


def test_bad_duration():
    bad("timeouts.startup", "must be a duration", "'2 minutes'", "90s, 5m, 8h, 1h30m",
        job={"timeouts": {"startup": "2 minutes"}})


def test_a_shared_studys_takeover_has_its_default_and_a_floor(tmp_path):
    """timeouts.takeover: how long a shared study's trial may go without a heartbeat before another
    driver takes it over; 45 s unless set, at least 4 s (a heartbeat every quarter of it, a second
    at least); a value below is one line naming the file and the key, exit code 2 from the CLI."""
    assert load_job(write()).timeouts.takeover_s == 45
    assert load_job(write(job={"timeouts": {"takeover": "8s"}})).timeouts.takeover_s == 8
    bad("timeouts.takeover", "at least 4s", "not 2s", job={"timeouts": {"takeover": "2s"}})
    bad("timeouts.takeover", "must be a duration", job={"timeouts": {"takeover": "soon"}})
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "orchestrator", "validate", write(job={"timeouts": {"takeover": 1}})],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "job.yaml: timeouts.takeover: at least 4s" in done.stderr and "not 1s" in done.stderr, done.stderr


def test_bad_budget():
    bad("budget", "at least one of trials", job={"budget": {}})
    bad("budget.trials", "must be an integer >= 1", job={"budget": {"trials": 0}})
    bad("budget.confirm", "must be an integer >= 0", job={"budget": {"trials": 3, "confirm": -1}})
    bad("budget.relaunch", "must be a number <= 1", job={"budget": {"trials": 3, "relaunch": 1.5}})
    bad("budget.relaunch", "must be a number >= 0 and <= 1", job={"budget": {"trials": 3, "relaunch": -0.1}})


def test_the_race_and_the_relaunches_have_their_defaults_and_can_be_turned_off(tmp_path):
    from orchestrator.config.job import DEFAULT_CONFIRM, DEFAULT_RELAUNCH

    job = load_job(DATA / "cpu-demo.yaml")
    assert (job.budget.confirm, job.budget.relaunch) == (DEFAULT_CONFIRM, DEFAULT_RELAUNCH) == (8, 0.2)
    (tmp_path / "space.yaml").write_text("params:\n  backend.threads: [1, 2]\n")
    (tmp_path / "job.yaml").write_text("study: s\nbackend: {kind: refserver, settings: {model: tiny, device: cpu}}\n"
                                       "space: space.yaml\nbudget: {confirm: 0, relaunch: 0}\n")
    off = load_job(tmp_path / "job.yaml")
    assert (off.budget.trials, off.budget.confirm, off.budget.relaunch) == (8, 0, 0.0)  # the limits keep theirs


def test_bad_unknown_sampler():
    msg = bad("sampler.name", "unknown sampler 'tpee'", "did you mean 'tpe'", job={"sampler": {"name": "tpee"}})
    assert "allowed: " + ", ".join(SAMPLER_NAMES) in msg


def test_bad_sampler_option():
    bad("sampler.options.multivariat", "did you mean 'multivariate'",
        job={"sampler": {"name": "tpe", "options": {"multivariat": True}}})


def test_bad_constraint_expression():
    bad("constraints[1]", "cannot parse", "allowed:", file="space.yaml",
        space={**BASE_SPACE, "constraints": ["tp_size <= gpus_per_node", "tp_size =< 2"]})


def test_bad_unknown_name_in_constraint():
    bad("constraints[0]", "unknown name 'head'", "did you mean 'heads'", file="space.yaml",
        space={**BASE_SPACE, "constraints": ["head % tp_size == 0"]})


def test_bad_unknown_backend_kind():
    bad("backend.kind", "unknown backend 'vlm'", "did you mean 'vllm'", "refserver",
        job={"backend": {"kind": "vlm"}})


def test_bad_backend_setting():
    bad("backend.settings.modle", "did you mean 'model'",
        job={"backend": {"kind": "refserver", "settings": {"modle": "tiny"}}})


def test_bad_dead_choice_cpu_job():
    # CPU job: gpus_per_node in the context is cpus_per_trial (1 here), so TP=2 can never run.
    bad("constraints[0]", "dead choice", "tp_size=2", "gpus_per_node=1", file="space.yaml",
        job={"cpus_per_trial": 1})


def test_bad_study_name_and_storage():
    bad("study", "must match [A-Za-z0-9_.-]+", "'my study!'", job={"study": "my study!"})
    for name in ("..", ".", "a/b"):  # a study name is a folder name: never a path out of the output folder
        bad("study", "not be '.' or '..'", repr(name), job={"study": name})
    bad("storage", "not a storage: 'studies'", "sqlite:///", job={"storage": "studies"})


def test_bad_env_conflicts_with_space():
    bad("env.OMP_NUM_THREADS", "also tuned by space.yaml params.env.OMP_NUM_THREADS",
        job={"env": {"OMP_NUM_THREADS": 1}},
        space={"params": {"tp_size": [1, 2], "env.OMP_NUM_THREADS": [1, 2]}})


def test_bad_outcome_constraint_level():
    bad("constraints[0].concurrency", "3 is not a measured level", "1, 2, 10, 64",
        job={"constraints": [{"concurrency": 3, "min_ratio": 0.9}]})


def test_bad_reference_file():
    bad("correctness.reference", "reference file not found", "baseline",
        job={"correctness": {"reference": "golden.json"}})


def test_bad_bench_values():
    bad("bench.max_repeats", "must be >= repeats (5)", job={"bench": {"repeats": 5, "max_repeats": 2}})
    bad("bench.concurrency[1]", "must be an integer >= 1", job={"bench": {"concurrency": [1, 0]}})
    bad("pruning.min_ratio", "must be a number > 0 and <= 1", job={"pruning": {"min_ratio": 1.5}})
    bad("bench.prefix_reuse", "must be true or false", "not 'yes'", job={"bench": {"prefix_reuse": "yes"}})
    bad("bench.prefix_reuse_", "did you mean 'prefix_reuse'", job={"bench": {"prefix_reuse_": True}})


def test_every_request_its_own_prefix_unless_the_job_shares_them():
    assert load_job(write()).bench.prefix_reuse is False  # TTFT measured on prompts the server has not seen
    assert load_job(write(job={"bench": {"prefix_reuse": True}})).bench.prefix_reuse is True


def traffic(*prompts: str, output_tokens: int = 64) -> dict:
    Path("traffic.jsonl").write_text("".join(f'{{"prompt": "{p}", "output_tokens": {output_tokens}}}\n'
                                             for p in prompts))
    return {"traffic": "traffic.jsonl"}


@pytest.mark.parametrize("settings", [
    {"kind": "vllm", "settings": {"model": "m", "version": "0.26.0", "extra_args": ["--max-model-len", "4096"]}},
    {"kind": "command", "settings": {"argv": ["vllm", "serve", "m", "--port", "{port}", "--max-model-len=4096"],
                                     "model_name": "m"}},
])
def test_validate_names_the_traffic_line_longer_than_the_servers_limit(capsys, settings):
    """The issue's case: two 30,000-character prompts against --max-model-len 4096 (the baseline failed
    HTTP 400 and the run blamed it): validate names the longest line and its length, exit 2, one line."""
    from orchestrator.cli import main

    bench = traffic("short", "x" * 30000, "mid " * 100, "y" * 28000)
    space = {"params": {"tp_size": {"choices": [1]}}}
    write(job={"backend": settings, "bench": bench, "gpus_per_node": 1}, space=space)
    assert main(["validate", "job.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    flag = "--max-model-len 4096"
    assert err[0].startswith("ncclsweep: error: job.yaml: bench.traffic: traffic.jsonl line 2: a prompt of about 7500 "
                             "tokens (30000 characters / 4) plus 64 output tokens = 7564 is more than "), err
    assert flag in err[0] and "(2 of the 4 sampled requests are over it)" in err[0], err
    assert "raise --max-model-len to at least 7564, or cut that request from the traffic" in err[0], err
    write(job={"backend": settings, "bench": traffic("short", "z" * (4 * (4096 - 64))), "gpus_per_node": 1},
          space=space)  # at the limit: it fits
    assert main(["validate", "job.yaml"]) == 0






# ---- the study's folder is the study's (issue 38) -----------------------------------------------

def test_a_study_name_longer_than_a_folder_name_is_refused_at_validate(tmp_path, capsys):
    from orchestrator.cli import main

    bad("study", "at most 255 characters", "(300 characters)", job={"study": "s" * 300})
    write({"study": "s" * 300})
    assert main(["validate", "job.yaml"]) == 2  # what run gave as "internal error: OSError: [Errno 36]"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "job.yaml: study: must match" in err[0], err
    assert load_job(write({"study": "s" * 255})).study == "s" * 255  # the longest a folder name may be
    bad("report_dir", "longer than the 255 bytes", job={"report_dir": "r/" + "x" * 256})


def test_the_root_of_the_file_system_is_no_study_folder():
    bad("report_dir", "'/' is the root of the file system", "a folder of its own", job={"report_dir": "/"})
    bad("output_dir", "'/' is the root of the file system", job={"output_dir": "/"})
    bad("report_dir", "the root of the file system", job={"report_dir": "/../.."})


def test_a_new_study_is_not_started_among_other_files(tmp_path):
    """A folder that holds someone else's files (here: the job's own folder, a home folder's
    kind of content) is refused for a new study, naming what it holds; an empty folder, a study's
    own folder (whatever was put beside it later) and output_dir's folder of studies are fine."""
    (tmp_path / "notes.txt").write_text("mine")
    bad("report_dir", f"the study's folder {tmp_path} already holds 3 entries that are not a study's",
        "'job.yaml', 'notes.txt', 'space.yaml'", "a folder of its own", job={"report_dir": "."})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "notes.txt", "space.yaml"]  # nothing written
    (tmp_path / "empty").mkdir()
    assert load_job(write({"report_dir": "empty"})).report_dir == tmp_path / "empty"
    study = tmp_path / "study"
    (study / "logs").mkdir(parents=True)
    (study / "study.journal").write_text("")
    (study / "best.env").write_text("X=1\n")  # an export the user kept beside the study
    assert load_job(write({"report_dir": "study"})).report_dir == study
    (tmp_path / "out" / "other-study").mkdir(parents=True)
    assert load_job(write({"output_dir": "out"})).report_dir == tmp_path / "out" / "t"
    db = tmp_path / "db"
    db.mkdir()
    (db / "s.db").write_text("")  # a study stored in sqlite in its own folder
    assert load_job(write({"report_dir": "db", "storage": "sqlite:///db/s.db"})).report_dir == db


def test_a_stall_limit_no_start_can_reach_is_said_by_validate(capsys):
    """timeouts.stall written longer than timeouts.startup is valid (it still ends a silent
    benchmark stream) but can never end a start: validate says so (exit 0); the default stall
    (10m, over the default 2m start) and a stall below the start say nothing."""
    from orchestrator.cli import main

    write({"timeouts": {"startup": "5m", "stall": "15m"}})
    assert main(["validate", "job.yaml"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["job.yaml: warning: timeouts.stall (15m) is longer than timeouts.startup (5m): a start that hangs "
                   "ends at the start-up limit as start-timeout, never as hang; the stall still ends a benchmark "
                   "stream silent that long (set it below timeouts.startup for a silent start to end as hang, "
                   "sooner)"], err
    for timeouts in ({}, {"startup": "30m", "stall": "5m"}, {"startup": "60s"}):
        assert load_job(write({"timeouts": timeouts})).advice == ()


# ---- latency targets, goodput, presets (issue 35) ------------------------------------------------

def test_slo_at_every_level_and_a_levels_own():
    path = write(job={"objective": {"concurrency": [1, 32]},
                      "slo": {"tpot_p99": "20ms", "ttft_p99": 1, 32: {"tpot_p99": "50ms"}}})
    slo = load_job(path).slo
    assert {s.describe() for s in slo.at(1)} == {"TPOT p99 <= 20 ms", "TTFT p99 <= 1 s"}
    assert {s.describe() for s in slo.at(32)} == {"TPOT p99 <= 50 ms", "TTFT p99 <= 1 s"}
    assert load_job(write()).slo is None  # no slo: none (the study as before)


def test_bad_slo():
    bad("slo.tpot_p95", "unknown target 'tpot_p95'", "did you mean", "tpot_p99", job={"slo": {"tpot_p95": "20ms"}})
    bad("slo.tpot_p99", "must be a duration", job={"slo": {"tpot_p99": "fast"}})
    bad("slo", "must be a mapping of targets to durations", job={"slo": ["tpot_p99"]})
    bad("slo.7", "7 is not a measured level", "1, 2, 10, 64", job={"slo": {7: {"tpot_p99": "20ms"}}})
    bad("slo.1", "must map targets to durations", job={"slo": {1: "20ms"}})


def test_goodput_needs_its_targets_and_finds_its_own_concurrency():
    path = write(job={"objective": {"goodput": {"max_concurrency": 48}}, "slo": {"tpot_p99": "20ms"}})
    obj = load_job(path).objective
    assert obj.goodput == 48 and not obj.by_level and obj.slo.every[0].name == "tpot_p99"
    bad("objective.goodput", "needs the latency targets", job={"objective": {"goodput": {"max_concurrency": 8}}})
    bad("objective.goodput", "not both", job={"objective": {"concurrency": [1, 8], "goodput": {"max_concurrency": 8}},
                                             "slo": {"tpot_p99": "20ms"}})
    bad("objective.goodput", "needs max_concurrency", job={"objective": {"goodput": {}}, "slo": {"tpot_p99": 1}})
    bad("objective.goodput.max_concurrency", ">= 1",
        job={"objective": {"goodput": {"max_concurrency": 0}}, "slo": {"tpot_p99": 1}})
    bad("slo.8", "goodput checks every concurrency",
        job={"objective": {"goodput": {"max_concurrency": 8}}, "slo": {8: {"tpot_p99": 1}}})


def test_minimize_and_per_gpu_build_their_objective_and_bad_ones_are_one_line():
    """Issue 46: ``minimize: tpot_p99`` (a recorded percentile, lowest wins) and ``per_gpu: true``."""
    from orchestrator.core.objectives import Latency, PerGpu, Single

    obj = load_job(write(job={"objective": {"minimize": "tpot_p99", "concurrency": 32}})).objective
    assert isinstance(obj, Single) and obj.levels == (32,) and obj.measure == Latency("tpot_p99")
    assert obj.directions() == ["minimize"] and obj.minimize == "tpot_p99" and not obj.per_gpu
    obj = load_job(write(job={"objective": {"concurrency": [1, 8], "per_gpu": True}})).objective
    assert obj.by_level and obj.measure == PerGpu() and obj.per_gpu and obj.directions() == ["maximize"] * 2
    bad("objective.minimize", "unknown latency 'tpot_p95'", "did you mean", "tpot_p99",
        job={"objective": {"minimize": "tpot_p95", "concurrency": 32}})
    bad("objective.minimize", "goodput or minimize, not both",
        job={"objective": {"minimize": "ttft_p99", "goodput": {"max_concurrency": 8}}, "slo": {"tpot_p99": "1s"}})
    bad("objective.per_gpu", "per_gpu or minimize, not both",
        job={"objective": {"minimize": "e2e_p50", "per_gpu": True}})
    bad("objective.per_gpu", "not with goodput",
        job={"objective": {"per_gpu": True, "goodput": {"max_concurrency": 8}}, "slo": {"tpot_p99": "1s"}})
    bad("objective.per_gpu", "true or false", job={"objective": {"per_gpu": "yes"}})
    bad("objective.concurrency", "non-empty list", job={"objective": {"concurrency": "32"}})


def test_cost_prices_a_goodput_studys_capacity_point_and_is_checked_like_any_key():
    """Issue 47: ``cost: {gpu_hour: 2.50}`` or ``{node_hour: 20}``, one of the two, a positive number."""
    goodput = {"objective": {"goodput": {"max_concurrency": 64}}, "slo": {"tpot_p99": "20ms"}}
    job = load_job(write(job={**goodput, "cost": {"node_hour": 3}}))
    assert job.cost.node_hour == 3.0 and job.cost.gpu_hour is None and job.pricing().cost is job.cost
    assert job.pricing().gpus_of({"tp_size": 2}) == 2  # TP x PP, as the backend counts them
    assert load_job(write(job=goodput)).cost is None and load_job(write(job=goodput)).pricing() is None
    bad("cost", "give one price", "not both", job={**goodput, "cost": {"gpu_hour": 2.5, "node_hour": 20}})
    bad("cost", "give one price", "not neither", job={**goodput, "cost": {}})
    bad("cost", "must be {gpu_hour: DOLLARS}", job={**goodput, "cost": 2.5})
    bad("cost.gpu_hours", "unknown key", "gpu_hour", job={**goodput, "cost": {"gpu_hours": 2.5}})
    bad("cost.node_hour", "must be a number > 0", job={**goodput, "cost": {"node_hour": 0}})
    bad("cost.node_hour", "must be a number > 0", job={**goodput, "cost": {"node_hour": "cheap"}})
    bad("cost.node_hour", "finite", job={**goodput, "cost": {"node_hour": float("inf")}})
    bad("cost.gpu_hour", "a CPU job", "node_hour", job={**goodput, "cost": {"gpu_hour": 2.5}})
    bad("cost", "prices the capacity point of a goodput study", job={"cost": {"node_hour": 3}})


def test_a_preset_expands_to_levels_and_targets_and_the_jobs_own_slo_replaces_its():
    from orchestrator.config.job import PRESETS
    from orchestrator.study.storage import objective as objectives

    for word in PRESETS:
        obj = load_job(write(job={"objective": word})).objective
        assert obj.preset == word and obj.slo  # a user with no SLO of their own gets one
        assert objectives.expansion(obj).startswith(f"objective: {word} = ")
    balanced = load_job(write(job={"objective": "balanced"})).objective
    assert balanced.goodput == 64 and {s.name for s in balanced.slo.every} == {"tpot_p99", "ttft_p99"}
    own = load_job(write(job={"objective": "throughput", "slo": {"e2e_p90": "30s"}})).objective
    assert own.concurrency == (64,) and [s.name for s in own.slo.every] == ["e2e_p90"]
    bad("objective", "unknown preset 'balance'", "did you mean", "balanced", job={"objective": "balance"})


def test_goodput_takes_no_outcome_constraints():
    bad("constraints", "goodput measures the concurrencies its search picks",
        job={"objective": {"goodput": {"max_concurrency": 8}}, "slo": {"tpot_p99": "20ms"},
             "constraints": [{"concurrency": 2, "min_ratio": 0.9}]})


# ---- long context as a level's second axis (objective.context, core.level) ---------------------

def test_a_context_axis_makes_each_concurrency_and_context_pair_a_level():
    from orchestrator.core.level import context_of, make

    job = load_job(write(job={"objective": {"concurrency": [1, 64], "context": [0, 8192]},
                              "slo": {"tpot_p99": "50ms", "64@8192": {"ttft_p99": "2s"}}}))
    obj = job.objective
    assert obj.levels == (1, 64, make(1, 8192), make(64, 8192)) and obj.by_level and obj.value_per_level
    assert [context_of(lv) for lv in obj.levels] == [0, 0, 8192, 8192] and type(obj.levels[1]) is int
    assert {s.describe() for s in job.slo.at(make(64, 8192))} == {"TPOT p99 <= 50 ms", "TTFT p99 <= 2 s"}
    assert {s.describe() for s in job.slo.at(64)} == {"TPOT p99 <= 50 ms"}  # 64 is 64 streams at context 0 only
    mixed = load_job(write(job={"objective": {"concurrency": [1], "context": [0, 4096],
                                              "weights": {1: 3, "1@4096": 1}}})).objective
    assert mixed.weights == {1: 0.75, make(1, 4096): 0.25}
    assert load_job(write()).objective.context == () and load_job(write()).objective.levels == (1,)  # as before


def test_bad_context_axis():
    from orchestrator.config.prompts import MAX_CONTEXT

    bad("objective.context", "give bench.context (one length per study) or objective.context",
        job={"bench": {"context": 4096}, "objective": {"concurrency": [1], "context": [0, 4096]}})
    bad("objective.context", "goodput searches the concurrency at one prompt length",
        job={"objective": {"goodput": {"max_concurrency": 8}, "context": [0, 4096]}, "slo": {"tpot_p99": 1}})
    bad("objective.context", "must be a non-empty list of prompt lengths", job={"objective": {"context": 4096}})
    bad("objective.context", "must be a non-empty list", job={"objective": {"context": []}})
    bad("objective.context[1]", f"must be an integer from 0 to {MAX_CONTEXT}", "not -1",
        job={"objective": {"context": [0, -1]}})
    bad("objective.context[0]", f"must be an integer from 0 to {MAX_CONTEXT}",
        job={"objective": {"context": [MAX_CONTEXT + 1]}})
    bad("objective.context[1]", "must be an integer", job={"objective": {"context": [0, "8k"]}})
    bad("objective.context[2]", "duplicate context 8192", job={"objective": {"context": [0, 8192, 8192]}})
    bad("slo.64@4096", "64@4096 is not a measured level", "1@8192",
        job={"objective": {"concurrency": [1, 64], "context": [0, 8192]}, "slo": {"64@4096": {"tpot_p99": 1}}})
    bad("objective.weights", "gives no weight to level(s) 1@8192",
        job={"objective": {"concurrency": [1], "context": [0, 8192], "weights": {1: 1}}})


@pytest.mark.parametrize("args", [["--max-model-len", "4096"], ["--max-model-len=8200"], ["--context-length", "100"]])
def test_validate_warns_when_the_servers_length_cannot_hold_the_longest_context_and_its_output(capsys, args):
    from orchestrator.cli import main

    settings = {"model": "tiny", "device": "cpu", "extra_args": args}
    write(job={"backend": {"kind": "refserver", "settings": settings},
               "objective": {"concurrency": [1], "context": [0, 8192]}})
    assert main(["validate", "job.yaml"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is less than the longest context (8192) plus the output (64) = 8256 tokens" in err[0]
    assert err[0].startswith(f"job.yaml: warning: backend.settings.extra_args: {args[0].split('=')[0]} "), err


def test_a_server_length_that_holds_the_context_or_no_context_warns_nothing():
    for extra, objective in ((["--max-model-len", "8256"], {"context": [0, 8192]}),
                             (["--max-model-len", "100"], {"concurrency": [1]})):
        job = load_job(write(job={"backend": {"kind": "refserver", "settings": {
            "model": "tiny", "device": "cpu", "extra_args": extra}}, "objective": objective}))
        assert job.advice == ()
    held = load_job(write(job={"bench": {"context": 4096}, "backend": {"kind": "refserver", "settings": {
        "model": "tiny", "device": "cpu", "extra_args": ["--max-model-len", "2048"]}}}))
    assert sum("the longest context (4096) plus the output (64)" in line for line in held.advice) == 1  # bench.context


# ---- notify: the command `run` tells how it ended (driver/notify.py) --------------------------

def test_notify_is_an_argv_split_like_shell_words_or_given_as_a_list():
    assert load_job(write()).notify is None
    assert load_job(write(job={"notify": "notify-send 'study over' --urgency=low"})).notify == (
        "notify-send", "study over", "--urgency=low")
    assert load_job(write(job={"notify": ["curl", "-d", "@-", "https://example.invalid/x y"]})).notify == (
        "curl", "-d", "@-", "https://example.invalid/x y")


@pytest.mark.parametrize("value, words", [
    ("notify-send 'unclosed", "cannot split"), ("  ", "names no command"), ([], "names no command"),
    (3, "must be a command line or a list of its words"), (["ok", 2], "must be a command line or a list")])
def test_bad_notify(value, words):
    bad("notify", words, job={"notify": value})


# ---- goodput by request rate (issue 47 item 2) ---------------------------------------------

RATE_SLO = {"ttft": "200ms", "tpot": "10ms", "attainment": 0.99}


def test_goodput_by_rate_reads_its_axis_and_its_attainment_targets():
    obj = load_job(write(job={"objective": {"goodput": {"max_rate": 40, "burstiness": 0.5, "requests": 200,
                                                        "seed": 3}},
                              "slo": {**RATE_SLO, "tpot_p99": "20ms"}})).objective
    assert obj.by_capacity and obj.goodput is None and obj.kind_name == "goodput by rate"
    axis = obj.rate
    assert (axis.max_rate, axis.lowest, axis.burstiness, axis.requests, axis.max_probes, axis.seed) == \
        (40, 5, 0.5, 200, 8, 3)
    assert [(s.kind, s.limit_s) for s in obj.slo.per_request] == [("ttft", 0.2), ("tpot", 0.01)]
    assert obj.slo.attainment == 0.99 and obj.slo.every[0].name == "tpot_p99"  # a percentile target beside them
    assert obj.describe() == ("goodput up to 40 req/s (gamma arrivals, burstiness 0.5, 200 requests a probe) under "
                              "TTFT <= 200 ms and TPOT <= 10 ms for 99% of requests; TPOT p99 <= 20 ms")
    assert obj.identity()["goodput"] == {"max_rate": 40, "min_rate": 5, "burstiness": 0.5, "requests": 200,
                                         "max_probes": 8, "seed": 3}
    assert obj.identity()["slo"] == {"ttft": 0.2, "tpot": 0.01, "attainment": 0.99, "tpot_p99": 0.02}


def test_jobs_without_the_new_keys_are_read_as_before():
    job = {"objective": {"goodput": {"max_concurrency": 48}}, "slo": {"tpot_p99": "20ms"}}
    obj = load_job(write(job=job)).objective
    assert obj.rate is None and obj.goodput == 48 and obj.kind_name == "goodput"
    assert obj.identity() == {"concurrency": [1], "weights": None, "goodput": {"max_concurrency": 48},
                              "slo": {"tpot_p99": 0.02}}


@pytest.mark.parametrize("job, key, words", [
    ({"objective": {"goodput": {"max_rate": 0}}, "slo": RATE_SLO}, "objective.goodput.max_rate", ["> 0", "not 0"]),
    ({"objective": {"goodput": {"max_rate": ".inf"}}, "slo": RATE_SLO}, "objective.goodput.max_rate", ["number"]),
    ({"objective": {"goodput": {"max_rate": 10, "min_rate": 20}}, "slo": RATE_SLO}, "objective.goodput.min_rate",
     ["at most the highest rate searched (10 req/s), not 20"]),
    ({"objective": {"goodput": {"max_rate": 10, "burstiness": -1}}, "slo": RATE_SLO},
     "objective.goodput.burstiness", ["> 0"]),
    ({"objective": {"goodput": {"max_rate": 10, "requests": 0}}, "slo": RATE_SLO}, "objective.goodput.requests",
     [">= 1"]),
    ({"objective": {"goodput": {"max_rate": 10, "max_probes": 1}}, "slo": RATE_SLO},
     "objective.goodput.max_probes", [">= 2"]),
    ({"objective": {"goodput": {"max_rate": 10, "max_rates": 3}}, "slo": RATE_SLO}, "objective.goodput.max_rates",
     ["did you mean", "max_rate"]),
    ({"objective": {"goodput": {"max_rate": 10, "max_concurrency": 8}}, "slo": RATE_SLO}, "objective.goodput",
     ["one of them, not max_concurrency and max_rate"]),
    ({"objective": {"goodput": {"max_concurrency": 8, "burstiness": 2}}, "slo": {"tpot_p99": "1s"}},
     "objective.goodput.burstiness", ["a key of goodput by request rate (max_rate)"]),
    ({"objective": {"goodput": {"max_speed": 2}}, "slo": RATE_SLO}, "objective.goodput.max_speed",
     ["replays a trace's timestamps", "the job has no bench.traffic"]),
    ({"objective": {"goodput": {"max_rate": 10}}}, "objective.goodput", ["needs the latency targets",
                                                                          "ttft, tpot, e2e with attainment"]),
    ({"objective": {"concurrency": [1, 8]}, "slo": RATE_SLO}, "slo.ttft",
     ["judge an open-loop load at a request rate", "goodput: {max_rate: R}"]),
    ({"objective": {"goodput": {"max_rate": 10}}, "slo": {"ttft": "1s"}}, "slo", ["need attainment", "0.99"]),
    ({"objective": {"goodput": {"max_rate": 10}}, "slo": {"attainment": 0.9}}, "slo.attainment",
     ["give one or more of ttft, tpot, e2e"]),
    ({"objective": {"goodput": {"max_rate": 10}}, "slo": {"ttft": "1s", "attainment": 1.5}}, "slo.attainment",
     ["a number > 0 and <= 1", "not 1.5"]),
    ({"objective": {"goodput": {"max_rate": 10}}, "slo": {"ttft": "soon", "attainment": 0.9}}, "slo.ttft", []),
    ({"objective": {"goodput": {"max_rate": 10}}, "slo": {"itl": "1s", "attainment": 0.9}}, "slo.itl",
     ["unknown target 'itl'", "per request: ttft, tpot, e2e and attainment"]),
    ({"objective": {"goodput": {"max_rate": 10}, "concurrency": [1, 8]}, "slo": RATE_SLO}, "objective.goodput",
     ["finds its own request rate (up to max_rate)"]),
    ({"objective": {"goodput": {"max_rate": 10}}, "slo": RATE_SLO, "constraints": [{"concurrency": 2,
                                                                                     "min_ratio": 0.9}]},
     "constraints", ["slo:"]),
])
def test_a_bad_rate_objective_or_attainment_target_is_one_line_naming_the_key(job, key, words):
    bad(key, *words, job=job)


def test_a_bad_rate_key_is_one_line_and_exit_2_from_the_command_line(capsys):
    from orchestrator import cli

    write(job={"objective": {"goodput": {"max_rate": 10, "burstiness": 0}}, "slo": RATE_SLO})
    assert cli.main(["validate", "job.yaml"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["ncclsweep: error: job.yaml: objective.goodput.burstiness: must be a number > 0, not 0"], said


def test_a_trace_replays_at_a_speed_and_refuses_drawing_arrivals(tmp_path):
    Path("trace.jsonl").write_text("".join(f'{{"prompt": "p{i}", "output_tokens": 4, "timestamp": {t}}}\n'
                                           for i, t in enumerate([10.0, 10.5, 11.0, 12.0, 14.0])))
    job = load_job(write(job={"bench": {"traffic": "trace.jsonl"}, "slo": RATE_SLO,
                              "objective": {"goodput": {"max_speed": 4, "min_speed": 0.5}}}))
    assert job.bench.arrival_times == (10.0, 10.5, 11.0, 12.0, 14.0)  # its own 1 req/s
    assert (job.objective.rate.max_rate, job.objective.rate.lowest, job.objective.rate.requests) == (4, 0.5, 5)
    assert load_job(write(job={"bench": {"traffic": "trace.jsonl"}, "slo": RATE_SLO,
                               "objective": {"goodput": {"max_rate": 8}}})).objective.rate.max_rate == 8
    bad("objective.goodput.burstiness", "bench.traffic's timestamps are replayed instead", "drop burstiness",
        job={"bench": {"traffic": "trace.jsonl"}, "slo": RATE_SLO,
             "objective": {"goodput": {"max_rate": 8, "burstiness": 2}}})
    bad("objective.goodput.min_rate", "give min_speed with max_speed",
        job={"bench": {"traffic": "trace.jsonl"}, "slo": RATE_SLO,
             "objective": {"goodput": {"max_speed": 8, "min_rate": 2}}})
