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
``backend.dp_size``  replicas: GPUs per trial = TP x PP x DP
``backend.<flag>``  ``--flag``; e.g. ``backend.enable_torch_compile: true`` ->
                    ``--enable-torch-compile``, ``backend.cuda_graph_max_bs: 16`` (spelled
                    for the release, below), ``backend.torch_compile_max_bs``
==================  ==========================================================

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

import sys

from orchestrator.backends import common
from orchestrator.backends.base import Config
from orchestrator.backends.flags import Spelling
from orchestrator.backends.serving import ServingBackend

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


class SglangBackend(ServingBackend):
    """``python -m sglang.launch_server``; see the module docstring."""

    kind = "sglang"
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
        "--disable-custom-all-reduce": "custom_all_reduce", "--served-model-name": "settings.served_model_name",
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
    GRAPH_ONLY = ("backend.cuda_graph_max_bs", "backend.cuda_graph_max_bs_decode",
                  "backend.cuda_graph_max_bs_prefill", "backend.cuda_graph_backend_decode",
                  "backend.cuda_graph_backend_prefill", "capture_sizes")

    def command(self) -> list[str]:
        return [self.python or sys.executable, "-m", "sglang.launch_server", "--model-path", self.model]

    def normalize_engine(self, out: Config) -> None:
        """The max-batch aliases folded into one name."""
        if "backend.cuda_graph_max_bs_decode" in out:
            out["backend.cuda_graph_max_bs"] = out.pop("backend.cuda_graph_max_bs_decode")

    def graph_args(self, config: Config) -> list[str]:
        checker = self.flags()
        if config.get("graph_capture", True) is False:
            return checker.words_for(_NO_GRAPHS)
        if config.get("capture_sizes"):
            return checker.words_for(_BS, common.capture_sizes_of(config["capture_sizes"]))
        return []
