"""Backend for SGLang's server: ``python -m sglang.launch_server --model-path M --tp-size N``.

What it shares with vLLM (settings, release, flags, the head of the command line) is
``orchestrator.backends.serving``; here is only what is SGLang's. Neutral params -> flags:

==================  ==========================================================
``tp_size``         ``--tp-size N`` (always)
``pp_size``         ``--pp-size N``
``graph_capture``   false: ``--disable-decode-cuda-graph --disable-prefill-cuda-graph``
                    (0.5.14+), ``--disable-cuda-graph`` before; true: nothing (on by default)
``capture_sizes``   the explicit batch sizes: ``--cuda-graph-bs-decode 1 2 4 8`` (0.5.14+),
                    ``--cuda-graph-bs 1 2 4 8`` before
``custom_all_reduce`` false: ``--disable-custom-all-reduce``
``allreduce.backend`` ``nccl``: ``--disable-custom-all-reduce``; ``custom``: SGLang's kernel (its
                    default); ``symm_mem``: ``--enable-torch-symm-mem``; ``nccl_symm_mem``:
                    ``--enable-symm-mem``; ``mscclpp``: ``--enable-mscclpp``; each of these
                    also ``--enforce-disable-flashinfer-allreduce-fusion`` where the release has
                    it (SGLang turns the fusion on by itself for some models).
                    ``flashinfer_fusion``: ``--flashinfer-allreduce-fusion-backend auto``
                    (0.5.23; ``--enable-flashinfer-allreduce-fusion`` where that flag is not
                    deprecated), ``flashinfer_fusion_<b>`` for each other choice of that flag
                    (0.5.23: trtllm, mnnvl, cutedsl). Each value is offered where the release
                    has its flags. No path takes a size limit (``allreduce.max_size`` refused).
                    After start the trial reads ``CustomAllreduce is disabled because ...``
                    (SGLang turns its kernel off on more than two PCIe-only GPUs and only logs it)
``backend.dp_size``  replicas: GPUs per trial = TP x PP x DP
``backend.<flag>``  ``--flag``; e.g. ``backend.enable_torch_compile: true`` ->
                    ``--enable-torch-compile``, ``backend.cuda_graph_max_bs: 16`` (spelled
                    for the release, below), ``backend.torch_compile_max_bs``
``speculative.*``   ``--speculative-algorithm A`` (ngram: NGRAM, mtp: NEXTN, eagle: EAGLE,
                    eagle3: EAGLE3, draft_model: STANDALONE; the release's own names, as
                    it spells them, also), ``--speculative-draft-model-path DRAFT``, and K
                    drafted tokens as a chain: ``--speculative-num-steps K
                    --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1`` (SGLang
                    counts the verified token among the draft tokens and forces K+1 at top-k
                    1: server_args.py); NGRAM: ``--speculative-num-draft-tokens K+1`` alone;
                    ``prompt_lookup_max``/``_min``: ``--speculative-ngram-{max,min}-match-
                    window-size`` where the release has them (0.5.23 has not: refused). A
                    speculative config also gets ``--enable-metrics``: SGLang serves
                    ``/metrics`` (its ``sglang:spec_accept_length``) only with it
==================  ==========================================================

Methods needing ``speculative.model``: EAGLE, EAGLE3, STANDALONE and the release's others;
NEXTN takes one optionally (the target's own MTP layers otherwise), NGRAM ignores it. Tree
drafting (top-k > 1) is not tuned: ``--speculative-eagle-topk`` is the backend's.
MoE knobs are SGLang's own flags: ``backend.ep_size``, ``backend.moe_a2a_backend``,
``backend.moe_runner_backend`` (values checked against the release's choices).

Readiness is ``GET /health`` answering 200 (``/v1/models`` answers before warm-up ends).

Spellings by release (each read in that release's ``sglang/srt/server_args.py`` and, from
0.5.20, ``sglang/srt/arg_groups/fields/``; wheels of 0.4.6, 0.4.10.post2, 0.5.1, 0.5.3,
0.5.6, 0.5.9, 0.5.12, 0.5.13, 0.5.14, 0.5.15, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22 and
0.5.23, the parsers of 0.4.10.post2, 0.5.1, 0.5.3, 0.5.20 to 0.5.23 built and dumped):

- up to 0.5.13: ``--disable-cuda-graph``, ``--cuda-graph-max-bs``, ``--cuda-graph-bs``.
- 0.5.14 to 0.5.19: per phase ``--cuda-graph-max-bs-decode``, ``--cuda-graph-bs-decode``,
  ``--disable-decode-cuda-graph`` / ``--disable-prefill-cuda-graph`` (and
  ``--cuda-graph-backend-{decode,prefill}``); the old ``--cuda-graph-max-bs`` and
  ``--cuda-graph-bs`` are deprecated aliases, ``--disable-cuda-graph`` deprecated.
- from 0.5.20: ``--cuda-graph-max-bs`` and ``--cuda-graph-bs`` are gone;
  ``--disable-cuda-graph`` is still accepted, deprecated.
- ``--tp-size``, ``--enable-torch-compile``, ``--torch-compile-max-bs``,
  ``--disable-custom-all-reduce``, ``--model-path``, ``--served-model-name``,
  ``--host``, ``--port``: unchanged from 0.4.6 to 0.5.23; ``--pp-size`` from 0.4.10.

A ``backend.cuda_graph_max_bs``/``backend.cuda_graph_max_bs_decode`` (and ``..._bs``)
param is spelled for the release either way, so a space written for one release runs on
the other; a deprecated spelling is never sent to a release that has the new one.

The installed release is read from ``settings.python``'s environment (default: this
interpreter, as ncclsweep is installed beside the server), and its parser dumped there.
The backend sets only scalar and list flags, none holding a JSON config, so unlike vLLM's
``--compilation-config`` there is nothing to merge: a flag it sets stays refused in
``extra_args``.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from orchestrator.backends import allreduce, common, sglang_engine, speculative
from orchestrator.backends.base import Config
from orchestrator.backends.flags import Spelling
from orchestrator.backends.serving import ServingBackend
from orchestrator.core.errors import ConfigRejected

PER_PHASE_SINCE = (0, 5, 14)  # --cuda-graph-max-bs-decode & co. (the old spellings are gone since 0.5.20)

_MAX_BS = [
    Spelling(None, PER_PHASE_SINCE, ("--cuda-graph-max-bs",)),
    Spelling(PER_PHASE_SINCE, None, ("--cuda-graph-max-bs-decode",)),
]
_BS = [
    Spelling(None, PER_PHASE_SINCE, ("--cuda-graph-bs",)),
    Spelling(PER_PHASE_SINCE, None, ("--cuda-graph-bs-decode",)),
]
_NO_GRAPHS = [
    Spelling(None, PER_PHASE_SINCE, ("--disable-cuda-graph",)),
    Spelling(PER_PHASE_SINCE, None, ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")),
]
# the neutral speculative methods as --speculative-algorithm spells them (server_args.py)
ALGORITHMS = {"ngram": "NGRAM", "mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE"}
_NEUTRAL_OF = {algorithm: method for method, algorithm in ALGORITHMS.items()}
# SGLang's all-reduce switches (0.5.23: sglang/srt/arg_groups/fields/exec_.py)
_AR_FLAGS = {"nccl": "--disable-custom-all-reduce", "symm_mem": "--enable-torch-symm-mem",
             "nccl_symm_mem": "--enable-symm-mem", "mscclpp": "--enable-mscclpp"}
_NO_FUSION = "--enforce-disable-flashinfer-allreduce-fusion"
_FUSION_BACKEND, _FUSION_OLD = "--flashinfer-allreduce-fusion-backend", "--enable-flashinfer-allreduce-fusion"
# what SGLang logs when its custom kernel turns itself off (custom_all_reduce_utils.py; cls_name
# CustomAllreduce or CustomAllReduceV2)
_CUSTOM_OFF = r"CustomAll[Rr]educe(?:V2)? is disabled because .*"
_WINDOW = {speculative.LOOKUP_MAX: "--speculative-ngram-max-match-window-size",
           speculative.LOOKUP_MIN: "--speculative-ngram-min-match-window-size"}


class SglangBackend(ServingBackend):
    """``python -m sglang.launch_server``; see the module docstring."""

    kind = "sglang"
    ENGINE = sglang_engine.ENGINE  # its log's start-up and notices, its /metrics, its custom all-reduce
    # SGLang's scheduler/detokenizer log this and SIGQUIT their parent when they die
    FATAL_LOG_PATTERNS = (r"Scheduler hit an exception", r"DetokenizerManager hit an exception",
                          r"Received sigquit from a child process")
    # SGLang's scheduler and detokenizer retitle themselves "sglang::..." (setproctitle)
    ESSENTIAL_PROCESSES = (r"sglang::",)
    package = "sglang"
    server = "SGLang"
    parser_recipe = "sglang"
    example_release = "0.5.23"
    SETTINGS = {
        "model": "model path or Hugging Face id (--model-path); a .gguf file loads where the release's --load-format "
                 "has gguf (0.5.23 has), else it is refused",
        "python": "python of SGLang's environment (default: the one running ncclsweep)",
    }
    TP_FLAG, PP_FLAG = "--tp-size", "--pp-size"
    MANAGED = {
        "--model-path": "settings.model", "--model": "settings.model", "--tp-size": "tp_size",
        "--tensor-parallel-size": "tp_size", "--pp-size": "pp_size", "--pipeline-parallel-size": "pp_size",
        "--host": "the trial", "--port": "the trial", "--disable-cuda-graph": "graph_capture",
        "--disable-decode-cuda-graph": "graph_capture", "--disable-prefill-cuda-graph": "graph_capture",
        "--cuda-graph-bs": "capture_sizes", "--cuda-graph-bs-decode": "capture_sizes",
        "--disable-custom-all-reduce": "custom_all_reduce or allreduce.backend",
        "--served-model-name": "settings.served_model_name",
        "--speculative-algorithm": speculative.METHOD, "--speculative-draft-model-path": speculative.MODEL,
        "--speculative-draft-model": speculative.MODEL, "--speculative-num-steps": speculative.NUM_TOKENS,
        "--speculative-num-draft-tokens": speculative.NUM_TOKENS,
        "--speculative-eagle-topk": f"{speculative.NUM_TOKENS} (a chain: top-k 1)",
        _WINDOW[speculative.LOOKUP_MAX]: speculative.LOOKUP_MAX,
        _WINDOW[speculative.LOOKUP_MIN]: speculative.LOOKUP_MIN,
    }
    SPELLINGS = {
        "cuda_graph_max_bs": _MAX_BS, "cuda_graph_max_bs_decode": _MAX_BS,
        "cuda_graph_bs": [Spelling(None, None, None, "use the neutral capture_sizes param")],
        "cuda_graph_bs_decode": [Spelling(None, None, None, "use the neutral capture_sizes param")],
        "disable_cuda_graph": [Spelling(None, None, None, "use the neutral graph_capture param")],
        "cuda_graph_max_bs_prefill": [
            Spelling(None, PER_PHASE_SINCE, None, "SGLang before 0.5.14 has no per-phase CUDA-graph settings"),
            Spelling(PER_PHASE_SINCE, None, ("--cuda-graph-max-bs-prefill",)),
        ],
    }
    DP_PARAM = "backend.dp_size"
    GRAPH_MAX_FLAGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    BATCH_FLAGS = ("--max-running-requests",)
    GRAPH_ONLY = ("backend.cuda_graph_max_bs", "backend.cuda_graph_max_bs_decode",
                  "backend.cuda_graph_max_bs_prefill", "backend.cuda_graph_backend_decode",
                  "backend.cuda_graph_backend_prefill", "capture_sizes")

    def command(self) -> list[str]:
        return [self.python or sys.executable, "-m", "sglang.launch_server", "--model-path", self.model]

    # ---- speculative decoding -----------------------------------------------------------------
    def speculative_methods(self) -> speculative.Methods:
        """The neutral methods the release's --speculative-algorithm has (all five where its
        parser records no choices: ``assumed``), their SGLang spellings, and its own others."""
        checker = self.flags()
        info = checker.table.flags.get("--speculative-algorithm") if checker.table is not None else None
        choices = info.choices if info is not None else None
        neutral = [m for m, a in ALGORITHMS.items() if choices is None or a in choices]
        names = (*neutral, *(ALGORITHMS[m] for m in neutral), *(c for c in choices or () if c not in _NEUTRAL_OF))
        window = checker.table is None or checker.table.knows(_WINDOW[speculative.LOOKUP_MAX])
        return speculative.Methods(
            names=names, model_free=frozenset({"ngram", "NGRAM", "mtp", "NEXTN"}),
            ignore_model=frozenset({"ngram", "NGRAM"}), lookup=frozenset({"ngram", "NGRAM"} if window else ()),
            release=checker.release,
            source=f"{checker.table.source} (--speculative-algorithm)" if choices and checker.table is not None
            else "the release records no --speculative-algorithm choices: EAGLE, EAGLE3, NEXTN, STANDALONE and NGRAM "
                 "are assumed", assumed=choices is None)

    def speculative_args(self, config: Config) -> list[str]:
        spec = speculative.of(config)
        if spec is None:
            return []
        algorithm = ALGORITHMS.get(spec.method, spec.method)
        words = ["--speculative-algorithm", algorithm]
        if spec.model is not None:
            words += ["--speculative-draft-model-path", spec.model]
        if algorithm != "NGRAM":
            words += ["--speculative-num-steps", str(spec.num_tokens), "--speculative-eagle-topk", "1"]
        words += ["--speculative-num-draft-tokens", str(spec.num_tokens + 1)]
        for name, value in ((speculative.LOOKUP_MAX, spec.lookup_max), (speculative.LOOKUP_MIN, spec.lookup_min)):
            if value is not None:
                words += [_WINDOW[name], str(value)]
        table = self.flags().table
        if "--enable-metrics" not in self.extra_args and (table is None or table.knows("--enable-metrics")):
            words.append("--enable-metrics")  # /metrics, where the acceptance gauges are
        return words

    # ---- the all-reduce path -------------------------------------------------------------------
    def allreduce_paths(self) -> allreduce.Paths:
        """The paths whose flags the release has (module docstring); with no table, ``nccl`` and
        ``custom`` (``--disable-custom-all-reduce``, in every release), assumed."""
        checker = self.flags()
        table = checker.table

        def usable(flag: str) -> bool:
            info = table.flags.get(flag) if table is not None else None
            return info is not None and not info.deprecated

        no_fusion = (_NO_FUSION,) if usable(_NO_FUSION) else ()
        paths = {"nccl": allreduce.Path("nccl", (_AR_FLAGS["nccl"], *no_fusion)),
                 "custom": allreduce.Path("custom", no_fusion)}
        for value in ("symm_mem", "nccl_symm_mem", "mscclpp"):
            if usable(_AR_FLAGS[value]):
                paths[value] = allreduce.Path(value, (_AR_FLAGS[value], *no_fusion),
                                              nccl_symmetric=value == "nccl_symm_mem")
        info = table.flags.get(_FUSION_BACKEND) if table is not None else None
        if info is not None and usable(_FUSION_BACKEND):
            choices = info.choices or ("auto",)
            first = "auto" if "auto" in choices else choices[0]
            paths[allreduce.FUSION] = allreduce.Path(allreduce.FUSION, (_FUSION_BACKEND, first))
            for choice in choices:
                if choice != first:
                    name = f"{allreduce.FUSION}_{choice}"
                    paths[name] = allreduce.Path(name, (_FUSION_BACKEND, choice))
        elif usable(_FUSION_OLD):
            paths[allreduce.FUSION] = allreduce.Path(allreduce.FUSION, (_FUSION_OLD,))
        return allreduce.Paths(
            paths, checker.release,
            f"{table.source} ({', '.join(sorted({*_AR_FLAGS.values(), _FUSION_BACKEND}))})" if table is not None
            else "not recorded for this release: nccl and custom (--disable-custom-all-reduce) are assumed",
            assumed=table is None, no_size=f"{checker.release} has no setting for the size its all-reduce paths take")

    def engine_fallbacks(self, config: Config, log_text: str) -> list[dict[str, Any]]:
        """The custom kernel asked for (``allreduce.backend=custom``, or ``custom_all_reduce: true``,
        SGLang's default) and SGLang's log says it turned itself off: the tensor-parallel group's
        all-reduce is then NCCL's (none of the other paths is on unless its flag is)."""
        asked = allreduce.asked_path(config)
        m = re.search(_CUSTOM_OFF, log_text) if asked is not None and asked[1] == "custom" else None
        return [allreduce.fallback(config, asked[0], "nccl", m.group(0).strip())] if m and asked else []

    def allreduce_warnings(self, config: Config, log_text: str) -> list[str]:
        """``custom`` requested and SGLang's log says its kernel turned itself off."""
        if allreduce.value_of(config) != "custom":
            return []
        m = re.search(_CUSTOM_OFF, log_text)
        return [allreduce.warning("custom", self.flags().release, f"turned it off; SGLang said: {m.group(0).strip()}")
                ] if m else []

    def check_engine(self, config: Config) -> None:
        method = speculative.method_of(config)
        given = [name for name in _WINDOW if name in config]
        if given and method in ("ngram", "NGRAM") and not self.speculative_methods().lookup:
            raise ConfigRejected(f"{self.flags().release} has no {_WINDOW[given[0]]} (its n-gram drafter is tuned with "
                                 f"backend.speculative_ngram_max_trie_depth and the bfs breadths); drop {given[0]}",
                                 file=self.job_file, key=given[0])

    def diagnose(self) -> tuple[list[str], list[str]]:
        lines, warnings = super().diagnose()
        methods = self.speculative_methods()
        lines.append(f"speculative methods: {', '.join(methods.names)} ({methods.source})")
        if methods.assumed:
            warnings.append(f"{methods.release}'s parser records no --speculative-algorithm choices: "
                            f"speculative.method is checked against EAGLE, EAGLE3, NEXTN, STANDALONE and NGRAM")
        return lines, warnings

    def normalize_engine(self, out: Config) -> None:
        """The max-batch aliases folded into one name; a method in SGLang's spelling into the
        neutral one (EAGLE and eagle run the same server)."""
        method = out.get(speculative.METHOD)
        if method in _NEUTRAL_OF:
            out[speculative.METHOD] = _NEUTRAL_OF[method]
        if "backend.cuda_graph_max_bs_decode" in out:
            out["backend.cuda_graph_max_bs"] = out.pop("backend.cuda_graph_max_bs_decode")

    def graph_args(self, config: Config) -> list[str]:
        checker = self.flags()
        if config.get("graph_capture", True) is False:
            return checker.words_for(_NO_GRAPHS)
        if config.get("capture_sizes"):
            return checker.words_for(_BS, common.capture_sizes_of(config["capture_sizes"]))
        return []
