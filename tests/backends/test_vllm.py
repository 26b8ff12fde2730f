"""The vLLM backend: argv/env per config, every flag checked against vLLM 0.33.0's and
0.26.0's own parsers (the bundled tables of orchestrator.backends.known_flags), spellings of
older releases, rejected values, the user's --compilation-config keys merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch import checked_argv

from orchestrator.backends import get_backend_class, known_flags
from orchestrator.backends.vllm import VllmBackend
from orchestrator.core import nccl
from orchestrator.core.errors import BadInput, ConfigRejected

VLLM = known_flags.bundled("vllm", "0.33.0")
VLLM_026 = known_flags.bundled("vllm", "0.26.0")


@pytest.fixture(autouse=True)
def no_installed_vllm(monkeypatch):
    """Tests never depend on (or run) an installed vLLM: detection answers None."""
    monkeypatch.setattr(VllmBackend, "detect_version", lambda self: None)
    monkeypatch.setattr(VllmBackend, "server_python", lambda self: None)


def backend(version: str | None = "0.33.0", **settings) -> VllmBackend:
    s = {"model": "/models/GLM-5-AWQ", **settings}
    if version:
        s["version"] = version
    return VllmBackend(s, job_file="jobs/x.yaml")


argv = checked_argv


def flags_in(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


SAMPLE_CONFIGS = [
    {"tp_size": 8, "graph_capture": False},
    {"tp_size": 8, "graph_capture": True},
    {"tp_size": 8, "pp_size": 1, "graph_capture": True, "capture_sizes": "1,2,4,8",
     "backend.cudagraph_mode": "FULL_DECODE_ONLY", "custom_all_reduce": False, "env.NCCL_PROTO": "LL"},
    {"tp_size": 4, "pp_size": 2, "graph_capture": True, "backend.cudagraph_mode": "piecewise",
     "backend.max_cudagraph_capture_size": 64, "backend.gpu_memory_utilization": 0.9, "backend.max_num_seqs": 16,
     "backend.enable_expert_parallel": True, "backend.enable_prefix_caching": False,
     "backend.trust_remote_code": False, "backend.max_model_len": 8192},
]


def test_registered_and_kind():
    assert get_backend_class("vllm") is VllmBackend and VllmBackend.kind == "vllm"


def test_baseline_of_the_motivating_case():
    b = backend()
    spec = b.launch_spec({"tp_size": 8, "graph_capture": False, "env.NCCL_PROTO": "ll"}, "0.0.0.0", 8123)
    assert spec.argv == ["vllm", "serve", "/models/GLM-5-AWQ", "--tensor-parallel-size", "8",
                         "--host", "0.0.0.0", "--port", "8123", "--enforce-eager"]
    assert spec.env == {"NCCL_PROTO": "LL"}  # NCCL's canonical spelling
    assert spec.health_path == "/health" and spec.ready_status == 200
    assert spec.base_url == "http://0.0.0.0:8123"
    assert spec.model_name == "/models/GLM-5-AWQ"


def test_graphs_mode_sizes_and_custom_all_reduce():
    words = argv(backend(served_model_name="glm5"), SAMPLE_CONFIGS[2])
    i = words.index("--compilation-config")
    assert json.loads(words[i + 1]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    j = words.index("--cudagraph-capture-sizes")
    assert words[j + 1:j + 5] == ["1", "2", "4", "8"]
    assert "--disable-custom-all-reduce" in words and "--enforce-eager" not in words
    assert words[words.index("--served-model-name") + 1] == "glm5"
    assert words[words.index("--pipeline-parallel-size") + 1] == "1"


def test_default_mode_is_full_and_piecewise():
    words = argv(backend(), {"tp_size": 2, "graph_capture": True})
    assert json.loads(words[words.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert "--compilation-config" not in argv(backend(), {"tp_size": 2})  # nothing tuned: vLLM's defaults


def test_backend_flags_and_switches():
    words = argv(backend(), SAMPLE_CONFIGS[3])
    assert words[words.index("--gpu-memory-utilization") + 1] == "0.9"
    assert words[words.index("--max-cudagraph-capture-size") + 1] == "64"
    assert "--enable-expert-parallel" in words
    assert "--disable-prefix-caching" in words  # False -> the release's negative spelling
    assert "--no-trust-remote-code" in words
    assert words[words.index("--max-model-len") + 1] == "8192"


@pytest.mark.parametrize("config", SAMPLE_CONFIGS)
def test_every_emitted_flag_exists_in_vllm_0_33(config):
    b = backend(extra_args=["--max-model-len", "8192", "--trust-remote-code"])
    for flag in flags_in(argv(b, config)):
        assert VLLM.knows(flag), f"{flag} is not a flag of vLLM {VLLM.version}"
        info = VLLM.flags.get(flag)
        assert info is None or not info.deprecated, f"{flag} is deprecated in vLLM {VLLM.version}"


def test_flag_table_is_vllm_0_33_parser():
    assert VLLM.version == "0.33.0" and len(VLLM.flags) > 300
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--enforce-eager", "--compilation-config",
                 "--cudagraph-capture-sizes", "--max-cudagraph-capture-size", "--disable-custom-all-reduce",
                 "--gpu-memory-utilization", "--max-num-seqs", "--host", "--port", "--served-model-name",
                 "--data-parallel-size", "--enable-expert-parallel"):
        assert flag in VLLM.flags, flag
    assert VLLM.flags["--cudagraph-capture-sizes"].kind == "list"
    assert VLLM.flags["--enforce-eager"].kind == "switch"
    assert VLLM.flags["--disable-custom-all-reduce"].negative == "--enable-custom-all-reduce"
    for gone in ("--max-seq-len-to-capture", "--cuda-graph-sizes"):
        assert not VLLM.knows(gone)


# ---- older releases ------------------------------------------------------------------------

def test_spellings_before_0_11_1():
    b = backend("0.10.2")
    words = argv(b, {"tp_size": 2, "graph_capture": True, "capture_sizes": "1,2,4",
                     "backend.max_seq_len_to_capture": 4096})
    cc = json.loads(words[words.index("--compilation-config") + 1])
    assert cc == {"cudagraph_capture_sizes": [1, 2, 4], "cudagraph_mode": "PIECEWISE"}  # 0.10.x default mode
    assert "--cudagraph-capture-sizes" not in words and "--max-cudagraph-capture-size" not in words
    assert words[words.index("--max-seq-len-to-capture") + 1] == "4096"
    words = argv(b, {"tp_size": 2, "backend.max_cudagraph_capture_size": 32})
    assert words[words.index("--cuda-graph-sizes") + 1] == "32"
    with pytest.raises(ConfigRejected, match="conflicts with explicit capture_sizes"):
        b.check_config({"capture_sizes": "1,2,4", "backend.max_cudagraph_capture_size": 4})


def test_spellings_from_0_11_1():
    words = argv(backend("0.11.1"), {"tp_size": 2, "capture_sizes": "1,2,4", "backend.max_cudagraph_capture_size": 4})
    assert words[words.index("--cudagraph-capture-sizes") + 1:][:3] == ["1", "2", "4"]
    assert "--max-cudagraph-capture-size" in words and "--cuda-graph-sizes" not in words


@pytest.mark.parametrize("version,name,value,needle", [
    ("0.11.0", "backend.max_seq_len_to_capture", 8192, "removed in vLLM 0.11.0"),
    ("0.33.0", "backend.max_seq_len_to_capture", 8192, "removed in vLLM 0.11.0"),
    ("0.13.0", "backend.cuda_graph_sizes", 64, "deprecated from vLLM 0.11.1"),
    ("0.33.0", "backend.cudagraph_capture_sizes", "1,2", "capture_sizes"),
    ("0.8.5", "backend.max_cudagraph_capture_size", 64, "before vLLM 0.9.0"),
])
def test_removed_spellings_are_refused(version, name, value, needle):
    with pytest.raises(ConfigRejected, match=needle) as exc:
        backend(version).check_config({"tp_size": 2, name: value})
    assert exc.value.key == name


def test_cudagraph_mode_before_0_10_1():
    b = backend("0.9.2")
    words = argv(b, {"tp_size": 2, "graph_capture": True, "backend.cudagraph_mode": "FULL"})
    assert json.loads(words[words.index("--compilation-config") + 1]) == {"full_cuda_graph": True}
    assert "--compilation-config" not in argv(b, {"tp_size": 2, "backend.cudagraph_mode": "PIECEWISE"})
    with pytest.raises(ConfigRejected, match="only PIECEWISE and FULL"):
        b.check_config({"tp_size": 2, "backend.cudagraph_mode": "FULL_AND_PIECEWISE"})


def test_installed_version_chooses_spelling(monkeypatch):
    monkeypatch.setattr(VllmBackend, "detect_version", lambda self: "0.10.1.1")
    b = backend(version=None)
    assert b.version() == "0.10.1.1"
    words = argv(b, {"tp_size": 2, "backend.max_cudagraph_capture_size": 16})
    assert "--cuda-graph-sizes" in words
    assert backend("0.33.0").version() == "0.33.0"  # the job's version: wins over the installed one


def test_unknown_version_assumes_current_release():
    b = backend(version=None)
    assert b.version() is None
    assert "--max-cudagraph-capture-size" in argv(b, {"tp_size": 2, "backend.max_cudagraph_capture_size": 8})
    with pytest.raises(ConfigRejected, match=r"not a flag of vLLM 0\.33\.0 \(assumed\)"):
        b.check_config({"backend.max_num_seq": 8})


def test_lenient_for_releases_without_a_table():
    b = backend("0.20.0")  # no full flag table for it: only the spelling rules apply
    assert "--some-flag-of-0-20" in argv(b, {"tp_size": 1, "backend.some_flag_of_0_20": 1})


# ---- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("config,key,needle", [
    ({"backend.cudagraph_mode": "FULLEST"}, "backend.cudagraph_mode", "NONE, PIECEWISE, FULL"),
    ({"capture_sizes": "1,two"}, "capture_sizes", "batch sizes"),
    ({"capture_sizes": "0,1"}, "capture_sizes", "positive"),
    ({"tp_size": 0}, "tp_size", "positive integer"),
    ({"pp_size": "x"}, "pp_size", "positive integer"),
    ({"graph_capture": "yes"}, "graph_capture", "true or false"),
    ({"backend.max_num_seq": 8}, "backend.max_num_seq", "did you mean '--max-num-seqs'"),
    ({"backend.tensor_parallel_size": 8}, "backend.tensor_parallel_size", "set by the tuner from tp_size"),
    ({"backend.enforce_eager": True}, "backend.enforce_eager", "graph_capture"),
    ({"backend.disable_cascade_attn": True}, "backend.disable_cascade_attn", "deprecated in vLLM 0.33.0"),
    ({"backend.enable_prefix_caching": 3}, "backend.enable_prefix_caching", "is a switch"),
    ({"backend.max_num_seqs": True}, "backend.max_num_seqs", "takes a value"),
    ({"env.NCCL_PROTO": "LL129"}, "env.NCCL_PROTO", "LL129"),
    ({"capture_sizes": "1,2,8", "backend.max_cudagraph_capture_size": 4}, "backend.max_cudagraph_capture_size",
     "largest is 8"),
])
def test_rejected_configs(config, key, needle):
    with pytest.raises(ConfigRejected, match=needle) as exc:
        backend().check_config({"tp_size": 2, **config})
    assert exc.value.key == key
    assert "jobs/x.yaml" in str(exc.value)


def test_graph_settings_ignored_without_graphs():
    b = backend()
    b.check_config({"tp_size": 2, "graph_capture": False, "backend.cudagraph_mode": "BOGUS"})  # inactive


@pytest.mark.parametrize("settings,key,needle", [
    ({"model": None}, "model", "required"),
    ({"modle": "x"}, "modle", "did you mean 'model'"),
    ({"extra_args": "--max-model-len 8192"}, "extra_args", "list of strings"),
    ({"extra_args": ["--max-model-lenn", "8192"]}, "extra_args", "did you mean '--max-model-len'"),
    ({"extra_args": ["--port=9000"]}, "extra_args", "set by the tuner"),
    ({"extra_args": ["--tensor-parallel-size", "2"]}, "extra_args", "tp_size"),
    ({"extra_args": ["--log-config-file", "x"]}, "extra_args", "deprecated"),
    ({"extra_args": ["-tp", "4"]}, "extra_args", "tp_size"),
    ({"extra_args": ["--compilation-config.cudagraph_mode=FULL"]}, "extra_args", "backend.cudagraph_mode"),
    ({"version": "latest"}, "version", "release like"),
    ({"model_facts": {"layer": 78}}, "model_facts.layer", "did you mean 'layers'"),
])
def test_bad_settings(settings, key, needle):
    with pytest.raises(BadInput, match=needle) as exc:
        VllmBackend({"model": "m", "version": "0.33.0", **settings}, job_file="j.yaml")
    assert exc.value.key == f"backend.settings.{key}"


def test_extra_args_pass_through_after_tuned_flags():
    b = backend(extra_args=["--max-model-len=8192", "--kv-cache-dtype", "fp8"])
    words = argv(b, {"tp_size": 2})
    assert words[-3:] == ["--max-model-len=8192", "--kv-cache-dtype", "fp8"]


def test_python_and_executable_settings():
    assert argv(backend(python="/venv/bin/python"), {})[:5] == [
        "/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/GLM-5-AWQ"]
    assert argv(backend(executable="/opt/vllm/bin/vllm"), {})[:2] == ["/opt/vllm/bin/vllm", "serve"]


# ---- identity, GPUs, facts ---------------------------------------------------------------------

def test_normalize():
    b = backend()
    assert b.normalize(b.default_config()) == b.normalize({}) == b.normalize(
        {"tp_size": 1, "backend.cudagraph_mode": "full_and_piecewise", "env.NCCL_PROTO": "LL"})
    eager = b.normalize({"tp_size": 8, "graph_capture": False, "capture_sizes": "1,2",
                         "backend.cudagraph_mode": "FULL"})
    assert "capture_sizes" not in eager and "backend.cudagraph_mode" not in eager
    a = b.normalize({"tp_size": 8, "capture_sizes": "8,4,2,1", "env.NCCL_PROTO": "simple,ll"})
    c = b.normalize({"tp_size": 8, "capture_sizes": "1,2,4,8", "env.NCCL_PROTO": "LL,Simple",
                     "custom_all_reduce": True})
    assert a == c
    assert "custom_all_reduce" not in b.normalize({"tp_size": 1, "custom_all_reduce": False})


def test_default_config_is_vllms_own():
    b = backend()
    assert b.default_config() == {"tp_size": 1, "graph_capture": True, "custom_all_reduce": True}
    b.check_config(b.default_config())


def test_gpus_per_trial():
    b = backend()
    assert b.gpus_per_trial({"tp_size": 4, "pp_size": 2}) == 8
    assert b.gpus_per_trial({"tp_size": 2, "backend.data_parallel_size": 2}) == 4


def test_model_facts(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 8, "hidden_size": 6144,
         "torch_dtype": "bfloat16"}))
    b = VllmBackend({"model": str(tmp_path), "version": "0.33.0", "model_facts": {"allreduces_per_step": 157}})
    assert b.model_facts() == {"layers": 78, "heads": 64, "kv_heads": 8, "hidden_size": 6144, "dtype_bytes": 2,
                               "allreduces_per_step": 157}
    assert backend().model_facts() == {}  # a GGUF file path says nothing


def test_glm5_job_commands_use_only_current_vllm_flags():
    """Acceptance: every config of jobs/glm5-vllm-8xpcie.yaml (baseline included) launches
    with flags that exist, undeprecated, in vLLM 0.33.0."""
    from pathlib import Path

    from orchestrator.config.job import load_job

    job = load_job(str(Path(__file__).resolve().parents[2] / "jobs" / "glm5-vllm-8xpcie.yaml"))
    b = job.backend_obj()
    assert job.baseline["tp_size"] == 8 and job.baseline["graph_capture"] is False
    baseline_argv = b.launch_spec(job.baseline, "127.0.0.1", 8000).argv
    assert "--enforce-eager" in baseline_argv
    assert baseline_argv[baseline_argv.index("--tensor-parallel-size") + 1] == "8"
    configs = job.space.enumerate()
    assert configs and len(configs) > 100
    seen = set()
    for config in [job.baseline, *(job.space.active({**job.baseline, **c}) for c in configs)]:
        b.check_config(config)
        for flag in flags_in(b.launch_spec(config, "127.0.0.1", 8000).argv):
            seen.add(flag)
    for flag in seen:
        assert VLLM.knows(flag) and not (VLLM.flags.get(flag) and VLLM.flags[flag].deprecated), flag
    assert {"--enforce-eager", "--compilation-config", "--cudagraph-capture-sizes", "--tensor-parallel-size",
            "--pipeline-parallel-size", "--disable-custom-all-reduce"} <= seen


# ---- vLLM 0.26.0 (the release the GPU machines run) -----------------------------------------

def test_flag_table_is_vllm_0_26_parser():
    assert VLLM_026.version == "0.26.0" and len(VLLM_026.flags) > 250
    for flag in ("--tensor-parallel-size", "--enforce-eager", "--compilation-config", "--cudagraph-capture-sizes",
                 "--max-cudagraph-capture-size", "--disable-custom-all-reduce", "--max-num-seqs",
                 "--gpu-memory-utilization", "--data-parallel-size"):
        assert flag in VLLM_026.flags, flag
    assert VLLM_026.flags["--cudagraph-capture-sizes"].kind == "list"
    assert VLLM_026.flags["--disable-custom-all-reduce"].negative == "--no-disable-custom-all-reduce"
    assert not VLLM_026.knows("--cuda-graph-sizes") and not VLLM_026.knows("--max-seq-len-to-capture")


@pytest.mark.parametrize("config", SAMPLE_CONFIGS)
def test_every_emitted_flag_exists_in_vllm_0_26(config):
    b = backend("0.26.0", extra_args=["--max-model-len", "8192"], compilation_config={
        "pass_config": {"fuse_allreduce_rms": False}})
    assert b.flags().table is VLLM_026
    words = argv(b, config)
    for flag in flags_in(words):
        assert VLLM_026.knows(flag), f"{flag} is not a flag of vLLM 0.26.0"
        assert not (VLLM_026.flags.get(flag) and VLLM_026.flags[flag].deprecated), flag
    assert words.count("--compilation-config") == 1


def test_0_26_spellings_and_refusals():
    b = backend("0.26.0")
    words = argv(b, {"tp_size": 2, "capture_sizes": "1,2,4", "backend.max_cudagraph_capture_size": 4,
                     "backend.enable_prefix_caching": False})
    assert json.loads(words[words.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert words[words.index("--cudagraph-capture-sizes") + 1:][:3] == ["1", "2", "4"]
    assert "--no-enable-prefix-caching" in words  # 0.26.0's negative (0.33.0 says --disable-prefix-caching)
    with pytest.raises(ConfigRejected, match=r"--max-num-seq is not a flag of vLLM 0\.26\.0"):
        b.check_config({"backend.max_num_seq": 8})
    b.check_config({"backend.disable_cascade_attn": True})  # deprecated only later (0.33.0)


# ---- the user's own --compilation-config keys, merged -------------------------------------------

WORKAROUND = {"pass_config": {"fuse_allreduce_rms": False}}


@pytest.mark.parametrize("settings", [
    {"compilation_config": WORKAROUND},
    {"extra_args": ["--compilation-config", json.dumps(WORKAROUND)]},
    {"extra_args": [f"--compilation-config={json.dumps(WORKAROUND)}"]},
    {"extra_args": ["-cc", json.dumps(WORKAROUND)]},
    {"extra_args": ["--compilation-config.pass_config.fuse_allreduce_rms=false"]},
    {"extra_args": ["-cc.pass_config.fuse_allreduce_rms", "false"]},
])
def test_compilation_config_keys_are_merged_with_the_graph_mode(settings):
    """The TP=2 graphs crash workaround: one --compilation-config holding both."""
    b = backend("0.26.0", extra_args=[*settings.get("extra_args", []), "--max-model-len", "4096"],
                **{k: v for k, v in settings.items() if k != "extra_args"})
    words = argv(b, {"tp_size": 2, "graph_capture": True, "backend.cudagraph_mode": "FULL_DECODE_ONLY",
                     "capture_sizes": "1,2"})
    assert words.count("--compilation-config") == 1 and "-cc" not in words
    merged = json.loads(words[words.index("--compilation-config") + 1])
    assert merged == {"cudagraph_mode": "FULL_DECODE_ONLY", "pass_config": {"fuse_allreduce_rms": False}}
    assert words[-2:] == ["--max-model-len", "4096"]  # the rest passes through, after the tuned flags
    eager = argv(b, {"tp_size": 2, "graph_capture": False})
    assert "--enforce-eager" in eager and json.loads(eager[eager.index("--compilation-config") + 1]) == WORKAROUND
    plain = argv(b, {"tp_size": 2})  # nothing tuned: vLLM's own mode, the user's keys still sent
    assert json.loads(plain[plain.index("--compilation-config") + 1]) == WORKAROUND


def test_compilation_config_from_both_places_merges_deeply():
    b = backend(compilation_config={"pass_config": {"fuse_allreduce_rms": False}},
                extra_args=["--compilation-config.pass_config.enable_fusion=false", "-cc", '{"mode": 3}'])
    words = argv(b, {"tp_size": 2, "graph_capture": True})
    assert json.loads(words[words.index("--compilation-config") + 1]) == {
        "cudagraph_mode": "FULL_AND_PIECEWISE", "mode": 3,
        "pass_config": {"fuse_allreduce_rms": False, "enable_fusion": False}}


@pytest.mark.parametrize("settings,key,needle", [
    ({"compilation_config": {"cudagraph_mode": "FULL"}}, "compilation_config",
     "'cudagraph_mode' is set by the tuner from graph_capture and backend.cudagraph_mode"),
    ({"extra_args": ["-cc", '{"cudagraph_capture_sizes": [1, 2]}']}, "extra_args",
     "'cudagraph_capture_sizes' is set by the tuner from capture_sizes"),
    ({"extra_args": ["--compilation-config.max_cudagraph_capture_size=8"]}, "extra_args",
     "backend.max_cudagraph_capture_size"),
    ({"compilation_config": {"pass_config": {"fuse_allreduce_rms": False}},
      "extra_args": ["--compilation-config.pass_config.fuse_allreduce_rms=true"]}, "extra_args",
     "'pass_config.fuse_allreduce_rms' is given twice"),
    ({"extra_args": ["--compilation-config", "3"]}, "extra_args", "takes a JSON object"),
    ({"extra_args": ["--compilation-config"]}, "extra_args", "needs a value"),
    ({"compilation_config": "fuse"}, "compilation_config", "must be a mapping"),
])
def test_compilation_config_conflicts_are_refused_with_one_line(settings, key, needle):
    with pytest.raises(BadInput, match=needle) as exc:
        VllmBackend({"model": "m", "version": "0.26.0", **settings}, job_file="j.yaml")
    assert exc.value.key == f"backend.settings.{key}" and "\n" not in str(exc.value)


# ---- GGUF: what the release can load ---------------------------------------------------------
GGUF = "/models/GLM-5-GGUF/GLM-5-Q4_K_M.gguf"


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0", None])
def test_a_gguf_model_is_refused_where_the_release_has_no_gguf_load_format(version):
    """vLLM 0.26.0 and 0.33.0 have no gguf load format (the bundled tables list theirs);
    without a version the newest bundled release is assumed, and says so."""
    with pytest.raises(BadInput) as exc:
        backend(version, model=GGUF)
    text = str(exc.value)
    release = f"vLLM {version}" if version else "vLLM 0.33.0 (assumed)"
    assert exc.value.key == "backend.settings.model" and "\n" not in text
    assert f"is a GGUF file, which {release} cannot load (its --load-format takes auto, hf," in text
    assert "no gguf); serve a GGUF with llama.cpp (backend kind: llamacpp)" in text
    assert "a Hugging Face checkpoint directory" in text and "a vLLM release whose --load-format accepts gguf" in text


def test_a_release_without_a_format_table_is_not_refused():
    b = backend("0.10.2", model=GGUF)  # no bundled table for 0.10.2: nothing known, nothing refused
    assert argv(b, {})[2] == GGUF


@pytest.mark.parametrize("given", [{"extra_args": ["--load-format", "gguf"]}, {"extra_args": ["--load-format=gguf"]},
                                   {"extra_args": ["--quantization", "gguf"]}])
def test_gguf_asked_for_in_extra_args_is_refused(given):
    with pytest.raises(BadInput, match=r"is not a value vLLM 0\.26\.0 accepts; allowed: (auto|awq), "):
        backend("0.26.0", **given)
    backend("0.26.0", extra_args=["--load-format", "safetensors", "--quantization", "fp8"])  # listed: fine


def test_a_load_format_param_outside_the_releases_formats_is_refused():
    b = backend("0.26.0")
    with pytest.raises(ConfigRejected, match=r"--load-format 'gguf' is not a value vLLM 0\.26\.0 accepts"):
        b.check_config({"backend.load_format": "gguf"})
    assert "--load-format" in argv(b, {"backend.load_format": "safetensors"})


def test_the_motivating_job_with_a_gguf_model_is_refused_at_validate(tmp_path, capsys):
    """jobs/glm5-vllm-8xpcie.yaml validates with its Hugging Face checkpoint; the same job
    with the .gguf file the motivating case ran is one line, exit 2."""
    import yaml

    from orchestrator.cli import main

    repo = known_flags.TABLES.parents[2]
    job_file = repo / "jobs" / "glm5-vllm-8xpcie.yaml"
    assert main(["validate", str(job_file)]) == 0
    data = yaml.safe_load(job_file.read_text())
    data["backend"]["settings"]["model"] = GGUF
    data.update(space=str(repo / "search_spaces" / "vllm-pcie.yaml"), output_dir=str(tmp_path))
    job = tmp_path / "glm5-gguf.yaml"
    job.write_text(yaml.safe_dump(data, sort_keys=False))
    capsys.readouterr()
    assert main(["validate", str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ncclsweep: error: {job}: backend.settings.model: '{GGUF}' is a "
                                                f"GGUF file, which vLLM 0.33.0 (assumed) cannot load"), err
    assert "backend kind: llamacpp" in err[0]
    assert not (tmp_path / "glm5-vllm-8xpcie").exists()  # validate writes nothing


# ---- the all-reduce path vLLM took, from its log ------------------------------------------------

VLLM_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"


def vllm_log(name: str) -> str:
    return (VLLM_LOGS / name).read_text()


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_custom_requested_on_four_pcie_gpus_warns_with_vllms_own_reason(version):
    """vLLM turns its custom all-reduce off on more than two PCIe-only GPUs and only logs it
    (custom_all_reduce.py); the lines are the release's own text (tests/fixtures/vllm/README.md)."""
    b = backend(version)
    config = b.normalize({"tp_size": 4, "allreduce.backend": "custom"})
    (warning,) = b.allreduce_warnings(config, vllm_log(f"vllm-{version}-4xpcie-tp4-custom-disabled.lines.log"))
    assert warning.startswith(nccl.ENGINE_PATH_WARNING) and not nccl.is_verification_warning(warning)
    assert f"allreduce.backend=custom was requested but vLLM {version} did not enable it" in warning
    assert "its all-reduce backends: PYNCCL" in warning
    assert "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs" in warning
    # NCCL alone is what ran: asking for it is confirmed by the same lines
    assert b.allreduce_warnings(b.normalize({"tp_size": 4, "allreduce.backend": "nccl"}),
                                vllm_log(f"vllm-{version}-4xpcie-tp4-custom-disabled.lines.log")) == []


