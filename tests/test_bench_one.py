"""`ncclsweep bench`: one configuration measured once, and its NCCL verification launch."""

from __future__ import annotations

import pytest

from conftest import write_job
from orchestrator.bench_one import bench_config, format_result
from orchestrator.job import load_job
from orchestrator.records import TrialResult


def test_format_shows_what_nccl_took_and_its_per_call_choices():
    result = TrialResult(outcome="COMPLETE", config={"tp_size": 2}, value=100.0,
                         metrics={"decode_tok_s": 100.0, "decode_samples": [99.0, 100.0, 101.0], "repeats": 3,
                                  "cv": 0.01, "ttft_s": 0.02, "e2e_tok_s": 95.0},
                         nccl={"version": "2.28.9", "env_applied": {"NCCL_PROTO": "LL"}, "transports": ["SHM/direct/direct"],
                               "per_call": [["AllReduce", 4096, "RING", "LL"]]})
    text = format_result(result)
    assert "NCCL_PROTO=LL" in text and "SHM/direct/direct" in text
    assert "AllReduce 4096 B -> RING LL" in text


@pytest.mark.slow
def test_verification_launch_adds_tuning_to_the_server_env(tmp_path, no_leftover_servers):
    job = load_job(write_job(tmp_path, study="verify"))
    result = bench_config(job, {"tp_size": 2}, verify_nccl=True)
    assert result.outcome == "COMPLETE", result.failure_reason
    assert result.server["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,TUNING"
    assert result.config["tp_size"] == 2 and result.value > 0
