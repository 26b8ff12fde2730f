"""Stand-in spaces with the structure users' boxes have: the suite a search strategy is judged on.

One replay table (``study.replay``) is one box; a strategy tuned on it is fast there and may be
brittle on the next box, which is always one it was not tuned on. The suite is several boxes, each
generated here from a few lines of physics and a seed, so a strategy is judged on all of them at
once (``ncclsweep simulate --suite``, ``study.night``) and on variants it has never seen
(``--suite-seed``: every stand-in's effect sizes redrawn; ``random-N``: a space drawn at random).

What every stand-in has, in the proportions the field reports (docs/tables/README.md, "The suite"):
main effects (graphs, the NCCL protocol, the layout), pairwise interactions of chosen strength
(algorithm x TP, protocol x P2P, graphs x capture size x load, all-reduce backend x TP,
speculation x tokens), values that crash at start (the log naming them, as NCCL does) or answer
wrong (LL128 over PCIe), combinations that crash where each value alone works (a capture list
too large for the memory left), a narrow optimum region, near-ties, noise per benchmark sample and
per launch, and start-up costs per config (GLM-5-like: minutes).

A stand-in is a ``Box``: its parameters and their values, which are active where, which layouts
are feasible, and four functions of a (normalized) config: its true value (tok/s, None where it
fails), how it fails, and what a launch costs to start. ``Box.table(seed)`` enumerates it into a
``replay.Table``: one row per distinct config, the baseline marked, the true value as the row's
sample with the noise columns set (the replay draws the noise).

    suite(seed=0) -> list[Table]               every stand-in of the suite
    stand_in(name, seed=0) -> Table            one, by name (``NAMES``, or ``random-N``)
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.core.records import Config, FailureKind, config_key
from orchestrator.study.simulation.replay_table import Row, Table, TableError, index_table

Failure = tuple[str, str]  # (failure kind, what the server's log says)

# GLM-5-like start-up (docs/tables/README.md, S1-S8): process and NCCL init, weights, warm compile,
# profiling, a full capture of the 7-size list, a pipeline boundary; a cold compile once per key
PROCESS_S, WEIGHTS_S, COMPILE_WARM_S, PROFILE_S, CAPTURE_FULL_S, BOUNDARY_S = 60.0, 63.0, 30.0, 89.0, 208.0, 5.0
COMPILE_COLD_EXTRA_S = 136.0
NCCL_REFUSED = "NCCL WARN Error : algorithm {} is not supported on this platform"


@dataclass(frozen=True)
class Box:
    """One stand-in box (module docstring). ``value``, ``failure`` and ``startup`` take a normalized
    config (inactive parameters dropped) and the box's ``effects`` (its seeded effect sizes)."""

    name: str
    about: str  # one line: the structure it tests
    params: dict[str, tuple[Any, ...]]
    baseline: Config
    value: Callable[[Config, Mapping[str, float]], float]
    effects: dict[str, float]  # named effect sizes (factors), redrawn around these by a seed
    failure: Callable[[Config], Failure | None] = lambda c: None
    active: Callable[[Config], Config] = lambda c: c
    feasible: Callable[[Config], bool] = lambda c: True
    startup: Callable[[Config, Failure | None], tuple[float, float]] = lambda c, f: (300.0, 0.0)
    noise: float = 0.01  # CV of one benchmark sample
    launch_noise: float = 0.005  # CV of one launch
    fixed: tuple[str, ...] = field(default=())  # effects a seed never moves (the published anchors)
    synergy: tuple[tuple[str, Any], tuple[str, Any]] | None = None  # a value slow alone, and its partner

    def drawn(self, seed: int) -> dict[str, float]:
        """The effect sizes of variant ``seed``: seed 0 as written, else each factor's distance from
        1 scaled by a draw in [0.6, 1.4] (the structure kept, the sizes not)."""
        if seed == 0:
            return dict(self.effects)
        rng = random.Random(f"{self.name}:{seed}")
        return {k: v if k in self.fixed else 1.0 + (v - 1.0) * rng.uniform(0.6, 1.4)
                for k, v in self.effects.items()}

    def configs(self) -> list[Config]:
        """Every distinct feasible normalized config, in enumeration order."""
        seen: dict[str, Config] = {}
        names = list(self.params)
        for combo in itertools.product(*(self.params[n] for n in names)):
            raw = dict(zip(names, combo))
            if not self.feasible(raw):
                continue
            config = self.active(raw)
            seen.setdefault(config_key(config), config)
        return list(seen.values())

    def table(self, seed: int = 0) -> Table:
        """The box as a replay table (module docstring)."""
        effects = self.drawn(seed)
        base_key = config_key(self.active(dict(self.baseline)))
        rows: list[Row] = []
        for line, config in enumerate(self.configs(), start=2):
            failed = self.failure(config)
            start, cold = self.startup(config, failed)
            value = None if failed else self.value(config, effects)
            rows.append(Row(dict(config), [] if value is None else [round(value, 4)],
                            failed[0] if failed else None, baseline=config_key(config) == base_key, line=line,
                            startup_s=float(round(start)), compile_s=float(round(cold)),
                            noise=None if failed else self.noise,
                            launch_noise=0.0 if failed else self.launch_noise,
                            log=failed[1] if failed else ""))
        name = self.name if seed == 0 else f"{self.name}~{seed}"
        return index_table(name, rows, {n: list(v) for n, v in self.params.items()})


