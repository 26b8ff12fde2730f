"""The Hugging Face export of a reference-server preset is the server's own model: the
same weights tensor by tensor, the same tokenizer in both directions, and (where
transformers is installed) the same logits."""

from __future__ import annotations

import json

import pytest
import torch

from orchestrator.refserver import export_hf
from orchestrator.refserver.model import LOGIT_STD, ShardedLlama, full_tensor
from orchestrator.refserver.presets import BOS_ID, PRESETS
from orchestrator.refserver.tokenizer import ByteTokenizer

TEXTS = ["The capital of France is", "déjà vu\tx\n", 'def f(n):\n    """doc"""\n', ""]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return export_hf.export("tiny", tmp_path_factory.mktemp("hf") / "tiny", dtype="float32", max_len=256)


def test_safetensors_hold_the_server_weights(tiny):
    safetensors = pytest.importorskip("safetensors.torch")
    dims = PRESETS["tiny"]
    weights = safetensors.load_file(str(tiny / "model.safetensors"))
    cpu = torch.device("cpu")
    d = dims.hidden
    assert torch.equal(weights["model.embed_tokens.weight"], full_tensor("embed", (dims.vocab, d), 1.0, 0, cpu))
    assert torch.equal(weights["model.layers.3.mlp.down_proj.weight"],
                       full_tensor("layers.3.down", (d, dims.ffn), dims.ffn ** -0.5, 0, cpu))
    assert torch.equal(weights["model.norm.weight"], torch.full((d,), LOGIT_STD))
    assert len(weights) == 2 + 9 * dims.layers + 1  # embed, 9 per layer, final norm, untied head
    config = json.loads((tiny / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_key_value_heads"] == dims.kv_heads
    assert config["tie_word_embeddings"] is False and config["bos_token_id"] == BOS_ID


def test_a_tied_preset_stays_tied():
    items = list(export_hf.tensors(PRESETS["1b"], 0, torch.device("cpu"), torch.bfloat16))
    names = [n for n, _, _ in items]
    assert "lm_head.weight" not in names and names[0] == "model.embed_tokens.weight"
    assert export_hf.config_json(PRESETS["1b"], torch.bfloat16, 4096)["tie_word_embeddings"] is True


def test_tokenizer_encodes_and_decodes_like_the_server(tiny):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    ours = ByteTokenizer(PRESETS["tiny"].vocab)
    for text in TEXTS:
        assert hf.encode(text).ids == ours.encode(text), text
    generated = [300, 65, 0xAE, 400, 10, 511]  # words, bytes, a non-printable byte
    assert hf.decode(generated, skip_special_tokens=False) == ours.decode(generated)


def test_transformers_computes_the_server_logits(tiny):
    transformers = pytest.importorskip("transformers")
    dims = PRESETS["tiny"]
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    ref = ShardedLlama(dims, tp=1, rank=0, device=torch.device("cpu"), dtype=torch.float32, seed=0, max_slots=1,
                       max_len=256, all_reduce=lambda x: None, with_head=True, fused=False)
    ids = ByteTokenizer(dims.vocab).encode(TEXTS[0])
    assert tok(TEXTS[0])["input_ids"] == ids
    n = len(ids)
    with torch.no_grad():
        ours = ref.logits(ref.forward(torch.tensor([ids]), torch.arange(n).view(1, n), torch.tensor([0]), n)[0])
        theirs = hf(torch.tensor([ids])).logits[0].float()
    assert (ours - theirs).abs().max() < 1e-3 and torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_a_full_disk_leaves_no_checkpoint_file_and_says_one_line(tmp_path):
    import subprocess
    import sys

    from conftest import REPO, fill_disk, mounted_tmpfs

    with mounted_tmpfs(tmp_path / "disk", "256k") as disk:
        out = disk / "tiny"
        out.mkdir()
        (out / "config.json").write_text("{}")  # a previous export's file: kept as it was
        fill_disk(disk)
        done = subprocess.run([sys.executable, "-m", "orchestrator.refserver.export_hf", "--model", "tiny",
                               "--out", str(out), "--dtype", "float32"], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 1 and done.stderr.strip() == (f"export_hf: error: cannot write to {out}: "
                                                                "No space left on device"), done.stderr
        assert [p.name for p in out.iterdir()] == ["config.json"] and (out / "config.json").read_text() == "{}"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "tiny"]  # no temporary folder left
