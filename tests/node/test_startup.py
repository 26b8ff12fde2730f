"""The start-up phase parser (orchestrator/node/startup.py) on real vLLM 0.26.0 logs
(tests/fixtures/vllm/, README there), SGLang's log lines and the reference server's."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.node import startup

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"


def _log(name: str) -> str:
    return (FIXTURES / name).read_text(errors="replace")


def test_a_cold_start_compiles_and_a_start_that_differs_only_in_nccl_loads_the_compiled_graphs():
    """The capture of 2026-12-01: the same config twice on one machine, the second with only
    NCCL_PROTO/NCCL_ALGO set: the same cache directory, miss then hit."""
    cold = startup.parse(_log("vllm-0.26.0-h200-tp1-graphs-cold-compile-miss.log"), first_line_s=2.0, ready_s=165.0)
    warm = startup.parse(_log("vllm-0.26.0-h200-tp1-graphs-nccl-only-compile-hit.log"), first_line_s=2.0,
                         ready_s=54.0)
    assert cold["engine"] == warm["engine"] == "vllm"
    assert (cold["compile_cache"], warm["compile_cache"]) == ("miss", "hit")
    assert cold["compile_cache_dir"] == warm["compile_cache_dir"]
    assert cold["compile_cache_dir"].endswith("torch_compile_cache/f0f977201c")
    assert (cold["compile_s"], warm["compile_s"]) == (12.83, 2.42)  # "torch.compile took ... in total"
    assert cold["weights_s"] == 0.33 and cold["model_load_s"] == 1.87
    assert cold["graph_capture_s"] == 1.0 and cold["init_engine_s"] == 111.08
    segments = dict(cold["segments"])
    assert segments["process start"] == 2.0 and segments["weights"] == 1.87
    assert segments["torch.compile"] == 12.83 and segments["graph capture"] == 1.0
    # init engine (111.08 s) contains the compile and the capture
    assert segments["profile, KV cache, warm-up"] == pytest.approx(111.08 - 12.83 - 1.0)
    for phases, ready in ((cold, 165.0), (warm, 54.0)):  # the stacked bar is the whole start-up
        assert sum(s for _, s in phases["segments"]) == pytest.approx(ready)
        assert phases["segments"][-1][0] == "other" and phases["ready_s"] == ready
    assert cold["last_phase"] == "ready"


def test_eager_compiles_nothing_and_tp2_takes_the_slowest_rank():
    eager = startup.parse(_log("vllm-0.26.0-h200-tp1-eager-warm.log"))
    assert "compile_cache" not in eager and "compile_s" not in eager and "graph_capture_s" not in eager
    assert [name for name, _ in eager["segments"]] == ["weights", "profile, KV cache, warm-up"]
    tp2 = startup.parse(_log("vllm-0.26.0-2xh200-tp2-eager-p2poff-simple-nccl-info.log"))
    # Worker_TP0 1.120962 s, Worker_TP1 1.164011 s: the slower rank gates the start
    assert tp2["model_load_s"] == pytest.approx(1.164, abs=1e-3)


def test_a_draft_model_adds_its_load_and_its_compile():
    spec = startup.parse(_log("vllm-0.26.0-h200-tp1-draft-model-spec.log"))
    assert spec["weights_s"] == pytest.approx(0.39 + 0.13)  # target, then drafter, one process
    assert spec["compile_s"] == pytest.approx(13.57 + 4.66)  # backbone, then draft_model
    assert spec["compile_cache"] == "miss"


def test_the_last_phase_a_failed_start_reached():
    crash = _log("vllm-0.26.0-2xh200-tp2-graphs-p2poff-crash-illegal-address.log")
    assert startup.last_phase(crash) == "torch.compile"
    refused = _log("vllm-0.26.0-2xh200-tp2-graphs-p2poff-tree-ll-allgather-refused.log")
    assert startup.last_phase(refused) == "profile and KV cache"
    assert startup.parse(refused)["compile_cache"] == "hit"  # TP0 loaded its graphs from the cache


@pytest.mark.parametrize("text, phase", [
    ("", "process start"),
    ("# ncclsweep: python -m server --port 1\n", "process start"),  # only the node's launch line
    ("# ncclsweep: python -m server\nloading the model\n", "start-up"),  # output, no engine marker
    ("(APIServer pid=1) INFO 12-01 20:57:53 [api_utils.py:345] version 0.26.0\n"
     "(EngineCore pid=2) INFO 12-01 20:58:24 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config\n"
     "(EngineCore pid=2) INFO 12-01 20:58:25 [parallel_state.py:1615] world_size=2 rank=0 local_rank=0 "
     "distributed_init_method=tcp://127.0.0.1:1 backend=nccl\n", "NCCL init"),
])
def test_last_phase_before_and_after_the_first_line(text, phase):
    assert startup.last_phase(text) == phase


def test_any_backend_gets_spawn_to_first_line_to_ready():
    phases = startup.parse("# ncclsweep: ./server --port 9\nlistening\n", first_line_s=0.5, ready_s=3.0)
    assert "engine" not in phases
    assert phases["segments"] == [["process start", 0.5], ["start-up", 2.5]]
    failed = startup.parse("# ncclsweep: ./server\nhello\n", first_line_s=0.4, ended_s=61.0)
    assert failed["ended_s"] == 61.0 and "ready_s" not in failed
    assert sum(s for _, s in failed["segments"]) == pytest.approx(61.0)


# SGLang's own log lines (its scheduler's and model runner's format strings; no real SGLang log is
# kept here): a TP=2 start with a weights load per rank and a CUDA-graph capture
SGLANG = """\
[2026-02-26 05:20:01] server_args=ServerArgs(model_path='/models/m', tp_size=2)
[2026-02-26 05:20:20 TP0] Init torch distributed begin.
[2026-02-26 05:20:24 TP0] Init torch distributed ends. elapsed=3.50 s, mem usage=0.10 GB
[2026-02-26 05:20:24 TP1] Init torch distributed ends. elapsed=3.70 s, mem usage=0.10 GB
[2026-02-26 05:20:25 TP0] Load weight begin. avail mem=194.04 GB
[2026-02-26 05:24:09 TP0] Load weight end. elapsed=228.09 s, type=GlmMoeDsaForCausalLM, avail mem=104.4 GB
[2026-02-26 05:24:09 TP1] Load weight end. elapsed=229.10 s, type=GlmMoeDsaForCausalLM, avail mem=104.4 GB
[2026-02-26 05:24:10 TP0] KV Cache is allocated. #tokens: 39078, K size: 4.77 GB, V size: 4.77 GB
[2026-02-26 05:24:11 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=94.1 GB
[2026-02-26 05:27:39 TP0] Capture cuda graph end. Time elapsed: 208.30 s. mem usage=1.91 GB. avail mem=92.2 GB.
[2026-02-26 05:27:45] INFO:     Application startup complete.
[2026-02-26 05:27:46] The server is fired up and ready to roll!
"""


def test_sglang_phases():
    phases = startup.parse(SGLANG, first_line_s=20.0, ready_s=470.0)
    assert phases["engine"] == "sglang"
    assert phases["nccl_init_s"] == 3.7 and phases["weights_s"] == 229.1 and phases["graph_capture_s"] == 208.3
    assert [name for name, _ in phases["segments"]] == ["process start", "NCCL init", "weights", "graph capture",
                                                        "other"]
    assert sum(s for _, s in phases["segments"]) == pytest.approx(470.0)
    stuck = SGLANG.split("[2026-02-26 05:27:39")[0]  # the capture never ended
    assert startup.last_phase(stuck) == "graph capture"


def test_the_reference_servers_own_lines():
    log = ("# ncclsweep: python -m orchestrator.refserver --port 1\n"
           "[refserver rank0] starting tiny: tp=1 device=cpu dtype=float32 max_batch=8 graph_capture=False\n"
           "[refserver rank0] weights built in 0.4s (3.1M params, float32, tp=1, threads=1); KV cache 0.01 GiB\n"
           "[refserver rank0] ready on http://127.0.0.1:1\n")
    phases = startup.parse(log, first_line_s=1.5, ready_s=2.5)
    assert phases["engine"] == "refserver" and phases["weights_s"] == 0.4
    assert [name for name, _ in phases["segments"]] == ["process start", "weights", "other"]
    assert startup.last_phase(log) == "ready"


def test_segments_never_add_up_past_the_start_up_when_the_engine_and_the_node_overlap():
    """On a loaded box the node reads the first line late while the server already times its
    weights: spawn -> first line plus the weights can pass spawn -> ready (seen in CI: 1.764 s
    of segments for a 1.655 s start). The bar still adds up to the start-up."""
    log = ("[refserver rank0] starting tiny: tp=1 device=cpu dtype=float32 max_batch=8 graph_capture=False\n"
           "[refserver rank0] weights built in 0.9s (3.1M params, float32, tp=1, threads=1); KV cache 0.01 GiB\n"
           "[refserver rank0] ready on http://127.0.0.1:1\n")
    phases = startup.parse(log, first_line_s=1.2, ready_s=1.655)
    assert sum(s for _, s in phases["segments"]) == pytest.approx(1.655)
    assert phases["segments"] == [["process start", 1.2], ["weights", 0.455]]
    failed = startup.parse(log.splitlines()[0], first_line_s=3.0, ended_s=2.0)  # read after the end was timed
    assert failed["segments"] == [["process start", 2.0]]


def test_what_the_engine_prints_after_it_is_ready_is_no_phase():
    log = _log("vllm-0.26.0-h200-tp1-graphs-nccl-only-compile-hit.log")
    later = log + "(EngineCore pid=1291) INFO 12-01 21:05:00 [monitor.py:53] torch.compile took 99.00 s in total\n"
    assert startup.parse(later)["compile_s"] == 2.42


def test_summary_line():
    phases = startup.parse(_log("vllm-0.26.0-h200-tp1-graphs-cold-compile-miss.log"), first_line_s=2.0,
                           ready_s=165.0)
    line = startup.summary(phases)
    assert line.startswith("ready 165s: process start 2s, weights 2s, torch.compile 13s (cache miss)")


def test_what_the_engine_changed_beyond_the_config_is_noticed_once():
    """vLLM 0.26.0 with n-gram speculation says, from two processes, that it falls back to its V1
    model runner and turns async scheduling off (and its weight prefetch, "... is disabled because
    ..."): each is one notice, without process and time."""
    got = startup.notices(_log("vllm-0.26.0-h200-tp1-ngram-spec.log"))
    assert got == [
        "engine notice: Async scheduling not supported with ngram-based speculative decoding and will be disabled.",
        "engine notice: Model Runner V2 does not yet support ngram/ngram_gpu speculative decoding; using the V1 "
        "model runner instead.",
        "engine notice: Auto-prefetch is disabled because the filesystem (EXT4) is not a recognized network FS "
        "(NFS/Lustre). If you want to force prefetching, start vLLM with --safetensors-load-strategy=prefetch."]
    assert any("draft_model" in n for n in startup.notices(_log("vllm-0.26.0-h200-tp1-draft-model-spec.log")))
    assert startup.notices(_log("vllm-0.26.0-h200-tp1-graphs-serve.log")) == []  # eager and graphs: nothing new
    assert startup.notices("any other server\nusing the V1 model runner instead\n") == []  # no engine we know


CUSTOM_OFF = ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
              "this warning, specify disable_custom_all_reduce=True explicitly.")


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_vllms_custom_all_reduce_turned_off_is_a_notice_whatever_asked_for_it(version):
    """vLLM's own line (custom_all_reduce.py, once per worker) on four PCIe-only GPUs, with the custom
    kernel left at vLLM's default: one notice, whatever the config said; and any engine's "<X> is
    disabled because <reason>", the engine known or not, is one too."""
    log = _log(f"vllm-{version}-4xpcie-tp4-custom-disabled.lines.log")
    assert log.count("Custom allreduce is disabled because") == 4  # one per worker
    assert startup.notices(log) == [f"engine notice: {CUSTOM_OFF}"]
    other = "starting\n[server] FancyKernel is disabled because the GPUs are not NVLink-connected.\nready\n"
    assert startup.notices(other) == ["engine notice: [server] FancyKernel is disabled because the GPUs are not "
                                      "NVLink-connected."]
    assert startup.notices(log.replace("is disabled because", "is enabled as")) == []


def test_what_sglang_turned_off_is_noticed_once_across_its_ranks():
    """SGLang says, once per rank and with its ``[time TPn]`` prefix, that it turned a feature off
    (the texts of its server_args.py and all-reduce utils; tests/fixtures/sglang/README.md): one
    notice each, without the prefix; its ordinary lines are no notice."""
    custom = (FIXTURES.parent / "sglang" / "sglang-0.5.23-4xpcie-tp4-custom-disabled.lines.log").read_text()
    log = ("[2026-12-03 10:00:00] server_args=ServerArgs(model_path='m', tp_size=4)\n"
           "[2026-12-03 10:00:01] Overlap scheduler is disabled because of using eagle speculative decoding.\n"
           "[2026-12-03 10:00:01 TP0] Load weight begin. avail mem=78.00 GB\n"
           + custom +
           "[2026-12-03 10:00:09] The server is fired up and ready to roll!\n")
    assert startup.notices(log) == [
        "engine notice: Overlap scheduler is disabled because of using eagle speculative decoding.",
        "engine notice: CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
        "To silence this warning, specify disable_custom_all_reduce=True explicitly."]
    assert startup.notices(log.replace("is disabled because", "is enabled as")) == []


def test_where_the_engine_says_it_changes_regime():
    """Issue 47: the capacity search probes where the engine changes regime, as its log says it runs
    (after its defaults): vLLM 0.26.0's engine config ('max_cudagraph_capture_size': 128, 0 when eager,
    after the user's None), its non-default 'max_num_seqs' and its KV cache's tokens in requests of the
    plan's length; SGLang's server args and its pool's max_total_num_tokens."""
    cold = _log("vllm-0.26.0-h200-tp1-graphs-cold-compile-miss.log")
    graphs = {(m.kind, m.streams) for m in startup.engine_marks(cold, 2000.0)}
    assert graphs == {("graphs", 128), ("batch", 64), ("kv_cache", 2_189_344 // 2000)}
    eager = {m.kind: m for m in startup.engine_marks(_log("vllm-0.26.0-h200-tp1-eager-warm.log"), 0.0)}
    assert eager["graphs"].streams == 0 and "kv_cache" not in eager  # captured none; no request length known
    assert eager["graphs"].source == "the engine's log: 'max_cudagraph_capture_size': 0"
    trial = {m.kind: m.streams for m in startup.engine_marks(_log("vllm-0.26.0-h200-tp1-graphs-trial.log"), 100.0)}
    assert trial["graphs"] == 8  # the configured None first, the engine's 8 after it
    sglang = ("[2026-01-05 10:00:00] server_args=ServerArgs(model_path='m', max_running_requests=128, "
              "cuda_graph_max_bs=160, chunked_prefill_size=8192)\n"
              "[2026-01-05 10:00:30 TP0] max_total_num_tokens=665690, chunked_prefill_size=8192, "
              "max_prefill_tokens=16384, max_running_requests=4096, context_len=32768\n")
    assert {(m.kind, m.streams) for m in startup.engine_marks(sglang, 1000.0)} == {
        ("graphs", 160), ("batch", 4096), ("kv_cache", 665)}
    assert startup.engine_marks("INFO nothing of the kind\n", 100.0) == []