@pytest.mark.parametrize("asked, param, shown", [
    ({"allreduce.backend": "custom"}, "allreduce.backend", "allreduce.backend=custom"),
    ({"custom_all_reduce": True}, "custom_all_reduce", "custom_all_reduce=true"),
    ({}, "custom_all_reduce", "custom_all_reduce=true")], ids=["allreduce.backend", "older-switch", "default"])
def test_a_custom_path_turned_off_is_recorded_as_the_fallback_vllm_ran(asked, param, shown):
    """Whatever asked for vLLM's custom all-reduce (the neutral param, the older switch, vLLM's own
    default that a normalized config carries), the path it turned off on four PCIe-only GPUs is
    recorded with what ran instead, the first backend its tensor-parallel group enabled (PYNCCL:
    nccl); asking for NCCL, or without the custom kernel, there is no fallback."""
    b = backend("0.33.0")
    text = vllm_log("vllm-0.33.0-4xpcie-tp4-custom-disabled.lines.log")
    (fell,) = b.engine_fallbacks(b.normalize({"tp_size": 4, **asked}), text)
    said = ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence "
            "this warning, specify disable_custom_all_reduce=True explicitly.")
    assert fell["param"] == param and fell["ran"] == "nccl" and fell["said"] == said
    assert fell["ran_value"] == ("nccl" if param == "allreduce.backend" else False)
    assert fell["text"] == f"{shown} (the engine ran nccl: {said})"
    for other in ({"allreduce.backend": "nccl"}, {"custom_all_reduce": False}):
        assert b.engine_fallbacks(b.normalize({"tp_size": 4, **other}), text) == []
    kept = text.replace("Custom allreduce is disabled", "Custom allreduce is on").replace("['PYNCCL']",
                                                                                          "['CUSTOM', 'PYNCCL']")
    assert b.engine_fallbacks(b.normalize({"tp_size": 4, **asked}), kept) == []  # it ran what was asked


