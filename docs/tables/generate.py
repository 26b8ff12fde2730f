"""Regenerate the synthetic replay tables of this folder (deterministic: fixed seeds).

    python docs/tables/generate.py                       # motivating-case{,-startup}.csv, motivating-space.csv,
                                                         # h200-graphs-small.csv
    python docs/tables/generate.py --variants 20 --out /tmp/variants   # sensitivity tables
    python docs/tables/generate.py --slices --out /tmp/slices          # small slices (< 24 configs)

Every number below is either a published figure of the motivating case (docs/tables/README.md)
(or, for the H200 table, a one-run measurement from docs/benchmarks.md) or an assumption
labelled A<n>; docs/tables/README.md lists them. The samples are SYNTHETIC: a mean per
configuration from the model, then 3-5 repeats with a per-configuration coefficient of
variation drawn from a range (1-3% for the motivating case).

``--variants`` writes copies of the motivating case whose unpublished assumptions
(A3-A10 and the noise) are redrawn at random, to check that the search defaults do not
depend on the particular values chosen here (docs/benchmarks.md, "Search efficiency").
"""

from __future__ import annotations

import argparse
import csv
import random
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---- motivating case: 744B MoE GGUF Q4, vLLM, 8 PCIe GPUs, single-request decode -----------
# Published (the motivating case): 157 all-reduces per decode step, ~135 us each in eager mode;
# TP=8 enforce-eager 20.0 tok/s, CUDA graphs 42.7 tok/s, NCCL protocol tuning ~57 tok/s.
N_ALLREDUCE = 157
TOKS_EAGER_DEFAULT = 20.0
TOKS_GRAPHS_DEFAULT = 42.7
TOKS_GRAPHS_TUNED = 57.0
AR_EAGER_DEFAULT = 0.135  # ms


@dataclass(frozen=True)
class CaseModel:
    """Step-time model of single-request decode; fields are the labelled assumptions."""

    ar_graph_simple_ring: float = 0.055  # A3: ms per all-reduce inside a graph, Simple/Ring, TP=8
    tree_factor_simple: float = 1.08     # A4: Tree / Ring all-reduce time within one PCIe node
    tree_factor_ll: float = 1.04         # A4
    piecewise_launch_share: float = 0.25  # A5: share of eager launch overhead left with piecewise graphs
    piecewise_ar_overhead: float = 0.010  # A5: ms added per all-reduce at graph-piece boundaries
    graph_ar_fixed: float = 0.008        # A6: ms of an all-reduce that does not scale with ranks
    pp_boundary_scale: float = 1.0       # A7: scales PP_BOUNDARY
    ll128_works: bool = False            # A10: LL128 over PCIe gives wrong output (False) or works
    ll128_factor: float = 1.0            # A10 (variants only): LL128 time / LL time when it works
    tp2_crashes: bool = False            # A8 (variants only): TP=2 (PP=4) also fails to start
    cv_low: float = 0.01                 # noise: per-config coefficient of variation range
    cv_high: float = 0.03

    # A1: the published "NCCL defaults" runs behave like NCCL_PROTO=Simple, NCCL_ALGO=Ring.
    # A2: the ~57 tok/s config is full CUDA graphs + LL + Ring at TP=8.
    def ar_graph(self, proto: str, algo: str) -> float:
        simple = self.ar_graph_simple_ring
        gemm = 1000 / TOKS_GRAPHS_DEFAULT - N_ALLREDUCE * simple
        ll = (1000 / TOKS_GRAPHS_TUNED - gemm) / N_ALLREDUCE  # from A2
        base = {"Simple": simple, "LL": ll, "LL128": ll * self.ll128_factor}[proto]
        if algo == "Tree":
            base *= self.tree_factor_simple if proto == "Simple" else self.tree_factor_ll
        return base

    @property
    def gemm_8(self) -> float:  # ms of matmuls etc. per step at TP=8 (~14.8 ms with A3)
        return 1000 / TOKS_GRAPHS_DEFAULT - N_ALLREDUCE * self.ar_graph_simple_ring

    @property
    def launch_eager(self) -> float:  # ms of kernel launches per step in eager mode (~14 ms)
        return 1000 / TOKS_EAGER_DEFAULT - self.gemm_8 - N_ALLREDUCE * AR_EAGER_DEFAULT

    def mean(self, tp: int, mode: str, proto: str, algo: str) -> float:
        """Mean tok/s of a working config. A7: PP = 8 / TP; stages run one after the other."""
        pp = 8 // tp
        gemm = self.gemm_8 * 8 / tp
        base = self.ar_graph(proto, algo)
        ar = self.graph_ar_fixed + (base - self.graph_ar_fixed) * (tp - 1) / 7  # A6: ~ ring steps
        eager_overhead = AR_EAGER_DEFAULT - self.ar_graph_simple_ring  # 80 us launch + sync per call
        if mode == "eager":
            step = gemm + self.launch_eager + N_ALLREDUCE * (ar + eager_overhead)
        elif mode == "piecewise":
            step = gemm + self.piecewise_launch_share * self.launch_eager + N_ALLREDUCE * (
                ar + self.piecewise_ar_overhead)
        else:
            step = gemm + N_ALLREDUCE * ar
        step += PP_BOUNDARY[mode] * self.pp_boundary_scale * (pp - 1)
        return 1000.0 / step

    def failure(self, tp: int, proto: str, algo: str) -> str:
        if tp == 1 or (tp == 2 and self.tp2_crashes):
            return "start-crash"   # A8: TP=1 (PP=8) does not fit: first stage + graph pools > 96 GB
        if algo == "NVLS":
            return "nccl-invalid"  # A9: NVLS needs NVSwitch; NCCL >= 2.24 refuses it
        if proto == "LL128" and not self.ll128_works:
            return "wrong-output"  # A10: LL128 forced over PCIe corrupts data; the gate catches it
        return ""


