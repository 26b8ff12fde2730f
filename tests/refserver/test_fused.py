"""The Triton kernels of the fused decode path (orchestrator/refserver/fused.py), on CPU.

They run through Triton's interpreter (``TRITON_INTERPRET=1``, numpy on CPU tensors),
which checks their indexing and math; ``test_kernels_compile_for_h200`` runs Triton's
compiler on them for sm_90 (no GPU needed). GPU speed is not measured here (see
docs/benchmarks.md). triton comes with the `test` extra; without it the module is skipped.

The interpreter is chosen when triton (its own ``@jit`` helpers such as ``tl.sum``) and
fused.py are imported, so both are imported here, at collection, with the variable set;
it is then removed again (and set only while a test here runs), since servers that other
tests spawn on a GPU would inherit it. Triton stays in interpreter mode for the rest of
this pytest process (nothing else in it runs Triton kernels; the servers are subprocesses).

One interpreter quirk shapes the bf16 checks: it converts fp32 -> bf16 by truncation,
where a GPU rounds to nearest even, so bf16 results are held to within one bf16 ulp of
the exact fp32 value (either rounding lands there); float32 results are held tightly.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (`pip install -e '.[test]'` brings it); the fused "
                "CUDA kernels are tested through its CPU interpreter", allow_module_level=True)


def _import_interpreted():
    """fused.py with kernels (and triton's helpers) built for the interpreter, or None."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language.standard as tls

        importlib.import_module("triton.experimental.gluon")  # else imported at a 1st launch

        if type(tls.sigmoid).__name__ != "InterpretedFunction":
            return None  # triton was imported earlier in this process without the variable
        name = "orchestrator.refserver.fused"
        return importlib.reload(sys.modules[name]) if name in sys.modules \
            else importlib.import_module(name)
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


kernels_module = _import_interpreted()
if kernels_module is None:
    pytest.skip("triton was already imported in this process without TRITON_INTERPRET=1; "
                "run this file in a pytest process of its own", allow_module_level=True)

from orchestrator.refserver.model import ShardedLlama  # noqa: E402
from orchestrator.refserver.presets import PRESETS  # noqa: E402

F = torch.nn.functional
EPS = 1e-5
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kernels(monkeypatch):
    """The interpreted kernels; TRITON_INTERPRET=1 while a test runs (read at launch too)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return kernels_module


def assert_close(actual: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype) -> None:
    """bf16: within one ulp of the exact value (+1% for fp32 noise); float32: 16 ulps."""
    assert actual.dtype == dtype and actual.shape == exact.shape
    exact = exact.float()
    _, e = torch.frexp(exact)  # |exact| in [2^(e-1), 2^e): a bf16 ulp is 2^(e-8)
    if dtype == torch.bfloat16:
        tol = 1.01 * torch.ldexp(torch.ones_like(exact), e - 8)
    else:  # measured: at most 3 float32 ulps (rms_norm's sum order, sigmoid's exp)
        tol = torch.ldexp(torch.ones_like(exact), e - 20)
    tol = tol + 1e-30
    err = (actual.float() - exact).abs()
    assert (err <= tol).all(), f"max error {err.max():.3g}, worst excess {(err / tol).max():.3g}"


DTYPES = [torch.bfloat16, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [256, 200])  # 200: a masked tail in the row block
def test_add_rms_norm(kernels, dtype, hidden):
    gen = torch.Generator().manual_seed(hidden)
    x = (torch.randn(2, 3, hidden, generator=gen) * 3).to(dtype)
    delta = torch.randn(2, 3, hidden, generator=gen).to(dtype)
    w = (1 + 0.5 * torch.randn(hidden, generator=gen)).to(dtype)
    x0 = x.clone()
    out_x, h = kernels.add_rms_norm(x, delta, w, EPS)
    assert out_x is x  # in place
    assert_close(x, x0.float() + delta.float(), dtype)
    if dtype == torch.float32:
        assert torch.equal(x, x0 + delta)
    # the norm is of the stored (rounded) sum
    assert_close(h, F.rms_norm(x.float(), (hidden,), w.float(), EPS), dtype)
    assert_close(kernels.rms_norm(x0, w, EPS), F.rms_norm(x0.float(), (hidden,), w.float(), EPS),
                 dtype)


def rotary_table(max_len: int, head_dim: int) -> torch.Tensor:
    """The model's complex64 [max_len, hd/2] RoPE table (theta 10000)."""
    half = head_dim // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
    return torch.polar(torch.ones_like(angles), angles)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hd", [32, 24])  # 24: 12 pairs, a masked tail in the pair block
def test_rope_and_cache_write(kernels, dtype, hd):
    B, T, nh, nkv, n_slots, max_len = 2, 3, 8, 4, 5, 16
    gen = torch.Generator().manual_seed(hd)
    qkv = torch.randn(B, T, (nh + 2 * nkv) * hd, generator=gen).to(dtype)
    cache = torch.randn(2, n_slots, nkv, max_len, hd, generator=gen).to(dtype)
    positions = torch.tensor([[3, 4, 5], [9, 10, 15]])
    slots = torch.tensor([4, 1])
    rotary = rotary_table(max_len, hd)
    qkv0, cache0 = qkv.clone(), cache.clone()

    kernels.rope_and_cache_write(qkv, rotary.real.contiguous(), rotary.imag.contiguous(),
                                 positions, slots, cache, nh, nkv, hd)

    # reference: the unfused model's ops, in fp32
    qk = qkv0[..., : (nh + nkv) * hd].float().view(B, T, nh + nkv, hd // 2, 2)
    turned = torch.view_as_complex(qk) * rotary[positions].unsqueeze(2)
    exact_qk = torch.view_as_real(turned).reshape(B, T, (nh + nkv) * hd)
    assert_close(qkv[..., : (nh + nkv) * hd].contiguous(), exact_qk, dtype)
    assert torch.equal(qkv[..., (nh + nkv) * hd:], qkv0[..., (nh + nkv) * hd:])  # v untouched
    # the cache gets exactly the stored rotated keys and the values ...
    written = torch.zeros(n_slots, max_len, dtype=torch.bool)
    for b in range(B):
        for t in range(T):
            s, p = int(slots[b]), int(positions[b, t])
            written[s, p] = True
            kv = qkv[b, t, nh * hd:].view(2, nkv, hd)
            assert torch.equal(cache[:, s, :, p], kv), (b, t)
    # ... and nothing else changes
    keep = ~written.view(1, n_slots, 1, max_len, 1).expand_as(cache)
    assert torch.equal(cache[keep], cache0[keep])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ffn", [300, 1500])  # one masked column block / two blocks
def test_silu_mul(kernels, dtype, ffn):
    gen = torch.Generator().manual_seed(ffn)
    gate_up = (torch.randn(2, 3, 2 * ffn, generator=gen) * 3).to(dtype)
    out = kernels.silu_mul(gate_up)
    gate, up = gate_up.float().chunk(2, dim=-1)
    assert out.shape == (2, 3, ffn)
    assert_close(out, F.silu(gate) * up, dtype)


def test_fused_forward_matches_torch_ops(kernels):
    """tiny, float32, CPU: prefill 2 rows x 5 tokens, then 2 decode steps, both paths."""
    def make(fused):
        return ShardedLlama(PRESETS["tiny"], tp=1, rank=0, device=torch.device("cpu"),
                            dtype=torch.float32, seed=0, max_slots=4, max_len=32,
                            all_reduce=lambda x: None, with_head=True, fused=fused)

    plain, fused = make(False), make(True)
    assert not plain.fused and fused.fused
    gen = torch.Generator().manual_seed(1)
    slots = torch.tensor([2, 0])
    steps = [(torch.randint(0, 512, (2, 5), generator=gen), torch.arange(5).expand(2, 5), 5)]
    for pos in (5, 6):  # kv_len 8: masked positions beyond, as in a graph's bucket
        steps.append((torch.randint(0, 512, (2, 1), generator=gen), torch.full((2, 1), pos), 8))
    with torch.inference_mode():
        for tokens, positions, kv_len in steps:
            want = plain.forward(tokens, positions.contiguous(), slots, kv_len)
            got = fused.forward(tokens, positions.contiguous(), slots, kv_len)
            scale = want.abs().max()
            assert 1 < scale < 100
            assert (got - want).abs().max() < 1e-5 * scale, (got - want).abs().max()
            last = want.shape[1] - 1
            assert torch.equal(plain.logits(want[:, last]).argmax(-1),
                               fused.logits(got[:, last]).argmax(-1))
    for a, b in zip(plain.kv_cache, fused.kv_cache, strict=True):
        assert a.abs().max() > 0.1
        assert (a - b).abs().max() < 1e-5 * a.abs().max()
        assert torch.equal(a == 0, b == 0)  # the same entries written


COMPILE_FOR_H200 = r"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from orchestrator.refserver import fused as k

def compile_ptx(fn, sig, consts, warps):
    aligned = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
               if t[0] == "*" or n.endswith(("stride", "cols"))}  # as the JIT specializes
    sig = {**sig, **{c: "constexpr" for c in consts}}
    src = ASTSource(fn, sig, constexprs=consts, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps}).asm["ptx"]

