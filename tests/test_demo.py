"""The demo (`ncclsweep run jobs/demo.yaml`, README Quickstart line 1) shows what the tool
is for, on a 2-core CPU box (a few minutes there): the baseline is beaten, a fast config
with wrong output is refused by the correctness gate, the study ends on its trial budget
(not its 15-minute timeout), and the last line gives the ratio and what to run next. Run
on a copy of the job, so reports/demo is left alone."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, study_servers

pytestmark = pytest.mark.slow


def test_the_demo_beats_its_baseline_and_shows_the_gate(tmp_path, no_leftover_servers):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "search_spaces").mkdir()
    shutil.copy(REPO / "jobs" / "demo.yaml", tmp_path / "jobs" / "demo.yaml")
    shutil.copy(REPO / "search_spaces" / "refserver-cpu-demo.yaml", tmp_path / "search_spaces")
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "orchestrator", "run", "jobs/demo.yaml"], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    print(f"the demo took {time.monotonic() - t0:.0f} s")
    assert run.returncode == 0, run.stderr
    lines = run.stderr.strip().splitlines()
    ends = [ln for ln in lines if ln.startswith(("budget reached:", "space exhausted:", "timeout:"))]
    assert ends and ends[-1].startswith(("budget reached: 8 trials counted", "space exhausted:")), ends  # not timeout
    assert any("FAIL wrong-output" in ln and "do not count" in ln for ln in lines), run.stderr
    last = lines[-1]
    ratio = re.search(r"best #\d+ [0-9.]+ tok/s = ([0-9.]+)x the baseline, (beyond noise|within noise)", last)
    assert ratio and float(ratio.group(1)) > 1.0, last  # "beyond noise" on a box that is not overloaded
    assert "`ncclsweep report jobs/demo.yaml`" in last and "compare" in last and "export" in last
    assert (tmp_path / "reports" / "demo" / "driver.log").exists()  # output_dir: ../reports, next to jobs/
    assert not study_servers(tmp_path / "reports")

