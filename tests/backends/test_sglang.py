"""The SGLang backend: argv/env per config, flags checked against SGLang 0.5.23's parser,
spellings renamed in 0.5.14 and removed in 0.5.20, rejected values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from launch import checked_argv

from orchestrator.backends import get_backend_class, known_flags
from orchestrator.backends.sglang import SglangBackend
from orchestrator.core.errors import BadInput, ConfigRejected

SGLANG = known_flags.bundled("sglang", "0.5.23")


@pytest.fixture(autouse=True)
def no_installed_sglang(monkeypatch):
    monkeypatch.setattr(SglangBackend, "detect_version", lambda self: None)


def backend(version: str | None = "0.5.23", **settings) -> SglangBackend:
    s = {"model": "/models/Qwen3-8B", "python": "python3", **settings}
    if version:
        s["version"] = version
    return SglangBackend(s, job_file="jobs/s.yaml")


def argv(b: SglangBackend, config: dict) -> list[str]:
    return checked_argv(b, config, 30000)


SAMPLE_CONFIGS = [
    {"tp_size": 2, "graph_capture": False},
    {"tp_size": 2, "graph_capture": True, "backend.cuda_graph_max_bs": 16},
    {"tp_size": 4, "pp_size": 1, "graph_capture": True, "capture_sizes": "1,2,4,8",
     "backend.enable_torch_compile": True, "backend.torch_compile_max_bs": 8, "custom_all_reduce": False,
     "env.NCCL_ALGO": "ring"},
    {"tp_size": 2, "backend.mem_fraction_static": 0.85, "backend.max_running_requests": 32,
     "backend.cuda_graph_max_bs_decode": 32, "backend.enable_torch_compile": False},
]


def test_registered_and_kind():
    assert get_backend_class("sglang") is SglangBackend and SglangBackend.kind == "sglang"


def test_basic_launch():
    spec = backend(served_model_name="qwen").launch_spec({"tp_size": 2, "env.NCCL_ALGO": "ring"}, "0.0.0.0", 30001)
    assert spec.argv == ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-8B",
                         "--tp-size", "2", "--host", "0.0.0.0", "--port", "30001", "--served-model-name", "qwen"]
    assert spec.env == {"NCCL_ALGO": "Ring"}
    assert spec.health_path == "/health" and spec.model_name == "qwen"


def test_default_python_is_this_interpreter():
    b = SglangBackend({"model": "m", "version": "0.5.23"})
    assert b.launch_spec({}, "h", 1).argv[0] == sys.executable


def test_current_release_spellings():
    words = argv(backend(), SAMPLE_CONFIGS[0])
    assert words[-2:] == ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
    assert "--disable-cuda-graph" not in words  # deprecated in 0.5.23
    words = argv(backend(), SAMPLE_CONFIGS[2])
    i = words.index("--cuda-graph-bs-decode")
    assert words[i + 1:i + 5] == ["1", "2", "4", "8"]
    assert "--enable-torch-compile" in words and words[words.index("--torch-compile-max-bs") + 1] == "8"
    assert "--disable-custom-all-reduce" in words
    words = argv(backend(), SAMPLE_CONFIGS[1])
    assert words[words.index("--cuda-graph-max-bs-decode") + 1] == "16" and "--cuda-graph-max-bs" not in words


@pytest.mark.parametrize("config", SAMPLE_CONFIGS)
def test_every_emitted_flag_exists_in_sglang_0_5_23(config):
    for word in argv(backend(extra_args=["--context-length", "8192"]), config):
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            assert SGLANG.knows(flag), f"{flag} is not a flag of SGLang {SGLANG.version}"
            info = SGLANG.flags.get(flag)
            assert info is None or not info.deprecated, f"{flag} is deprecated in SGLang {SGLANG.version}"


def test_flag_table_is_sglang_0_5_23_parser():
    assert SGLANG.version == "0.5.23" and len(SGLANG.flags) > 500
    for flag in ("--model-path", "--tp-size", "--pp-size", "--host", "--port", "--enable-torch-compile",
                 "--torch-compile-max-bs", "--disable-custom-all-reduce", "--cuda-graph-max-bs-decode",
                 "--cuda-graph-bs-decode", "--disable-decode-cuda-graph", "--disable-prefill-cuda-graph",
                 "--served-model-name", "--mem-fraction-static"):
        assert flag in SGLANG.flags, flag
    assert SGLANG.flags["--disable-cuda-graph"].deprecated
    assert not SGLANG.knows("--cuda-graph-max-bs") and not SGLANG.knows("--cuda-graph-bs")


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.3", "0.5.13"])
def test_spellings_before_0_5_14(version):
    b = backend(version)
    assert argv(b, SAMPLE_CONFIGS[0])[-1] == "--disable-cuda-graph"
    words = argv(b, SAMPLE_CONFIGS[1])
    assert words[words.index("--cuda-graph-max-bs") + 1] == "16"
    words = argv(b, {"tp_size": 2, "capture_sizes": "2,1", "backend.cuda_graph_max_bs_decode": 8})
    assert words[words.index("--cuda-graph-bs") + 1:][:2] == ["1", "2"]
    assert words[words.index("--cuda-graph-max-bs") + 1] == "8"  # the new name, spelled for the old release


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19", "0.5.20", "0.5.22"])
def test_spellings_from_0_5_14(version):
    b = backend(version)
    words = argv(b, {"tp_size": 2, "capture_sizes": "1,2", "backend.cuda_graph_max_bs": 8})
    assert "--cuda-graph-bs-decode" in words and words[words.index("--cuda-graph-max-bs-decode") + 1] == "8"
    assert "--cuda-graph-max-bs" not in words and "--cuda-graph-bs" not in words
    assert argv(b, SAMPLE_CONFIGS[0])[-2:] == ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]


def test_installed_version_chooses_spelling(monkeypatch):
    monkeypatch.setattr(SglangBackend, "detect_version", lambda self: "0.5.12")
    b = backend(version=None)
    assert b.version() == "0.5.12"
    assert argv(b, SAMPLE_CONFIGS[0])[-1] == "--disable-cuda-graph"


def test_per_phase_prefill_needs_0_5_14():
    with pytest.raises(ConfigRejected, match="before 0.5.14"):
        backend("0.5.13").check_config({"backend.cuda_graph_max_bs_prefill": 4})
    assert "--cuda-graph-max-bs-prefill" in argv(backend(), {"backend.cuda_graph_max_bs_prefill": 4})


def test_graph_settings_dropped_without_graphs():
    words = argv(backend(), {"tp_size": 2, "graph_capture": False, "backend.cuda_graph_max_bs": 16,
                             "capture_sizes": "1,2"})
    assert not any("cuda-graph-max-bs" in w or "cuda-graph-bs" in w for w in words)


@pytest.mark.parametrize("config,key,needle", [
    ({"backend.disable_cuda_graph": True}, "backend.disable_cuda_graph", "graph_capture"),
    ({"backend.cuda_graph_bs": "1,2"}, "backend.cuda_graph_bs", "capture_sizes"),
    ({"backend.tp_size": 2}, "backend.tp_size", "set by the tuner from tp_size"),
    ({"backend.enable_dp_attention": True}, "backend.enable_dp_attention", "deprecated"),
    ({"backend.enable_torch_compil": True}, "backend.enable_torch_compil", "did you mean '--enable-torch-compile'"),
    ({"backend.enable_torch_compile": "yes"}, "backend.enable_torch_compile", "is a switch"),
    ({"capture_sizes": "x"}, "capture_sizes", "batch sizes"),
    ({"tp_size": -1}, "tp_size", "positive integer"),
    ({"env.NCCL_ALGO": "ringg"}, "env.NCCL_ALGO", "ringg"),
])
def test_rejected_configs(config, key, needle):
    with pytest.raises(ConfigRejected, match=needle) as exc:
        backend().check_config({"tp_size": 2, **config})
    assert exc.value.key == key


@pytest.mark.parametrize("settings,key,needle", [
    ({"model_path": "m"}, "model_path", "did you mean 'model'"),
    ({"extra_args": ["--disable-cuda-graph"]}, "extra_args", "set by the tuner"),
    ({"extra_args": ["--cuda-graph-max-bs", "8"]}, "extra_args", "not a flag of SGLang 0.5.23"),
    ({"extra_args": ["--grpc-mode"]}, "extra_args", "deprecated"),
])
def test_bad_settings(settings, key, needle):
    with pytest.raises(BadInput, match=needle) as exc:
        SglangBackend({"model": "m", "version": "0.5.23", **settings})
    assert exc.value.key == f"backend.settings.{key}"


def test_normalize():
    b = backend()
    assert b.normalize(b.default_config()) == b.normalize({})
    assert b.normalize({"tp_size": 2, "backend.cuda_graph_max_bs_decode": 8}) == b.normalize(
        {"tp_size": 2, "backend.cuda_graph_max_bs": 8})
    off = b.normalize({"tp_size": 2, "graph_capture": False, "capture_sizes": "1", "backend.cuda_graph_max_bs": 8})
    assert "capture_sizes" not in off and "backend.cuda_graph_max_bs" not in off


def test_gpus_per_trial():
    assert backend().gpus_per_trial({"tp_size": 2, "pp_size": 2}) == 4
    assert backend().gpus_per_trial({"tp_size": 2, "backend.dp_size": 2}) == 4


def test_example_job_commands_use_only_current_sglang_flags():
    from pathlib import Path

    from orchestrator.config.job import load_job

    job = load_job(str(Path(__file__).resolve().parents[2] / "jobs" / "sglang-example.yaml"))
    b = job.backend_obj()
    seen = set()
    for config in [job.baseline, *(job.space.active({**job.baseline, **c}) for c in job.space.enumerate())]:
        b.check_config(config)
        seen |= {w for w in b.launch_spec(config, "127.0.0.1", 30000).argv if w.startswith("--")}
    for flag in seen:
        assert SGLANG.knows(flag) and not (SGLANG.flags.get(flag) and SGLANG.flags[flag].deprecated), flag
    assert {"--disable-decode-cuda-graph", "--cuda-graph-max-bs-decode", "--enable-torch-compile", "--tp-size"} <= seen


def test_a_gguf_model_is_accepted_by_a_release_whose_load_format_has_gguf():
    """SGLang 0.5.23's parser lists gguf among its --load-format choices (bundled table)."""
    assert "gguf" in known_flags.bundled("sglang", "0.5.23").flags["--load-format"].choices
    b = backend(model="/models/GLM-5-Q4_K_M.gguf")
    assert argv(b, {})[argv(b, {}).index("--model-path") + 1] == "/models/GLM-5-Q4_K_M.gguf"
    with pytest.raises(ConfigRejected, match=r"--load-format 'gguff' is not a value SGLang 0\.5\.23 accepts"):
        b.check_config({"backend.load_format": "gguff"})