def test_real_log_confirms_nccl_and_names_why_symmetric_memory_was_off():
    """A real vLLM 0.26.0 TP=2 log (2x H200, multicast kept off): PYNCCL alone, SYMM_MEM disabled."""
    text = vllm_log("vllm-0.26.0-2xh200-tp2-eager-p2poff-simple-nccl-info.log")
    b = backend("0.26.0")
    assert b.allreduce_warnings(b.normalize({"tp_size": 2, "allreduce.backend": "nccl"}), text) == []
    (warning,) = b.allreduce_warnings(b.normalize({"tp_size": 2, "allreduce.backend": "symm_mem"}), text)
    assert "did not enable it" in warning and "SymmMemCommunicator: symmetric memory multicast" in warning
    assert b.allreduce_warnings(b.normalize({"tp_size": 2}), text) == []  # nothing asked, nothing said


def test_fusion_seen_in_a_real_log():
    """vLLM 0.26.0 set up the all-reduce + RMSNorm fusion on 2x H200 (its default there): asked for,
    it is confirmed; with another path asked for, the fusion is said to have run all the same."""
    text = vllm_log("vllm-0.26.0-2xh200-tp2-graphs-p2poff-crash-illegal-address.log")
    b = backend("0.26.0")
    assert b.allreduce_warnings(b.normalize({"tp_size": 2, "allreduce.backend": "flashinfer_fusion"}), text) == []
    (warning,) = b.allreduce_warnings(b.normalize({"tp_size": 2, "allreduce.backend": "nccl"}), text)
    assert "fused the all-reduce with the RMSNorm all the same" in warning


