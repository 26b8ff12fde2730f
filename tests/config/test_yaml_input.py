"""What a user writes cannot take the machine: a few lines of YAML aliases (the "billion
laughs"), a file of megabytes, nesting thousands deep, a recursive alias, a value of
hundreds of KB. Each is refused by the real CLI in a subprocess, with one line naming the
file and exit code 2, under an address-space limit (``RLIMIT_AS``, 200 MB for the whole
process): a loader that built
the expanded document, or a message that rendered it, would die of MemoryError there
(it used to take 6 GB and 110 s). The limit is what proves the bound; the time is only
printed. A generous timeout guards against a hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, write_job

LIMIT_BYTES = 200 * 1024 * 1024  # the whole process: interpreter, imports, the file
HANG_GUARD_S = 120


def bomb(levels: int = 9, width: int = 9) -> str:
    """A flow list whose last item expands to ``width ** levels`` strings: each anchor is
    ``width`` aliases of the one before (9 x 9: 387 million strings from 200 characters)."""
    names = [f"l{i}" for i in range(levels)]
    parts = [f"&{names[0]} [" + ", ".join(['"lol"'] * width) + "]"]
    for prev, cur in zip(names, names[1:]):
        parts.append(f"&{cur} [" + ", ".join([f"*{prev}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


# A fresh interpreter sets the limit on itself, then runs the CLI, and at exit writes its
# peak resident memory (VmHWM: this process's own, which rusage is not: it counts the
# forked test process too) to the file named by HWM_FILE. Not preexec_fn: that runs in a
# fork of the test process, whose address space (torch, Ray loaded by other tests) is
# already past the limit, so the limit could not even be set there.
LIMITED = f"""
import atexit, os, resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_BYTES}, {LIMIT_BYTES}))

