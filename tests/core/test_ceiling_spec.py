"""The ceiling of one token per weight pass, and what speculative decoding reaches past it: a
step that verifies drafted tokens reads the weights once and yields the mean accepted length."""

from __future__ import annotations

import pytest

from orchestrator.core.ceiling import decode_ceiling, speculative_ceiling


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
