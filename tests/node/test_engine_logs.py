"""Real engine logs (tests/fixtures/vllm/): the fatal lines the tree watch acts on are found
in a real crash and in no healthy start; NCCL's lines of vLLM's workers parse."""

from __future__ import annotations

import pytest

from conftest import TESTS
from orchestrator.backends import get_backend_class
from orchestrator.core import nccl
from orchestrator.node.treewatch import find_fatal

LOGS = TESTS / "fixtures" / "vllm"
HEALTHY = ["vllm-0.26.0-h200-tp1-eager-serve.log", "vllm-0.26.0-h200-tp1-graphs-serve.log",
           "vllm-0.26.0-h200-tp1-graphs-trial.log", "vllm-0.26.0-2xh200-tp2-eager-p2poff-simple-nccl-info.log",
           "vllm-0.26.0-2xh200-tp2-eager-p2poff-ll-nccl-info.log",
           "vllm-0.26.0-2xh200-tp2-graphs-p2poff-simple-ring-trial.log"]
CRASH = "vllm-0.26.0-2xh200-tp2-graphs-p2poff-crash-illegal-address.log"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(errors="replace").splitlines()


@pytest.fixture(scope="module")
def vllm_fatal():
    return get_backend_class("vllm")({"model": "/models/m", "version": "0.26.0"}).watch_rules().fatal_regex()


def test_the_worker_crash_is_found_at_its_first_line(vllm_fatal):
    lines = _lines(CRASH)
    i = find_fatal(lines, vllm_fatal)
    assert i is not None and "WorkerProc hit an exception" in lines[i]
    assert "21:19:29" in lines[i]  # the moment the workers died, not the end of the log
    later = [j for j, line in enumerate(lines) if "EngineCore failed to start" in line]
    assert later and later[0] > i


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_starts_have_no_fatal_line(name, vllm_fatal):
    """What the watch reads: the log until the study tears the server down (vLLM logs an
    EngineDeadError while it shuts down on our SIGTERM; the watch has stopped by then)."""
    lines = _lines(name)
    teardown = next((i for i, line in enumerate(lines) if "[shutdown]" in line), len(lines))
    assert find_fatal(lines[:teardown], vllm_fatal) is None


@pytest.mark.parametrize("name,proto", [("vllm-0.26.0-2xh200-tp2-eager-p2poff-simple-nccl-info.log", "Simple"),
                                        ("vllm-0.26.0-2xh200-tp2-eager-p2poff-ll-nccl-info.log", "LL")])
def test_nccl_lines_of_vllm_workers_parse(name, proto):
    info = nccl.parse_log((LOGS / name).read_text(errors="replace"))
    assert info["version"] == "2.28.9" and info["nranks"] == 2
    assert info["env_applied"]["NCCL_PROTO"] == proto and info["env_applied"]["NCCL_P2P_DISABLE"] == "1"
    assert info["transports"] == ["SHM/direct/direct"]
    assert not nccl.verify_applied({"NCCL_PROTO": proto, "NCCL_P2P_DISABLE": "1"}, info)


def test_a_tp1_server_shows_no_nccl_and_that_is_no_warning():
    info = nccl.parse_log((LOGS / "vllm-0.26.0-h200-tp1-graphs-trial.log").read_text(errors="replace"))
    assert info["version"] is None and info["transports"] == []


def test_nccl_algo_tree_for_every_collective_kills_vllms_workers(vllm_fatal):
    """Seen on 2x H200: NCCL_ALGO=Tree applies to every collective, and NCCL has no Tree
    AllGather (vLLM gathers logits with one at TP > 1): NCCL refuses (invalid usage), the
    workers die while the API server stays up. The watch sees the worker's line; the trial is
    the config's fault (nccl-invalid), not a crash to retry. Tuning the all-reduce alone is
    NCCL_ALGO=allreduce:tree."""
    name = "vllm-0.26.0-2xh200-tp2-graphs-p2poff-tree-ll-allgather-refused.log"
    text = (LOGS / name).read_text(errors="replace")
    lines = text.splitlines()
    i = find_fatal(lines, vllm_fatal)
    assert i is not None and "WorkerProc hit an exception" in lines[i]
    assert nccl.classify_failure(text) == "nccl-invalid"
    refusal = [ln for ln in lines if "no algorithm/protocol available for function AllGather" in ln]
    assert refusal and "NCCL_ALGO was set to Tree" in refusal[0]


def test_a_tp2_graphs_trial_of_vllm_took_the_settings():
    log = LOGS / "vllm-0.26.0-2xh200-tp2-graphs-p2poff-simple-ring-trial.log"
    info = nccl.parse_log(log.read_text(errors="replace"))
    assert info["nranks"] == 2 and info["transports"] == ["SHM/direct/direct"]
    assert not nccl.verify_applied({"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"}, info)
