"""One tensor-parallel shard of a Llama-style decoder with a static KV cache, and its CUDA graphs.

Megatron-style sharding over ``tp`` ranks: the fused QKV and gate/up projections are
column-parallel (each rank owns whole heads / a slice of the FFN), ``o_proj`` and ``down``
are row-parallel and followed by one all-reduce each (2 per layer). Embedding, norms and
the output head are replicated; only rank 0 builds the head and computes logits.

Weights are random but deterministic: every full tensor is drawn from a generator seeded
by (seed, tensor name) and then sliced, so TP=1 and TP=2 compute the same function and
differ only in summation order. The output head is scaled (``LOGIT_STD``) so that greedy
margins dwarf that rounding noise. ``garbage=True`` loads shards in the wrong order (the
o_proj head blocks and the down-projection shards rolled by one block), a shard-order bug.

One forward serves prefill and decode: ``forward(tokens[B,T], positions[B,T], slots[B],
kv_len)``. Row ``b`` writes its keys/values into cache slot ``slots[b]`` at
``positions[b]`` and attends to positions ``<= positions[b, t]`` of that slot among the
first ``kv_len``. Nothing in it syncs with the host, so it can be captured in a CUDA graph
(``GraphRunner``: static inputs, batch padded to the next captured size with a scratch slot).

Decode at batch 1 is a string of GEMVs (the weight reads) and small kernels between them;
on a GPU each small kernel costs microseconds even inside a graph, so the layer keeps them
few: RoPE is one complex multiply (q/k rows are stored with each rotary pair adjacent,
which leaves q.k unchanged), keys and values share one cache tensor (one write, one
gather), decode attention is two batched GEMMs and a softmax with the GQA groups folded
into the query axis (``scaled_dot_product_attention`` serves prefill), and at TP=1 the
residual add rides in the output projection's GEMM. docs/gpu/decode_probe.py measures it.

On CUDA with triton importable (``fused``; ``REFSERVER_FUSED=0`` turns it off) the glue
between the GEMVs runs as Triton kernels (fused.py): residual add + RMSNorm, RoPE + the
KV-cache write, and silu * up, one launch each; attention and the GEMMs are as above.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import mmap
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

from orchestrator.refserver.presets import ModelDims

LOGIT_STD = 8.0  # std of the logits: top-1/top-2 gaps of O(1) vs float32 noise of O(1e-5)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def zeros(shape: tuple[int, ...], *, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``torch.zeros``. On the CPU from a private anonymous mapping, which the kernel zeroes a
    page at a time as it is first touched: the KV cache then costs time and memory only where
    it is written, not a memset of all of it at start (0.51 GiB, 0.2 CPU-s for the tiny preset)."""
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if torch.device(device).type != "cpu" or size == 0:
        return torch.zeros(shape, device=device, dtype=dtype)
    return torch.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE), dtype=dtype).view(shape)


def derive_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def full_tensor(name: str, shape: tuple[int, ...], std: float, seed: int,
                device: torch.device) -> torch.Tensor:
    """The whole (unsharded) float32 tensor ``name``: identical on every rank and TP size."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, name))
    out = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return out.mul_(std)


def _pairs_adjacent(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Rows of a q/k projection reordered per head so rotary pair (i, i + hd/2) is adjacent.

    Applying one permutation to q and k leaves every q.k product, hence the model's
    function, unchanged; it lets RoPE be a complex multiply on (even, odd) pairs.
    """
    half = head_dim // 2
    order = torch.stack((torch.arange(half), torch.arange(half) + half), dim=1).flatten()
    rows = w.view(heads, head_dim, -1).index_select(1, order.to(w.device))
    return rows.reshape(heads * head_dim, -1)


def fused_choice(device: torch.device, override: bool | None = None) -> tuple[bool, str]:
    """(run the glue as Triton kernels?, why): on CUDA when triton imports, unless overridden.

    ``override`` (tests) forces the choice; ``REFSERVER_FUSED=0`` keeps the torch ops on
    CUDA (to compare, or if a kernel misbehaves). CPU always uses the torch ops.
    """
    if override is not None:
        return override, "forced " + ("on" if override else "off")
    if device.type != "cuda":
        return False, f"torch ops on {device.type}"
    if os.environ.get("REFSERVER_FUSED") == "0":
        return False, "REFSERVER_FUSED=0"
    try:
        import triton  # optional: the fused kernels (CUDA, or Triton's CPU interpreter in tests)

        importlib.import_module("orchestrator.refserver.fused")  # compiles nothing yet
    except Exception as exc:  # noqa: BLE001 - a missing or broken triton: the torch ops still work
        return False, f"triton unavailable: {type(exc).__name__}: {exc}"
    return True, f"triton {triton.__version__}"


