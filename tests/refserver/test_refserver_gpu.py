"""The CUDA path of the reference server: NCCL, CUDA graphs, faults, SIGTERM (skipped without GPUs).

float32 is used where outputs are compared: TF32 is off for matmuls by default, so a
summation-order change (TP, graph padding) keeps every greedy token as on CPU. In bf16
greedy text across configurations may part after a dozen tokens (see docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from refserver_helpers import TINY, RefServer, get, greedy, post, wait_group_gone

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(240),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_PROTO": "Simple",
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}
PROMPTS = ["The quick brown fox", "Tensor parallel decode, step by step:", "a"]


def tp_max() -> int:
    return min(2, torch.cuda.device_count())


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("refserver-gpu")
    tp = str(tp_max())
    common = [*TINY, "--device", "cuda", "--dtype", "float32", "--max-batch", "16"]
    eager = RefServer([*common, "--tp", "1"], logs, "eager", env=NCCL_ENV)
    graph = RefServer([*common, "--tp", tp, "--graph-capture", "--capture-sizes", "1,2,4,8"],
                      logs, "graph", env=NCCL_ENV)
    garbage = RefServer([*common, "--tp", tp, "--graph-capture", "--fault", "garbage"],
                        logs, "garbage", env=NCCL_ENV)
    try:
        for s in (eager, graph, garbage):
            s.start()
        for s in (eager, graph, garbage):
            s.wait_healthy(180)
        yield eager, graph, garbage
    finally:
        for s in (eager, graph, garbage):
            s.stop()


def test_nccl_initialises_and_logs_the_environment(servers):
    _, graph, _ = servers
    log = graph.log()
    assert "NCCL version" in log
    assert "NCCL_PROTO set by environment to Simple" in log
    assert "captured" in log and "CUDA graphs" in log
    info = json.loads(get(graph.port, "/info")[1])
    assert info["graph_capture"] and info["nccl_env"]["NCCL_PROTO"] == "Simple"


def test_graph_replay_matches_eager_and_garbage_does_not(servers):
    eager, graph, garbage = servers
    for prompt in PROMPTS:
        want = greedy(eager.port, prompt, n=32)["choices"][0]["text"]
        assert greedy(graph.port, prompt, n=32)["choices"][0]["text"] == want, prompt
        assert greedy(garbage.port, prompt, n=32)["choices"][0]["text"] != want, prompt


def test_echo_logprobs_agree_between_eager_and_graph(servers):
    eager, graph, _ = servers
    req = {"prompt": "The reference text to score.", "max_tokens": 0, "echo": True,
           "logprobs": 1}
    a = post(eager.port, req)[1]["choices"][0]["logprobs"]["token_logprobs"][1:]
    b = post(graph.port, req)[1]["choices"][0]["logprobs"]["token_logprobs"][1:]
    assert a == pytest.approx(b, abs=1e-3)


@pytest.mark.parametrize("concurrency", [3, 12])  # padded to a captured size / above them
def test_concurrent_batches_through_graphs(servers, concurrency):
    eager, graph, _ = servers
    prompts = [f"request {i}" for i in range(concurrency)]
    out: dict[int, str] = {}

    def run(i):
        out[i] = greedy(graph.port, prompts[i], n=16)["choices"][0]["text"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(out) == list(range(concurrency))
    for i in (0, concurrency - 1):
        assert out[i] == greedy(eager.port, prompts[i], n=16)["choices"][0]["text"]


def test_sigterm_ends_every_rank(tmp_path):
    s = RefServer([*TINY, "--device", "cuda", "--tp", str(tp_max()), "--graph-capture"],
                  tmp_path, "term", env=NCCL_ENV).start()
    try:
        s.wait_healthy(180)
        assert greedy(s.port, "hi", n=4)["usage"]["completion_tokens"] == 4
        os.kill(s.proc.pid, signal.SIGTERM)
        s.proc.wait(timeout=10)
        assert wait_group_gone(s.pgid, 10) == []  # every rank gone, though only rank 0 was signalled
    finally:
        s.stop()
