"""A stalled start-up and a stalled stream end in the stall limit, not the whole timeout: the
log watch of a starting server (node/server.py, node/treewatch.py) and the benchmark's client
(node/client.py), with real processes and real HTTP."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.core.launch import LaunchSpec
from orchestrator.node import proctree, startup
from orchestrator.node.client import measure_concurrency, stream_completion
from orchestrator.node.server import ServerProcess, ServerStalled, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = pytest.mark.timeout(120)

FAKE = str(Path(__file__).resolve().parents[1] / "fake_openai_server.py")
START_TIMEOUT_S = 60.0  # far above every stall limit below: reaching it would be the bug

# prints one line, starts a child that sleeps too (a tree, like an engine's), then nothing: a deadlock
SILENT = textwrap.dedent("""\
    import subprocess, sys, time
    print("starting the engine", flush=True)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)
    """)
# a progress bar (carriage returns, no newline) for a while, then healthy
PROGRESS_THEN_READY = textwrap.dedent("""\
    import http.server, sys, time
    port = int(sys.argv[1])
    for i in range(20):  # 5 s of progress bar, no newline: longer than the stall limit of the test
        sys.stdout.write(f"\\rCapturing CUDA graphs: {i + 1}/20"); sys.stdout.flush(); time.sleep(0.25)
    print(flush=True)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)


def _server(tmp_path: Path, script: str) -> ServerProcess:
    port = free_port()
    spec = LaunchSpec(argv=[sys.executable, "-c", script, str(port)], port=port)
    return ServerProcess(spec, tmp_path / "server.log")


def test_a_silent_start_is_a_stall_and_its_tree_ends(tmp_path):
    proc = _server(tmp_path, SILENT)
    proc.start()
    try:
        with pytest.raises(ServerStalled, match="no log output for 2 s and not ready") as got:
            proc.wait_ready(START_TIMEOUT_S, poll_s=0.1, stall_s=2.0)
        assert got.value.stall_s == 2.0
        assert proc.alive()  # the tree was alive: a stall, not a crash
        assert proc.silent_s() >= 2.0
        assert proc.first_output_s is not None and proc.first_output_s < proc.silent_s()  # it did print its line
        assert startup.last_phase(proc.log_path.read_text()) == "start-up"
        members = proctree.tree(proc.pid, proctree.start_time(proc.pid))
        assert len(members) >= 2  # the server and its child
    finally:
        proc.stop(grace_s=1.0)
    assert not [m for m in members if proctree.alive(m.pid, m.start)]


def test_a_progress_bar_is_output_not_a_stall(tmp_path):
    """tqdm redraws a line with carriage returns: the log grows, so a start that captures
    graphs for longer than the stall limit without a newline is not stalled."""
    proc = _server(tmp_path, PROGRESS_THEN_READY)
    proc.start()
    try:
        proc.wait_ready(START_TIMEOUT_S, poll_s=0.1, stall_s=1.5)  # no ServerStalled: the bar is output
        out = proc.log_path.read_bytes().split(b"\n# ncclsweep:")[-1]
        bar = out[out.index(b"\rCapturing"):]
        assert bar.count(b"\r") == 20 and b"20/20" in bar and bar.count(b"\n") == 1  # redrawn, no newline until done
    finally:
        proc.stop(grace_s=1.0)


def test_without_a_stall_limit_silence_is_only_the_timeout(tmp_path):
    proc = _server(tmp_path, SILENT)
    proc.start()
    try:
        with pytest.raises(Exception) as got:
            proc.wait_ready(2.0, poll_s=0.1)
        assert type(got.value).__name__ == "ReadyTimeout"
    finally:
        proc.stop(grace_s=1.0)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    port = free_port()
    spec = LaunchSpec(argv=[sys.executable, FAKE, "--port", str(port), "--model", "fake", "--token-delay", "0.005"],
                      port=port, model_name="fake")
    sp = ServerProcess(spec, tmp_path_factory.mktemp("fake") / "fake.log")
    sp.start()
    try:
        sp.wait_ready(30, poll_s=0.05)
        yield spec.base_url
    finally:
        sp.stop(grace_s=1.0)


def test_a_stream_that_stops_is_stalled_before_its_deadline(url):
    deadline_s = 30.0
    r = stream_completion(url, "fake", "hang", 50, deadline_s, stall_s=0.5,
                          extra={"fake": {"hang_after": 3, "token_delay": 0.001}})
    assert not r.ok and r.stalled and not r.timed_out
    assert r.error.startswith("stalled: no data for 0.5s")
    assert len(r.token_times) == 3  # what came before the stop was read
    assert r.latency_s < deadline_s / 10  # ended by the stall limit, far before the deadline


def test_a_slow_but_steady_stream_is_not_stalled(url):
    r = stream_completion(url, "fake", "steady", 10, 30.0, stall_s=0.5, extra={"fake": {"token_delay": 0.1}})
    assert r.ok and r.n_tokens == 10


def test_concurrent_streams_that_stop_are_counted_as_stalls(url):
    deadline_s = 30.0
    got = measure_concurrency(url, "fake", "hang", 20, 3, n_requests=3, timeout_s=deadline_s, stall_s=0.5,
                              extra={"fake": {"hang_after": 2, "token_delay": 0.001}})
    assert got["failures"] == 3 and got["stalls"] == 3 and got["timeouts"] == 0
    assert got["wall_s"] < deadline_s / 10
    assert got["errors"][0].startswith("stalled")
