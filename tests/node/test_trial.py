"""A trial stopped early for speed still answers the correctness prompts: a config that is
wrong is reported wrong (and banned), not merely slow. On a loaded box the demo's garbage
config was pruned before its check and the gate never saw it."""

from __future__ import annotations

import pytest

from orchestrator.core import correctness, outcome
from orchestrator.core.records import FAIL, PRUNED
from orchestrator.node.spec import BenchPlan, CheckPlan, ServerPlan, TrialSpec
from orchestrator.node.trial import run_trial

pytestmark = pytest.mark.slow

PROMPTS = ["The quick brown fox", "Once upon a time"]


def _spec(tmp_path, number: int, fault: str, reference_texts=None, prune_below=None) -> TrialSpec:
    return TrialSpec(number=number, config={"tp_size": 1, "backend.fault": fault},
                     server=ServerPlan("refserver", {"model": "tiny", "device": "cpu"}, None, {},
                                       startup_timeout_s=60, teardown_grace_s=5),
                     bench=BenchPlan(prompts=("Hello",), output_tokens=16, warmup=1, repeats=2, timeout_s=30),
                     check=CheckPlan(prompts=tuple(PROMPTS), tokens=12,
                                     reference_texts=tuple(reference_texts) if reference_texts else None),
                     log_dir=str(tmp_path / "logs"), registry_dir=str(tmp_path / "servers"),
                     prune_below={1: prune_below} if prune_below else None, measure_bandwidth=False)


def test_a_pruned_wrong_config_fails_the_gate(tmp_path, no_leftover_servers):
    ref = run_trial(_spec(tmp_path, 0, "none"))
    golden, why = correctness.calibrate(PROMPTS, ref.outputs["first"], ref.outputs["second"])
    assert golden is not None, why
    # a threshold no CPU server reaches: the first repeat prunes the trial
    slow = run_trial(_spec(tmp_path, 1, "garbage", reference_texts=golden.texts, prune_below=1e9))
    assert slow.outcome == PRUNED and slow.outputs, slow.failure_reason
    final = outcome.decide(slow, golden=golden).result
    assert final.outcome == FAIL and final.failure_kind == "wrong-output", final
    # a pruned config whose output is right stays PRUNED
    fine = run_trial(_spec(tmp_path, 2, "none", reference_texts=golden.texts, prune_below=1e9))
    assert outcome.decide(fine, golden=golden).result.outcome == PRUNED
