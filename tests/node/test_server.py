"""ServerProcess, ServerRegistry and cleanup, with real processes and a real HTTP server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tree_servers import fake_spec, gone, worker_pids

from conftest import TESTS, kill_pids
from orchestrator.core.launch import LaunchSpec
from orchestrator.core.records import ServerRecord
from orchestrator.node import proctree, startup
from orchestrator.node.server import (
    ReadyTimeout,
    ServerExited,
    ServerProcess,
    ServerRegistry,
    ServerStalled,
    cleanup_recorded,
    free_port,
    process_start_time,
)

pytestmark = pytest.mark.timeout(60)

FAKE = str(TESTS / "fake_openai_server.py")
REPO = str(Path(__file__).resolve().parents[2])


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (an unreaped zombie has already died)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_for(pred, timeout: float = 5.0, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def _kill_quietly(pid: int) -> None:
    for fn in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            fn()
        except OSError:
            pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


@pytest.fixture
def servers():
    """Every ServerProcess a test makes; all stopped (KILL fast) in finally."""
    made: list[ServerProcess] = []
    try:
        yield made
    finally:
        for sp in made:
            sp.stop(grace_s=0.2)


@pytest.fixture
def stray_pids():
    """Pids of processes a test starts outside ServerProcess; killed in finally."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        for pid in pids:
            _kill_quietly(pid)


def _shell(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    return str(path)


def _fake_spec(port: int, *args: str, env: dict | None = None) -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, FAKE, "--port", str(port), *args], env=env or {},
                      host="127.0.0.1", port=port, model_name="fake")


# --------------------------------------------------------------------------------------
def test_start_ready_record_and_idempotent_stop(tmp_path, servers):
    reg = ServerRegistry(tmp_path / "servers")
    port = free_port()
    sp = ServerProcess(_fake_spec(port, env={"NCCLSWEEP_TEST_VAR": "x1"}), tmp_path / "s.log", reg,
                       base_env={"PATH": os.environ["PATH"], "PYTHONPATH": REPO})
    servers.append(sp)
    rec = sp.start()
    # recorded before start() returned, with the identity cleanup relies on
    assert [r.pid for r in reg.records()] == [sp.pid]
    assert rec.pid == sp.pid and rec.pgid == sp.pid  # own process group
    assert os.getpgid(sp.pid) == sp.pid and os.getsid(sp.pid) == sp.pid  # own session
    assert rec.start_time == process_start_time(sp.pid)
    assert rec.port == port and rec.hostname == socket.gethostname() and rec.argv[-1] == str(port)
    assert rec.node_id
    environ = Path(f"/proc/{sp.pid}/environ").read_bytes().split(b"\0")
    assert b"NCCLSWEEP_TEST_VAR=x1" in environ  # spec.env on top of base_env
    assert not any(e.startswith(b"HOME=") for e in environ)  # base_env replaced os.environ

    waited = sp.wait_ready(20)
    assert 0 <= waited < 20 and sp.alive() and _accepts(port)
    assert "listening on" in sp.log_tail()

    grace = 5
    spent = sp.stop(grace_s=grace)
    assert spent < grace  # a well-behaved server exits on TERM, before the grace runs out
    assert not sp.alive() and not _alive(rec.pid)
    assert sp.proc.returncode == -signal.SIGTERM
    assert reg.records() == []
    assert sp.stop() == 0.0  # idempotent


def test_context_manager_starts_and_stops(tmp_path):
    spec = LaunchSpec(argv=["sleep", "1000"], port=1)
    with ServerProcess(spec, tmp_path / "s.log") as sp:
        pid = sp.pid
        assert sp.alive()
    assert not _alive(pid) and not sp.alive()


