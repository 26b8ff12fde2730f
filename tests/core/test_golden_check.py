"""The golden reference is checked before any comparison: calibrated on real outputs
(tests/data/reference_outputs.json) a usable reference passes and a degenerate one is refused
with why; the outvote rule needs two distinct configs that agree, and a value that returns
to a default is no shared departure. The studies that stop on an unusable reference are
tests/e2e/test_golden_reference.py."""

from __future__ import annotations

import json
import math

import pytest

from conftest import TESTS
from orchestrator.core import golden_check
from orchestrator.core.correctness import Golden

OUTPUTS = json.loads((TESTS / "data" / "reference_outputs.json").read_text())


def golden(name: str, **kw) -> Golden:
    data = OUTPUTS[name]
    texts = data["texts"]
    return Golden(prompts=[f"p{i}" for i in range(len(texts))], texts=texts, tokens=data.get("tokens") or [], **kw)


@pytest.mark.parametrize("name", ["refserver-tiny-12", "refserver-tiny-32", "gpu-8b", "gpu-1b"])
def test_real_outputs_of_working_servers_are_usable(name):
    """Random-weight models repeat words (' pekuge pekuge pekuge pekuge pekuge dofo',
    ' tanifo' six times): repetition inside an output is not degeneration."""
    assert golden_check.unusable(golden(name)) == (None, [])


@pytest.mark.parametrize("name", ["refserver-tiny-garbage-12", "refserver-tiny-garbage-32"])
def test_garbage_fault_looks_like_text_so_its_own_check_passes(name):
    """The reference server's shard-order bug gives another random function, text as
    plausible as the working server's: no check of the text alone can refuse it (the
    study-level test below catches it by the configs that outvote it)."""
    assert golden_check.unusable(golden(name)) == (None, [])


def test_the_old_1b_output_is_refused_even_when_repetition_is_allowed():
    for allow in (False, True):
        why, _ = golden_check.unusable(golden("gpu-1b-before-fix"), allow)
        assert why and "not text on 2 of 3 prompts" in why and "only whitespace" in why


def test_a_two_token_cycle_is_refused_unless_the_job_allows_it():
    texts = [OUTPUTS["vllm-dummy"]["texts"][0], " ROMtax ROMtax ROMtax ROMtax ROMtax", " qa qa qa qa qa qa qa"]
    g = Golden(prompts=["a", "b", "c"], texts=texts,
               tokens=[[" FAIL", "er"] * 8, [" ROM", "tax"] * 5, [" qa"] * 7])
    why, _ = golden_check.unusable(g)
    assert "repeats ' FAILer'" in why and "allow_repetitive_reference: true" in why
    why, warnings = golden_check.unusable(g, allow_repetitive=True)
    assert why is None and "repetitive" in warnings[0]
    assert golden_check.cycle_unit(" a b c a b c a b c") is None  # a longer cycle reads as text


def test_same_output_for_every_prompt_and_non_finite_logprobs_are_refused():
    same = OUTPUTS["gpu-8b"]["texts"][0]
    assert "same output" in golden_check.unusable(Golden(prompts=["a", "b"], texts=[same, same]))[0]
    g = golden("gpu-8b", logprobs=[[-0.1, -0.2], [-0.3, math.nan], [-0.1]])
    assert "not finite" in golden_check.unusable(g)[0]
    bad = Golden(prompts=["a", "b"], texts=["\ufffd\ufffd\ufffd x", "<0xFD><0xDA><0x80> y"])
    assert "replacement characters or raw bytes" in golden_check.unusable(bad)[0]


def test_outvoted_needs_two_distinct_configs_that_agree():
    ref = ["x1 x2", "y1 y2"]
    other = ["a1 a2", "b1 b2"]
    assert golden_check.outvoted(ref, [(1, "k1", other)]) is None
    assert golden_check.outvoted(ref, [(1, "k1", other), (2, "k1", other)]) is None  # the same config twice
    assert golden_check.outvoted(ref, [(1, "k1", other), (2, "k2", ["c", "d"])]) is None  # they disagree
    why = golden_check.outvoted(ref, [(1, "k1", other), (2, "k2", other)])
    assert "trials 1, 2" in why and "odd one out" in why


# ---- what counts as a shared departure (the outvote rule's one exception) ------------------------

def test_returning_to_a_default_is_no_shared_departure():
    """Every form of a garbage baseline: a fault set in the baseline (the correct configs all
    carry the server's own `backend.fault: none`), a baseline that differs from the trials in
    several params (they share `tp_size: 1`, the backend's default), a baseline setting that
    the trials leave out (an NCCL variable dropped at TP 1). None of these shares a setting
    that could explain two configs' agreement; a non-default value both set does."""
    from orchestrator.backends.command import CommandBackend
    from orchestrator.backends.refserver import RefServerBackend

    ref = RefServerBackend({"model": "tiny", "device": "cpu"})
    norm, defaults = ref.normalize, ref.default_values()
    garbage = norm({"tp_size": 2, "backend.threads": 1, "backend.fault": "garbage", "env.NCCL_PROTO": "LL128"})
    a = norm({"tp_size": 1, "backend.threads": 1, "backend.fault": "none"})
    b = norm({"tp_size": 1, "backend.threads": 2, "backend.fault": "none"})
    c = norm({"tp_size": 2, "backend.threads": 2, "backend.fault": "none", "env.NCCL_PROTO": "LL"})
    assert "env.NCCL_PROTO" in garbage and "env.NCCL_PROTO" not in a  # dropped at TP 1: both leave it out
    assert golden_check.shared_departure(a, b, garbage, defaults) is None  # tp_size 1, fault none: defaults
    assert golden_check.shared_departure(b, c, garbage, defaults) == "backend.threads"  # 2: neither default nor base
    assert golden_check.shared_departure(a, c, garbage, defaults) is None  # threads 1 is the baseline's own
    # the same rule without the default: tp_size=1 and fault=none would be departures
    assert golden_check.shared_departure(a, b, garbage, {}) == "backend.fault"
    # the command backend's settings.defaults fill what a config leaves out: they are its defaults
    cmd = CommandBackend({"argv": ["{python}", "-m", "orchestrator.refserver", "--port", "{port}",
                                   "--fault", "{backend.fault}"], "defaults": {"backend.fault": "slow-start:0"}})
    x, y = {"tp_size": 2, "backend.fault": "slow-start:0"}, {"tp_size": 4, "backend.fault": "slow-start:0"}
    assert golden_check.shared_departure(x, y, {"tp_size": 1, "backend.fault": "garbage"}, cmd.default_values()) is None


def test_a_pair_that_shares_a_departure_is_no_vote():
    ref = ["x1 x2", "y1 y2"]
    other = ["a1 a2", "b1 b2"]
    failed = [(1, "k1", other), (2, "k2", other)]
    assert golden_check.outvoted(ref, failed, related=lambda a, b: True) is None
    unrelated_to_3 = lambda a, b: 3 not in (a, b)  # noqa: E731 - 1 and 2 share a setting, 3 shares none
    why = golden_check.outvoted(ref, [*failed, (3, "k3", other)], related=unrelated_to_3)
    assert why is not None and "trials 1, 2, 3" in why


