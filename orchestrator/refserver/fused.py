"""Triton kernels that fuse the small ops between a decode step's weight GEMVs (CUDA only).

At batch 1 a decode step is four weight GEMVs per layer and the glue between them; on a
GPU each glue kernel costs microseconds even inside a CUDA graph (8b on H200: ~1.6 ms of
glue per step against 3.7 ms of GEMVs). These kernels do the glue of a layer in four
launches instead of about ten:

- ``add_rms_norm``: residual add + RMSNorm (replaces addmm's input copy and ``F.rms_norm``);
- ``rope_and_cache_write``: RoPE on q and k in place + the KV-cache write of k and v
  (replaces ``qk.float()``, the complex multiply, ``copy_`` and ``index_put``);
- ``silu_mul``: SwiGLU's ``silu(gate) * up`` (replaces two elementwise kernels).

Every wrapper allocates only by shape and never syncs with the host, so the calls can be
captured in a CUDA graph. Math is fp32 whatever the storage dtype. ``ShardedLlama`` uses
them when it runs on CUDA with triton importable (``REFSERVER_FUSED=0`` turns them off);
tests run them on CPU tensors through Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SILU_BLOCK = 1024  # columns per program: 8 bf16 per thread at 4 warps (16-byte accesses)


def _norm_warps(block: int) -> int:
    """Warps for one row of ``block`` columns: 4 at 2048, 8 at 4096, 16 at 8192.

    One program reduces a whole row; at batch 1 that is the only program, so more warps
    mean more loads in flight (each thread keeps 16 elements, two 16-byte bf16 loads).
    """
    return max(1, min(16, block // 512))


@triton.jit
def _add_rms_norm_kernel(x_ptr, d_ptr, w_ptr, h_ptr, n_cols, x_stride, d_stride, h_stride,
                         eps, HAS_DELTA: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=inside, other=0.0).to(tl.float32)
    if HAS_DELTA:
        d = tl.load(d_ptr + row * d_stride + cols, mask=inside, other=0.0).to(tl.float32)
        # the residual stream is stored in the model dtype: normalise the rounded sum,
        # exactly what the next layer will read back
        x_new = (x + d).to(x_ptr.dtype.element_ty)
        tl.store(x_ptr + row * x_stride + cols, x_new, mask=inside)
        x = x_new.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(h_ptr + row * h_stride + cols, (x * rstd * w).to(h_ptr.dtype.element_ty),
             mask=inside)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as [rows, last dim] without a copy (the kernels index rows by one stride)."""
    t2 = t.view(-1, t.shape[-1])
    assert t2.stride(-1) == 1, "last dimension must be contiguous"
    return t2