bf16 = {n: "*bf16" for n in ("x_ptr", "d_ptr", "w_ptr", "h_ptr")}
for has_delta in (True, False):
    ptx = compile_ptx(k._add_rms_norm_kernel,
                      {**bf16, "n_cols": "i32", "x_stride": "i32", "d_stride": "i32",
                       "h_stride": "i32", "eps": "fp32"},
                      {"HAS_DELTA": has_delta, "BLOCK": 4096}, k._norm_warps(4096))
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx, "rms: no 16-byte accesses"
compile_ptx(k._rope_cache_kernel,
            {"qkv_ptr": "*bf16", "cos_ptr": "*fp32", "sin_ptr": "*fp32", "pos_ptr": "*i64",
             "slot_ptr": "*i64", "cache_ptr": "*bf16", "T": "i32", "row_stride": "i32",
             "pos_stride_b": "i32", "pos_stride_t": "i32", "slot_stride": "i32",
             "c_kv": "i32", "c_slot": "i32", "c_head": "i32", "c_pos": "i32"},
            {"NH": 32, "NKV": 8, "HD": 128, "HALF_BLOCK": 64}, 1)
ptx = compile_ptx(k._silu_mul_kernel, {"gu_ptr": "*bf16", "out_ptr": "*bf16", "n_cols": "i32",
                                       "gu_stride": "i32", "out_stride": "i32"},
                  {"BLOCK": k.SILU_BLOCK}, 4)
