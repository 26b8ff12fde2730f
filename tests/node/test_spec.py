"""What one trial is as its node receives it (node/spec.py): ``TrialSpec.from_job`` turns a real
job's sections into the server's, the benchmark's and the gate's plans in one place; the spec
is plain data that crosses to a worker (pickled) and is never changed afterwards; the gate's
plan follows the job's correctness section."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.node.spec import CheckPlan, TrialSpec, check_plan


@pytest.fixture
def job(tmp_path):
    return load_job(write_job(tmp_path, env={"OMP_NUM_THREADS": "1"},
                              bench={"output_tokens": 24, "warmup": 2, "repeats": 3, "max_repeats": 5,
                                     "target_rel_ci": 0.02, "concurrency": [1, 8]},
                              timeouts={"startup": "90s", "bench": "45s", "teardown": "7s"},
                              constraints=[{"concurrency": 8, "min_ratio": 0.9}]))


def test_the_spec_carries_the_jobs_settings(job):
    config = {"tp_size": 2, "backend.threads": 1}
    spec = TrialSpec.from_job(job, 12, config, extra_env={"NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"})
    assert (spec.number, spec.config) == (12, config) and spec.config is not config
    server = spec.server
    assert (server.backend_kind, dict(server.backend_settings)) == ("refserver", {"model": "tiny", "device": "cpu"})
    assert dict(server.env) == {"OMP_NUM_THREADS": "1", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}
    assert (server.startup_timeout_s, server.teardown_grace_s, server.job_file) == (90, 7, str(job.path))
    bench = spec.bench
    assert bench.prompts == job.bench.prompts and (bench.output_tokens, bench.warmup) == (24, 2)
    assert (bench.repeats, bench.max_repeats, bench.target_rel_ci, bench.timeout_s) == (3, 5, 0.02, 45)
    assert bench.constraint_levels == (8,)  # what the outcome constraint reads, measured by the trial
    assert spec.log_path == job.dir.logs / "trial-0012.log" and spec.registry_dir == str(job.dir.servers)
    assert spec.check == CheckPlan() and spec.prune_below is None
    assert spec.device_check is False  # a CPU job: no GPUs to check


def test_the_spec_is_plain_data_never_changed(job, tmp_path):
    spec = TrialSpec.from_job(job, 3, {"tp_size": 1}, prune_below={1: 40.0}, log_dir=tmp_path / "bench-logs",
                              log_name="bench-1.log", device_check=True)
    assert pickle.loads(pickle.dumps(spec)) == spec  # what crosses to a Ray actor
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.number = 4  # type: ignore[misc]
    variant = dataclasses.replace(spec, number=4)
    assert (variant.number, spec.number) == (4, 3)
    assert spec.log_path == tmp_path / "bench-logs" / "bench-1.log" and spec.device_check
    assert dict(spec.prune_below) == {1: 40.0}


def test_the_gate_captures_what_the_correctness_section_says(job, tmp_path):
    capture = check_plan(job, None)  # the reference itself
    assert capture.prompts == tuple(job.correctness.prompts) and capture.reference_texts is None
    assert (capture.tokens, capture.logprobs) == (job.correctness.check_tokens, job.correctness.logprobs)
    gate = check_plan(job, ["fox text", "time text"])
    assert gate.reference_texts == ("fox text", "time text") and gate.prompts == capture.prompts
    assert check_plan(job, None, prompts=("only this",)).prompts == ("only this",)
    off = load_job(write_job(tmp_path, study="off", correctness={"enabled": False}))
    assert check_plan(off, ["x"]) == CheckPlan()  # nothing captured, nothing compared


def test_the_start_up_limit_grows_with_the_longest_start_the_study_measured(job):
    # no start measured yet, or starts well within it: timeouts.startup as written
    quiet = TrialSpec.from_job(job, 1, {"tp_size": 1}, measured_starts=[None, 12.0, 20.0])
    assert (quiet.server.startup_timeout_s, quiet.server.startup_basis) == (90, "timeouts.startup")
    # a host that got busier slows every start alike: 4x the longest measured start, and the
    # reason a start ends at it says so
    slow = TrialSpec.from_job(job, 2, {"tp_size": 1}, measured_starts=[12.0, 40.0, None])
    assert slow.server.startup_timeout_s == 160
    assert slow.server.startup_basis == "4x the longest start this study measured, 40s, above timeouts.startup 90s"


def test_the_bench_plan_says_how_a_launch_measures_through_its_objectives_kind():
    """Issue 46: the node asks the plan's kind (``Objective(...)`` of its fields) whether a launch searches
    the load axis, not whether a field is set."""
    from orchestrator.core.objectives import Goodput, RateGoodput, Single
    from orchestrator.core.rate_search import RateAxis
    from orchestrator.node.spec import BenchPlan

    assert isinstance(BenchPlan(prompts=("x",)).kind, Single) and not BenchPlan(prompts=("x",)).kind.searches_load
    load = BenchPlan(prompts=("x",), goodput=64)
    assert isinstance(load.kind, Goodput) and load.kind.searches_load
    rate = BenchPlan(prompts=("x",), rate=RateAxis(40))
    assert isinstance(rate.kind, RateGoodput) and not rate.kind.searches_load


def test_the_worker_measures_the_bandwidth_only_where_the_ceiling_can_use_it(job, tmp_path):
    """The reference server's facts give its bytes per token: its trials measure the node's bandwidth.
    A command whose model is unknown, or a job that declares the bandwidth, gets no copy that nothing reads."""
    assert TrialSpec.from_job(job, 0, {"tp_size": 1}).measure_bandwidth is True
    (tmp_path / "declared").mkdir()
    (tmp_path / "command").mkdir()
    declared = load_job(write_job(tmp_path / "declared", hardware={"memory_bandwidth": "100 GB/s"}))
    assert TrialSpec.from_job(declared, 0, {"tp_size": 1}).measure_bandwidth is False
    command = {"kind": "command", "settings": {"argv": ["server", "--x", "{backend.x}", "--port", "{port}"],
                                               "model_name": "m"}}
    unknown = load_job(write_job(tmp_path / "command", backend=command, baseline={"backend.x": 1},
                                 space_text="params:\n  backend.x: {choices: [1, 2]}\n"))
    assert TrialSpec.from_job(unknown, 0, {"backend.x": 1}).measure_bandwidth is False
    assert TrialSpec.from_job(unknown, 0, {"backend.x": 1}, measure_bandwidth=True).measure_bandwidth is True
