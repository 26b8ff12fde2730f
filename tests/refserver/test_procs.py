"""Each ``--fault`` behaves as named; SIGTERM and parent death leave no process behind."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from refserver_helpers import TINY, RefServer, get, greedy, group_members, post, wait_group_gone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

BASE = [*TINY, "--max-batch", "4", "--threads", "1"]


@pytest.fixture
def launch(tmp_path):
    """Start servers for one test; every one is stopped (group TERM, KILL, reap) after it."""
    started: list[RefServer] = []

    def _launch(args, name="server", env=None):
        server = RefServer([*BASE, *args], tmp_path, name, env=env).start()
        started.append(server)
        return server

    try:
        yield _launch
    finally:
        for server in started:
            server.stop()


def rank_pids(server: RefServer) -> list[int]:
    return [p for p in group_members(server.pgid) if p != server.proc.pid]


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def wait_log(server: RefServer, needle: str, timeout_s: float = 45) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in server.log():
        assert server.proc.poll() is None, server.log()
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)


def test_slow_start_then_sigterm_ends_every_rank(launch):
    s = launch(["--tp", "2", "--fault", "slow-start:2"], env={"NCCL_PROTO": "Simple"})
    seen = []
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        assert s.proc.poll() is None, s.log()
        status = s.health()
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == 200:
            break
        time.sleep(0.05)
    assert seen[-1] == 200 and 503 in seen, seen
    assert "fault slow-start" in s.log()
    # the ranks are in the launched process group and got the environment unchanged
    (rank1,) = rank_pids(s)
    env = Path(f"/proc/{rank1}/environ").read_bytes().split(b"\0")
    assert b"NCCL_PROTO=Simple" in env
    assert greedy(s.port, "hi", n=3)["usage"]["completion_tokens"] == 3
    os.kill(s.proc.pid, signal.SIGTERM)  # rank 0 only, not the group
    s.proc.wait(timeout=5)
    assert wait_group_gone(s.pgid, 5) == []  # every rank gone, though only rank 0 was signalled
    assert port_closed(s.port)


def test_garbage_changes_output_and_ranks_die_with_their_parent(launch):
    good = launch(["--tp", "1"], "good")
    bad = launch(["--tp", "2", "--fault", "garbage"], "garbage")
    good.wait_healthy()
    bad.wait_healthy()
    for prompt in ("The quick brown fox", "Tensor parallel"):
        a = greedy(good.port, prompt, n=16)["choices"][0]["text"]
        b = greedy(bad.port, prompt, n=16)["choices"][0]["text"]
        assert a != b
    ranks = rank_pids(bad)
    assert len(ranks) == 1
    os.kill(bad.proc.pid, signal.SIGKILL)  # rank 0 dies without any cleanup
    bad.proc.wait(timeout=5)
    assert wait_group_gone(bad.pgid, 5) == []


def test_garbage_at_tp1_also_changes_output(launch):
    good = launch(["--tp", "1"], "good")
    bad = launch(["--tp", "1", "--fault", "garbage"], "garbage")
    good.wait_healthy()
    bad.wait_healthy()
    a = greedy(good.port, "The quick brown fox", n=16)["choices"][0]["text"]
    assert greedy(bad.port, "The quick brown fox", n=16)["choices"][0]["text"] != a


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


def test_hang_on_start_stays_alive_and_unhealthy(launch):
    s = launch(["--tp", "1", "--fault", "hang-on-start"])
    wait_log(s, "fault hang-on-start")
    for _ in range(10):
        assert s.proc.poll() is None
        assert s.health() == 503
        time.sleep(0.1)
    status, body = post(s.port, {"prompt": "x", "max_tokens": 2})
    assert status == 503 and body["error"]["code"] == 503


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


def test_crash_after_n_requests(launch):
    s = launch(["--tp", "1", "--fault", "crash-after:2"])
    s.wait_healthy()
    assert get(s.port, "/v1/models")[0] == 200  # not a completion: does not count
    for _ in range(2):
        assert greedy(s.port, "x", n=2)["usage"]["completion_tokens"] == 2
    assert s.proc.wait(timeout=10) != 0
    assert "fault crash-after" in s.log()
    assert port_closed(s.port)
