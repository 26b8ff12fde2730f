"""The reference server's benchmark (``python -m orchestrator.refserver.benchmark``, the numbers
in docs/benchmarks.md), run for real on the tiny model: for each configuration a fresh server,
startup-to-healthy and single-request decode tok/s per start, a Markdown row of medians and
samples, every sample in the JSON file, each server's log kept, a configuration that cannot
start reported as failed while the others go on, and no server left behind."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_benchmark_of_two_configurations_one_of_which_cannot_start(tmp_path, no_leftover_servers):
    (tmp_path / "logs").mkdir()
    out = subprocess.run([sys.executable, "-m", "orchestrator.refserver.benchmark", "--repeats", "2", "--tokens", "8",
                          "--config", "--model tiny --tp 1 --threads 1", "--config", "--model tiny --tp 3",
                          "--common", "--max-model-len 256", "--concurrency", "2", "--startup-timeout", "60",
                          "--log-dir", str(tmp_path / "logs"), "--json", str(tmp_path / "samples.json")],
                         capture_output=True, text=True, timeout=200, cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["| server flags | startup to healthy, s (median; samples) | decode tok/s (median; samples) |",
                         "|---|---|---|"]
    row = re.fullmatch(r"\| `--model tiny --tp 1 --threads 1 --max-model-len 256` \| ([\d.]+) \(([\d.]+), ([\d.]+)\) "
                       r"\| ([\d.]+) \(((?:\d+, ){5}\d+)\) \|", lines[2])  # 3 requests measured per start
    assert row, lines[2]
    assert "| `--model tiny --tp 3 --max-model-len 256` | failed: " in lines[3]  # 8 heads do not split 3 ways
    (result,) = json.loads((tmp_path / "samples.json").read_text())
    assert len(result["startup_s"]) == 2 and len(result["decode_tok_s"]) == 6 and min(result["decode_tok_s"]) > 0
    assert [f"{x:.2f}" for x in result["startup_s"]] == [row.group(2), row.group(3)]  # the samples as printed
    assert [f"{x:.0f}" for x in result["decode_tok_s"]] == row.group(5).split(", ")
    assert set(result["concurrency_tok_s"]) == {"2"} and result["concurrency_tok_s"]["2"] > 0
    assert result["greedy"][0] and f"greedy {' '.join(result['args'])}: " in out.stdout
    assert (tmp_path / "logs" / "server-0.log").read_text().strip()