def test_pcie_ipc_listed_but_never_set_up_without_graphs():
    b = backend("0.33.0")
    config = b.normalize({"tp_size": 2, "allreduce.backend": "flashinfer_pcie_ipc", "graph_capture": False})
    (warning,) = b.allreduce_warnings(config, vllm_log("vllm-0.33.0-2xpcie-tp2-pcie-ipc-eager.lines.log"))
    assert "never set it up" in warning and "without graphs" in warning
    ready = vllm_log("vllm-0.33.0-2xpcie-tp2-pcie-ipc-eager.lines.log") + (
        "(Worker_TP0 pid=5000) INFO 12-03 10:00:09 [flashinfer_pcie_ipc_all_reduce.py:149] Initialized FlashInfer "
        "PCIe IPC all-reduce for TP2, hidden_dim=2048, dtype=torch.bfloat16, max_tokens=8.\n")
    assert b.allreduce_warnings(config, ready) == []


def test_where_a_config_changes_regime_for_the_capacity_search():
    """Issue 47: the largest captured batch (the capture sizes, else --max-cudagraph-capture-size) and
    max-num-seqs, as a param or in extra_args; no graph mark without graphs."""
    from orchestrator.core.measurement import BATCH, GRAPHS, RegimeMark

    b = backend(extra_args=["--max-num-seqs", "256"])
    assert b.load_marks(b.normalize({"graph_capture": True, "capture_sizes": "1,2,4,8,16,32,64"})) == [
        RegimeMark(64, GRAPHS, "capture_sizes"), RegimeMark(256, BATCH, "--max-num-seqs 256")]
    assert b.load_marks(b.normalize({"graph_capture": False, "capture_sizes": "1,2,4"})) == [
        RegimeMark(256, BATCH, "--max-num-seqs 256")]
    tuned = backend().load_marks({"graph_capture": True, "backend.max_cudagraph_capture_size": 128,
                                  "backend.max_num_seqs": 96})
    assert [(m.streams, m.kind) for m in tuned] == [(128, GRAPHS), (96, BATCH)]
    assert backend(extra_args=["--max-num-seqs=32"]).load_marks({"graph_capture": True}) == [
        RegimeMark(32, BATCH, "--max-num-seqs 32")]
    assert backend().load_marks({"graph_capture": True}) == []  # vLLM's own defaults: its log says them
