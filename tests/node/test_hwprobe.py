"""What a trial records about its node: the GPUs Ray gave it, their model, driver and links.

nvidia-smi cannot run here (no GPU), so a stand-in on PATH replays output captured on the
2x H200 machine (tests/fixtures/nvidia-smi-topo-2xh200.txt, `nvidia-smi topo -m` there);
where it is missing, nothing is invented.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from conftest import TESTS
from orchestrator.node.hwprobe import memory_bandwidth, node_info

TOPO = TESTS / "fixtures" / "nvidia-smi-topo-2xh200.txt"


def fake_nvidia_smi(directory: Path) -> None:
    script = directory / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$*" in
  *topo*) cat {TOPO} ;;
  *driver_version*) echo 580.159.04; echo 580.159.04 ;;
  *name*) echo "NVIDIA H200" ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_records_gpus_model_driver_and_topology(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    info = node_info()
    assert info["gpus"] == "0,1" and info["gpu_count"] == 2 and info["gpu_model"] == "NVIDIA H200"
    assert info["driver_version"] == "580.159.04"
    assert info["topology"] == "GPU0-GPU1 NV18"


def test_cpu_node_records_no_gpu_facts(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    info = node_info()
    assert info["hostname"] and info["gpus"] == "" and "gpu_model" not in info and "topology" not in info


def test_a_cpu_nodes_bandwidth_is_measured_without_torch():
    """The CPU copy bandwidth (the decode ceiling's denominator on a CPU node) comes back as a
    real figure, measured in a child that never imports torch (2 CPU-seconds on every node where
    a study starts); the same child measures a GPU with torch."""
    got = subprocess.run([sys.executable, "-c", "import json, sys\nfrom orchestrator.node import hwprobe\n"
                          "print(json.dumps([hwprobe._measure('cpu'), 'torch' in sys.modules]))"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    bandwidth, torch_imported = json.loads(got.stdout)
    assert 1e8 < bandwidth < 1e13 and not torch_imported  # between 100 MB/s and 10 TB/s: a machine's
    assert memory_bandwidth("cpu")["bytes_s"] > 1e8  # through the probe's own process
