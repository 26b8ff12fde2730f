"""The reference server's presets (presets.py, read by the tuner without torch): parameter
counts of the Llama models they mirror, weight and KV bytes, the TP rules, overridden
dimensions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.refserver.presets import PRESETS, ModelDims


def test_presets_module_does_not_import_torch():
    code = ("import sys, orchestrator.refserver.presets as p; "
            "assert 'torch' not in sys.modules; print(sorted(p.PRESETS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['1b', '8b', 'tiny']"


def test_preset_sizes_match_the_llama_models():
    assert PRESETS["1b"].param_count() == pytest.approx(1.236e9, rel=0.01)  # Llama-3.2-1B
    assert PRESETS["8b"].param_count() == pytest.approx(8.03e9, rel=0.01)  # Llama-3-8B
    tiny = PRESETS["tiny"]
    assert tiny.param_count() < 5e6
    assert tiny.allreduces_per_step() == 2 * tiny.layers == 8
    assert (tiny.heads, tiny.kv_heads) == (8, 4)


def test_weight_bytes_counts_layers_and_head_not_the_whole_embedding():
    d = PRESETS["8b"]
    bf16 = d.weight_bytes(2)
    assert bf16 == pytest.approx(2 * (d.param_count() - d.vocab * d.hidden), rel=1e-3)
    assert d.weight_bytes(4) == 2 * bf16
    assert d.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2
    facts = d.model_facts("bfloat16")
    assert facts["bytes_per_token"] == bf16 and facts["allreduces_per_step"] == 64
    assert facts["hidden_size"] == 4096 and facts["dtype_bytes"] == 2


def test_tp_rules():
    tiny = PRESETS["tiny"]
    assert tiny.allowed_tp(8) == [1, 2, 4]
    assert tiny.tp_error(2) is None
    assert "heads" in tiny.tp_error(3)
    assert PRESETS["8b"].allowed_tp(8) == [1, 2, 4, 8]


def test_dims_override_and_validation():
    d = PRESETS["tiny"].with_overrides(layers=2, hidden=None)
    assert isinstance(d, ModelDims) and d.layers == 2 and d.hidden == 256
    assert "--kv-heads" in PRESETS["tiny"].with_overrides(kv_heads=3).dims_error()
    assert "--vocab" in PRESETS["tiny"].with_overrides(vocab=100).dims_error()
