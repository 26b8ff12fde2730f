"""`ncclsweep bench`: one configuration measured once, and its NCCL verification launch (real server
processes: the fake OpenAI server on the reference server's command line, its garbage fault wrong text)."""

from __future__ import annotations

import pytest
from wrapped_server import fake_backend

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.core.records import TrialResult
from orchestrator.driver.bench_command import bench_config, format_result


def test_format_shows_what_nccl_took_and_its_per_call_choices():
    result = TrialResult(outcome="COMPLETE", config={"tp_size": 2}, value=100.0,
                         metrics={"decode_tok_s": 100.0, "decode_samples": [99.0, 100.0, 101.0], "repeats": 3,
                                  "cv": 0.01, "ttft_s": 0.02, "e2e_tok_s": 95.0},
                         nccl={"version": "2.28.9", "env_applied": {"NCCL_PROTO": "LL"},
                               "transports": ["SHM/direct/direct"], "per_call": [["AllReduce", 4096, "RING", "LL"]]})
    text = format_result(result)
    assert "NCCL_PROTO=LL" in text and "SHM/direct/direct" in text
    assert "AllReduce 4096 B -> RING LL" in text


@pytest.mark.slow
def test_verification_launch_adds_tuning_to_the_server_env(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="verify", backend=fake_backend(tmp_path)))
    result = bench_config(job, {"tp_size": 2}, verify_nccl=True)
    assert result.outcome == "COMPLETE", result.failure_reason
    assert result.server["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,TUNING"
    assert result.config["tp_size"] == 2 and result.value > 0


@pytest.mark.slow
def test_bench_applies_the_studys_correctness_gate_and_keeps_one_log_per_run(tmp_path, no_leftover_servers):
    """Once the study holds a golden reference, `bench` gates its output like a trial: a
    shard-order bug (fault garbage) is FAIL wrong-output, exit 1; each run has its own log."""
    import subprocess
    import sys

    from conftest import REPO

    space = "params:\n  tp_size: {choices: [1, 2]}\n  backend.fault: {choices: [none, garbage]}\n"
    job_path = write_job(tmp_path, study="gated", space_text=space, baseline={"tp_size": 1, "backend.fault": "none"},
                         budget={"trials": 1}, backend=fake_backend(tmp_path))

    def ncclsweep(*argv):
        return subprocess.run([sys.executable, "-m", "orchestrator", *argv], capture_output=True, text=True,
                              timeout=300, cwd=REPO)

    before = ncclsweep("bench", str(job_path), "--set", "tp_size=1")
    assert before.returncode == 0, before.stderr
    assert "correctness: not checked: the study has no golden reference yet" in before.stdout
    assert ncclsweep("run", str(job_path)).returncode == 0
    good = ncclsweep("bench", str(job_path), "--set", "tp_size=2")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "correctness: passed the study's gate" in good.stdout
    bad = ncclsweep("bench", str(job_path), "--set", "backend.fault=garbage")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL wrong-output: greedy output differs from the reference" in bad.stdout
    assert "which does not count: the output is wrong" in bad.stdout
    logs = sorted((tmp_path / "reports" / "gated" / "bench-logs").glob("bench-*.log"))
    assert len(logs) == 3, logs  # one per bench run, never appended
    assert all(log.read_text().count("fake server listening on") == 1 for log in logs)  # one server's start each


def test_format_shows_goodputs_crossing_and_the_lengths_measured():
    from orchestrator.core.measurement import Distribution, GoodputResult, Lengths, LevelResult, Measurement

    m = Measurement(levels={1: LevelResult(1, samples=(700.0,)), 16: LevelResult(16, samples=(858.8,)),
                            17: LevelResult(17, samples=(860.0,))},
                    goodput=GoodputResult(32, (1, 32, 16, 24, 20, 18, 17), 16, 17),
                    lengths=Lengths(input=Distribution.of([5, 9]), output=Distribution.of([12, 12])))
    text = format_result(TrialResult(outcome="COMPLETE", config={}, value=m.value, measurement=m))
    assert "goodput: holds the SLO up to 16 stream(s) (breaks at 17), 858.8 total tok/s there (probed 1, 32, 16" in text
    assert "lengths: input tokens min 5, p50 7" in text


def test_format_shows_the_capacity_point_and_where_the_engine_changes_regime():
    """Issue 47: `bench` of a goodput job says where the config serves the most within the SLO, the
    loads it probed, and the regime marks it probed at."""
    from orchestrator.core.measurement import GRAPHS, GoodputResult, LevelResult, Measurement, RegimeMark

    m = Measurement(levels={n: LevelResult(n, samples=(v,), whole_run_tok_s=0.9 * v if n > 1 else None)
                            for n, v in {1: 20.0, 64: 1022.0, 65: 414.0, 128: 679.0}.items()},
                    goodput=GoodputResult(128, (1, 64, 65, 128), 64, None, held=(True,) * 4,
                                          marks=(RegimeMark(64, GRAPHS, "capture_sizes"),)))
    text = format_result(TrialResult(outcome="COMPLETE", config={}, value=m.value, measurement=m))
    assert ("goodput: serves the most within the SLO at 64 stream(s): 1022.0 total tok/s (holds it up to 128) "
            "(probed 1, 64, 65, 128)") in text
    assert "regime: CUDA graphs captured up to 64 (capture_sizes)" in text
    assert "whole run 919.8 tok/s" in text  # beside the steady state at each level N


def test_format_shows_each_rate_probed_and_the_capacity():
    """`bench` of a job by request rate prints each probe (rate, attainment, tok/s, the targeted
    percentile, whether it held) and the capacity line, as it does for the search over concurrency."""
    from orchestrator.core.measurement import Latency, Measurement, RateProbe, RateResult
    from orchestrator.core.slo import RequestSlo, Targets

    probes = (RateProbe(15.0, 100, 100, True, tok_s=146.6, ttft=Latency(0.05, 0.1, 0.16, 100)),
              RateProbe(30.0, 100, 23, False, tok_s=194.0, ttft=Latency(0.5, 1.2, 1.7, 100)),
              RateProbe(22.5, 100, 100, True, tok_s=187.1, ttft=Latency(0.1, 0.2, 0.25, 100)))
    m = Measurement(levels={}, rate=RateResult(30.0, 15.0, probes, holds=22.5, breaks=30.0, attainment=0.99,
                                               targets=("ttft",)))
    targets = Targets(per_request=(RequestSlo("ttft", 0.3),), attainment=0.99)
    lines = format_result(TrialResult(outcome="COMPLETE", config={}, value=m.value, measurement=m), targets)
    said = lines.splitlines()
    assert [line for line in said if line.startswith("rate ")] == [
        "rate 15 req/s: attainment 100.0% (100 of 100), 146.6 tok/s, TTFT p99 160 ms (target 300 ms): holds",
        "rate 30 req/s: attainment 23.0% (23 of 100), 194.0 tok/s, TTFT p99 1.7 s (target 300 ms): breaks",
        "rate 22.5 req/s: attainment 100.0% (100 of 100), 187.1 tok/s, TTFT p99 250 ms (target 300 ms): holds"]
    assert ("goodput: serves the most within the SLO at 22.5 req/s: 187.1 tok/s (attainment 100.0%; breaks at "
            "30 req/s: attainment 23.0%)") in said
    assert not any("stream" in line or "level" in line for line in said)
