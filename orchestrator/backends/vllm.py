"""Backend for vLLM's OpenAI server: ``vllm serve MODEL --tensor-parallel-size N ...``.

What it shares with SGLang (settings, release, flags, the head of the command line) is
``orchestrator.backends.serving``; here is only what is vLLM's. Neutral params -> flags:

==================  ==========================================================
``tp_size``         ``--tensor-parallel-size N`` (always; vLLM's default is 1)
``pp_size``         ``--pipeline-parallel-size N``
``graph_capture``   false: ``--enforce-eager``; true (or absent): ``--compilation-config
                    '{"cudagraph_mode": MODE}'`` with MODE from ``backend.cudagraph_mode``
                    (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE; default
                    the release's own: FULL_AND_PIECEWISE from 0.11.0, PIECEWISE before)
``capture_sizes``   ``--cudagraph-capture-sizes 1 2 4 8``
``custom_all_reduce`` false: ``--disable-custom-all-reduce``. vLLM turns custom
                    all-reduce off by itself on PCIe-only boxes for TP > 2 (it needs
                    NVLink or at most two GPUs), so there it cannot change anything.
``allreduce.backend`` the path vLLM tries first (below); ``allreduce.max_size`` only for
                    ``flashinfer_fusion`` (``pass_config.fi_allreduce_fusion_max_size_mb``)
``backend.data_parallel_size``  replicas: GPUs per trial = TP x PP x DP
``speculative.*``   ``--speculative-config '{"method": M, "num_speculative_tokens": K,
                    "model": DRAFT, "prompt_lookup_max": N, "prompt_lookup_min": N}'``
                    (only what the method uses); method ``none``: no flag at all
==================  ==========================================================

Speculative methods are the release's own (its ``SpeculativeMethod``: read from the installed
release's ``vllm.config.speculative``, else the bundled table's ``config_choices``; 0.26.0 has
medusa and mlp_speculator, 0.33.0 no longer); a release whose list is unknown takes the
neutral set (ngram, mtp, eagle, eagle3, draft_model) and ``doctor`` warns. Read in both
releases' ``SpeculativeConfig.__post_init__``: ngram, ngram_gpu, suffix and
extract_hidden_states need no draft model and ignore one; mtp (and its deprecated aliases
``*_mtp``) and dspark use the target's own weights unless given a model; every other method
needs ``speculative.model``; ``prompt_lookup_*`` are ngram's and ngram_gpu's.
Your own ``--speculative-config`` keys (``settings.speculative_config``, or
``--speculative-config JSON`` / ``-sc JSON`` / ``--speculative-config.key=V`` in
``extra_args``; e.g. ``{draft_tensor_parallel_size: 1}``) are merged into the one the backend
sends, as ``--compilation-config`` is, when a config speculates; the keys the params set are
refused there with the param that sets them, as are ``--spec-method``, ``--spec-model`` and
``--spec-tokens`` (0.26.0's shorthands).

MoE knobs are vLLM's own flags: ``backend.enable_expert_parallel`` (true/false; false,
vLLM's default, is dropped), ``backend.all2all_backend`` (dropped without expert parallelism:
it is the experts' all-to-all) and ``backend.moe_backend`` (the MoE kernels), their values
checked against the release's (bundled tables: 0.26.0, 0.33.0); on a model known to be dense
(``model_facts.moe: false``, or a readable config.json without experts) they are refused:
they could not change the server.

All-reduce paths (``allreduce.backend``; read in 0.26.0's and 0.33.0's
``vllm/distributed/device_communicators/cuda_communicator.py``, ``envs.py`` and
``config/compilation.py``). vLLM tries, in this order, FLASHINFER_PCIE_IPC (0.33), FLASHINFER,
NCCL_SYMM_MEM, CUSTOM, SYMM_MEM, then PYNCCL (NCCL), each where it is on and takes the
tensor; each value turns its path on and those tried before it off:

- ``nccl``: ``--disable-custom-all-reduce``, ``VLLM_ALLREDUCE_USE_SYMM_MEM=0``,
  ``VLLM_ALLREDUCE_USE_FLASHINFER=0``, no all-reduce + RMSNorm fusion;
- ``custom``: the custom kernel (on by default), ``VLLM_ALLREDUCE_USE_FLASHINFER=0``, no fusion;
- ``symm_mem``: ``VLLM_ALLREDUCE_USE_SYMM_MEM=1`` with the custom kernel off; ``nccl_symm_mem``:
  ``VLLM_USE_NCCL_SYMM_MEM=1``; ``flashinfer``: ``VLLM_ALLREDUCE_USE_FLASHINFER=1`` (the default
  from 0.33); ``flashinfer_pcie_ipc`` (0.33): ``VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC=1``, set up
  at graph capture (with ``--enforce-eager`` it never runs);
- ``flashinfer_fusion``: ``--compilation-config '{"pass_config": {"fuse_allreduce_rms": true}}'``
  (vLLM's own default on Hopper and Blackwell with TP > 1), ``allreduce.max_size`` as
  ``fi_allreduce_fusion_max_size_mb``; the other values set it false.

The variables and ``pass_config`` keys a release has are read where its flags are (the table's
``env_vars`` and ``config_keys``); a release whose table lacks them offers ``nccl`` and
``custom`` (``--disable-custom-all-reduce`` alone). After start the trial reads vLLM's
``Using [...] all-reduce backends (in dispatch order) for group 'tp:0'`` line and its
``Custom allreduce is disabled because ...`` warnings (vLLM turns the custom kernel off on more
than two PCIe-only GPUs and says so only there) and warns when the requested path is missing.

Your own ``--compilation-config`` keys (``settings.compilation_config`` as a mapping, or
``--compilation-config JSON`` / ``-cc JSON`` / ``--compilation-config.a.b=V`` in
``extra_args``) are merged into the one ``--compilation-config`` the backend sends, e.g.
``{"pass_config": {"fuse_allreduce_rms": false}}``, the workaround for vLLM 0.26's
all-reduce fusion crashing at TP=2 with graphs where NVLink multicast is off. vLLM
itself would keep only the last ``--compilation-config`` it is given, so a second one
would silently drop the tuned mode. Keys the backend sets (``cudagraph_mode``,
``full_cuda_graph``, ``cudagraph_capture_sizes``, ``max_cudagraph_capture_size``) are
refused there with the param that tunes them.

Spellings by release (each read in that release's ``vllm/engine/arg_utils.py`` and
``vllm/config``; wheels of 0.8.5, 0.9.0, 0.9.2, 0.10.0, 0.10.1.1, 0.10.2, 0.11.0,
0.11.1, 0.11.2, 0.12.0, 0.13.0, 0.14.0, 0.17.0, 0.20.0, 0.25.0, 0.26.0, 0.30.0, 0.32.0,
0.33.0; full flag tables of 0.26.0 and 0.33.0 are bundled):

- capture sizes: ``--cudagraph-capture-sizes`` from 0.11.1; before, the
  ``cudagraph_capture_sizes`` key of ``--compilation-config`` (present since 0.8).
- largest captured batch (``backend.max_cudagraph_capture_size``):
  ``--max-cudagraph-capture-size N`` from 0.11.1; ``--cuda-graph-sizes N`` in 0.9.0 to
  0.11.0 (one value means [1, 2, 4] + every 8th up to N, the same list). ``--cuda-graph-sizes``
  is deprecated from 0.11.1 and gone in 0.13.0: a ``backend.cuda_graph_sizes`` param is
  refused there.
- ``--max-seq-len-to-capture`` (longest sequence covered by graphs) exists up to 0.10.2
  and was removed in 0.11.0 with no replacement; refused from 0.11.0.
- ``cudagraph_mode`` (in ``--compilation-config``) from 0.10.1; in 0.9.0 to 0.10.0 only
  PIECEWISE (the default) and FULL (``{"full_cuda_graph": true}``) can be expressed.
  ``pass_config.fuse_allreduce_rms`` exists in 0.26.0.
- ``--enforce-eager``, ``--tensor-parallel-size``, ``--pipeline-parallel-size``,
  ``--disable-custom-all-reduce``, ``--compilation-config`` (``-cc``), ``--host``,
  ``--port``, ``--served-model-name``: unchanged from 0.9.0 to 0.33.0.

The installed release is read from ``settings.python``'s environment, else this
interpreter's, else ``vllm --version``; its parser is dumped from that interpreter (the
``vllm`` script's own, read from its first line, when only the script is known).

Settings (beside the shared ones): ``python`` (run ``python -m vllm.entrypoints.cli.main
serve``), ``executable`` (the ``vllm`` command, default ``vllm``), ``compilation_config``.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

from orchestrator.backends import allreduce, common, speculative, vllm_engine
from orchestrator.backends.base import Config
from orchestrator.backends.flags import Spelling, vstr
from orchestrator.backends.serving import ServingBackend
from orchestrator.core import versions
from orchestrator.core.errors import ConfigRejected, brief

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
CUDAGRAPH_MODE_SINCE = (0, 10, 1)
FULL_AND_PIECEWISE_DEFAULT_SINCE = (0, 11, 0)
CAPTURE_SIZES_FLAG_SINCE = (0, 11, 1)

_GRAPH_PARAMS = "graph_capture and backend.cudagraph_mode"
# --compilation-config keys the backend sets, and what tunes them
TUNED_KEYS = {"cudagraph_mode": _GRAPH_PARAMS, "full_cuda_graph": _GRAPH_PARAMS,
              "cudagraph_capture_sizes": "capture_sizes",
              "max_cudagraph_capture_size": "backend.max_cudagraph_capture_size"}
_CC = ("--compilation-config", "-cc")
_SC = ("--speculative-config", "-sc")
# --speculative-config keys the backend sets, and what tunes them
SPEC_TUNED_KEYS = {"method": speculative.METHOD, "num_speculative_tokens": speculative.NUM_TOKENS,
                   "model": speculative.MODEL, "prompt_lookup_max": speculative.LOOKUP_MAX,
                   "prompt_lookup_min": speculative.LOOKUP_MIN}
# what SpeculativeConfig.__post_init__ does without a model (0.26.0, 0.33.0): these draft from the
# context or the target's own layers ...
_MODEL_FREE = {"ngram", "ngram_gpu", "suffix", "extract_hidden_states", "mtp", "dspark"}
# ... and of them these ignore a model; the n-gram window is these two's
_IGNORE_MODEL = frozenset({"ngram", "ngram_gpu", "suffix", "extract_hidden_states"})
_LOOKUP = frozenset({"ngram", "ngram_gpu"})
_MOE_FLAGS = ("backend.enable_expert_parallel", "backend.all2all_backend", "backend.moe_backend")
# the variable that turns each all-reduce path on (envs.py), and the path's name in vLLM's log
_AR_ENV = {"symm_mem": "VLLM_ALLREDUCE_USE_SYMM_MEM", "nccl_symm_mem": "VLLM_USE_NCCL_SYMM_MEM",
           "flashinfer": "VLLM_ALLREDUCE_USE_FLASHINFER",
           "flashinfer_pcie_ipc": "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC"}
_AR_LOG = {"nccl": "PYNCCL", "custom": "CUSTOM", "symm_mem": "SYMM_MEM", "nccl_symm_mem": "NCCL_SYMM_MEM",
           "flashinfer": "FLASHINFER", "flashinfer_pcie_ipc": "FLASHINFER_PCIE_IPC"}
# what vLLM logs when a path turns itself off (custom_all_reduce.py, symm_mem.py, flashinfer_*all_reduce.py)
_AR_OFF = {"custom": r"Custom allreduce is disabled because .*", "symm_mem": r"SymmMemCommunicator: .*not .*",
           "flashinfer": r"(?:FlashInfer All Reduce is disabled because|Failed to initialize FlashInfer All Reduce).*",
           "flashinfer_pcie_ipc": r"FlashInfer PCIe IPC all-reduce (?!for TP).*"}
_AR_LINE = re.compile(r"Using \[([^\]]*)\] all-reduce backends \(in dispatch order\) for group '(tp[^']*)'")
_FUSION_UP = "Initialized FlashInfer Allreduce norm fusion workspace"  # flashinfer_all_reduce.py, 0.26 and 0.33
_PASS = "--compilation-config.pass_config"
_FUSE, _FUSE_SIZE = "pass_config.fuse_allreduce_rms", "pass_config.fi_allreduce_fusion_max_size_mb"

_MAX_CAPTURE = [
    Spelling(None, (0, 9, 0), None, "no flag for the largest captured batch before vLLM 0.9.0"),
    Spelling((0, 9, 0), CAPTURE_SIZES_FLAG_SINCE, ("--cuda-graph-sizes",)),
    Spelling(CAPTURE_SIZES_FLAG_SINCE, None, ("--max-cudagraph-capture-size",)),
]


class VllmBackend(ServingBackend):
    """``vllm serve``; see the module docstring for the mapping and the releases."""

    kind = "vllm"
    ENGINE = vllm_engine.ENGINE  # its log's start-up and notices, its /metrics, its custom all-reduce
    # Seen in real vLLM 0.26 logs: a worker or the engine core died while the API server
    # stayed up and never turned healthy (tests/fixtures/vllm/).
    FATAL_LOG_PATTERNS = (r"WorkerProc hit an exception", r"WorkerProc failed to start",
                          r"EngineCore failed to start", r"Engine core initialization failed", r"EngineDeadError")
    # the model-inspection subprocess vLLM runs on a cache miss, and its P2P access check
    # (both exit when done)
    TRANSIENT_PROCESSES = (r"vllm\.model_executor\.models\.registry", r"custom_all_reduce_utils")
    # vLLM's engine core and workers retitle themselves (setproctitle): these are the tree
    # whose loss is fatal; every other python child (helpers, checks) may come and go
    ESSENTIAL_PROCESSES = (r"VLLM::(?:EngineCore|Worker)",)
    package = "vllm"
    server = "vLLM"
    parser_recipe = "vllm"
    example_release = "0.33.0"
    SETTINGS = {
        "model": "a Hugging Face checkpoint: its directory or Hub id (the positional MODEL of vllm serve); a .gguf "
                 "file is refused where the release's --load-format has no gguf (0.26.0, 0.33.0): use llamacpp",
        "python": "python of vLLM's environment: runs python -m vllm.entrypoints.cli.main serve",
        "executable": "the vllm command (default: vllm)",
        "compilation_config": "your own --compilation-config keys (e.g. {pass_config: {fuse_allreduce_rms: false}}), "
                              "merged with the graph keys the tuner sets",
        "speculative_config": "your own --speculative-config keys (e.g. {draft_tensor_parallel_size: 1}), merged "
                              "with the keys the speculative.* params set, sent when a config speculates",
    }
    TP_FLAG = "--tensor-parallel-size"
    PP_FLAG = "--pipeline-parallel-size"
    DP_PARAM = "backend.data_parallel_size"
    MANAGED = {
        "--tensor-parallel-size": "tp_size", "--pipeline-parallel-size": "pp_size", "--host": "the trial",
        "--port": "the trial", "--enforce-eager": "graph_capture", "--no-enforce-eager": "graph_capture",
        "--cudagraph-capture-sizes": "capture_sizes", "--disable-custom-all-reduce": "custom_all_reduce",
        "--enable-custom-all-reduce": "custom_all_reduce", "--no-disable-custom-all-reduce": "custom_all_reduce",
        "--served-model-name": "settings.served_model_name", "--model": "settings.model", "-tp": "tp_size",
        "-pp": "pp_size", "--speculative-config": "the speculative.* params (your own keys: "
        "settings.speculative_config)", "-sc": "the speculative.* params", "--spec-method": speculative.METHOD,
        "--spec-model": speculative.MODEL, "--spec-tokens": speculative.NUM_TOKENS,
    }
    SPELLINGS = {
        "max_cudagraph_capture_size": _MAX_CAPTURE,
        "cuda_graph_sizes": [
            Spelling(None, (0, 9, 0), None, "--cuda-graph-sizes appeared in vLLM 0.9.0"),
            Spelling((0, 9, 0), CAPTURE_SIZES_FLAG_SINCE, ("--cuda-graph-sizes",)),
            Spelling(CAPTURE_SIZES_FLAG_SINCE, None, None,
                     "--cuda-graph-sizes is deprecated from vLLM 0.11.1 and removed in 0.13.0; use the capture_sizes "
                     "param or backend.max_cudagraph_capture_size"),
        ],
        "max_seq_len_to_capture": [
            Spelling(None, (0, 11, 0), ("--max-seq-len-to-capture",)),
            Spelling((0, 11, 0), None, None,
                     "--max-seq-len-to-capture was removed in vLLM 0.11.0 (graphs are bounded by batch size now: "
                     "backend.max_cudagraph_capture_size)"),
        ],
        "cudagraph_capture_sizes": [Spelling(None, None, None, "use the neutral capture_sizes param")],
    }
    HANDLED = ("cudagraph_mode",)
    GRAPH_MAX_FLAGS = ("--max-cudagraph-capture-size", "--cuda-graph-sizes")
    BATCH_FLAGS = ("--max-num-seqs",)
    GRAPH_ONLY = ("capture_sizes", "backend.cudagraph_mode", "backend.max_cudagraph_capture_size",
                  "backend.cuda_graph_sizes", "backend.max_seq_len_to_capture")

    # ---- settings and release ----------------------------------------------------------------
    def read_settings(self) -> None:
        self.executable = common.str_setting(self, "executable", "vllm")
        self.compilation, rest = self._split_json_flag(
            list(self.extra_args), "compilation_config", _CC, TUNED_KEYS,
            '{"pass_config": {"fuse_allreduce_rms": false}}', "{pass_config: {fuse_allreduce_rms: false}}")
        self.speculation, self.passed = self._split_json_flag(
            rest, "speculative_config", _SC, SPEC_TUNED_KEYS, '{"draft_tensor_parallel_size": 1}',
            "{draft_tensor_parallel_size: 1}")

    def _split_json_flag(self, extra: list[str], setting: str, names: tuple[str, str], tuned: dict[str, str],
                         example: str, example_yaml: str) -> tuple[dict[str, Any], list[str]]:
        """The user's keys of one JSON-valued flag (``settings.<setting>`` and ``extra_args``:
        ``--flag JSON``, ``--flag=JSON``, ``-x JSON``, ``--flag.a.b=V``, merged) and the extra
        arguments without them; a key the tuner sets (``tuned``) is refused with its param."""
        flag = names[0]
        merged: dict[str, Any] = {}
        given = self.settings.get(setting)
        if given is not None:
            if not isinstance(given, dict):
                raise self.bad(setting, f"must be a mapping like {example_yaml}, not {brief(given)}")
            _merge(merged, given, "", self.bad, setting, flag)
        rest: list[str] = []
        args = list(extra)
        while args:
            arg = args.pop(0)
            name, eq, value = arg.partition("=")
            head, dot, path = name.partition(".")
            if head.replace("_", "-") not in names:
                rest.append(arg)
                continue
            if not eq:
                if not args:
                    raise self.bad("extra_args", f"{brief(arg)} needs a value")
                value = args.pop(0)
            if dot:  # --compilation-config.pass_config.fuse_allreduce_rms=false, as vLLM parses it
                try:
                    leaf: Any = json.loads(value)
                except ValueError:
                    leaf = value
                for key in reversed(path.split(".")):
                    leaf = {key: leaf}
                part = leaf
            else:
                try:
                    part = json.loads(value)
                except ValueError:
                    part = None
                if not isinstance(part, dict):
                    raise self.bad("extra_args", f"{head} takes a JSON object like '{example}', not {brief(value)}")
            _merge(merged, part, "", self.bad, "extra_args", flag)
        for key in merged:
            if key in tuned:
                where = setting if given and key in given else "extra_args"
                raise self.bad(where, f"{flag} key {brief(key)} is set by the tuner from {tuned[key]}; tune or fix "
                                      f"that instead")
        return merged, rest

    def pass_through(self) -> list[str]:
        return list(self.passed)

    def command(self) -> list[str]:
        if self.python:
            return [self.python, "-m", "vllm.entrypoints.cli.main", "serve", self.model]
        return [self.executable, "serve", self.model]

    def detect_version(self) -> str | None:
        """Metadata of settings.python (or this interpreter), else ``vllm --version``."""
        found = versions.package_version("vllm", self.probe_python())
        if found or self.python is not None:
            return found
        return _version_of_command(shutil.which(self.executable))

    def server_python(self) -> str | None:
        if self.python or versions.package_version("vllm"):
            return self.python or super().server_python()
        return _script_python(shutil.which(self.executable))

    def default_mode(self) -> str:
        return "FULL_AND_PIECEWISE" if self.effective_release() >= FULL_AND_PIECEWISE_DEFAULT_SINCE else "PIECEWISE"

    def _mode(self, config: Config) -> str:
        mode = config.get("backend.cudagraph_mode")
        return self.default_mode() if mode is None else str(mode).upper()

    # ---- speculative decoding -----------------------------------------------------------------
    def speculative_methods(self) -> speculative.Methods | None:
        """The release's methods: its table's ``--speculative-config.method`` values (the installed
        parser's dump, else the bundled table), else the neutral set, assumed; None for a release
        whose flags are known and have no ``--speculative-config``."""
        checker = self.flags()
        table = checker.table
        if table is not None and not table.knows("--speculative-config"):
            return None
        names = table.config_choices.get("--speculative-config.method") if table is not None else None
        free = _MODEL_FREE | {n for n in names or () if n.endswith("_mtp")}  # deprecated aliases of mtp
        return speculative.Methods(
            names=tuple(names or speculative.NEUTRAL_METHODS), model_free=frozenset(free),
            ignore_model=_IGNORE_MODEL, lookup=_LOOKUP, release=checker.release,
            source=f"{table.source} (--speculative-config.method)" if names and table is not None else
            "not recorded for this release: the neutral set is assumed", assumed=not names)

    def speculative_args(self, config: Config) -> list[str]:
        """One ``--speculative-config``: the params' keys and the user's own (disjoint: the
        user's tuned keys were refused)."""
        spec = speculative.of(config)
        if spec is None:
            return []
        tuned: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.num_tokens}
        for key, value in (("model", spec.model), ("prompt_lookup_max", spec.lookup_max),
                           ("prompt_lookup_min", spec.lookup_min)):
            if value is not None:
                tuned[key] = value
        return ["--speculative-config", json.dumps({**self.speculation, **tuned}, sort_keys=True)]

    # ---- the all-reduce path -------------------------------------------------------------------
    def allreduce_paths(self) -> allreduce.Paths | None:
        """The paths the release offers (module docstring), from its table's ``env_vars`` and
        ``config_keys``; ``nccl`` and ``custom`` alone, assumed, where they are not recorded;
        None for a release whose flags are known and have no ``--disable-custom-all-reduce``."""
        checker = self.flags()
        table = checker.table
        if table is not None and not table.knows("--disable-custom-all-reduce"):
            return None
        env = set(table.env_vars) if table is not None and table.env_vars is not None else set()
        passes = set(table.config_keys.get(_PASS, ())) if table is not None else set()
        fuse = "fuse_allreduce_rms" in passes
        no_fusion = ((_FUSE, False),) if fuse else ()

        def var(value: str, on: str) -> tuple[tuple[str, str], ...]:
            return ((_AR_ENV[value], on),) if _AR_ENV[value] in env else ()

        off = "--disable-custom-all-reduce",
        paths = {"nccl": allreduce.Path("nccl", off, var("symm_mem", "0") + var("flashinfer", "0"), no_fusion,
                                        log_name=_AR_LOG["nccl"]),
                 "custom": allreduce.Path("custom", (), var("flashinfer", "0"), no_fusion, log_name=_AR_LOG["custom"])}
        for value, flags, extra in (("symm_mem", off, "flashinfer"), ("nccl_symm_mem", (), "flashinfer"),
                                    ("flashinfer", (), None), ("flashinfer_pcie_ipc", (), None)):
            if _AR_ENV[value] in env:
                paths[value] = allreduce.Path(value, flags, var(value, "1") + (var(extra, "0") if extra else ()),
                                              no_fusion, nccl_symmetric=value == "nccl_symm_mem",
                                              log_name=_AR_LOG[value])
        if fuse:
            sized = _FUSE_SIZE if "fi_allreduce_fusion_max_size_mb" in passes else None
            paths[allreduce.FUSION] = allreduce.Path(allreduce.FUSION, (), (), ((_FUSE, True),), sized)
        known = table is not None and table.env_vars is not None
        return allreduce.Paths(
            paths, checker.release,
            f"{table.source} (--disable-custom-all-reduce, env_vars, {_PASS})" if known and table is not None else
            "not recorded for this release: nccl and custom (--disable-custom-all-reduce) are assumed",
            assumed=not known,
            no_size=f"{checker.release}'s custom all-reduce limit is fixed (8 MiB, lowered per GPU and TP size in "
                    f"all_reduce_utils.py); only the all-reduce + RMSNorm fusion's is a setting")

    def engine_fallbacks(self, config: Config, log_text: str) -> list[dict[str, Any]]:
        """The path asked for (``allreduce.backend``, or ``custom_all_reduce: true``, vLLM's default)
        that vLLM's log says it turned off, with the first path it enabled for the tensor-parallel
        group instead (``Using [...] all-reduce backends``: PYNCCL is ``nccl``)."""
        asked = allreduce.asked_path(config)
        if asked is None or asked[1] not in _AR_OFF:
            return []
        param, value = asked
        said = _said(log_text, _AR_OFF[value])
        listed = _listed(log_text)
        if said is None or (listed is not None and _AR_LOG[value] in listed):
            return []
        neutral = {name: path for path, name in _AR_LOG.items()}
        ran = neutral.get(listed[0], listed[0].lower()) if listed else None
        return [allreduce.fallback(config, param, ran, said)]

    def allreduce_warnings(self, config: Config, log_text: str) -> list[str]:
        """The requested path against vLLM's ``Using [...] all-reduce backends`` line of the
        tensor-parallel group and the warnings of the path that turned itself off."""
        value = allreduce.value_of(config)
        if value is None:
            return []
        release = self.flags().release
        fused = _FUSION_UP in log_text
        if value == allreduce.FUSION:
            said = _said(log_text, r"Failed to initialize FlashInfer All Reduce workspace.*")
            return [] if fused or not (said or _AR_LINE.search(log_text)) else [
                allreduce.warning(value, release, "did not set up the all-reduce + RMSNorm fusion (no "
                                                  f"'{_FUSION_UP}' line)" + (f"; vLLM said: {said}" if said else ""))]
        if fused:
            return [allreduce.warning(value, release, f"fused the all-reduce with the RMSNorm all the same "
                                                       f"('{_FUSION_UP}')")]
        listed = _listed(log_text)
        said = _said(log_text, _AR_OFF[value]) if value in _AR_OFF else None
        because = f"; vLLM said: {said}" if said else ""
        if listed is None:
            return [allreduce.warning(value, release, f"turned it off{because}")] if said else []
        if value == "nccl":
            others = [n for n in listed if n != _AR_LOG["nccl"]]
            return [allreduce.warning(value, release, f"also enabled {', '.join(others)} for the tensor-parallel "
                                                       f"group")] if others else []
        if _AR_LOG[value] not in listed:
            return [allreduce.warning(value, release, f"did not enable it for the tensor-parallel group (its "
                                                       f"all-reduce backends: {', '.join(listed) or 'none'}){because}")]
        if value == "flashinfer_pcie_ipc" and "Initialized FlashInfer PCIe IPC all-reduce" not in log_text:
            return [allreduce.warning(value, release, "never set it up (it is prepared at CUDA-graph capture: "
                                                       f"without graphs it is not used){because}")]
        return []

    def diagnose(self) -> tuple[list[str], list[str]]:
        lines, warnings = super().diagnose()
        methods = self.speculative_methods()
        if methods is None:
            lines.append(f"speculative decoding: {self.flags().release} has no --speculative-config")
        else:
            lines.append(f"speculative methods: {', '.join(methods.names)} ({methods.source})")
            if methods.assumed:
                warnings.append(f"the speculative methods of {methods.release} are not known here: speculative.method "
                                f"is checked against the neutral set ({', '.join(speculative.NEUTRAL_METHODS)})")
        return lines, warnings

    # ---- the differences ---------------------------------------------------------------------
    def check_engine(self, config: Config) -> None:
        file = self.job_file
        keys = allreduce.compilation_of(config, allreduce.path_of(config, self.allreduce_paths()))
        for dotted, value in _leaves(keys):
            mine = _leaf(self.compilation, dotted)
            if mine is not _NONE and mine != value:
                raise ConfigRejected(f"your --compilation-config sets {dotted}: {json.dumps(mine)}, which "
                                     f"{allreduce.BACKEND}={config[allreduce.BACKEND]} sets to {json.dumps(value)}; "
                                     f"drop the key or that value", file=file, key=allreduce.BACKEND)
        moe = [name for name in _MOE_FLAGS if name in config]
        if moe and common.is_moe(self, self.model) is False:
            raise ConfigRejected(f"{self.model} is a dense model (model_facts.moe false, or its config.json counts no "
                                 f"experts): {moe[0]} cannot change its server; drop it, or set "
                                 f"backend.settings.model_facts.moe: true if the model has experts", file=file,
                                 key=moe[0])
        graphs = config.get("graph_capture", True)
        release = self.effective_release()
        if "backend.cudagraph_mode" in config and graphs:
            mode = self._mode(config)
            if mode not in CUDAGRAPH_MODES:
                raise ConfigRejected(f"cudagraph_mode must be one of {', '.join(CUDAGRAPH_MODES)}, not "
                                     f"{brief(config['backend.cudagraph_mode'])}", file=file,
                                     key="backend.cudagraph_mode")
            if release < CUDAGRAPH_MODE_SINCE and mode not in ("PIECEWISE", "FULL"):
                raise ConfigRejected(f"vLLM {vstr(release)} has no cudagraph_mode (it arrived in 0.10.1); "
                                     f"only PIECEWISE and FULL can be expressed", file=file,
                                     key="backend.cudagraph_mode")
            if release < (0, 9, 0) and mode == "FULL":
                raise ConfigRejected(f"vLLM {vstr(release)} has no full CUDA graphs (full_cuda_graph "
                                     f"arrived in 0.9.0)", file=file, key="backend.cudagraph_mode")
        top = config.get("backend.max_cudagraph_capture_size")
        if graphs and top is not None and config.get("capture_sizes"):
            largest = common.capture_sizes_of(config["capture_sizes"])[-1]
            if release < CAPTURE_SIZES_FLAG_SINCE:
                raise ConfigRejected(f"vLLM {vstr(release)} spells the largest captured batch as "
                                     f"--cuda-graph-sizes, which conflicts with explicit capture_sizes: give one "
                                     f"of the two", file=file, key="backend.max_cudagraph_capture_size")
            if top != largest:
                raise ConfigRejected(f"vLLM refuses max_cudagraph_capture_size={brief(top)} with capture_sizes whose "
                                     f"largest is {largest}: give one of the two, or make them agree", file=file,
                                     key="backend.max_cudagraph_capture_size")

    def normalize_engine(self, out: Config) -> None:
        """The release's default mode spelled out; mode NONE captures nothing; expert
        parallelism off is vLLM's default, and the experts' all-to-all backend only matters
        with it on."""
        if out.get("backend.enable_expert_parallel") is False:
            del out["backend.enable_expert_parallel"]
        if out.get("backend.enable_expert_parallel") is not True:
            out.pop("backend.all2all_backend", None)
        if out["graph_capture"]:
            out["backend.cudagraph_mode"] = self._mode(out)
            if out["backend.cudagraph_mode"] == "NONE":
                for name in ("capture_sizes", "backend.max_cudagraph_capture_size", "backend.cuda_graph_sizes"):
                    out.pop(name, None)

    def graph_args(self, config: Config) -> list[str]:
        """``--enforce-eager`` or the graph mode and sizes, and one ``--compilation-config``
        holding the tuned keys and the user's own."""
        tuned: dict[str, Any] = {}
        words: list[str] = []
        if config.get("graph_capture", True) is False:
            words = ["--enforce-eager"]
        elif "graph_capture" in config or "backend.cudagraph_mode" in config or "capture_sizes" in config:
            release = self.effective_release()
            mode = self._mode(config)
            if release >= CUDAGRAPH_MODE_SINCE:
                tuned["cudagraph_mode"] = mode
            elif mode == "FULL":
                tuned["full_cuda_graph"] = True
            sizes = common.capture_sizes_of(config["capture_sizes"]) if config.get("capture_sizes") else None
            if sizes and mode != "NONE":
                if release >= CAPTURE_SIZES_FLAG_SINCE:
                    words = ["--cudagraph-capture-sizes", *map(str, sizes)]
                else:
                    tuned["cudagraph_capture_sizes"] = sizes
        # else nothing tuned: vLLM's own defaults
        compilation = {**self.compilation, **tuned}  # disjoint: the user's tuned keys were refused
        path_keys = allreduce.compilation_of(config, allreduce.path_of(config, self.allreduce_paths()))
        if path_keys:  # the user's own keys agree (check_engine refused a contradiction)
            compilation = json.loads(json.dumps(compilation))
            _merge(compilation, path_keys, "", self.bad, "compilation_config", "--compilation-config")
        if compilation:
            words = ["--compilation-config", json.dumps(compilation, sort_keys=True)] + words
        return words


def _merge(into: dict[str, Any], part: dict[str, Any], prefix: str, bad, setting: str, flag: str) -> None:
    """Deep-merge ``part`` into ``into``; one key given twice with two values is BadInput."""
    for key, value in part.items():
        here = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, f"{here}.", bad, setting, flag)
        elif key in into and into[key] != value:
            raise bad(setting, f"{flag} key {brief(here)} is given twice: {brief(into[key])} and {brief(value)}")
        else:
            into[key] = value


