"""Shared fixtures: a real local Ray instance, job files in tmp dirs, a study run on this
host without Ray, and a guard that no server process outlives a test."""

from __future__ import annotations

import contextlib
import os
import textwrap
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"  # the shared helpers (fake servers), fixtures/ and data/


# Every process this test session starts (servers, Ray workers, drivers in subprocesses)
# inherits this tag through its environment; the leftover check below only ever looks at,
# and ends, processes that carry it, so a test run beside a live study never touches it.
SESSION_TAG_VAR = "NCCLSWEEP_TEST_SESSION"
SESSION_TAG = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
os.environ[SESSION_TAG_VAR] = SESSION_TAG


def _started_by_this_session(pid: int) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{SESSION_TAG_VAR}={SESSION_TAG}".encode() in environ.split(b"\0")


REFSERVER = "orchestrator.refserver"
# the stand-in servers' command lines (their helper processes' too: tests/fake_openai_server.py's workers run it)
STANDINS = ("fake_openai_server", "standin_server.py", "fault_server.py")  # the first: wrapped_server's scripts too
FAKE_MARKER = STANDINS[0]  # in the command line of every fake OpenAI server, run directly or by a wrapper script
ANY_SERVER = (REFSERVER, *STANDINS)


def server_processes(marker: str | tuple[str, ...] = REFSERVER) -> list[tuple[int, str]]:
    """Live server processes that this test session started (zombies excluded): the reference server's,
    or those whose command lines contain ``marker`` (or one of several, e.g. ``ANY_SERVER``)."""
    markers = (marker,) if isinstance(marker, str) else marker
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (any(m in cmd for m in markers) and state != "Z" and int(entry) != os.getpid()
                and _started_by_this_session(int(entry))):
            found.append((int(entry), cmd.strip()))
    return found


def end_leftover_servers(before: set[int], wait_s: float = 10.0,
                         marker: str | tuple[str, ...] = REFSERVER) -> list[tuple[int, str]]:
    """Servers of this session that appeared after ``before`` and are still alive after
    ``wait_s``: SIGKILLed, and returned so the test can fail on them."""
    import signal
    import time

    deadline = time.monotonic() + wait_s
    left: list[tuple[int, str]] = []
    while time.monotonic() < deadline:
        left = [(p, c) for p, c in server_processes(marker) if p not in before]
        if not left:
            break
        time.sleep(0.2)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def kill_pids(pids) -> None:
    """SIGKILL each of ``pids`` (processes the test itself started), ignoring those gone."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def no_leftover_servers():
    """Fail a test that leaves a server process behind (and kill it): the reference server's and
    the stand-ins' (``STANDINS``: the fake server, the scripts that run it and its worker processes);
    only processes this test session started are looked at."""
    before = {pid for pid, _ in server_processes(ANY_SERVER)}
    yield
    left = end_leftover_servers(before, marker=ANY_SERVER)
    assert not left, f"server processes left behind: {left}"


@pytest.fixture(scope="session")
def _ray_session():
    """Shut down whatever Ray the session started, once, at the end."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def start_local_ray():
    """A real local Ray instance (logical CPUs for trial actors), started if no test left one
    running (a cluster test shuts its own down); ``_ray_session`` shuts it down."""
    import logging

    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)
    return ray


@pytest.fixture
def ray_local(_ray_session):
    """``start_local_ray`` for one test."""
    return start_local_ray()


TEST_PROMPT = ("Write a detailed, step-by-step explanation of how a ring all-reduce works across eight GPUs, then "
               "summarize its cost in one sentence.")


def write_job(directory: Path, *, study: str = "t", space_text: str | None = None, **sections) -> Path:
    """A CPU job for the tiny reference server in ``directory``; sections override YAML keys."""
    space_text = space_text or textwrap.dedent("""\
        params:
          tp_size: {choices: [1, 2]}
          backend.threads: {choices: [1, 2]}
        """)
    (directory / "space.yaml").write_text(space_text)
    job = {
        "study": study,
        "report_dir": str(directory / "reports" / study),
        "backend": {"kind": "refserver", "settings": {"model": "tiny", "device": "cpu"}},
        "gpus_per_node": 0,
        "cpus_per_trial": 1,
        "space": "space.yaml",
        "baseline": {"tp_size": 1, "backend.threads": 1},
        "budget": {"trials": 3},
        # one decode prompt (the job's default before the bundled set): these tests are about the study, not
        # the prompts; tests of the prompt set leave bench.prompt out
        "bench": {"prompt": TEST_PROMPT, "output_tokens": 16, "warmup": 1, "repeats": 2, "max_repeats": 2},
        "timeouts": {"startup": "60s", "bench": "30s", "teardown": "5s"},
        "correctness": {"check_tokens": 12, "prompts": ["The quick brown fox", "Once upon a time"]},
        "pruning": {"enabled": False},
    }
    job.update(sections)
    # these tests are about the study, not the launch noise: no relaunches and no race of the finalists
    # unless a test asks for them (every one costs launches; tests of them set budget.confirm/relaunch)
    if isinstance(job.get("budget"), dict):
        job["budget"] = {"confirm": 0, "relaunch": 0, **job["budget"]}
    import yaml

    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def run_in_process(job, **driver_args):
    """``StudyDriver(job, ...).run()`` with its trials in threads of this process
    (``InProcessExecutor``: as many slots as the job's ``ray.parallel``, else one, as a
    one-node Ray gives), shut down whatever happens: the driver's tests that are not about
    Ray. ``driver_args``: ``trials``, ``timeout_s``, ``out``."""
    from orchestrator.driver.in_process import InProcessExecutor
    from orchestrator.driver.run import StudyDriver

    executor = InProcessExecutor(parallel=job.ray.parallel or 1)
    try:
        return StudyDriver(job, executor=executor, **driver_args).run()
    finally:
        executor.shutdown()