PP_BOUNDARY = {"eager": 0.30, "piecewise": 0.20, "full": 0.15}  # A7: ms per pipeline boundary per token


def samples_for(rng: random.Random, mean: float, cv_range=(0.01, 0.03)) -> list[float]:
    cv = rng.uniform(*cv_range)
    n = rng.randint(3, 5)
    return [round(max(0.1, rng.gauss(mean, cv * mean)), 2) for _ in range(n)]


def motivating_rows(model: CaseModel = CaseModel(), seed: int = 20250101) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for tp in (1, 2, 4, 8):
        for mode in ("eager", "piecewise", "full"):
            combos = [("", "")] if tp == 1 else [(p, a) for p in ("Simple", "LL", "LL128")
                                                 for a in ("Ring", "Tree", "NVLS")]
            for proto, algo in combos:
                failure = model.failure(tp, proto, algo)
                samples = "" if failure else ";".join(
                    f"{s:g}" for s in samples_for(rng, model.mean(tp, mode, proto, algo),
                                                  (model.cv_low, model.cv_high)))
                baseline = "1" if (tp, mode, proto, algo) == (8, "eager", "Simple", "Ring") else ""
                rows.append({"tp_size": tp, "graph_mode": mode, "env.NCCL_PROTO": proto, "env.NCCL_ALGO": algo,
                             "samples": samples, "failure": failure, "baseline": baseline, "note": ""})
    return rows


def variant(seed: int) -> CaseModel:
    """The motivating case with its unpublished assumptions redrawn (published anchors kept)."""
    r = random.Random(seed)
    cv_low = r.uniform(0.005, 0.03)
    return replace(
        CaseModel(),
        ar_graph_simple_ring=r.uniform(0.040, 0.070),
        tree_factor_simple=r.uniform(0.85, 1.15),
        tree_factor_ll=r.uniform(0.85, 1.15),
        piecewise_launch_share=r.uniform(0.05, 0.6),
        piecewise_ar_overhead=r.uniform(0.0, 0.03),
        graph_ar_fixed=r.uniform(0.002, 0.015),
        pp_boundary_scale=r.uniform(0.5, 3.0),
        ll128_works=r.random() < 0.3,
        ll128_factor=r.uniform(0.85, 1.15),
        tp2_crashes=r.random() < 0.3,
        cv_low=cv_low,
        cv_high=cv_low + r.uniform(0.005, 0.04),
    )


