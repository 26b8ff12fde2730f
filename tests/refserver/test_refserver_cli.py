"""The reference server's command line (``python -m orchestrator.refserver``): bad input exits
2 with one line naming the flag, before any rank is spawned; settings and their defaults;
each ``--fault`` the command line wires in behaves as named on a real server (crash or hang
on start, hang in decode, crash after N requests, garbage at TP=1)."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time

import pytest
from refserver_helpers import (
    FAULT_BASE,
    RefServer,
    free_port,
    get,
    greedy,
    port_closed,
    post,
    wait_group_gone,
)

from orchestrator.refserver.cli import BadFlag, Fault, parse_settings

pytestmark = pytest.mark.timeout(60)
FAULT, FAULT_TIMEOUT = pytest.mark.slow, pytest.mark.timeout(90)  # the --fault tests: real servers


@pytest.fixture
def launch(tmp_path):
    """Start servers for one test; every one is stopped (group TERM, KILL, reap) after it."""
    started: list[RefServer] = []

    def _launch(args, name="server", env=None):
        server = RefServer([*FAULT_BASE, *args], tmp_path, name, env=env).start()
        started.append(server)
        return server

    try:
        yield _launch
    finally:
        for server in started:
            server.stop()


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.refserver", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_group_gone(proc.pid, 5) == []  # nothing was left running
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("args, needles", [
    (["--model", "nope"], ["--model", "tiny, 1b, 8b"]),
    (["--model", "tiny", "--tp", "3"], ["--tp", "allowed: 1, 2, 4"]),
    (["--model", "tiny", "--tp", "0"], ["--tp", "allowed"]),
    (["--graph-capture"], ["--graph-capture", "--device cuda"]),
    (["--fault", "explode"], ["--fault", "crash-on-start", "garbage"]),
    (["--fault", "crash-after"], ["--fault", "crash-after:3"]),
    (["--heads", "7"], ["--heads"]),
    (["--device", "tpu"], ["--device", "cpu", "cuda"]),
    (["--dtype", "int8"], ["--dtype", "float32"]),
    (["--capture-sizes", "1,x"], ["--capture-sizes"]),
    (["--port", "70000"], ["--port", "1-65535"]),
])
def test_bad_flags_exit_2_with_one_line(args, needles):
    r = run(*args, "--port", str(free_port())) if "--port" not in args else run(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in lines[0]


def test_port_in_use_exits_2_before_spawning_ranks():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run("--model", "tiny", "--tp", "2", "--port", str(port))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "--port" in line and str(port) in line and "in use" in line


def test_cuda_unavailable_is_bad_input():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    r = run("--device", "cuda", "--port", str(free_port()))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "--device" in line and "cpu" in line


def test_fault_parse():
    assert Fault.parse("crash-after:3") == Fault("crash-after", 3)
    assert Fault.parse("slow-start") == Fault("slow-start", 8)
    assert Fault.parse("slow-start:1.5") == Fault("slow-start", 1.5)
    assert Fault.parse("hang-in-decode") == Fault("hang-in-decode", 4)
    assert Fault.parse("garbage") == Fault("garbage", None)
    for bad in ("crash-after", "crash-after:0", "garbage:2", "nope", "slow-start:x"):
        with pytest.raises(BadFlag, match="--fault"):
            Fault.parse(bad)


def test_settings_defaults_and_overrides():
    s = parse_settings(["--model", "tiny", "--tp", "2", "--layers", "2", "--port", "9000"])
    assert (s.tp, s.dims.layers, s.dims.hidden, s.dtype, s.device) == (2, 2, 256, "float32", "cpu")
    assert s.model_name == "tiny" and s.max_batch == 64
    s = parse_settings(["--served-model-name", "m", "--capture-sizes", "8,1,4,64",
                        "--max-batch", "16"])
    assert s.model_name == "m" and s.capture_sizes == (1, 4, 8)


def wait_log(server: RefServer, needle: str, timeout_s: float = 45) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in server.log():
        assert server.proc.poll() is None, server.log()
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)


@FAULT
@FAULT_TIMEOUT
def test_garbage_at_tp1_also_changes_output(launch):
    good = launch(["--tp", "1"], "good")
    bad = launch(["--tp", "1", "--fault", "garbage"], "garbage")
    good.wait_healthy()
    bad.wait_healthy()
    a = greedy(good.port, "The quick brown fox", n=16)["choices"][0]["text"]
    assert greedy(bad.port, "The quick brown fox", n=16)["choices"][0]["text"] != a


@FAULT
@FAULT_TIMEOUT
def test_crash_on_start_exits_nonzero_before_healthy(launch):
    s = launch(["--tp", "2", "--fault", "crash-on-start"])
    deadline = time.monotonic() + 45
    while s.proc.poll() is None:
        assert s.health() != 200
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert s.proc.returncode != 0
    assert "fault crash-on-start" in s.log()
    assert wait_group_gone(s.pgid, 5) == []


@FAULT
@FAULT_TIMEOUT
def test_hang_on_start_stays_alive_and_unhealthy(launch):
    s = launch(["--tp", "1", "--fault", "hang-on-start"])
    wait_log(s, "fault hang-on-start")
    for _ in range(10):
        assert s.proc.poll() is None
        assert s.health() == 503
        time.sleep(0.1)
    status, body = post(s.port, {"prompt": "x", "max_tokens": 2})
    assert status == 503 and body["error"]["code"] == 503


@FAULT
@FAULT_TIMEOUT
def test_hang_in_decode_stalls_the_stream(launch):
    s = launch(["--tp", "1", "--fault", "hang-in-decode:3"])
    s.wait_healthy()
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=3)
    conn.request("POST", "/v1/completions", json.dumps(
        {"prompt": "x", "max_tokens": 20, "stream": True, "ignore_eos": True,
         "temperature": 0}))
    resp = conn.getresponse()
    chunks = []
    with pytest.raises(TimeoutError):
        for line in resp:
            if line.startswith(b"data: "):
                chunks.append(line)
    conn.close()
    assert len(chunks) == 3 and b"[DONE]" not in b"".join(chunks)
    assert s.proc.poll() is None and s.health() == 200


@FAULT
@FAULT_TIMEOUT
def test_crash_after_n_requests(launch):
    s = launch(["--tp", "1", "--fault", "crash-after:2"])
    s.wait_healthy()
    assert get(s.port, "/v1/models")[0] == 200  # not a completion: does not count
    for _ in range(2):
        assert greedy(s.port, "x", n=2)["usage"]["completion_tokens"] == 2
    assert s.proc.wait(timeout=10) != 0
    assert "fault crash-after" in s.log()
    assert port_closed(s.port)
