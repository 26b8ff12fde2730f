"""Model dimensions of the reference server's presets (no torch import: the tuner reads this).

``PRESETS[name]`` is a frozen :class:`ModelDims`. The backend and the report use it for
facts about a model without starting a server::

    from orchestrator.refserver.presets import PRESETS, DTYPE_BYTES
    dims = PRESETS["8b"]
    dims.param_count()                      # parameters, embeddings and output head included
    dims.weight_bytes(DTYPE_BYTES["bfloat16"])  # bytes read per decoded token at batch 1
    dims.kv_bytes_per_token(2)              # KV-cache bytes one token adds (all layers)
    dims.allreduces_per_step()              # 2 * layers (row-parallel o_proj and down)
    dims.allowed_tp(8)                      # TP sizes that divide heads, kv_heads and ffn
    dims.tp_error(3)                        # None, or why TP=3 is impossible
    dims.model_facts("bfloat16")            # dict for Backend.model_facts()

The server's default dtype is float32 on cpu and bfloat16 on cuda.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# Special token ids of the byte-level tokenizer (see tokenizer.py); every vocab must hold them.
NUM_BYTE_TOKENS = 256
BOS_ID = 256
EOS_ID = 257
MIN_VOCAB = 258

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelDims:
    """Shape of a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tie_embeddings: bool = False
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    # ---- sizes -------------------------------------------------------------------------
    def layer_params(self) -> int:
        """Parameters of one decoder layer (attention, MLP and both norms)."""
        d, hd = self.hidden, self.head_dim
        attn = d * (self.heads * hd) + 2 * d * (self.kv_heads * hd) + (self.heads * hd) * d
        mlp = 3 * d * self.ffn
        return attn + mlp + 2 * d

    def param_count(self) -> int:
        """All parameters: embedding, layers, final norm, output head (once if tied)."""
        embed = self.vocab * self.hidden
        head = 0 if self.tie_embeddings else self.vocab * self.hidden
        return embed + self.layers * self.layer_params() + self.hidden + head

    def weight_bytes(self, dtype_bytes: int) -> int:
        """Weight bytes read to decode one token at batch 1, summed over all ranks.

        Every layer's weights, the final norm and the full output head are read once;
        of the embedding only one row. The KV cache is excluded (``kv_bytes_per_token``).
        """
        embedding_row = self.hidden
        final_norm = self.hidden
        head = self.vocab * self.hidden
        read = embedding_row + self.layers * self.layer_params() + final_norm + head
        return read * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one cached token occupies across all layers (and all ranks)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def allreduces_per_step(self) -> int:
        """All-reduces per decode step at TP > 1: one after o_proj and one after down."""
        return 2 * self.layers

    # ---- validity ----------------------------------------------------------------------
    def tp_error(self, tp: int) -> str | None:
        """None if tensor parallelism ``tp`` can shard this model, else the reason."""
        if tp < 1:
            return f"must be >= 1, got {tp}"
        for what, n in (("heads", self.heads), ("kv_heads", self.kv_heads), ("ffn", self.ffn)):
            if n % tp:
                return f"{tp} does not divide {what}={n} of model {self.name}"
        return None

    def allowed_tp(self, max_tp: int = 8) -> list[int]:
        """TP sizes up to ``max_tp`` that divide heads, kv_heads and ffn."""
        return [tp for tp in range(1, max_tp + 1) if self.tp_error(tp) is None]

    def dims_error(self) -> str | None:
        """None if the dimensions make a valid model, else (flag, reason) as one string."""
        for flag, value in (("--layers", self.layers), ("--hidden", self.hidden),
                            ("--heads", self.heads), ("--kv-heads", self.kv_heads),
                            ("--ffn", self.ffn), ("--vocab", self.vocab)):
            if value < 1:
                return f"{flag}: must be >= 1, got {value}"
        if self.hidden % self.heads:
            return f"--heads: must divide --hidden={self.hidden}, got {self.heads}"
        if self.head_dim % 2:
            return f"--heads: hidden/heads must be even for rotary embeddings, got {self.head_dim}"
        if self.heads % self.kv_heads:
            return f"--kv-heads: must divide --heads={self.heads}, got {self.kv_heads}"
        if self.vocab < MIN_VOCAB:
            return f"--vocab: must be >= {MIN_VOCAB} (256 bytes + BOS + EOS), got {self.vocab}"
        return None

    def with_overrides(self, **overrides: int | None) -> ModelDims:
        """A copy with the given non-None fields replaced (explicit dims over a preset)."""
        changes: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **changes) if changes else self

    def model_facts(self, dtype: str = "bfloat16") -> dict:
        """What a backend's ``model_facts()`` reports for the ceiling (dtype by name)."""
        nbytes = DTYPE_BYTES[dtype]
        return {"bytes_per_token": self.weight_bytes(nbytes),
                "allreduces_per_step": self.allreduces_per_step(),
                "hidden_size": self.hidden, "dtype_bytes": nbytes,
                "params": self.param_count(), "layers": self.layers,
                "kv_bytes_per_token": self.kv_bytes_per_token(nbytes)}

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["head_dim"] = self.head_dim
        out["params"] = self.param_count()
        return out


PRESETS: dict[str, ModelDims] = {
    # fast on 2 CPU cores
    "tiny": ModelDims("tiny", layers=4, hidden=256, heads=8, kv_heads=4, ffn=768, vocab=512),
    # Llama-3.2-1B shapes (tied embeddings, ~1.24B params)
    "1b": ModelDims("1b", layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192,
                    vocab=128256, tie_embeddings=True, rope_theta=500000.0),
    # Llama-3-8B shapes (~8.03B params)
    "8b": ModelDims("8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                    vocab=128256, rope_theta=500000.0),
}