# ---- GLM-5-like start-up costs of the motivating case (issue 26) -------------------------------
# Community figures: GLM-5 on 8x RTX PRO 6000 (PCIe) starts in 7-8 minutes, about 208 s of it
# CUDA-graph capture; an 11-minute cold vLLM start elsewhere split into torch.compile 166 s,
# profiling and warm-up 131 s, weights 63 s, graphs ~90 s. Everything else is assumed:
# S1: a start with vLLM's default graphs (the "full" rows: FULL_AND_PIECEWISE, the published
#     "CUDA graphs" runs) takes 450 s (7.5 min), 208 s of it graph capture.
# S2: the rest of it: process start, imports and NCCL init 60 s (before any weight), weights 63 s
#     (the cold split's figure), torch.compile from a warm cache 30 s (every trial of a node keeps
#     its compile cache, issue 26; a cold compile, 166 s, is paid once per compile key and is
#     left out), profiling, KV cache and warm-up 450 - 208 - 60 - 63 - 30 = 89 s.
# S3: "piecewise" captures the piecewise graphs only: 76% of the default capture (the share of
#     the piecewise pass in the H200 `1b` capture of tests/fixtures/vllm: 19 sizes in ~0.47 s of
#     ~0.62 s), 158 s.
# S4: "eager" compiles and captures nothing: 60 + 63 + 89 = 212 s.
# S5: TP x PP = 8 in every row (A7): the weights per GPU are the same, each pipeline stage
#     captures its own layers' graphs at the same sizes in parallel; each pipeline boundary adds
#     5 s (its send/recv communicators and a stage process): PP - 1 boundaries.
# S7: the first launch of a compile key (TP, graph mode: NCCL variables never change what vLLM
#     compiles) in a night compiles cold: 166 s (the cold split's torch.compile) instead of 30 s,
#     136 s more (compile_s); eager compiles nothing.
# S6: failures end early: NVLS is refused at communicator creation (A9): 60 s; TP=1 (PP=8) runs
#     out of memory when the KV cache is profiled after the weights (A8): 60 + 63 (+ 30 compile
#     with graphs) + boundaries; LL128 (A10) starts in full (the gate fails after the benchmark).
GLM5_PROCESS_NCCL_S, GLM5_WEIGHTS_S, GLM5_COMPILE_WARM_S, GLM5_PROFILE_S = 60.0, 63.0, 30.0, 89.0
GLM5_CAPTURE_S = {"eager": 0.0, "piecewise": 158.0, "full": 208.0}  # S3: 0.76 x 208
GLM5_PP_BOUNDARY_S = 5.0
GLM5_COMPILE_COLD_S = 166.0  # S7


