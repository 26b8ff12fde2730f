"""Where the test suite's CPU goes, by kind of process (docs/benchmarks.md, "Where the suite's CPU goes").

The suite is bound by CPU on a 2-core box, and most of its work happens in processes the tests
start (servers, Ray's services, the command line), which pytest's own timings cannot split. This
samples every process whose environment carries a marker, twice a second, keeps each one's last
CPU seconds (user + system) and its command line, and sums them by kind:

    python docs/suite_cpu.py sample MARK out.json &      # MARK: a string in the suite's environment
    NCCLSWEEP_SUITE_MARK=MARK python -m pytest -q -p no:cacheprovider -n 3 --dist worksteal
    touch out.json.stop                                   # the sampler writes its last sample and ends
    python docs/suite_cpu.py table out.json
    python docs/suite_cpu.py files out.json              # by the test that started each process

A process that lives less than half a second may be missed; one that changes its command line
(Ray's workers as they become actors) is counted under the first one seen.

One command's processes the same way, sampled ten times a second (what one study, one server's
start costs; run it a few times, interleaved with what it is compared with):

    python docs/suite_cpu.py measure -- python -m pytest -q -p no:cacheprovider tests/e2e/test_x.py
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid

KINDS = (  # (what a command line contains, its kind): the first that matches
    ("default_worker.py", "Ray: worker"), ("ray::", "Ray: worker"), ("gcs_server", "Ray: GCS"),
    ("dashboard", "Ray: dashboard and agents"), ("agent", "Ray: dashboard and agents"),
    ("log_monitor", "Ray: monitors"), ("monitor.py", "Ray: monitors"), ("raylet/raylet", "Ray: raylet"),
    ("orchestrator.refserver", "reference server"), ("fake_openai_server", "fake OpenAI server"),
    ("standin_server", "stand-in server"), ("fault_server", "stand-in server"), ("import sys;exec", "pytest worker"),
    ("orchestrator.node.supervise", "server supervisor"), ("orchestrator.node.hwprobe", "bandwidth probe"),
    ("orchestrator.driver.allreduce_probe", "all-reduce probe"), ("-m orchestrator ", "command line"),
    ("postgres", "PostgreSQL"), ("import torch", "torch one-liners"),
)


def kind(command: str) -> str:
    return next((name for needle, name in KINDS if needle in command), "other")


def sample(mark: str, out: str, every_s: float = 0.5) -> None:
    """Until ``out``.stop exists: every process with ``mark`` in its environment, its CPU seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[tuple[int, bytes], list] = {}
    other: set[tuple[int, bytes]] = set()
    marker = mark.encode()
    while True:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
                fields = stat[stat.rfind(b")") + 2:].split()
                key = (int(entry), fields[19])  # pid and start time: a reused pid is another process
                if key in other:
                    continue
                if key not in seen:
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        environ = f.read()
                    if marker not in environ:
                        other.add(key)
                        continue
                    test = next((v[len(b"PYTEST_CURRENT_TEST="):] for v in environ.split(b"\0")
                                 if v.startswith(b"PYTEST_CURRENT_TEST=")), b"").decode(errors="replace")
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        seen[key] = [0.0, f.read().replace(b"\0", b" ").decode(errors="replace")[:300], test]
                seen[key][0] = (int(fields[11]) + int(fields[12])) / tick
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        with open(out + ".tmp", "w") as f:
            json.dump([[pid, *record] for (pid, _), record in seen.items()], f)
        os.replace(out + ".tmp", out)
        if os.path.exists(out + ".stop"):
            return
        time.sleep(every_s)


def table(path: str, digits: int = 0) -> None:
    cpu: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    with open(path) as f:
        for _, seconds, command, *_ in json.load(f):
            cpu[kind(command)] += seconds
            count[kind(command)] += 1
    print("| kind | processes | CPU-s | CPU-s each |\n|---|---:|---:|---:|")
    for name, seconds in cpu.most_common():
        print(f"| {name} | {count[name]} | {seconds:.{digits}f} | {seconds / count[name]:.2f} |")
    print(f"| all | {sum(count.values())} | {sum(cpu.values()):.{digits}f} | |")


def files(path: str, rows: int = 40) -> None:
    """CPU seconds by the test file that started each process (its ``PYTEST_CURRENT_TEST`` at the
    process's start; the test workers themselves carry none), with its reference-server starts."""
    cpu: collections.Counter = collections.Counter()
    servers: collections.Counter = collections.Counter()
    with open(path) as f:
        for _, seconds, command, *test in json.load(f):
            name = (test[0].split("::")[0] if test and test[0] else f"({kind(command)})")
            cpu[name] += seconds
            servers[name] += kind(command) == "reference server"
    print("| test file | CPU-s | reference-server starts |\n|---|---:|---:|")
    for name, seconds in cpu.most_common(rows):
        print(f"| {name} | {seconds:.0f} | {servers[name]} |")
    print(f"| all | {sum(cpu.values()):.0f} | {sum(servers.values())} |")


def measure(command: list[str]) -> int:
    """``command`` with a marker of its own in its environment; its processes' CPU seconds by kind."""
    mark = f"SUITE_CPU_{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cpu.json")
        sampler = threading.Thread(target=sample, args=(mark, out, 0.1))
        sampler.start()
        try:
            code = subprocess.call(command, env=dict(os.environ, NCCLSWEEP_SUITE_MARK=mark))
            time.sleep(1.0)  # what the command left behind exits (or is counted as it is)
        finally:
            open(out + ".stop", "w").close()
            sampler.join()
        table(out, digits=2)
    return code


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "sample":
        sample(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "files":
        files(sys.argv[2])
    elif len(sys.argv) > 3 and sys.argv[1:3] == ["measure", "--"]:
        sys.exit(measure(sys.argv[3:]))
    else:
        sys.exit(__doc__)