def _roll_blocks(w: torch.Tensor, dim: int, block: int) -> torch.Tensor:
    """Roll ``w`` along ``dim`` by one block of ``block`` (the shard/head-order bug)."""
    return torch.roll(w, shifts=block, dims=dim)


class ShardedLlama:
    """Rank ``rank``'s shard of the model plus its KV cache (``max_slots`` + 1 scratch slot)."""

    def __init__(self, dims: ModelDims, *, tp: int, rank: int, device: torch.device,
                 dtype: torch.dtype, seed: int, max_slots: int, max_len: int,
                 all_reduce: Callable[[torch.Tensor], None], with_head: bool,
                 garbage: bool = False, fused: bool | None = None):
        assert dims.tp_error(tp) is None, dims.tp_error(tp)
        self.dims, self.tp, self.rank = dims, tp, rank
        self.device, self.dtype = device, dtype
        self.max_slots, self.max_len = max_slots, max_len
        self.scratch_slot = max_slots
        self.all_reduce = all_reduce
        d, hd = dims.hidden, dims.head_dim
        self.n_heads = dims.heads // tp
        self.n_kv = dims.kv_heads // tp
        self.group = dims.heads // dims.kv_heads
        self.ffn_local = dims.ffn // tp
        self.scale = hd ** -0.5

        def shard(w: torch.Tensor, dim: int) -> torch.Tensor:
            size = w.shape[dim] // tp
            return w.narrow(dim, rank * size, size)

        def gen(name, shape, std):
            return full_tensor(name, shape, std, seed, device)

        # A tied head reads the embedding: rows of std 1 would make the input token dominate the
        # residual stream to the last layer, and the model would repeat it forever ("ssss...",
        # greedy margins of 60 nats), which no correctness gate can tell from garbage. Rows of
        # std d^-0.5 (small next to what the layers add, as in trained models) give
        # prompt-dependent text with realistic near-ties.
        self.embed = gen("embed", (dims.vocab, d), d ** -0.5 if dims.tie_embeddings else 1.0).to(dtype)
        self.layers = []
        for i in range(dims.layers):
            p = f"layers.{i}."
            wq = _pairs_adjacent(gen(p + "q", (dims.heads * hd, d), d ** -0.5), dims.heads, hd)
            wk = _pairs_adjacent(gen(p + "k", (dims.kv_heads * hd, d), d ** -0.5),
                                 dims.kv_heads, hd)
            wv = gen(p + "v", (dims.kv_heads * hd, d), d ** -0.5)
            wo = gen(p + "o", (d, dims.heads * hd), (dims.heads * hd) ** -0.5)
            wg = gen(p + "gate", (dims.ffn, d), d ** -0.5)
            wu = gen(p + "up", (dims.ffn, d), d ** -0.5)
            wd = gen(p + "down", (d, dims.ffn), dims.ffn ** -0.5)
            if garbage:
                wo = _roll_blocks(wo, 1, hd)  # head order shifted by one head
                wd = _roll_blocks(wd, 1, dims.ffn // max(tp, 2))  # down shards swapped
            qkv = torch.cat([shard(wq, 0), shard(wk, 0), shard(wv, 0)], 0)
            gate_up = torch.cat([shard(wg, 0), shard(wu, 0)], 0)
            # stored transposed ([in, out]): x @ w is the fastest small GEMM on CPU
            self.layers.append({
                "attn_norm": torch.ones(d, device=device, dtype=dtype),
                "qkv": qkv.t().to(dtype).contiguous(),
                "o": shard(wo, 1).t().to(dtype).contiguous(),
                "mlp_norm": torch.ones(d, device=device, dtype=dtype),
                "gate_up": gate_up.t().to(dtype).contiguous(),
                "down": shard(wd, 1).t().to(dtype).contiguous(),
            })
            del wq, wk, wv, wo, wg, wu, wd, qkv, gate_up
        self.final_norm = torch.ones(d, device=device, dtype=dtype)
        self.head = None
        self.logit_scale = 1.0
        if with_head:
            if dims.tie_embeddings:
                self.head = self.embed
                self.logit_scale = LOGIT_STD  # embedding rows have std d^-0.5, like an untied head
            else:
                self.head = gen("head", (dims.vocab, d), d ** -0.5).to(dtype)
                self.logit_scale = LOGIT_STD

        half = hd // 2
        inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, half, device=device,
                                                            dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv_freq)
        self.rotary = torch.polar(torch.ones_like(angles), angles)  # complex64 [max_len, hd/2]
        # keys and values of a layer in one tensor: [k|v, slot, kv head, position, head dim],
        # so one gather gives attention contiguous [B, kv head, L, head dim] keys and values
        cache_shape = (2, max_slots + 1, self.n_kv, max_len, hd)
        self.kv_cache = [zeros(cache_shape, device=device, dtype=dtype)
                         for _ in range(dims.layers)]
        # None: decided here from the device (see fused_choice); tests force True/False
        self.fused, self.fused_why = fused_choice(device, fused)
        if self.fused:
            from orchestrator.refserver import fused as kernels

            self.kernels = kernels
            self.rotary_cos = self.rotary.real.contiguous()  # float32 [max_len, hd/2]
            self.rotary_sin = self.rotary.imag.contiguous()

    # ---- forward -----------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, self.dims.norm_eps)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                kv_len: int) -> torch.Tensor:
        """Residual stream after the last layer, [B, T, hidden] (final norm not applied)."""
        B, T = tokens.shape
        hd, nh, nkv, g = self.dims.head_dim, self.n_heads, self.n_kv, self.group
        L = kv_len
        x = F.embedding(tokens, self.embed)
        visible = torch.arange(L, device=tokens.device).view(1, 1, L) <= positions.unsqueeze(2)
        bias = torch.zeros((B, T, L), device=tokens.device, dtype=self.dtype)
        bias.masked_fill_(~visible, float("-inf"))
        if T == 1:  # decode: GQA groups folded into the query axis, [B nkv, g, L]
            mask = bias.view(B, 1, 1, L).expand(B, nkv, g, L).reshape(B * nkv, g, L)
        else:  # prefill: query axis is (group member, position)
            mask = bias.view(B, 1, 1, T, L).expand(B, 1, g, T, L).reshape(B, 1, g * T, L)
        if self.fused:
            return self._forward_fused(x, positions, slots, mask, L)
        rotary = self.rotary[positions].unsqueeze(2)  # [B, T, 1, hd/2]
        write_slots = slots.view(B, 1).expand(B, T)
        for layer, cache in zip(self.layers, self.kv_cache, strict=True):
            h = self._rms(x, layer["attn_norm"])
            qkv = torch.matmul(h, layer["qkv"])  # [B, T, (nh + 2 nkv) hd]
            qk = qkv[..., : (nh + nkv) * hd]  # rotate q and k in place: three kernels in all
            turned = torch.view_as_complex(qk.float().view(B, T, nh + nkv, hd // 2, 2)) * rotary
            qk.copy_(torch.view_as_real(turned).view(B, T, (nh + nkv) * hd))
            cache[:, write_slots, :, positions] = qkv[..., nh * hd:].view(B, T, 2, nkv, hd)
            attn = self._attend(qkv, cache, slots, mask, L)
            x = self._add_projection(x, attn, layer["o"])
            h = self._rms(x, layer["mlp_norm"])
            gate, up = torch.matmul(h, layer["gate_up"]).chunk(2, dim=-1)
            x = self._add_projection(x, F.silu(gate) * up, layer["down"])
        return x

    def _forward_fused(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                       mask: torch.Tensor, L: int) -> torch.Tensor:
        """The layers with the glue as Triton kernels: 4 GEMMs + 4 launches + attention.

        ``x`` (the embedding rows, owned by this call) is updated in place; each residual
        add also yields the next norm's input, so x is read and written once per add.
        """
        k, eps = self.kernels, self.dims.norm_eps
        nh, nkv, hd = self.n_heads, self.n_kv, self.dims.head_dim
        layers = self.layers
        h = k.rms_norm(x, layers[0]["attn_norm"], eps)
        for i, (layer, cache) in enumerate(zip(layers, self.kv_cache, strict=True)):
            qkv = torch.matmul(h, layer["qkv"])  # [B, T, (nh + 2 nkv) hd]
            k.rope_and_cache_write(qkv, self.rotary_cos, self.rotary_sin, positions, slots,
                                   cache, nh, nkv, hd)
            attn = self._attend(qkv, cache, slots, mask, L)
            out = torch.matmul(attn, layer["o"])
            self.all_reduce(out)
            x, h = k.add_rms_norm(x, out, layer["mlp_norm"], eps)
            out = torch.matmul(k.silu_mul(torch.matmul(h, layer["gate_up"])), layer["down"])
            self.all_reduce(out)
            if i + 1 < len(layers):
                x, h = k.add_rms_norm(x, out, layers[i + 1]["attn_norm"], eps)
            else:
                x += out
        return x

    def _attend(self, qkv: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor,
                mask: torch.Tensor, L: int) -> torch.Tensor:
        """Attention of the (rotated) queries in ``qkv`` over the first L cached positions."""
        B, T = qkv.shape[:2]
        hd, nh, nkv, g = self.dims.head_dim, self.n_heads, self.n_kv, self.group
        keys, values = cache[:, slots, :, :L]  # [B, nkv, L, hd] each (faster than index_select)
        q = qkv[..., : nh * hd].view(B, T, nkv, g, hd)
        if T == 1:  # batched GEMMs: fewer, cheaper kernels than SDPA for 1 query/head
            scores = torch.baddbmm(mask, q.reshape(B * nkv, g, hd),
                                   keys.reshape(B * nkv, L, hd).transpose(1, 2),
                                   alpha=self.scale)
            attn = torch.bmm(torch.softmax(scores, dim=-1), values.reshape(B * nkv, L, hd))
            return attn.view(B, 1, nh * hd)
        q = q.permute(0, 2, 3, 1, 4).reshape(B, nkv, g * T, hd)
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                              scale=self.scale)  # [B, nkv, g T, hd]
        return attn.view(B, nkv, g, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, nh * hd)

    def _add_projection(self, x: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x + (a @ w summed over ranks): the row-parallel projection and its residual add.

        At TP=1 one GEMM with beta=1 does both (one kernel fewer per projection).
        """
        if self.tp == 1:
            return torch.addmm(x.reshape(-1, x.shape[-1]), a.reshape(-1, a.shape[-1]),
                               w).view(x.shape)
        out = torch.matmul(a, w)
        self.all_reduce(out)
        return x + out

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for rows of the residual stream [N, hidden] (rank 0 only)."""
        assert self.head is not None, "only rank 0 holds the output head"
        h = self._rms(hidden, self.final_norm)
        return F.linear(h, self.head).float() * self.logit_scale


def kv_buckets(max_len: int, smallest: int = 256) -> list[int]:
    """Attention lengths a CUDA graph is captured for: powers of two, then ``max_len``."""
    out, n = [], min(smallest, max_len)
    while n < max_len:
        out.append(n)
        n *= 2
    out.append(max_len)
    return out


class GraphRunner:
    """Runs decode steps through CUDA graphs captured per (batch size, KV-length bucket).

    Decode steps (T == 1) with a batch no larger than the largest capture size are
    padded up to the next captured size (pad rows use the scratch slot at position 0)
    and replayed; anything else runs eagerly. Every rank makes the same choice from
    (B, T, kv_len), so the collectives inside the graphs line up across ranks.
    """

    def __init__(self, model: ShardedLlama, sizes: list[int]):
        self.model = model
        self.sizes = sorted(set(sizes))
        self.buckets = kv_buckets(model.max_len)
        dev = model.device
        top = self.sizes[-1]
        self.tokens = torch.zeros((top, 1), dtype=torch.long, device=dev)
        self.positions = torch.zeros((top, 1), dtype=torch.long, device=dev)
        self.slots = torch.full((top,), model.scratch_slot, dtype=torch.long, device=dev)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def capture(self) -> None:
        m = self.model
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside capture (lazy inits, NCCL comm)
            for bs in self.sizes:
                m.forward(self.tokens[:bs], self.positions[:bs], self.slots[:bs], self.buckets[0])
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        for bs in reversed(self.sizes):
            for L in reversed(self.buckets):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                    out = m.forward(self.tokens[:bs], self.positions[:bs], self.slots[:bs], L)
                self.graphs[(bs, L)] = (graph, out)
        torch.cuda.synchronize()

    def plan(self, B: int, T: int, kv_len: int) -> tuple[int, int] | None:
        """(padded batch, bucket) to replay, or None to run eagerly."""
        if T != 1 or not self.graphs or B > self.sizes[-1]:
            return None
        bs = next(s for s in self.sizes if s >= B)
        L = next(b for b in self.buckets if b >= kv_len)
        return bs, L

    def run(self, key: tuple[int, int], tokens: torch.Tensor, positions: torch.Tensor,
            slots: torch.Tensor) -> torch.Tensor:
        """Replay graph ``key`` on CPU inputs of B rows; returns [B, 1, hidden]."""
        bs, _ = key
        B = tokens.shape[0]
        self.tokens[:B].copy_(tokens, non_blocking=True)
        self.positions[:B].copy_(positions, non_blocking=True)
        self.slots[:B].copy_(slots, non_blocking=True)
        if B < bs:
            self.tokens[B:bs].zero_()
            self.positions[B:bs].zero_()
            self.slots[B:bs].fill_(self.model.scratch_slot)
        graph, out = self.graphs[key]
        graph.replay()
        return out[:B]


def run_step(model: ShardedLlama, graphs: GraphRunner | None, tokens: torch.Tensor,
             positions: torch.Tensor, slots: torch.Tensor, kv_len: int) -> torch.Tensor:
    """One forward from CPU int64 inputs, through a graph when one fits (same on every rank)."""
    B, T = tokens.shape
    if graphs is not None:
        key = graphs.plan(B, T, kv_len)
        if key is not None:
            return graphs.run(key, tokens, positions, slots)
    dev = model.device
    if dev.type != "cpu":
        tokens = tokens.to(dev, non_blocking=True)
        positions = positions.to(dev, non_blocking=True)
        slots = slots.to(dev, non_blocking=True)
    return model.forward(tokens, positions, slots, kv_len)
