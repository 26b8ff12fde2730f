"""Bad input to ``python -m orchestrator.refserver``: exit 2, one line naming the flag."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from refserver_helpers import free_port, wait_group_gone

pytestmark = pytest.mark.timeout(60)


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