def glm5_startup_s(tp: int, mode: str, failure: str) -> float:
    """Seconds a launch of the motivating case takes to start, or to fail at start (S1-S6)."""
    compile_s = 0.0 if mode == "eager" else GLM5_COMPILE_WARM_S
    boundaries = GLM5_PP_BOUNDARY_S * (8 // tp - 1)
    if failure == "nccl-invalid":
        return GLM5_PROCESS_NCCL_S
    if failure == "start-crash":
        return GLM5_PROCESS_NCCL_S + GLM5_WEIGHTS_S + compile_s + boundaries
    return GLM5_PROCESS_NCCL_S + GLM5_WEIGHTS_S + compile_s + GLM5_PROFILE_S + GLM5_CAPTURE_S[mode] + boundaries


def with_startup(rows: list[dict]) -> list[dict]:
    """The motivating case's rows with a startup_s column (GLM-5-like, S1-S6)."""
    out = []
    for r in rows:
        cost = glm5_startup_s(int(r["tp_size"]), r["graph_mode"], r["failure"])
        compiles = r["graph_mode"] != "eager" and r["failure"] not in ("nccl-invalid", "start-crash")
        cold = GLM5_COMPILE_COLD_S - GLM5_COMPILE_WARM_S if compiles else 0.0
        row = {k: v for k, v in r.items() if k != "note"}
        out.append({**row, "startup_s": f"{cost:g}", "compile_s": f"{cold:g}" if cold else "", "note": r["note"]})
    return out


# ---- the motivating space: 672 configs of jobs/glm5-vllm-8xpcie.yaml with unsafe NCCL allowed --------
# The space of search_spaces/vllm-pcie.yaml with LL128, NVLS and PAT allowed (allow_unsafe_nccl): TP x PP
# = 8 (TP2xPP4, TP4xPP2, TP8xPP1), graphs off or on with one of three capture modes and two capture
# lists, custom all-reduce on/off at TP=2, NCCL_PROTO x NCCL_ALGO x NCCL_P2P_DISABLE: 672 configs.
# Decode speed is a product of per-value factors (nearly additive in the log), every factor an
# assumption M<n>; the published anchors are those of the motivating case (TP=8 eager 20.0, graphs
# 42.7, NCCL tuned ~57 tok/s):
# M1: the best, TP8xPP1 + graphs + LL + Ring + P2P on, decodes 57.0 tok/s (the published tuned figure).
# M2: layout: TP4xPP2 x0.978 (2.2% slower with the same NCCL settings: the near-optimal runner-up),
#     TP2xPP4 x0.85; at TP=2 vLLM's custom all-reduce off x0.97.
# M3: graphs: eager x0.468 (20.0 / 42.7, published). At PP=1 one request replays one size-1 graph in
#     every capture mode and with either capture list: the 6 graph settings tie, so 6 configs are
#     optimal. At PP > 1 PIECEWISE breaks the graph at every stage boundary: x0.97 (the one
#     interaction: nearly additive, not exactly).
# M4: NCCL_PROTO: Simple x0.749 (42.7 / 57, published); LL128 forced over PCIe returns wrong text,
#     fast (the correctness gate fails it after the benchmark: wrong-output).
# M5: NCCL_ALGO: Tree x0.96; NVLS (needs NVSwitch) and PAT (inter-node only) are refused when NCCL
#     creates its communicators: nccl-invalid, at start, the log naming the algorithm (the log column;
#     the wording of NCCL's warning, as tests/study/evidence/test_bans.py has it).
# M6: NCCL_P2P_DISABLE=1 (traffic through host memory) x0.92.
# M7: noise: every benchmark sample is the config's value x a normal draw with 1% coefficient of
#     variation (measurement noise), and every launch multiplies all of its samples by one normal
#     draw with 0.5% CV (launch noise: clocks, placement, what the box did meanwhile). The table
#     stores the true value as the one sample and the two CVs in its noise and launch_noise columns;
#     the replay draws the noise (orchestrator/study/simulation/replay.py).
# Start-up costs, GLM-5-like (S1-S7 above, and):
# S8: capture time is proportional to the sizes captured: the 7-size list takes S1's 208 s in
#     FULL_AND_PIECEWISE, the 4-size list 4/7 of it; PIECEWISE captures 76% (S3), FULL_DECODE_ONLY the
#     other 24%.
SPACE_BEST = 57.0
SPACE_LAYOUTS = ((2, 4), (4, 2), (8, 1))
SPACE_LAYOUT_FACTOR = {8: 1.0, 4: 0.978, 2: 0.85}
SPACE_MODES = ("PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
SPACE_CAPTURES = ("1,2,4,8", "1,2,4,8,16,32,64")
SPACE_MODE_CAPTURE_SHARE = {"PIECEWISE": 0.76, "FULL_DECODE_ONLY": 0.24, "FULL_AND_PIECEWISE": 1.0}
SPACE_PROTO_FACTOR = {"LL": 1.0, "Simple": 0.749}
SPACE_ALGO_FACTOR = {"Ring": 1.0, "Tree": 0.96}
SPACE_NOISE, SPACE_LAUNCH_NOISE = 0.01, 0.005


def space_value(tp: int, pp: int, mode: str | None, custom_ar: bool | None, proto: str, algo: str,
                p2p_disable: int) -> float:
    """True decode tok/s of a working config of the motivating space (M1-M6)."""
    value = SPACE_BEST * SPACE_LAYOUT_FACTOR[tp] * (0.97 if custom_ar is False else 1.0)
    if mode is None:
        value *= TOKS_EAGER_DEFAULT / TOKS_GRAPHS_DEFAULT
    elif mode == "PIECEWISE" and pp > 1:
        value *= 0.97
    return value * SPACE_PROTO_FACTOR[proto] * SPACE_ALGO_FACTOR[algo] * (0.92 if p2p_disable else 1.0)


def space_failure(proto: str, algo: str) -> str:
    if algo in ("NVLS", "PAT"):
        return "nccl-invalid"  # M5
    if proto == "LL128":
        return "wrong-output"  # M4
    return ""


def space_startup_s(pp: int, mode: str | None, capture: str | None, failure: str) -> tuple[float, float]:
    """(startup_s, compile_s) of one config of the motivating space (S1-S8)."""
    if failure == "nccl-invalid":
        return GLM5_PROCESS_NCCL_S, 0.0
    boundaries = GLM5_PP_BOUNDARY_S * (pp - 1)
    if mode is None:
        return GLM5_PROCESS_NCCL_S + GLM5_WEIGHTS_S + GLM5_PROFILE_S + boundaries, 0.0
    sizes = len(capture.split(",")) if capture else 0
    capture_s = GLM5_CAPTURE_S["full"] * SPACE_MODE_CAPTURE_SHARE[mode] * sizes / len(SPACE_CAPTURES[-1].split(","))
    start = GLM5_PROCESS_NCCL_S + GLM5_WEIGHTS_S + GLM5_COMPILE_WARM_S + GLM5_PROFILE_S + capture_s + boundaries
    return start, GLM5_COMPILE_COLD_S - GLM5_COMPILE_WARM_S


def motivating_space_rows() -> list[dict]:
    """The 672 configs of the motivating space (M1-M7, S1-S8), the baseline marked: TP8xPP1 eager
    with NCCL's defaults as the published runs had them (A1: Simple, Ring; P2P on)."""
    rows = []
    graphs = [(False, None, None)] + [(True, m, c) for m in SPACE_MODES for c in SPACE_CAPTURES]
    for tp, pp in SPACE_LAYOUTS:
        for on, mode, capture in graphs:
            for custom_ar in ((True, False) if tp == 2 else (None,)):
                for proto in ("LL", "Simple", "LL128"):
                    for algo in ("Ring", "Tree", "NVLS", "PAT"):
                        for p2p in (0, 1):
                            failure = space_failure(proto, algo)
                            value = "" if failure else f"{space_value(tp, pp, mode, custom_ar, proto, algo, p2p):.4f}"
                            start, cold = space_startup_s(pp, mode, capture, failure)
                            base = (tp, on, proto, algo, p2p) == (8, False, "Simple", "Ring", 0)
                            rows.append({
                                "tp_size": tp, "pp_size": pp, "graph_capture": "true" if on else "false",
                                "backend.cudagraph_mode": mode or "", "capture_sizes": capture or "",
                                "custom_all_reduce": "" if custom_ar is None else str(custom_ar).lower(),
                                "env.NCCL_PROTO": proto, "env.NCCL_ALGO": algo, "env.NCCL_P2P_DISABLE": p2p,
                                "samples": value, "failure": failure, "baseline": "1" if base else "",
                                "startup_s": f"{start:.0f}", "compile_s": f"{cold:.0f}" if cold else "",
                                "noise": "" if failure else f"{SPACE_NOISE:g}",
                                "launch_noise": "" if failure else f"{SPACE_LAUNCH_NOISE:g}",
                                "log": (f"NCCL WARN Error : algorithm {algo} is not supported on this platform"
                                        if failure == "nccl-invalid" else ""), "note": ""})
    return rows


# ---- small: reference server, one H200, graph capture -----------------------------------------
# Anchors (docs/benchmarks.md, "CUDA path, checked once on 2x H200"; one run each, `8b` preset,
# bf16, 128 tokens): --tp 1 eager 48.8 tok/s (samples 57, 49, 38); --tp 1 --graph-capture
# 154.3 tok/s (154, 154, 156). Everything else is assumed:
# A11: those runs used the server's default capture sizes and max_batch 8 (the baseline row
#      is eager at max_batch 8); eager noise CV 10-20% and graph noise CV 0.5-1.5%, as the
#      spread of those samples suggests.
# A12: a capture size above max_batch is refused at start (start-crash).
# A13: a larger max_batch slows single-request decode slightly (bigger static buffers):
#      +1.5% at 1, -1.5% at 32 relative to 8; extra capture sizes cost 0.5% / 1%.
EAGER_8B, GRAPH_8B = 48.8, 154.3


def h200_rows(seed: int = 20250102) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for max_batch in (1, 8, 32):
        slow = {1: 1.015, 8: 1.0, 32: 0.985}[max_batch]
        rows.append({"graph_capture": "false", "capture_sizes": "", "backend.max_batch": max_batch,
                     "samples": ";".join(f"{s:g}" for s in samples_for(rng, EAGER_8B * slow, (0.10, 0.20))),
                     "failure": "", "baseline": "1" if max_batch == 8 else "", "note": ""})
        for sizes, biggest, extra in (("1", 1, 1.00), ("1,2,4,8", 8, 0.995), ("1,2,4,8,16,32", 32, 0.99)):
            failure = "start-crash" if biggest > max_batch else ""
            samples = "" if failure else ";".join(
                f"{s:g}" for s in samples_for(rng, GRAPH_8B * slow * extra, (0.005, 0.015)))
            rows.append({"graph_capture": "true", "capture_sizes": sizes, "backend.max_batch": max_batch,
                         "samples": samples, "failure": failure, "baseline": "", "note": ""})
    return rows


def slices() -> dict[str, list[dict]]:
    """Small tables cut from the motivating case (a user tuning fewer knobs)."""
    rows = motivating_rows()
    safe = lambda r: r["env.NCCL_PROTO"] in ("Simple", "LL") and r["env.NCCL_ALGO"] in ("Ring", "Tree")  # noqa: E731
    cuts = {
        "slice-tp8-full": lambda r: r["tp_size"] == 8 and r["graph_mode"] == "full",
        "slice-tp8-safe-nccl": lambda r: r["tp_size"] == 8 and safe(r),
        "slice-tp48-full": lambda r: r["tp_size"] in (4, 8) and r["graph_mode"] == "full",
        "slice-full-safe-nccl": lambda r: r["tp_size"] > 1 and r["graph_mode"] == "full" and safe(r),
    }
    out = {}
    for name, keep in cuts.items():
        kept = [dict(r) for r in rows if keep(r)]
        for r in kept:  # baseline: TP=8, Simple/Ring in the slowest graph mode the slice has
            r["baseline"] = ""
        modes = [m for m in ("eager", "piecewise", "full") if any(r["graph_mode"] == m for r in kept)]
        for r in kept:
            setting = (r["tp_size"], r["graph_mode"], r["env.NCCL_PROTO"], r["env.NCCL_ALGO"])
            if setting == (8, modes[0], "Simple", "Ring"):
                r["baseline"] = "1"
        out[name] = kept
    return out


def write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=0, help="write N sensitivity variants instead")
    ap.add_argument("--slices", action="store_true", help="write small slices of the motivating case instead")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.slices:
        for name, rows in slices().items():
            write(args.out / f"{name}.csv", rows)
    elif args.variants:
        for i in range(args.variants):
            write(args.out / f"variant-{i:02d}.csv", motivating_rows(variant(1000 + i), seed=2000 + i))
    else:
        write(args.out / "motivating-case.csv", motivating_rows())
        write(args.out / "motivating-case-startup.csv", with_startup(motivating_rows()))
        write(args.out / "motivating-space.csv", motivating_space_rows())
        write(args.out / "h200-graphs-small.csv", h200_rows())