RUN_ENDS = ("budget reached:", "space exhausted:", "timeout:", "stopped by signal:")


def run_end(lines: list[str]) -> list[str]:
    """The lines a run ends with, after its "N trials counted" line (driver/progress.py): the
    verdict, the best's config lines, one ``next:`` line per command."""
    ends = [i for i, line in enumerate(lines) if line.startswith(RUN_ENDS)]
    assert ends, lines[-5:]
    return lines[ends[-1] + 1:]


def timeouts_until_blamed(rows) -> None:
    """A config's timed-out launches in order follow ``core.outcome``'s rule: the first blameless
    (re-queued to see it reproduce), the next blameless only while other work kept the host busy
    (the suite's own workers can), the last counted as the config's."""
    from orchestrator.core.outcome import BUSY_HOST_NOTE, FIRST_TIMEOUT_NOTE, MAX_BLAMELESS_TIMEOUTS

    assert 2 <= len(rows) <= MAX_BLAMELESS_TIMEOUTS + 1, rows
    assert [r.counted for r in rows] == [False] * (len(rows) - 1) + [True], rows
    assert FIRST_TIMEOUT_NOTE in rows[0].failure_reason, rows[0].failure_reason
    assert all(BUSY_HOST_NOTE in r.failure_reason for r in rows[1:-1]), rows


def study_servers(report_dir: Path, marker: str | tuple[str, ...] = REFSERVER) -> list[tuple[int, str]]:
    """Live server processes started by one study (found by the ports in its trial logs),
    so a check is not confused by servers of other tests running at the same time."""
    import re

    ports = set()
    for log in Path(report_dir).rglob("*.log"):
        head = log.read_text(errors="replace").splitlines()[:1]
        m = re.search(r"--port (\d+)", head[0]) if head else None
        if m:
            ports.add(m.group(1))
    return [(pid, cmd) for pid, cmd in server_processes(marker)
            if any(f"--port {port} " in cmd + " " for port in ports)]


def pytest_collection_modifyitems(items):
    """The end-to-end tests (marked slow) first, in their own order: run in parallel
    (``-n 4``), the long ones start at once instead of being the last and lonely ones."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


FAKE_OPENAI = TESTS / "fake_openai_server.py"


def start_fake_openai(directory: Path, *args: str, model: str = "fake"):
    """tests/fake_openai_server.py started (with ``args``) and healthy on a free port, its log in
    ``directory``; the caller stops it. A start that fails stops what it started."""
    import sys

    from orchestrator.core.launch import LaunchSpec
    from orchestrator.node.server import ServerProcess, free_port

    port = free_port()
    spec = LaunchSpec(argv=[sys.executable, str(FAKE_OPENAI), "--port", str(port), "--model", model, *args],
                      host="127.0.0.1", port=port, model_name=model)
    sp = ServerProcess(spec, directory / f"fake-{port}.log")
    sp.start()
    try:
        sp.wait_ready(30, poll_s=0.05)
    except BaseException:
        sp.stop(grace_s=0.2)
        raise
    return sp


def start_driver(job_path: Path, log_path: Path):
    """``ncclsweep run JOB`` in a process of its own session (a test can signal its group or
    kill -9 it, as a user's terminal would), everything it prints in ``log_path``."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(job_path)], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_for(predicate, timeout_s: float, what: str):
    """``predicate()``'s first true value, polled; AssertionError naming ``what`` after ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str):
    """A real small file system at ``where`` (a tmpfs of ``size``), unmounted after: a disk that
    can be filled. Skips the test where mounting is not allowed (it needs root)."""
    import shutil
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (the full disk) needs root")
    where.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        done = subprocess.run(["umount", str(where)], capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
        shutil.rmtree(where, ignore_errors=True)


def fill_disk(disk: Path, leave: int = 0) -> Path:
    """Fill the file system of ``disk`` until ``leave`` bytes are free (0: full); the filler file."""
    filler = disk / "filler"
    stat = os.statvfs(disk)
    with open(filler, "ab", buffering=0) as fh:
        fh.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
        if not leave:
            try:
                while True:  # what statvfs did not count (the filler's own blocks)
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
    return filler
