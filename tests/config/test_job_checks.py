"""What a job's configs must pass across job, space and backend before anything is launched
(job_checks): the baseline and a reference config checked like the space's values, NCCL
values unsafe on PCIe only with allow_unsafe_nccl, TP x PP against gpus_per_node, the
backend's check_config on every config of the space (on a space too large to enumerate,
every value applied to the baseline). Bad input names file and key path."""

from __future__ import annotations

import pytest
from job_files import bad, in_tmp, needs_nccl, write  # noqa: F401 - in_tmp: autouse, each test in a tmp dir

from orchestrator.config.job import load_job
from orchestrator.core.errors import ConfigRejected


def test_reference_config_merged_onto_defaults():
    job = load_job(write({"correctness": {"reference": {"tp_size": 1, "backend.threads": 1}}}))
    assert job.correctness.reference_kind == "config"
    assert job.correctness.reference == {"tp_size": 1, "graph_capture": False, "backend.threads": 1}


def test_gpu_job_tp_fits(tmp_path):
    job = load_job(write({"gpus_per_node": 2, "backend": {"kind": "refserver",
                                                          "settings": {"model": "tiny", "device": "cuda"}}},
                         space={"params": {"tp_size": [1, 2], "graph_capture": [False, True],
                                           "capture_sizes": {"choices": ["1,2,4,8"],
                                                             "when": {"graph_capture": True}}}}))
    assert job.context()["gpus_per_node"] == 2 and not job.context()["cpu_job"]
    assert job.space.size() == 4


def test_bad_tp_larger_than_gpus():
    msg = bad("params.tp_size", "tp_size=4", "gpus_per_node: 2", "job.yaml", "allowed: tp_size x pp_size <= 2",
              file="space.yaml",
              job={"gpus_per_node": 2,
                   "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cuda"}}},
              space={"params": {"tp_size": [1, 2, 4]}})
    assert "needs 4 GPUs" in msg


def test_bad_baseline_tp_larger_than_gpus():
    bad("baseline.tp_size", "gpus_per_node: 1",
        job={"gpus_per_node": 1, "baseline": {"tp_size": 2},
             "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cuda"}}},
        space={"params": {"backend.threads": [1, 2]}})


def test_bad_unsafe_nccl_without_opt_in():
    needs_nccl()
    space = {"params": {"tp_size": [1, 2], "env.NCCL_PROTO": ["LL", "LL128"]}}
    msg = bad("params.env.NCCL_PROTO.choices[1]", "LL128", "allow_unsafe_nccl: true", "job.yaml",
              file="space.yaml", space=space)
    assert "unsafe" in msg
    assert load_job(write({"allow_unsafe_nccl": True}, space)).space.size() == 4
    bad("env.NCCL_PROTO", "LL128", "allow_unsafe_nccl", job={"env": {"NCCL_PROTO": "LL128"}})


def test_bad_baseline_key_not_in_space():
    bad("baseline.tp", "unknown parameter 'tp' (did you mean 'tp_size'?)",
        "the space's params: tp_size, backend.threads", job={"baseline": {"tp": 2}})
    bad("baseline.NCCL_PROTO", "did you mean 'env.NCCL_PROTO'", job={"baseline": {"NCCL_PROTO": "LL"}})


def test_bad_baseline_value_not_in_space():
    bad("baseline.backend.threads", "8 is not in the space", "space.yaml params.backend.threads", "one of 1, 2",
        job={"baseline": {"backend.threads": 8}})


def test_bad_config_the_backend_cannot_express():
    err = bad("params.graph_capture", "graph_capture=true needs device cuda", file="space.yaml",
              space={"params": {"tp_size": [1, 2], "graph_capture": [False, True]}})
    assert "graph_capture" in err
    with pytest.raises(ConfigRejected):
        load_job(write(space={"params": {"tp_size": [1, 2], "graph_capture": [False, True]}}))


def test_large_space_checks_each_value_against_baseline():
    # Over 2000 configs: not enumerated at load, but every value is still checked with the backend.
    space = {"params": {"tp_size": [1, 2], "backend.max_batch": {"type": "int", "low": 1, "high": 5000},
                        "graph_capture": [False, True]}}
    bad("params.graph_capture", "needs device cuda", file="space.yaml", space=space)
    space["params"]["graph_capture"] = [False]
    job = load_job(write(space=space))
    assert job.space.size(limit=2000) is None and job.space.size() == 2 * 5000