def peak():
    with open("/proc/self/status") as status, open(os.environ["HWM_FILE"], "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])

atexit.register(peak)
sys.argv = ["ncclsweep", *sys.argv[1:]]
runpy.run_module("orchestrator", run_name="__main__", alter_sys=True)
"""


def run_cli(args: list[str], cwd: Path) -> tuple[int, list[str], float, int]:
    """``ncclsweep ARGS`` in a subprocess limited to ``LIMIT_BYTES`` of address space:
    (exit code, stderr lines, seconds, peak resident KB of that process alone)."""
    stamp = time.monotonic_ns()
    err_path, hwm_path = cwd / f"stderr-{stamp}.txt", cwd / f"hwm-{stamp}.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HWM_FILE": str(hwm_path)}
    with open(err_path, "wb") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", LIMITED, *args], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        seconds = time.monotonic() - t0
    lines = err_path.read_text().strip().splitlines()
    peak_kb = int(hwm_path.read_text()) if hwm_path.exists() else 0
    print(f"ncclsweep {' '.join(a[:40] for a in args)}: exit {proc.returncode} in {seconds:.2f} s, "
          f"peak {peak_kb / 1024:.0f} MB resident")
    return proc.returncode, lines, seconds, peak_kb


def refused(tmp_path: Path, args: list[str], file: str, *words: str) -> str:
    code, lines, _seconds, peak_kb = run_cli(args, tmp_path)
    assert code == 2, lines
    assert len(lines) == 1, lines  # one line, no traceback
    assert lines[0].startswith(f"ncclsweep: error: {file}"), lines
    for word in words:
        assert word in lines[0], lines
    assert len(lines[0]) < 600, lines  # a short prefix of the value at most
    assert 0 < peak_kb * 1024 < LIMIT_BYTES  # it ran to its exit (atexit wrote the peak), within the limit
    return lines[0]


@pytest.fixture
def job_with(tmp_path):
    """A valid CPU job whose ``'@X@'`` placeholders become the given YAML text."""
    def make(text: str, **sections) -> Path:
        path = write_job(tmp_path, **sections)
        path.write_text(path.read_text().replace("'@X@'", text))
        return path

    return make


BOMBED_KEYS = {
    "env.FOO": {"env": {"FOO": "@X@"}},
    "baseline.<param>": {"baseline": {"tp_size": "@X@", "backend.threads": 1}},
    "sampler.options.<opt>": {"sampler": {"name": "tpe", "options": {"multivariate": "@X@"}}},
    "ray.node_selector.resources.<r>": {"ray": {"node_selector": {"resources": {"pcie_box": "@X@"}}}},
    "top level": {"description": "@X@"},
}


@pytest.mark.parametrize("where", list(BOMBED_KEYS))
def test_an_alias_bomb_in_the_job_is_refused_in_bounded_memory(tmp_path, job_with, where):
    job = job_with(bomb(), **BOMBED_KEYS[where])
    refused(tmp_path, ["validate", str(job)], str(job), "refused at line", "more than 100000 values",
            "alias")


def test_an_alias_bomb_in_the_space_file_is_refused(tmp_path, job_with):
    job = job_with("x")
    (tmp_path / "space.yaml").write_text(f"params:\n  tp_size: {{choices: {bomb()}}}\n")
    refused(tmp_path, ["validate", str(job)], "space.yaml", "refused at line 2", "more than 100000 values")


def test_an_alias_bomb_in_bench_set_and_config_is_refused_before_any_launch(tmp_path, job_with):
    job = job_with("x")
    refused(tmp_path, ["bench", str(job), "--set", f"tp_size={bomb()}"], "--set tp_size",
            "more than 100000 values")
    config = tmp_path / "best.yaml"
    config.write_text(f"tp_size: 1\nbackend.threads: {bomb()}\n")
    refused(tmp_path, ["bench", str(job), "--config", str(config)], str(config), "more than 100000 values")


def test_files_over_1_mb_are_refused_unread(tmp_path, job_with):
    job = job_with("x")
    with open(job, "a") as f:
        f.write("# " + "x" * 1_100_000 + "\n")
    refused(tmp_path, ["validate", str(job)], str(job), "larger than 1 MB")
    job = job_with("x")
    (tmp_path / "space.yaml").write_text("params:\n  tp_size: {choices: [1, 2]}\n" + "#" * 2_000_000 + "\n")
    refused(tmp_path, ["validate", str(job)], "space.yaml", "larger than 1 MB")


def test_deep_nesting_and_recursive_aliases_are_refused(tmp_path, job_with):
    job = job_with("[" * 5000 + "]" * 5000, env={"FOO": "@X@"})
    refused(tmp_path, ["validate", str(job)], str(job), "nested deeper than 64 levels")
    # shallow anchors whose aliases stack up deeper than the limit
    deep = "[&d0 " + "[" * 40 + "1" + "]" * 40 + ", &d1 " + "[" * 40 + "*d0" + "]" * 40 + "]"
    job = job_with(deep, env={"FOO": "@X@"})
    refused(tmp_path, ["validate", str(job)], str(job), "nested deeper than 64 levels once aliases")
    job = job_with("&loop {FOO: *loop}", env="@X@")
    refused(tmp_path, ["validate", str(job)], str(job), "recursive alias")
    job = job_with("x")
    (tmp_path / "space.yaml").write_text("params:\n  tp_size: &me {choices: [1, *me]}\n")
    refused(tmp_path, ["validate", str(job)], "space.yaml", "recursive alias")


def test_long_values_are_shown_as_a_short_prefix(tmp_path, job_with):
    long = "y" * 400_000
    job = job_with(long, gpus_per_node="@X@")
    line = refused(tmp_path, ["validate", str(job)], str(job), "gpus_per_node: must be an integer >= 0, not 'yyyy",
                   "(a string)")
    assert line.count("y") < 100
    job = job_with("9" * 4400, gpus_per_node="@X@")
    refused(tmp_path, ["validate", str(job)], str(job), "cannot read '9999")  # past Python's digit limit
    explicit_key = f'? "{long}-"\n  '  # a key past PyYAML's 1024 characters of a plain one
    job = job_with(explicit_key, env={"@X@": "1"})
    line = refused(tmp_path, ["validate", str(job)], str(job), "not an environment variable name")
    assert line.count("y") < 400  # the key path and the value both cut
    job = job_with("x")
    space = tmp_path / "space.yaml"
    space.write_text(f"params:\n  tp_size: {{choices: [1, 2]}}\nconstraints: ['tp_size{' + 1' * 50_000} < 9']\n")
    refused(tmp_path, ["validate", str(job)], "space.yaml", "constraints[0]", "at most 500")


def test_a_small_alias_is_still_fine(tmp_path, job_with):
    job = job_with("&t 90s", timeouts={"startup": "@X@", "bench": "30s", "teardown": "5s"})
    job.write_text(job.read_text().replace("bench: 30s", "bench: *t"))
    code, lines, _seconds, _peak = run_cli(["validate", str(job)], tmp_path)
    assert code == 0, lines