# ---- shared physics ---------------------------------------------------------------------------------
def glm5_startup(pp: int, graphs: bool, capture_share: float, failure: Failure | None) -> tuple[float, float]:
    """(startup_s, compile_s) of a GLM-5-like launch on 8 PCIe GPUs (S1-S8): a start NCCL refuses
    ends after its init, a crash after the weights; ``capture_share``: of the full 7-size capture."""
    boundaries = BOUNDARY_S * (pp - 1)
    if failure is not None and failure[0] == FailureKind.NCCL_INVALID:
        return PROCESS_S, 0.0
    if failure is not None and failure[0] == FailureKind.START_CRASH:
        return PROCESS_S + WEIGHTS_S + (COMPILE_WARM_S if graphs else 0.0) + boundaries, 0.0
    if not graphs:
        return PROCESS_S + WEIGHTS_S + PROFILE_S + boundaries, 0.0
    return (PROCESS_S + WEIGHTS_S + COMPILE_WARM_S + PROFILE_S + CAPTURE_FULL_S * capture_share + boundaries,
            COMPILE_COLD_EXTRA_S)


def nccl_failure(config: Config) -> Failure | None:
    """NVLS and PAT refused at communicator creation (named in the log); LL128 wrong over PCIe."""
    algo = config.get("env.NCCL_ALGO")
    if algo in ("NVLS", "PAT"):
        return FailureKind.NCCL_INVALID, NCCL_REFUSED.format(algo)
    if config.get("env.NCCL_PROTO") == "LL128":
        return FailureKind.WRONG_OUTPUT, ""
    return None


def crash(what: str) -> Failure:
    return FailureKind.START_CRASH, what


def graph_params(config: Config) -> Config:
    """Capture settings only where graphs are on; custom all-reduce only at TP=2."""
    out = dict(config)
    if not out.get("graph_capture", True):
        out.pop("backend.cudagraph_mode", None)
        out.pop("capture_sizes", None)
    if "custom_all_reduce" in out and out.get("tp_size") != 2:
        out.pop("custom_all_reduce")
    return out


def capture_share(config: Config) -> float:
    mode_share = {"PIECEWISE": 0.76, "FULL_DECODE_ONLY": 0.24, "FULL_AND_PIECEWISE": 1.0}
    sizes = len(str(config.get("capture_sizes", "1,2,4,8,16,32,64")).split(","))
    return mode_share.get(str(config.get("backend.cudagraph_mode")), 1.0) * sizes / 7


def layout_8(config: Config) -> bool:
    return int(config.get("tp_size", 8)) * int(config.get("pp_size", 1)) == 8


NCCL_SPACE = {"env.NCCL_PROTO": ("LL", "Simple", "LL128"), "env.NCCL_ALGO": ("Ring", "Tree", "NVLS", "PAT"),
              "env.NCCL_P2P_DISABLE": (0, 1)}
GRAPH_SPACE = {"graph_capture": (False, True),
               "backend.cudagraph_mode": ("PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"),
               "capture_sizes": ("1,2,4,8", "1,2,4,8,16,32,64")}


# ---- the stand-ins -------------------------------------------------------------------------------------
def _motivating_value(c: Config, e: Mapping[str, float]) -> float:
    value = 57.0 * {8: 1.0, 4: e["tp4"], 2: e["tp2"]}[c["tp_size"]] * (e["custom_off"] if c.get(
        "custom_all_reduce") is False else 1.0)
    if not c["graph_capture"]:
        value *= e["eager"]
    elif c["backend.cudagraph_mode"] == "PIECEWISE" and c["pp_size"] > 1:
        value *= e["piecewise_pp"]
    value *= e["simple"] if c["env.NCCL_PROTO"] == "Simple" else 1.0
    value *= e["tree"] if c["env.NCCL_ALGO"] == "Tree" else 1.0
    return value * (e["p2p_off"] if c["env.NCCL_P2P_DISABLE"] else 1.0)


MOTIVATING = Box(
    "motivating", "the shipped table (docs/tables/motivating-space.csv): nearly additive, 6 optimal configs",
    {"tp_size": (2, 4, 8), "pp_size": (4, 2, 1), **GRAPH_SPACE, "custom_all_reduce": (True, False), **NCCL_SPACE},
    {"tp_size": 8, "pp_size": 1, "graph_capture": False, "env.NCCL_PROTO": "Simple", "env.NCCL_ALGO": "Ring",
     "env.NCCL_P2P_DISABLE": 0, "custom_all_reduce": True},
    _motivating_value,
    {"tp4": 0.978, "tp2": 0.85, "custom_off": 0.97, "eager": 20.0 / 42.7, "piecewise_pp": 0.97, "simple": 0.749,
     "tree": 0.96, "p2p_off": 0.92},
    failure=nccl_failure, active=graph_params, feasible=layout_8,
    startup=lambda c, f: glm5_startup(c["pp_size"], c["graph_capture"], capture_share(c), f),
    fixed=("eager", "simple"))