def test_stop_kills_group_including_grandchild_that_ignores_term(tmp_path, servers):
    pidfile = tmp_path / "grandchild.pid"
    grandchild = _shell(tmp_path, "gc.sh", f"""\
        trap '' TERM
        echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}
        exec sleep 1000
        """)
    child = _shell(tmp_path, "child.sh", f"sh {grandchild} & wait\n")
    leader = _shell(tmp_path, "leader.sh", f"sh {child} & wait\n")
    sp = ServerProcess(LaunchSpec(argv=["sh", leader], port=1), tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    assert _wait_for(pidfile.exists)
    gpid = int(pidfile.read_text())
    assert os.getpgid(gpid) == sp.pid  # the grandchild is in the server's group
    grace, grandchild_sleep = 0.5, 1000
    spent = sp.stop(grace_s=grace)
    assert not _alive(gpid), "grandchild survived stop()"
    assert not sp.alive()
    assert grace <= spent < grandchild_sleep / 10  # waited out the grace for the grandchild, then KILL


def test_stop_kills_leader_that_ignores_term_after_grace(tmp_path, servers):
    ready = tmp_path / "ready"
    script = _shell(tmp_path, "stubborn.sh", f"""\
        trap '' TERM
        touch {ready}
        exec sleep 1000
        """)
    sp = ServerProcess(LaunchSpec(argv=["sh", script], port=1), tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    assert _wait_for(ready.exists)
    grace, sleep_s = 0.4, 1000
    spent = sp.stop(grace_s=grace)
    assert sp.proc.returncode == -signal.SIGKILL
    assert grace <= spent < sleep_s / 10  # killed after the grace, not after the server's own sleep
    assert not _alive(sp.pid)


def test_wait_ready_raises_server_exited_at_once(tmp_path, servers):
    spec = LaunchSpec(argv=["sh", "-c", "echo 'boom: no GPU found' >&2; exit 3"], port=free_port())
    sp = ServerProcess(spec, tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    timeout = 60
    t0 = time.monotonic()
    with pytest.raises(ServerExited) as info:
        sp.wait_ready(timeout_s=timeout)
    assert time.monotonic() - t0 < timeout / 10  # at the exit, not at the timeout
    assert info.value.returncode == 3
    assert "boom: no GPU found" in info.value.log_tail
    assert "exit code 3" in str(info.value) and "boom" in str(info.value)
    assert sp.stop() < 1.0


def test_wait_ready_fake_server_crash_on_start(tmp_path, servers):
    sp = ServerProcess(_fake_spec(free_port(), "--crash-on-start", "7"), tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    timeout = 60
    t0 = time.monotonic()
    with pytest.raises(ServerExited) as info:
        sp.wait_ready(timeout_s=timeout)
    assert time.monotonic() - t0 < timeout / 4  # at the crash (python start-up included), not at the timeout
    assert info.value.returncode == 7 and "crashing on start" in info.value.log_tail


def test_wait_ready_timeout_while_health_is_503(tmp_path, servers):
    port = free_port()
    timeout, ready_after = 1.5, 600
    sp = ServerProcess(_fake_spec(port, "--ready-after", str(ready_after)), tmp_path / "s.log")
    servers.append(sp)
    sp.start()
    t0 = time.monotonic()
    with pytest.raises(ReadyTimeout) as info:
        sp.wait_ready(timeout_s=timeout, poll_s=0.1)
    assert timeout <= time.monotonic() - t0 < ready_after  # the timeout ended it, not the server
    assert sp.alive()  # a timeout does not stop the server: the caller does
    assert "not ready after 1.5 s" in str(info.value)


@pytest.mark.parametrize("status", [502, 503, 504])
def test_an_api_not_serving_yet_behind_a_healthy_health_check_is_waited_for(tmp_path, servers, status):
    """Health says 200 while completions answer 503 (an engine warming up) or, through a proxy
    in front of an engine that is not up yet, 502 or 504: the server is not ready yet. It is
    waited for within the budget, and one that outlasts it is a timeout that says so."""
    import http.client
    import json

    warming = ServerProcess(_fake_spec(free_port(), "--warming", "1.5", "--warming-status", str(status)),
                            tmp_path / "warming.log")
    stuck = ServerProcess(_fake_spec(free_port(), "--warming", "600", "--warming-status", str(status)),
                          tmp_path / "stuck.log")
    servers.extend([warming, stuck])
    for sp in (warming, stuck):
        sp.start()
        sp.wait_ready(timeout_s=30, poll_s=0.1)
    warming.wait_serving(30, poll_s=0.1)
    conn = http.client.HTTPConnection("127.0.0.1", warming.spec.port, timeout=10)
    conn.request("POST", "/v1/completions", json.dumps({"model": "fake", "prompt": "Hi", "max_tokens": 1}),
                 {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200  # it serves now
    conn.close()
    with pytest.raises(ReadyTimeout) as info:
        stuck.wait_serving(0.5, poll_s=0.1)
    assert info.value.warming and f"still answered HTTP {status}" in info.value.why, info.value.why


def test_parent_death_signal_kills_server_with_its_parent(tmp_path, stray_pids):
    code = textwrap.dedent(f"""\
        import sys, time
        sys.path.insert(0, {REPO!r})
        from orchestrator.core.launch import LaunchSpec
        from orchestrator.node.server import ServerProcess
        sp = ServerProcess(LaunchSpec(argv=["sleep", "1000"], port=1), {str(tmp_path / 's.log')!r})
        sp.start()
        print(sp.pid, flush=True)
        time.sleep(1000)
        """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    stray_pids.append(parent.pid)
    server_pid = int(parent.stdout.readline())
    stray_pids.append(server_pid)
    assert _alive(server_pid)
    parent.kill()
    parent.wait(5)
    assert _wait_for(lambda: not _alive(server_pid), timeout=5), "server outlived its parent"


# --------------------------------------------------------------------------------------
def test_registry_roundtrip_atomic_and_tolerant(tmp_path):
    reg = ServerRegistry(tmp_path / "r")
    a = ServerRecord("n1", "hostA", 100, 100, 12345.0, 8000, ["x", "--y"])
    b = ServerRecord("n1", "hostA", 101, 101, 12346.0, 8001, [])
    reg.add(a)
    reg.add(b)
    reg.add(a)  # re-adding replaces
    (tmp_path / "r" / "junk.json").write_text("{not json")
    assert sorted(reg.records(), key=lambda r: r.pid) == [a, b]
    assert not [p for p in (tmp_path / "r").iterdir() if p.name.startswith(".tmp-")]
    reg.remove(a)
    reg.remove(a)  # removing twice is fine
    assert reg.records() == [b]


def _orphan(argv: list[str]) -> int:
    """Start argv in its own session from a process that then exits: a true orphan."""
    code = ("import subprocess, sys; p = subprocess.Popen(sys.argv[1:], start_new_session=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)")
    return int(subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                              check=True, timeout=30).stdout)


def _record(pid: int, start_time: float | None = None, host: str | None = None) -> ServerRecord:
    st = process_start_time(pid) if start_time is None else start_time
    return ServerRecord(node_id="test", hostname=host or socket.gethostname(), pid=pid, pgid=pid,
                        start_time=st, port=0, argv=[])


def test_cleanup_kills_matching_orphan_and_spares_reused_pids(tmp_path, stray_pids):
    reg = ServerRegistry(tmp_path / "r")
    # An orphaned server whose whole group ignores TERM (needs the KILL step).
    orphan = _orphan(["sh", "-c", "trap '' TERM; sleep 1000 & sleep 1000 & wait"])
    stray_pids.append(orphan)
    assert _wait_for(lambda: len([p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == orphan]) == 3)
    members = [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == orphan]
    # A process whose pid is in a record with a different start time: a "reused" pid.
    decoy = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    stray_pids.append(decoy.pid)
    # A record of another host (even with a matching local pid): not ours to touch.
    other = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    stray_pids.append(other.pid)
    reg.add(_record(orphan))
    reg.add(_record(decoy.pid, start_time=process_start_time(decoy.pid) + 1))
    reg.add(_record(other.pid, host="elsewhere.invalid"))
    reg.add(_record(2**22 + 12345, start_time=1.0))  # pid that does not exist: stale

    killed = cleanup_recorded(reg, grace_s=0.3)

    assert [r.pid for r in killed] == [orphan]
    assert not any(_alive(m) for m in members), "orphan group survived cleanup"
    assert _alive(decoy.pid), "cleanup killed a process whose start time did not match"
    assert _alive(other.pid), "cleanup touched another host's record"
    assert [r.hostname for r in reg.records()] == ["elsewhere.invalid"]  # stale ones dropped
    for p in (decoy, other):
        p.kill()
        p.wait(5)


def test_cleanup_ends_members_left_by_a_killed_leader(tmp_path, stray_pids):
    reg = ServerRegistry(tmp_path / "r")
    leader = _orphan(["sh", "-c", "sleep 1000 & sleep 1000 & wait"])
    stray_pids.append(leader)
    assert _wait_for(lambda: len([p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == leader]) == 3)
    members = [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == leader and int(p) != leader]
    reg.add(_record(leader))
    os.kill(leader, signal.SIGKILL)  # the leader dies, its workers (group members) stay
    assert _wait_for(lambda: not _alive(leader))
    assert all(_alive(m) for m in members)
    killed = cleanup_recorded(reg, grace_s=0.5)
    assert [r.pid for r in killed] == [leader]
    assert not any(_alive(m) for m in members)
    assert reg.records() == []


def _pgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[2]) if fields[0] not in ("Z", "X") else None
    except (OSError, IndexError, ValueError):
        return None


# --------------------------------------------------------------------------------------
def _accepts(port: int) -> bool:
    """Something accepts TCP connections on 127.0.0.1:port."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_ports_and_start_times():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free: it binds
    mine = process_start_time(os.getpid())
    assert isinstance(mine, float) and mine > 0
    assert process_start_time(2**22 + 12345) is None


@pytest.mark.timeout(90)  # a tree of three processes to start, kill and clean up
def test_cleanup_ends_recorded_descendants_that_left_the_group(tmp_path):
    """The registry keeps the tree the supervisor saw: cleanup needs nothing else."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    reg = ServerRegistry(tmp_path / "reg")
    sp = ServerProcess(fake_spec(free_port(), "--workers", "2", "--pid-dir", str(pid_dir), "--workers-setsid"),
                       tmp_path / "s.log", reg, supervise=True)
    sp.start()
    workers = worker_pids(pid_dir, 2)
    try:
        deadline = time.monotonic() + 10
        while len(reg.tree(sp.record)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {m.pid for m in reg.tree(sp.record)} >= {sp.pid, *workers}
        # a driver that died: nobody calls stop(); its supervisor is gone too
        sp.watch.end()
        os.kill(sp.supervisor_pid, signal.SIGKILL)
        os.kill(sp.pid, signal.SIGKILL)
        sp.proc.wait(5)
        assert all(proctree.alive(w) for w in workers)  # in sessions of their own: not in the group
        killed = cleanup_recorded(reg, grace_s=0.5)
        assert [r.pid for r in killed] == [sp.pid]
        assert gone(workers, 5) and reg.records() == []
    finally:
        kill_pids(workers)
        sp._owner_fd = None


@pytest.mark.timeout(90)  # a tree of three processes to start, kill and clean up
def test_cleanup_command_needs_only_the_study(tmp_path):
    """`ncclsweep cleanup JOB` with the job's space file gone and an unknown backend kind:
    the recorded tree (a worker in a session of its own included) is ended."""
    from conftest import write_job

    job_path = write_job(tmp_path, study="orphans")
    (tmp_path / "space.yaml").unlink()
    job_path.write_text(job_path.read_text().replace("kind: refserver", "kind: gone-backend"))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    reg = ServerRegistry(tmp_path / "reports" / "orphans" / "servers")
    sp = ServerProcess(fake_spec(free_port(), "--workers", "1", "--pid-dir", str(pid_dir), "--workers-setsid"),
                       tmp_path / "s.log", reg)
    sp.start()
    (worker,) = worker_pids(pid_dir, 1)
    try:
        deadline = time.monotonic() + 10
        while len(reg.tree(sp.record)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        sp.watch.end()
        os.kill(sp.supervisor_pid, signal.SIGKILL)  # as after a kill -9 of the whole node's study
        out = subprocess.run([sys.executable, "-m", "orchestrator", "cleanup", str(job_path)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert f"ended server pid {sp.pid}" in out.stdout and "1 server(s) ended" in out.stdout
        assert gone([sp.pid, worker], 5)
    finally:
        sp._owner_fd = None
        kill_pids((sp.pid, worker))
        sp.proc.wait(5)


# ---- a stalled start-up: the log watch of a starting server (node/server.py, node/treewatch.py) ----
STALL_START_TIMEOUT_S = 60.0  # far above every stall limit below: reaching it would be the bug
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


def _script_server(tmp_path: Path, script: str) -> ServerProcess:
    port = free_port()
    spec = LaunchSpec(argv=[sys.executable, "-c", script, str(port)], port=port)
    return ServerProcess(spec, tmp_path / "server.log")


def test_a_silent_start_is_a_stall_and_its_tree_ends(tmp_path):
    """A start-up that stalls ends at the stall limit, not the whole start-up timeout, and
    the whole tree it left goes."""
    proc = _script_server(tmp_path, SILENT)
    proc.start()
    try:
        with pytest.raises(ServerStalled, match="no log output for 2 s and not ready") as got:
            proc.wait_ready(STALL_START_TIMEOUT_S, poll_s=0.1, stall_s=2.0)
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
    proc = _script_server(tmp_path, PROGRESS_THEN_READY)
    proc.start()
    try:
        proc.wait_ready(STALL_START_TIMEOUT_S, poll_s=0.1, stall_s=1.5)  # no ServerStalled: the bar is output
        out = proc.log_path.read_bytes().split(b"\n# ncclsweep:")[-1]
        bar = out[out.index(b"\rCapturing"):]
        assert bar.count(b"\r") == 20 and b"20/20" in bar and bar.count(b"\n") == 1  # redrawn, no newline until done
    finally:
        proc.stop(grace_s=1.0)


def test_without_a_stall_limit_silence_is_only_the_timeout(tmp_path):
    """No stall limit (timeouts.stall unset): a silent start runs to the start-up timeout."""
    proc = _script_server(tmp_path, SILENT)
    proc.start()
    try:
        with pytest.raises(ReadyTimeout):
            proc.wait_ready(2.0, poll_s=0.1)
    finally:
        proc.stop(grace_s=1.0)