def test_custom_requested_on_four_pcie_gpus_warns_with_sglangs_own_reason():
    """SGLang 0.5.23 turns its custom all-reduce off on more than two PCIe-only GPUs and only logs
    it (custom_all_reduce_utils.py; tests/fixtures/sglang/README.md)."""
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
            / "sglang-0.5.23-4xpcie-tp4-custom-disabled.lines.log").read_text()
    b = SglangBackend({"model": "m", "version": "0.5.23"}, "job.yaml")
    (warning,) = b.allreduce_warnings(b.normalize({"tp_size": 4, "allreduce.backend": "custom"}), text)
    assert warning.startswith("all-reduce path: allreduce.backend=custom was requested but SGLang 0.5.23 turned it")
    assert "CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs" in warning
    assert b.allreduce_warnings(b.normalize({"tp_size": 4, "allreduce.backend": "nccl"}), text) == []
    (fell,) = b.engine_fallbacks(b.normalize({"tp_size": 4}), text)  # SGLang's default: the custom kernel
    assert fell["text"].startswith("custom_all_reduce=true (the engine ran nccl: CustomAllreduce is disabled because")
    assert b.engine_fallbacks(b.normalize({"tp_size": 4, "allreduce.backend": "nccl"}), text) == []


def test_where_a_config_changes_regime_for_the_capacity_search():
    """Issue 47: SGLang's largest captured batch (--cuda-graph-max-bs) and --max-running-requests."""
    from orchestrator.core.measurement import BATCH, GRAPHS

    b = backend(extra_args=["--max-running-requests", "128"])
    marks = b.load_marks({"graph_capture": True, "backend.cuda_graph_max_bs": 160})
    assert [(m.streams, m.kind, m.source) for m in marks] == [
        (160, GRAPHS, "backend.cuda_graph_max_bs 160"), (128, BATCH, "--max-running-requests 128")]
    assert [m.kind for m in b.load_marks({"graph_capture": False, "backend.cuda_graph_max_bs": 160})] == [BATCH]
