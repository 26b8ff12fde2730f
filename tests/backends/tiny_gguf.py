"""A tiny Llama model as a GGUF file, written with the ``gguf`` package (llama.cpp's own
writer): 2 layers, hidden 64, 4 heads (2 KV heads), seeded random f32 weights, and a
SentencePiece-style vocabulary of the 256 byte tokens plus the letters, so any prompt
tokenizes. Greedy decoding of it is deterministic: what a server test needs."""

from __future__ import annotations

from pathlib import Path

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, CONTEXT = 2, 64, 4, 2, 128, 512


def _vocab() -> tuple[list[bytes], list[float], list[int]]:
    import gguf

    tokens = [b"<unk>", b"<s>", b"</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>".encode() for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    words = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += [w.encode() for w in words]
    types += [gguf.TokenType.NORMAL] * len(words)
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    return tokens, scores, [int(t) for t in types]


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("ncclsweep-tiny-llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    def tensor(name: str, *shape: int, scale: float = 0.2) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    head_dim = HIDDEN // HEADS
    tensor("token_embd.weight", vocab, HIDDEN, scale=1.0)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{i}.attn_k.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(f"blk.{i}.attn_v.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        tensor(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    tensor("output.weight", vocab, HIDDEN, scale=1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
