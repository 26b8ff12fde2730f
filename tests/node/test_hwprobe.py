"""What a trial records about its node: the GPUs Ray gave it, their model, driver and links.

nvidia-smi cannot run here (no GPU), so a stand-in on PATH replays output captured on the
2x H200 machine (tests/fixtures/nvidia-smi-topo-2xh200.txt, `nvidia-smi topo -m` there);
where it is missing, nothing is invented.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import TESTS
from orchestrator.node.hwprobe import node_info

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