def _combination_value(c: Config, e: Mapping[str, float]) -> float:
    """The issue's stand-in: at TP=8 the decode all-reduce is the step's largest part and only LL
    over a Ring keeps it short; TP=4 x PP=2 is 2.2% below the optimum and barely cares."""
    tp, proto, algo, p2p_off = c["tp_size"], c["env.NCCL_PROTO"], c["env.NCCL_ALGO"], c["env.NCCL_P2P_DISABLE"]
    value = 175.0 * {8: 1.0, 4: e["tp4"], 2: e["tp2"]}[tp]
    sensitivity = {8: 1.0, 4: 0.3, 2: 0.15}[tp]  # how much of the step is all-reduce: the interaction
    if proto == "Simple":
        value *= 1.0 - (1.0 - e["simple_tp8"]) * sensitivity
    if algo == "Tree":
        value *= 1.0 - (1.0 - e["tree_tp8"]) * sensitivity
    if p2p_off:
        value *= 1.0 - (1.0 - e["p2p_off_tp8"]) * sensitivity
    if not c["graph_capture"]:
        value *= e["eager"]
    else:
        if c["backend.cudagraph_mode"] == "PIECEWISE":  # the all-reduces run between the pieces
            value *= 1.0 - (1.0 - e["piecewise_tp8"]) * sensitivity
        if c["capture_sizes"] == "1,2,4,8" and tp == 8:  # FULL at TP=8 pads to a larger graph: short list slower
            value *= e["short_capture_tp8"]
    if c.get("custom_all_reduce") is False:
        value *= e["custom_off"]
    return value


def _combination_failure(c: Config) -> Failure | None:
    got = nccl_failure(c)
    if got is None and c["tp_size"] == 2 and c.get("capture_sizes") == "1,2,4,8,16,32,64" \
            and c.get("backend.cudagraph_mode") == "FULL_AND_PIECEWISE":
        return crash("torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs")  # a combination
    return got


GLM5_COMBINATION = Box(
    "glm5-combination", "the GLM-5 job where TP=8 is fastest only with LL over Ring (algo x TP, proto x TP)",
    MOTIVATING.params,
    MOTIVATING.baseline,
    _combination_value,
    {"tp4": 0.978, "tp2": 0.80, "simple_tp8": 0.55, "tree_tp8": 0.62, "p2p_off_tp8": 0.78, "eager": 0.42,
     "piecewise_tp8": 0.8, "short_capture_tp8": 0.93, "custom_off": 0.97},
    failure=_combination_failure, active=graph_params, feasible=layout_8,
    startup=lambda c, f: glm5_startup(c["pp_size"], c["graph_capture"], capture_share(c), f))


def _p2p_value(c: Config, e: Mapping[str, float]) -> float:
    """Total tok/s at 32 streams: P2P on with LL wins small messages, P2P off with many channels and
    Simple wins the large all-reduces a full batch makes (the RTX PRO 6000 community's finding)."""
    p2p_off, proto, ctas = c["env.NCCL_P2P_DISABLE"], c["env.NCCL_PROTO"], c["env.NCCL_MIN_CTAS"]
    value = 2400.0 * (e["tp4"] if c["tp_size"] == 4 else 1.0)
    if p2p_off:
        value *= e["p2p_off"] * (e["channels"] ** math.log2(ctas / 4))  # channels help only through host memory
        value *= e["simple_p2p_off"] if proto == "Simple" else 1.0
    else:
        value *= e["simple_p2p_on"] if proto == "Simple" else 1.0
        value *= e["ctas_p2p_on"] ** abs(math.log2(ctas / 4))
    value *= e["eager"] if not c["graph_capture"] else 1.0
    value *= {32: e["seqs32"], 64: 1.0, 128: e["seqs128"]}[c["max_num_seqs"]]
    value *= e["buff_small"] if c["env.NCCL_BUFFSIZE"] == 1048576 else 1.0
    return value


def _p2p_failure(c: Config) -> Failure | None:
    if c["env.NCCL_PROTO"] == "LL128":
        return FailureKind.WRONG_OUTPUT, ""
    if c["env.NCCL_BUFFSIZE"] == 16777216 and c["env.NCCL_MIN_CTAS"] == 32 and not c["env.NCCL_P2P_DISABLE"]:
        return crash("NCCL WARN Cuda failure 'out of memory' allocating 32 channels x 16 MB")
    return None


