"""ceiling: bytes per token / bandwidth + all-reduce floor, split across TP GPUs."""

from __future__ import annotations

import pytest

from orchestrator.core.ceiling import ceiling_for, decode_ceiling, parse_bandwidth, speculative_ceiling


def test_memory_only():
    c = decode_ceiling(1e9, 1e12)  # 1 GB per token at 1 TB/s: 1 ms
    assert c["memory_s"] == pytest.approx(1e-3)
    assert c["comm_s"] == 0.0
    assert c["ceiling_tok_s"] == pytest.approx(1000.0)
    assert c["time_per_token_s"] == pytest.approx(1e-3)


def test_tp_splits_bytes_and_adds_the_communication_floor():
    # the motivating case's shape: 157 all-reduces x 135 us on top of the memory time
    c = decode_ceiling(8e9, 1e12, allreduces_per_step=157, allreduce_latency_s=135e-6, tp=8)
    assert c["memory_s"] == pytest.approx(1e-3)
    assert c["comm_s"] == pytest.approx(157 * 135e-6)
    assert c["ceiling_tok_s"] == pytest.approx(1 / (1e-3 + 157 * 135e-6))


def test_no_communication_at_tp1():
    c = decode_ceiling(1e9, 1e12, allreduces_per_step=10, allreduce_latency_s=1e-3, tp=1)
    assert c["comm_s"] == 0.0


@pytest.mark.parametrize("args", [(0, 1e12), (1e9, 0), (1e9, -1), (float("nan"), 1e12)])
def test_rejects_nonsense(args):
    with pytest.raises(ValueError):
        decode_ceiling(*args)
    with pytest.raises(ValueError):
        decode_ceiling(1e9, 1e12, tp=0)


def test_ceiling_for_model_facts():
    facts = {"bytes_per_token": 13_117_440, "allreduces_per_step": 8, "hidden_size": 256}
    c = ceiling_for(facts, 50e9, tp=2, allreduce_latency_s=20e-6)
    assert c["memory_s"] == pytest.approx(13_117_440 / 2 / 50e9)
    assert c["comm_s"] == pytest.approx(8 * 20e-6) and c["comm_known"]
    unknown = ceiling_for(facts, 50e9, tp=2)
    assert unknown["comm_s"] == 0.0 and not unknown["comm_known"]
    assert ceiling_for({}, 50e9) is None
    assert ceiling_for(facts, None) is None


@pytest.mark.parametrize("text,value", [("900 GB/s", 900e9), ("3.35TB/s", 3.35e12), (1.5e12, 1.5e12),
                                         ("1e11", 1e11), ("64 GiB/s", 64 * 2**30)])
def test_parse_bandwidth(text, value):
    assert parse_bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["fast", "-3 GB/s", 0, True])
def test_parse_bandwidth_rejects(bad):
    with pytest.raises(ValueError):
        parse_bandwidth(bad)


# The ceiling of one token per weight pass, and what speculative decoding reaches past it: a
# step that verifies drafted tokens reads the weights once and yields the mean accepted length.
def test_tokens_per_weight_pass_multiply_the_one_token_ceiling():
    one = decode_ceiling(bytes_per_token=2e9, bandwidth_bytes_s=4.8e12)  # 2400 tok/s
    spec = speculative_ceiling(one, 3.74)
    assert spec["tokens_per_pass"] == 3.74
    assert spec["speculative_ceiling_tok_s"] == pytest.approx(one["ceiling_tok_s"] * 3.74)
    assert speculative_ceiling(one, 1.0)["speculative_ceiling_tok_s"] == one["ceiling_tok_s"]  # nothing accepted


@pytest.mark.parametrize("length", [0.5, 0.0, float("nan"), float("inf")])
def test_a_step_yields_at_least_its_own_token(length):
    with pytest.raises(ValueError, match="at least 1 token per step"):
        speculative_ceiling(decode_ceiling(2e9, 4.8e12), length)