def _launch_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> torch.Tensor:
    x2 = _rows(x)
    d2 = x2 if delta is None else _rows(delta)
    assert d2.shape == x2.shape and weight.shape == (x2.shape[1],) and weight.is_contiguous()
    h = torch.empty_like(x)
    h2 = _rows(h)
    block = triton.next_power_of_2(x2.shape[1])
    _add_rms_norm_kernel[(x2.shape[0],)](
        x2, d2, weight, h2, x2.shape[1], x2.stride(0), d2.stride(0), h2.stride(0), eps,
        HAS_DELTA=delta is not None, BLOCK=block, num_warps=_norm_warps(block))
    return h


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, h): ``x += delta`` IN PLACE (rounded to x's dtype), ``h = rms_norm(x) * weight``.

    One launch, one program per row of ``hidden`` columns. In place because ``x`` is the
    residual stream the caller owns (and a CUDA graph keeps its address); ``h`` is new.
    """
    return x, _launch_norm(x, delta, weight, eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``rms_norm(x) * weight`` in x's dtype (the first layer's norm: nothing to add)."""
    return _launch_norm(x, None, weight, eps)


@triton.jit
def _rope_cache_kernel(qkv_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, cache_ptr,
                       T, row_stride, pos_stride_b, pos_stride_t, slot_stride,
                       c_kv, c_slot, c_head, c_pos,
                       NH: tl.constexpr, NKV: tl.constexpr, HD: tl.constexpr,
                       HALF_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # token b * T + t
    head = tl.program_id(1)  # q heads, then k heads, then v heads
    b = row // T
    t = row % T
    pos = tl.load(pos_ptr + b * pos_stride_b + t * pos_stride_t)  # int64
    slot = tl.load(slot_ptr + b * slot_stride)
    src = qkv_ptr + row * row_stride + head * HD
    if head < NH + NKV:  # q or k: rotate pair (2i, 2i+1) by pos * inv_freq[i], in place
        i = tl.arange(0, HALF_BLOCK)
        inside = i < HD // 2
        a = tl.load(src + 2 * i, mask=inside, other=0.0).to(tl.float32)
        c = tl.load(src + 2 * i + 1, mask=inside, other=0.0).to(tl.float32)
        cos = tl.load(cos_ptr + pos * (HD // 2) + i, mask=inside, other=0.0)
        sin = tl.load(sin_ptr + pos * (HD // 2) + i, mask=inside, other=0.0)
        re = (a * cos - c * sin).to(qkv_ptr.dtype.element_ty)
        im = (a * sin + c * cos).to(qkv_ptr.dtype.element_ty)
        tl.store(src + 2 * i, re, mask=inside)
        tl.store(src + 2 * i + 1, im, mask=inside)
        if head >= NH:  # k: the rotated key also goes to cache[0, slot, head, pos]
            k_dst = cache_ptr + slot * c_slot + (head - NH) * c_head + pos * c_pos
            tl.store(k_dst + 2 * i, re.to(cache_ptr.dtype.element_ty), mask=inside)
            tl.store(k_dst + 2 * i + 1, im.to(cache_ptr.dtype.element_ty), mask=inside)
    else:  # v: copied to cache[1, slot, head, pos]
        # (names differ from the other branch: a name bound in both branches of a runtime
        # `if` must have one type there, and these blocks have other shapes)
        d = tl.arange(0, 2 * HALF_BLOCK)
        v_inside = d < HD
        v = tl.load(src + d, mask=v_inside, other=0.0)
        v_dst = cache_ptr + c_kv + slot * c_slot + (head - NH - NKV) * c_head + pos * c_pos
        tl.store(v_dst + d, v.to(cache_ptr.dtype.element_ty), mask=v_inside)


def rope_and_cache_write(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         positions: torch.Tensor, slots: torch.Tensor, cache: torch.Tensor,
                         n_heads: int, n_kv_heads: int, head_dim: int) -> None:
    """RoPE on q and k heads of ``qkv`` in place, then rotated k and v into ``cache``.

    ``qkv`` [B, T, (nh + 2 nkv) hd] contiguous (q heads, k heads, v heads) with each
    rotary pair adjacent: (2i, 2i+1) of a head turns by ``positions[b, t] * inv_freq[i]``
    (``cos``/``sin`` float32 [max_len, hd/2]). ``cache`` [2, slots, nkv, max_len, hd]
    receives k at [0, slots[b], head, positions[b, t]] and v at [1, ...]. One launch,
    one program per (token, head): grid (B T, nh + 2 nkv). ``positions`` int64 [B, T],
    ``slots`` int64 [B]; positions must be below max_len (not checked: no host sync).
    """
    B, T, width = qkv.shape
    assert width == (n_heads + 2 * n_kv_heads) * head_dim and qkv.is_contiguous()
    assert cos.is_contiguous() and sin.is_contiguous() and cos.shape[1] == head_dim // 2
    assert cache.shape[0] == 2 and cache.shape[2] == n_kv_heads and cache.shape[4] == head_dim
    assert cache.stride(4) == 1 and positions.shape == (B, T) and slots.shape == (B,)
    half_block = triton.next_power_of_2(head_dim // 2)
    _rope_cache_kernel[(B * T, n_heads + 2 * n_kv_heads)](
        qkv, cos, sin, positions, slots, cache,
        T, width, positions.stride(0), positions.stride(1), slots.stride(0),
        cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3),
        NH=n_heads, NKV=n_kv_heads, HD=head_dim, HALF_BLOCK=half_block,
        num_warps=max(1, min(4, half_block // 64)))


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, n_cols, gu_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n_cols
    gate = tl.load(gu_ptr + row * gu_stride + cols, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * gu_stride + n_cols + cols, mask=inside,
                 other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=inside)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up`` [..., 2F] (gate first), fp32 math, one launch.

    Grid (rows, cdiv(F, 1024)), 4 warps; the result [..., F] is new, in gate_up's dtype.
    """
    gu2 = _rows(gate_up)
    n = gu2.shape[1] // 2
    assert gu2.shape[1] == 2 * n
    out = torch.empty((*gate_up.shape[:-1], n), device=gate_up.device, dtype=gate_up.dtype)
    out2 = out.view(-1, n)
    _silu_mul_kernel[(gu2.shape[0], triton.cdiv(n, SILU_BLOCK))](
        gu2, out2, n, gu2.stride(0), out2.stride(0), BLOCK=SILU_BLOCK, num_warps=4)
    return out