PROTO_P2P = Box(
    "proto-p2p-load", "32 streams: P2P x protocol x channels flip the winner; a buffer x channels crash",
    {"tp_size": (4, 8), "graph_capture": (False, True), "max_num_seqs": (32, 64, 128),
     "env.NCCL_PROTO": ("LL", "Simple", "LL128"), "env.NCCL_P2P_DISABLE": (0, 1),
     "env.NCCL_MIN_CTAS": (1, 4, 16, 32), "env.NCCL_BUFFSIZE": (1048576, 4194304, 16777216)},
    {"tp_size": 8, "graph_capture": False, "max_num_seqs": 64, "env.NCCL_PROTO": "LL", "env.NCCL_P2P_DISABLE": 0,
     "env.NCCL_MIN_CTAS": 4, "env.NCCL_BUFFSIZE": 4194304},
    _p2p_value,
    {"tp4": 0.82, "p2p_off": 0.9, "channels": 1.07, "simple_p2p_off": 1.12, "simple_p2p_on": 0.93,
     "ctas_p2p_on": 0.985, "eager": 0.62, "seqs32": 0.7, "seqs128": 0.97, "buff_small": 0.96},
    failure=_p2p_failure,
    startup=lambda c, f: glm5_startup(8 // c["tp_size"], c["graph_capture"], 0.6, f),
    noise=0.015, launch_noise=0.01)


def _graphs_value(c: Config, e: Mapping[str, float]) -> float:
    """Total tok/s at 48 streams: graphs pay only where the batch (min of 48 and max_num_seqs) is
    captured, else the batch runs eagerly (the cliff above the largest captured size)."""
    batch = min(48, c["max_num_seqs"])
    value = 9000.0 * batch / 48
    mode = c["backend.cudagraph_mode"]
    if mode == "NONE" or int(c["max_capture_size"]) < batch:
        value *= e["eager"] * (e["piecewise_uncaptured"] if mode != "NONE" else 1.0)
    else:
        value *= {"PIECEWISE": e["piecewise"], "FULL": e["full"], "FULL_AND_PIECEWISE": 1.0}[mode]
        value *= e["capture_large"] if int(c["max_capture_size"]) >= 128 else 1.0
    value *= e["no_chunked"] if not c["enable_chunked_prefill"] else 1.0
    value *= {0.8: e["mem80"], 0.9: 1.0, 0.95: e["mem95"]}[c["gpu_memory_utilization"]]
    value *= e["seqs256"] if c["max_num_seqs"] == 256 else 1.0
    return value


def _graphs_failure(c: Config) -> Failure | None:
    if c.get("max_capture_size") == 128 and c["gpu_memory_utilization"] == 0.95 and c.get(
            "backend.cudagraph_mode") in ("FULL", "FULL_AND_PIECEWISE"):
        return crash("torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs")
    if c.get("backend.cudagraph_mode") == "FULL" and not c["enable_chunked_prefill"]:
        return crash("ValueError: FULL cudagraph mode needs chunked prefill in this release")
    return None


def _graphs_active(c: Config) -> Config:
    out = dict(c)
    if out.get("backend.cudagraph_mode") == "NONE":
        out.pop("max_capture_size", None)
    return out


GRAPHS_LOAD = Box(
    "graphs-capture-load", "48 streams: graphs pay only up to the largest captured size (graphs x capture x load)",
    {"backend.cudagraph_mode": ("NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE"),
     "max_capture_size": (8, 16, 32, 64, 128), "max_num_seqs": (32, 64, 128, 256),
     "enable_chunked_prefill": (True, False), "gpu_memory_utilization": (0.8, 0.9, 0.95)},
    {"backend.cudagraph_mode": "NONE", "max_num_seqs": 256, "enable_chunked_prefill": True,
     "gpu_memory_utilization": 0.9},
    _graphs_value,
    {"eager": 0.55, "piecewise_uncaptured": 1.03, "piecewise": 0.9, "full": 0.96, "capture_large": 0.985,
     "no_chunked": 0.97, "mem80": 0.96, "mem95": 1.01, "seqs256": 0.985},
    failure=_graphs_failure, active=_graphs_active,
    startup=lambda c, f: (150.0 + (60.0 * int(c.get("max_capture_size", 0)) / 128 if "max_capture_size" in c else 0.0)
                          if f is None else 90.0, 40.0 if c["backend.cudagraph_mode"] != "NONE" else 0.0),
    noise=0.02, launch_noise=0.01)


def _allreduce_value(c: Config, e: Mapping[str, float]) -> float:
    """Single-request decode: the all-reduce path's crossover moves with TP; NCCL's settings matter
    only where NCCL runs the all-reduce (backend x TP, backend x protocol)."""
    tp, backend = c["tp_size"], c["allreduce.backend"]
    value = 60.0 * {8: 1.0, 4: e["tp4"], 2: e["tp2"]}[tp]
    if backend == "custom" and tp > 2:
        backend = "nccl"  # the engine turns it off on more than two PCIe GPUs
    if backend == "nccl":
        value *= {8: e["nccl_tp8"], 4: e["nccl_tp4"], 2: e["nccl_tp2"]}[tp]
        value *= e["simple"] ** {8: 1.0, 4: 0.6, 2: 0.3}[tp] if c["env.NCCL_PROTO"] == "Simple" else 1.0
        value *= e["tree"] if c["env.NCCL_ALGO"] == "Tree" else 1.0
        value *= {1: e["ctas1"], 4: 1.0, 16: e["ctas16"]}[c["env.NCCL_MIN_CTAS"]]
    elif backend == "custom":
        value *= e["custom_tp2"]
    elif backend == "flashinfer_pcie_ipc":
        value *= {8: 1.0, 4: e["fi_tp4"], 2: e["fi_tp2"]}[tp]
    value *= e["eager"] if not c["graph_capture"] else 1.0
    value *= e["p2p_off"] if c["env.NCCL_P2P_DISABLE"] else 1.0
    return value


def _allreduce_failure(c: Config) -> Failure | None:
    if c["allreduce.backend"] == "symm_mem":
        return crash("RuntimeError: symm_mem all-reduce needs NVLink (allreduce.backend=symm_mem)")
    if c["allreduce.backend"] == "flashinfer_pcie_ipc" and c["env.NCCL_P2P_DISABLE"]:
        return crash("RuntimeError: CUDA IPC peer access is disabled (NCCL_P2P_DISABLE=1)")  # a combination
    return None


ALLREDUCE_TP = Box(
    "allreduce-backend-tp", "one request: the all-reduce backend's crossover moves with TP (backend x TP)",
    {"tp_size": (2, 4, 8), "pp_size": (4, 2, 1),
     "allreduce.backend": ("nccl", "custom", "flashinfer_pcie_ipc", "symm_mem"),
     "env.NCCL_PROTO": ("LL", "Simple"), "env.NCCL_ALGO": ("Ring", "Tree"), "env.NCCL_P2P_DISABLE": (0, 1),
     "env.NCCL_MIN_CTAS": (1, 4, 16), "graph_capture": (False, True)},
    {"tp_size": 8, "pp_size": 1, "allreduce.backend": "nccl", "env.NCCL_MIN_CTAS": 4, "env.NCCL_PROTO": "Simple",
     "env.NCCL_ALGO": "Ring", "env.NCCL_P2P_DISABLE": 0, "graph_capture": False},
    _allreduce_value,
    {"tp4": 0.94, "tp2": 0.8, "nccl_tp8": 0.9, "nccl_tp4": 0.95, "nccl_tp2": 0.97, "simple": 0.8, "tree": 0.97,
     "ctas1": 0.97, "ctas16": 1.02, "custom_tp2": 1.02, "fi_tp4": 1.07, "fi_tp2": 1.05, "eager": 0.45, "p2p_off": 0.9},
    failure=_allreduce_failure, feasible=layout_8,
    startup=lambda c, f: glm5_startup(c["pp_size"], c["graph_capture"], 0.8, f))


def _spec_value(c: Config, e: Mapping[str, float]) -> float:
    """Single-request decode with speculation: the best draft length depends on the method (MTP's
    heads accept more), graphs matter more with speculation, n-gram turns async scheduling off."""
    method, k = c["speculative.method"], c.get("speculative.num_tokens", 0)
    value = 50.0 * (e["tp4"] if c["tp_size"] == 4 else 1.0)
    if method == "mtp":
        value *= e["mtp"] * math.exp(-e["draft_curve"] * (k - 3) ** 2)
    elif method == "ngram":
        value *= e["ngram"] * math.exp(-e["draft_curve"] * (k - 1) ** 2)
    if not c["graph_capture"]:
        value *= e["eager_spec"] if method != "none" else e["eager"]
    if not c["async_scheduling"] and method != "ngram":  # vLLM turns it off with n-gram anyway
        value *= e["sync"]
    value *= e["simple"] if c["env.NCCL_PROTO"] == "Simple" else 1.0
    value *= e["p2p_off"] if c["env.NCCL_P2P_DISABLE"] else 1.0
    return value


def _spec_failure(c: Config) -> Failure | None:
    if c["speculative.method"] == "eagle":
        return crash("ValueError: speculative.method eagle needs a draft model (speculative.model)")
    if c["speculative.method"] == "mtp" and c.get("speculative.num_tokens", 0) >= 5 and c["tp_size"] == 4:
        return crash("torch.OutOfMemoryError: CUDA out of memory (MTP heads x 5 drafts at TP=4)")
    return None


def _spec_active(c: Config) -> Config:
    out = dict(c)
    if out["speculative.method"] == "none":
        out.pop("speculative.num_tokens", None)
    return out


SPECULATION = Box(
    "speculation-tokens", "one request: each method has its own best draft length (method x tokens x graphs)",
    {"speculative.method": ("none", "ngram", "mtp", "eagle"), "speculative.num_tokens": (1, 2, 3, 4, 5),
     "graph_capture": (False, True), "tp_size": (4, 8), "async_scheduling": (True, False),
     "env.NCCL_PROTO": ("LL", "Simple"), "env.NCCL_P2P_DISABLE": (0, 1)},
    {"speculative.method": "none", "graph_capture": True, "tp_size": 8, "async_scheduling": True,
     "env.NCCL_PROTO": "Simple", "env.NCCL_P2P_DISABLE": 0},
    _spec_value,
    {"tp4": 0.9, "mtp": 1.75, "ngram": 1.04, "draft_curve": 0.06, "eager": 0.5, "eager_spec": 0.35, "sync": 0.95,
     "simple": 0.85, "p2p_off": 0.93},
    failure=_spec_failure, active=_spec_active,
    startup=lambda c, f: glm5_startup(8 // c["tp_size"], c["graph_capture"], 0.8, f),
    noise=0.02, launch_noise=0.01)


def _synergy_value(c: Config, e: Mapping[str, float]) -> float:
    """A value slow alone and fastest with one other: 512 NCCL threads lose 5% with any channel
    count but 8, and win 12% with 8 channels (8 channels alone are 1% ahead of the default)."""
    threads, ctas = c["env.NCCL_NTHREADS"], c["env.NCCL_MIN_CTAS"]
    value = 80.0 * (e["tp4"] if c["tp_size"] == 4 else 1.0)
    if threads == 512 and ctas == 8:
        value *= e["synergy"]
    else:
        value *= e["threads512"] if threads == 512 else (e["threads128"] if threads == 128 else 1.0)
        value *= e["ctas8"] if ctas == 8 else {1: e["ctas1"], 2: 1.0, 4: e["ctas4"]}[ctas]
    value *= e["simple"] if c["env.NCCL_PROTO"] == "Simple" else 1.0
    value *= e["tree"] if c["env.NCCL_ALGO"] == "Tree" else 1.0
    value *= e["p2p_off"] if c["env.NCCL_P2P_DISABLE"] else 1.0
    value *= e["eager"] if not c["graph_capture"] else 1.0
    return value


SYNERGY = Box(
    "synergy-threads-channels", "a value slow alone and fastest with one other (512 threads x 8 channels)",
    {"tp_size": (4, 8), "graph_capture": (False, True), "env.NCCL_PROTO": ("LL", "Simple", "LL128"),
     "env.NCCL_ALGO": ("Ring", "Tree"), "env.NCCL_P2P_DISABLE": (0, 1), "env.NCCL_MIN_CTAS": (1, 2, 4, 8),
     "env.NCCL_NTHREADS": (128, 256, 512)},
    {"tp_size": 8, "graph_capture": False, "env.NCCL_PROTO": "Simple", "env.NCCL_ALGO": "Ring",
     "env.NCCL_P2P_DISABLE": 0, "env.NCCL_MIN_CTAS": 2, "env.NCCL_NTHREADS": 256},
    _synergy_value,
    {"tp4": 0.93, "synergy": 1.12, "threads512": 0.95, "threads128": 0.98, "ctas8": 1.01, "ctas1": 0.97,
     "ctas4": 1.0, "simple": 0.8, "tree": 0.97, "p2p_off": 0.92, "eager": 0.5},
    failure=nccl_failure,
    startup=lambda c, f: glm5_startup(8 // c["tp_size"], c["graph_capture"], 0.8, f),
    synergy=(("env.NCCL_NTHREADS", 512), ("env.NCCL_MIN_CTAS", 8)))


def _ties_value(c: Config, e: Mapping[str, float]) -> float:
    """Many settings within 1-3% of each other and 3% noise per sample: which config the export
    names is decided by relaunches, not by one launch."""
    value = 120.0
    value *= {"LL": 1.0, "Simple": e["simple"]}[c["env.NCCL_PROTO"]]
    value *= {"Ring": 1.0, "Tree": e["tree"]}[c["env.NCCL_ALGO"]]
    value *= {1: e["ctas1"], 2: e["ctas2"], 4: 1.0, 8: e["ctas8"]}[c["env.NCCL_MIN_CTAS"]]
    value *= {1048576: e["buff1"], 4194304: 1.0, 16777216: e["buff16"]}[c["env.NCCL_BUFFSIZE"]]
    value *= e["p2p_off"] if c["env.NCCL_P2P_DISABLE"] else 1.0
    value *= e["eager"] if not c["graph_capture"] else 1.0
    value *= e["tp4"] if c["tp_size"] == 4 else 1.0
    return value


NEAR_TIES = Box(
    "near-ties", "a flat top: 4 optimal configs, 20 within 2%, 3% noise per sample, 2% per launch",
    {"tp_size": (4, 8), "graph_capture": (False, True), "env.NCCL_PROTO": ("LL", "Simple"),
     "env.NCCL_ALGO": ("Ring", "Tree"), "env.NCCL_P2P_DISABLE": (0, 1), "env.NCCL_MIN_CTAS": (1, 2, 4, 8),
     "env.NCCL_BUFFSIZE": (1048576, 4194304, 16777216)},
    {"tp_size": 8, "graph_capture": False, "env.NCCL_PROTO": "Simple", "env.NCCL_ALGO": "Ring",
     "env.NCCL_P2P_DISABLE": 0, "env.NCCL_MIN_CTAS": 2, "env.NCCL_BUFFSIZE": 4194304},
    _ties_value,
    {"simple": 0.985, "tree": 0.99, "ctas1": 0.97, "ctas2": 0.99, "ctas8": 1.0, "buff1": 0.99, "buff16": 1.0,
     "p2p_off": 0.95, "eager": 0.6, "tp4": 0.96},
    startup=lambda c, f: glm5_startup(8 // c["tp_size"], c["graph_capture"], 0.8, f),
    noise=0.03, launch_noise=0.02, fixed=("ctas8", "buff16"))

STANDIN_FACTORS = {"backend.layout": {"tp8": 1.0, "tp4pp2": 0.978, "tp2pp4": 0.85},
                   "backend.graphs": {"full": 1.0, "eager": 0.468}, "backend.proto": {"LL": 1.0, "Simple": 0.749},
                   "backend.algo": {"Ring": 1.0, "Tree": 0.96}, "backend.p2p": {"direct": 1.0, "host": 0.92}}


def _standin_value(c: Config, e: Mapping[str, float]) -> float:
    """tests/standin_server.py --interaction: the motivating factors, but Tree with LL is the fastest."""
    value = 100.0
    for name, factors in STANDIN_FACTORS.items():
        value *= factors.get(c[name], 1.0)
    if c["backend.algo"] == "Tree" and c["backend.proto"] == "LL":
        value *= e["tree_with_ll"] / STANDIN_FACTORS["backend.algo"]["Tree"]
    return value


def _standin_failure(c: Config) -> Failure | None:
    if c["backend.algo"] in ("NVLS", "PAT"):
        return FailureKind.NCCL_INVALID, NCCL_REFUSED.format(c["backend.algo"])
    return (FailureKind.WRONG_OUTPUT, "") if c["backend.proto"] == "LL128" else None


def _standin_active(c: Config) -> Config:
    return {k: v for k, v in c.items() if not (k == "backend.capture" and c["backend.graphs"] == "eager")}


STANDIN = Box(
    "standin-interaction", "the end-to-end test's stand-in (tests/standin_server.py --interaction): Tree, slow "
    "alone, the fastest with LL; 216 configs, a budget of 15",
    {"backend.layout": ("tp8", "tp4pp2", "tp2pp4"), "backend.graphs": ("eager", "full"),
     "backend.capture": ("small", "large"), "backend.proto": ("LL", "Simple", "LL128"),
     "backend.algo": ("Ring", "Tree", "NVLS", "PAT"), "backend.p2p": ("direct", "host")},
    {"backend.layout": "tp8", "backend.graphs": "eager", "backend.proto": "Simple", "backend.algo": "Ring",
     "backend.p2p": "direct"},
    _standin_value, {"tree_with_ll": 1.08}, failure=_standin_failure, active=_standin_active,
    startup=lambda c, f: (5.0, 0.0), noise=0.03, launch_noise=0.02,
    synergy=(("backend.algo", "Tree"), ("backend.proto", "LL")))

BOXES: tuple[Box, ...] = (MOTIVATING, GLM5_COMBINATION, PROTO_P2P, GRAPHS_LOAD, ALLREDUCE_TP, SPECULATION,
                          SYNERGY, NEAR_TIES, STANDIN)
NAMES = tuple(b.name for b in BOXES)
RANDOM_PREFIX = "random-"


# ---- spaces drawn at random: boxes nobody wrote ------------------------------------------------------
def random_box(n: int) -> Box:
    """A box drawn from seed ``n``: 5-7 parameters of 2-4 values (200-1000 configs), main effects of
    mixed sizes, two to four pairwise interactions (one a synergy: a value below average alone is
    the best with one value of another parameter), one or two values that crash at start (named in the log
    half the time), one that answers wrong, one pair of values that crashes together, 1-3% noise
    per sample and 0.5-2% per launch, start-up costs per value."""
    rng = random.Random(f"random-box:{n}")
    while True:
        sizes = [rng.choice((2, 2, 3, 3, 4)) for _ in range(rng.randint(5, 7))]
        if 200 <= math.prod(sizes) <= 1000:
            break
    names = [f"p{i}" for i in range(len(sizes))]
    params = {name: tuple(f"{name}v{j}" for j in range(size)) for name, size in zip(names, sizes)}
    main = {(name, v): rng.gauss(0.0, rng.choice((0.03, 0.08, 0.2, 0.4))) for name in names for v in params[name]}
    pairs = rng.sample(list(itertools.combinations(names, 2)), rng.randint(2, 4))
    inter = {}
    for a, b in pairs:
        strength = rng.choice((0.05, 0.1, 0.2))
        for va in params[a]:
            for vb in params[b]:
                inter[(a, va, b, vb)] = rng.gauss(0.0, strength)
    a, b = pairs[0]
    syn_a, syn_b = rng.choice(params[a]), rng.choice(params[b])
    main[(a, syn_a)] = -abs(main[(a, syn_a)]) - 0.05  # slow alone; its partner is whatever it is
    inter[(a, syn_a, b, syn_b)] = 0.0
    synergy = {(a, syn_a), (b, syn_b)}
    # failing values of distinct parameters, never a synergy value: every parameter keeps one that works
    pickable = [name for name in names if name not in (a, b)] or names
    chosen = rng.sample(pickable, min(len(pickable), 4))
    picks = [(name, rng.choice([v for v in params[name] if (name, v) not in synergy])) for name in chosen]
    crashing, wrong = picks[: max(1, min(2, len(picks) - 2))], picks[-1]
    combo = ((a, rng.choice([v for v in params[a] if v != syn_a])), (b, syn_b))
    named = rng.random() < 0.5
    sample_cv, launch_cv = round(rng.uniform(0.01, 0.03), 4), round(rng.uniform(0.005, 0.02), 4)
    start_by_value = {(name, v): rng.uniform(0.0, 80.0) for name in names for v in params[name]}

    def log_value(c: Config) -> float:
        total = sum(main[(name, c[name])] for name in names)
        return total + sum(inter.get((x, c[x], y, c[y]), 0.0) for x, y in pairs)

    def failure(c: Config) -> Failure | None:
        for name, v in crashing:
            if c[name] == v:
                return crash(f"RuntimeError: {name}={v} is not supported here" if named else "Segmentation fault")
        if c[wrong[0]] == wrong[1]:
            return FailureKind.WRONG_OUTPUT, ""
        if combo[0][0] != combo[1][0] and all(c[x] == v for x, v in combo):
            return crash("torch.OutOfMemoryError: CUDA out of memory")
        return None

    working = [cfg for cfg in _product(params) if failure(cfg) is None]
    apart = [cfg for cfg in working if cfg[b] != syn_b]  # slow alone: below the parameter's other values
    alone = statistics.fmean(log_value(c) for c in apart if c[a] == syn_a)
    others = statistics.fmean(log_value(c) for c in apart if c[a] != syn_a)
    main[(a, syn_a)] -= max(0.0, alone - others + 0.03)
    together = [cfg for cfg in working if cfg[a] == syn_a and cfg[b] == syn_b]
    top = max(log_value(cfg) for cfg in working if cfg not in together)
    inter[(a, syn_a, b, syn_b)] = top - max(log_value(cfg) for cfg in together) + rng.uniform(0.04, 0.10)
    barred = {(name, v) for name, v in crashing} | {wrong} | synergy
    baseline = {name: next((v for v in params[name] if (name, v) not in barred), params[name][0]) for name in names}
    if failure(baseline) is not None:
        baseline = min(working, key=log_value)  # a working baseline, the slowest: room to improve

    def value(c: Config, e: Mapping[str, float]) -> float:
        return 100.0 * math.exp(log_value(c))

    def startup(c: Config, f: Failure | None) -> tuple[float, float]:
        cost = 120.0 + sum(start_by_value[(name, c[name])] for name in names)
        return (cost * 0.4 if f is not None and f[0] == FailureKind.START_CRASH else cost), 0.0

    return Box(f"{RANDOM_PREFIX}{n}", f"drawn at random: {a}={syn_a} slow alone, the best with {b}={syn_b}",
               params, baseline, value, {},
               failure=failure, startup=startup, noise=sample_cv, launch_noise=launch_cv,
               synergy=((a, syn_a), (b, syn_b)))


def _product(params: Mapping[str, Sequence[Any]]) -> list[Config]:
    names = list(params)
    return [dict(zip(names, combo)) for combo in itertools.product(*(params[n] for n in names))]


# ---- the suite ------------------------------------------------------------------------------------------
def box(name: str) -> Box:
    """A stand-in by name (``NAMES``) or ``random-N``; ValueError naming the allowed ones."""
    if name.startswith(RANDOM_PREFIX) and name[len(RANDOM_PREFIX):].isdigit():
        return random_box(int(name[len(RANDOM_PREFIX):]))
    for b in BOXES:
        if b.name == name:
            return b
    raise TableError(f"unknown stand-in {name!r}; allowed: {', '.join(NAMES)}, or {RANDOM_PREFIX}N (N an integer)")


def stand_in(name: str, seed: int = 0) -> Table:
    """One stand-in as a replay table (module docstring)."""
    return box(name).table(seed)


def suite(seed: int = 0, names: Sequence[str] = NAMES) -> list[Table]:
    """The suite's stand-ins as replay tables, variant ``seed`` of each (0: as written)."""
    return [stand_in(name, seed) for name in names]