_NONE = object()


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a nested mapping."""
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _leaves(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _leaf(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _NONE
        node = node[part]
    return node


def _listed(log_text: str) -> list[str] | None:
    """The all-reduce backends vLLM enabled for every tensor-parallel group, in dispatch order, by
    its log's names (``PYNCCL``); None when the log has no ``Using [...] all-reduce backends`` line."""
    listed: list[str] | None = None
    for m in _AR_LINE.finditer(log_text):
        names = [n.strip(" '\"") for n in m.group(1).split(",") if n.strip(" '\"")]
        listed = names if listed is None else [n for n in listed if n in names]  # every TP group
    return listed


def _said(log_text: str, pattern: str) -> str | None:
    """The first message of the log that matches ``pattern``, without vLLM's line prefix."""
    m = re.search(pattern, log_text)
    return m.group(0).strip() if m else None


def _version_of_command(exe: str | None) -> str | None:
    """The version ``vllm --version`` prints (its last line that holds one)."""
    out = versions.command_output((exe, "--version"), 120.0) if exe else None
    lines = [line.strip() for line in (out or "").splitlines() if versions.parse_version(line.strip())]
    return lines[-1] if lines else None


def _script_python(script: str | None) -> str | None:
    """The interpreter a console script names on its first line (``#!/venv/bin/python``)."""
    try:
        with open(script or "", "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if len(words) > 1 and words[0].endswith("/env"):  # #!/usr/bin/env python3
        words = [shutil.which(words[1]) or ""]
    return words[0] if words and "python" in words[0].rsplit("/", 1)[-1] else None
