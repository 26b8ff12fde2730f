"""Export a reference-server preset as a Hugging Face Llama checkpoint, for real engines.

    python -m orchestrator.refserver.export_hf --model 1b --out /models/refserver-1b --device cuda

writes ``config.json`` (``LlamaForCausalLM``), ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` and ``generation_config.json``. vLLM or SGLang then serve the
very weights the reference server computes with, so their greedy outputs can be checked
against each other and their decode speed compared on the same model.

The weights are the server's own: every tensor comes from ``model.full_tensor`` with the
same seed and name, on the same kind of device (CUDA and CPU generators draw different
numbers: export with ``--device cuda`` for a server that runs on CUDA). Mapping:

- q/k projections are taken before the server's rotary-pair reordering (it keeps pair
  (i, i + head_dim/2) adjacent; Hugging Face's ``rotate_half`` uses that pair as is);
- the server multiplies the logits by ``LOGIT_STD`` (8, a power of two): folded into the
  final norm's weight, which leaves bf16 logits bit-identical;
- a tied head (``1b``) stays tied (``tie_word_embeddings``).

The tokenizer mirrors ``tokenizer.ByteTokenizer``: a BPE model without merges whose
pieces are the printable bytes, ``<0xNN>`` for the others (byte fallback), BOS/EOS as
special tokens, and the word pieces (`` kato``) that only generation produces; encoding
gives byte tokens only, exactly like the server. The safetensors file is written
directly (an 8-byte header length, a JSON header, raw little-endian tensors), one tensor
at a time, so an 8b export needs one tensor's memory, not the model's.

Every file is written whole or not at all: the checkpoint is written into a temporary folder
beside ``--out`` (flushed to disk), and its files are renamed into ``--out`` only when all of
them are written; a file system that refuses a write (a full disk) leaves ``--out`` as it
was and says so in one line (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from orchestrator.refserver.model import LOGIT_STD, full_tensor
from orchestrator.refserver.presets import BOS_ID, EOS_ID, NUM_BYTE_TOKENS, PRESETS, ModelDims
from orchestrator.refserver.tokenizer import _byte_piece, _word_piece

BOS_TEXT = "<|begin_of_text|>"
EOS_TEXT = "<|end_of_text|>"
_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


def tensors(dims: ModelDims, seed: int, device: torch.device,
            dtype: torch.dtype) -> Iterator[tuple[str, tuple, Callable[[], torch.Tensor]]]:
    """(Hugging Face name, shape, thunk producing the tensor) for every weight, in file order."""
    d, hd = dims.hidden, dims.head_dim

    def gen(name: str, shape: tuple, std: float):
        return lambda: full_tensor(name, shape, std, seed, device).to(dtype)

    def ones(shape: tuple, value: float = 1.0):
        return lambda: torch.full(shape, value, device=device, dtype=dtype)

    embed_std = d ** -0.5 if dims.tie_embeddings else 1.0  # as model.ShardedLlama draws it
    yield "model.embed_tokens.weight", (dims.vocab, d), gen("embed", (dims.vocab, d), embed_std)
    for i in range(dims.layers):
        p, q = f"layers.{i}.", f"model.layers.{i}."
        yield q + "input_layernorm.weight", (d,), ones((d,))
        yield q + "self_attn.q_proj.weight", (dims.heads * hd, d), gen(p + "q", (dims.heads * hd, d), d ** -0.5)
        yield q + "self_attn.k_proj.weight", (dims.kv_heads * hd, d), gen(p + "k", (dims.kv_heads * hd, d), d ** -0.5)
        yield q + "self_attn.v_proj.weight", (dims.kv_heads * hd, d), gen(p + "v", (dims.kv_heads * hd, d), d ** -0.5)
        yield q + "self_attn.o_proj.weight", (d, dims.heads * hd), gen(p + "o", (d, dims.heads * hd),
                                                                       (dims.heads * hd) ** -0.5)
        yield q + "post_attention_layernorm.weight", (d,), ones((d,))
        yield q + "mlp.gate_proj.weight", (dims.ffn, d), gen(p + "gate", (dims.ffn, d), d ** -0.5)
        yield q + "mlp.up_proj.weight", (dims.ffn, d), gen(p + "up", (dims.ffn, d), d ** -0.5)
        yield q + "mlp.down_proj.weight", (d, dims.ffn), gen(p + "down", (d, dims.ffn), dims.ffn ** -0.5)
    yield "model.norm.weight", (d,), ones((d,), LOGIT_STD)
    if not dims.tie_embeddings:
        yield "lm_head.weight", (dims.vocab, d), gen("head", (dims.vocab, d), d ** -0.5)


def write_safetensors(path: Path, items: list[tuple[str, tuple, Callable[[], torch.Tensor]]],
                      dtype: torch.dtype) -> None:
    """One safetensors file, tensors produced and written one at a time."""
    size = torch.tensor([], dtype=dtype).element_size()
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in items:
        n = size
        for s in shape:
            n *= s
        header[name] = {"dtype": _ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)))
        fh.write(blob)
        for name, shape, make in items:
            t = make().contiguous().cpu()
            assert tuple(t.shape) == tuple(shape), name
            fh.write(t.view(torch.uint8).numpy().tobytes())
            del t
        fh.flush()
        os.fsync(fh.fileno())


def _write_json(path: Path, doc: object, indent: int | None = 1) -> None:
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=indent)
        fh.flush()
        os.fsync(fh.fileno())


def tokenizer_json(vocab: int) -> dict:
    """``tokenizer.json`` equal to ``ByteTokenizer(vocab)`` in both directions."""
    pieces = {_byte_piece(b): b for b in range(NUM_BYTE_TOKENS)}  # "<0xNN>" for the non-printable ones
    pieces[BOS_TEXT], pieces[EOS_TEXT] = BOS_ID, EOS_ID
    for i in range(EOS_ID + 1, vocab):
        pieces[_word_piece(i)] = i
    special = [{"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, text in ((BOS_ID, BOS_TEXT), (EOS_ID, EOS_TEXT))]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS_TEXT, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": BOS_TEXT, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS_TEXT: {"id": BOS_TEXT, "ids": [BOS_ID], "tokens": [BOS_TEXT]}},
        },
        "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True, "ignore_merges": False,
                  "vocab": pieces, "merges": []},
    }


def config_json(dims: ModelDims, dtype: torch.dtype, max_len: int) -> dict:
    name = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": dims.hidden,
        "intermediate_size": dims.ffn,
        "num_hidden_layers": dims.layers,
        "num_attention_heads": dims.heads,
        "num_key_value_heads": dims.kv_heads,
        "head_dim": dims.head_dim,
        "vocab_size": dims.vocab,
        "hidden_act": "silu",
        "rms_norm_eps": dims.norm_eps,
        "rope_theta": dims.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": dims.rope_theta},
        "max_position_embeddings": max_len,
        "tie_word_embeddings": dims.tie_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": name,
    }


def export(model: str, out: Path, *, seed: int = 0, device: str = "cpu", dtype: str = "bfloat16",
           max_len: int = 4096, layers: int | None = None) -> Path:
    """Write the checkpoint directory; returns it. ``layers`` keeps only the first N layers
    (the same tensors by name and seed, the same tokenizer): a small draft model for
    speculative decoding that shares the preset's vocabulary."""
    dims = PRESETS[model].with_overrides(layers=layers)
    tdtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:  # every file into a folder beside out first: out gets whole files, or nothing new
        _write_json(work / "config.json", config_json(dims, tdtype, max_len))
        _write_json(work / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
                                                      "do_sample": False})
        _write_json(work / "tokenizer.json", tokenizer_json(dims.vocab), indent=None)
        _write_json(work / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS_TEXT, "eos_token": EOS_TEXT,
            "model_max_length": max_len, "clean_up_tokenization_spaces": False})
        items = list(tensors(dims, seed, torch.device(device), tdtype))
        write_safetensors(work / "model.safetensors", items, tdtype)
        for path in sorted(work.iterdir()):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.refserver.export_hf",
                                description="Export a reference-server preset as a Hugging Face Llama checkpoint.")
    p.add_argument("--model", required=True, choices=sorted(PRESETS))
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the weights are drawn: the device the reference server runs on")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--layers", type=int, default=None,
                   help="keep only the first N layers (a draft model with the same vocabulary and tokenizer)")
    a = p.parse_args(argv)
    if a.layers is not None and a.layers < 1:
        p.error(f"--layers: must be >= 1, got {a.layers}")
    try:
        path = export(a.model, a.out, seed=a.seed, device=a.device, dtype=a.dtype, max_len=a.max_len,
                      layers=a.layers)
    except OSError as exc:  # a full disk, a read-only folder: one line, --out as it was
        print(f"export_hf: error: cannot write to {a.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
