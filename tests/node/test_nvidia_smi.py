"""The nvidia-smi parsers on real output of a 2 x H200 NVLink machine and on hand-written
output of an 8-GPU PCIe box (tests/node/smi_outputs.py): GPUs, links, P2P, compute
processes, the CUDA version."""

from __future__ import annotations

from smi_outputs import (
    CAPTURED_P2P,
    CAPTURED_QUERY,
    CAPTURED_SMI_HEADER,
    CAPTURED_TOPO,
    PCIE_APPS,
    PCIE_P2P,
    PCIE_QUERY,
    PCIE_TOPO,
)

from orchestrator.node import nvidia_smi


def test_parse_gpu_query_captured():
    gpus = nvidia_smi.parse_gpu_query(CAPTURED_QUERY)
    assert gpus == [
        {"index": 0, "name": "NVIDIA H200", "bus_id": "00000000:00:06.0", "memory_total_mib": 143771,
         "memory_used_mib": 0, "util_percent": 0, "driver": "580.159.04", "gen_current": 5, "gen_max": 5,
         "width_current": 16, "width_max": 16},
        {"index": 1, "name": "NVIDIA H200", "bus_id": "00000000:00:07.0", "memory_total_mib": 143771,
         "memory_used_mib": 0, "util_percent": 0, "driver": "580.159.04", "gen_current": 5, "gen_max": 5,
         "width_current": 16, "width_max": 16}]


def test_parse_gpu_query_not_available_cells():
    gpus = nvidia_smi.parse_gpu_query(PCIE_QUERY)
    assert len(gpus) == 8 and gpus[7]["gen_current"] is None and gpus[7]["gen_max"] == 4
    assert gpus[3]["memory_used_mib"] == 61234 and gpus[3]["util_percent"] == 97


def test_parse_topo_captured_nvlink():
    topo = nvidia_smi.parse_topo_matrix(CAPTURED_TOPO)
    assert topo["gpus"] == ["GPU0", "GPU1"]
    assert topo["links"][("GPU0", "GPU1")] == "NV18" and topo["links"][("GPU0", "GPU0")] == "X"
    assert topo["affinity"]["GPU0"]["cpu"] == "0-31"


def test_parse_topo_pcie_with_nic():
    topo = nvidia_smi.parse_topo_matrix(PCIE_TOPO)
    assert len(topo["gpus"]) == 8 and topo["nics"] == ["NIC0"]
    assert topo["links"][("GPU0", "GPU1")] == "PIX"
    assert topo["links"][("GPU0", "GPU2")] == "PXB"
    assert topo["links"][("GPU3", "GPU4")] == "SYS"
    assert ("GPU0", "NIC0") not in topo["links"]
    assert topo["affinity"]["GPU4"]["cpu"] == "32-63,96-127" and topo["affinity"]["GPU4"]["numa"] == "1"


def test_parse_topo_p2p():
    assert nvidia_smi.parse_topo_p2p(CAPTURED_P2P) == {("GPU0", "GPU1"): "OK", ("GPU1", "GPU0"): "OK"}
    p2p = nvidia_smi.parse_topo_p2p(PCIE_P2P)
    assert p2p[("GPU0", "GPU3")] == "CNS" and p2p[("GPU1", "GPU2")] == "OK" and len(p2p) == 12


def test_parse_compute_apps_and_cuda():
    assert nvidia_smi.parse_compute_apps(PCIE_APPS) == [
        {"bus_id": "00000000:5D:00.0", "pid": 48213, "name": "/usr/bin/python3", "used_mib": 61220}]
    assert nvidia_smi.parse_compute_apps("") == []
    assert nvidia_smi.parse_cuda_version(CAPTURED_SMI_HEADER) == "13.0"