assert "ld.global.v4" in ptx and "st.global.v4" in ptx, "silu_mul: no 16-byte accesses"
print("compiled")
"""


def test_kernels_compile_for_h200(tmp_path):
    """The kernels compile for sm_90 (8b shapes, bf16) with triton's bundled ptxas, no GPU.

    The interpreter runs Python, not Triton's compiler: rules of the compiler, e.g. that a
    name bound in both branches of a runtime ``if`` keeps one type, only show here. In a
    subprocess, since triton in this one is in interpreter mode.
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", COMPILE_FOR_H200], env=env, text=True,
                         capture_output=True, timeout=300, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "compiled", out.stderr[-3000:]


TP2_RANK = r"""
import os, sys, torch, torch.distributed as dist
from orchestrator.refserver import fused  # noqa: F401 (interpreted: TRITON_INTERPRET=1 is set)
from orchestrator.refserver.model import ShardedLlama
from orchestrator.refserver.presets import PRESETS
rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(1)
slots = torch.tensor([2, 0])
steps = [(torch.randint(0, 512, (2, 5), generator=gen), torch.arange(5).expand(2, 5).contiguous(), 5)]
for pos in (5, 6):
    steps.append((torch.randint(0, 512, (2, 1), generator=gen), torch.full((2, 1), pos), 8))
results = {}
for fused_on in (False, True):
    m = ShardedLlama(PRESETS["tiny"], tp=2, rank=rank, device=torch.device("cpu"),
                     dtype=torch.float32, seed=0, max_slots=4, max_len=32,
                     all_reduce=dist.all_reduce, with_head=rank == 0, fused=fused_on)
    assert m.fused is fused_on
    with torch.inference_mode():
        results[fused_on] = [m.forward(t, p, slots, L) for t, p, L in steps]
if rank == 0:
    torch.save(results, out)
dist.barrier()
os._exit(0)
"""


def test_fused_forward_at_tp2_matches_torch_ops(tmp_path):
    """Two gloo ranks, tiny, float32: the fused path with its all-reduces between the
    kernels gives what the torch-ops path gives at TP=2 (and both what TP=1 gives)."""
    from orchestrator.refserver.procs import free_port

    port, out = free_port(), tmp_path / "tp2.pt"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", TP2_RANK, str(r), str(port), str(out)],
                              env=env, cwd=REPO, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for r in (0, 1)]
    try:
        errors = [p.communicate(timeout=240)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(e[-2000:] for e in errors)
    results = torch.load(out)
    single = ShardedLlama(PRESETS["tiny"], tp=1, rank=0, device=torch.device("cpu"),
                          dtype=torch.float32, seed=0, max_slots=4, max_len=32,
                          all_reduce=lambda x: None, with_head=True, fused=False)
    gen = torch.Generator().manual_seed(1)
    slots = torch.tensor([2, 0])
    steps = [(torch.randint(0, 512, (2, 5), generator=gen), torch.arange(5).expand(2, 5).contiguous(), 5)]
    for pos in (5, 6):
        steps.append((torch.randint(0, 512, (2, 1), generator=gen), torch.full((2, 1), pos), 8))
    with torch.inference_mode():
        for i, (tokens, positions, kv_len) in enumerate(steps):
            want = single.forward(tokens, positions, slots, kv_len)
            scale = want.abs().max()
            for path in (False, True):
                got = results[path][i]
                assert (got - want).abs().max() < 1e-5 * scale, (path, i, (got - want).abs().max())
