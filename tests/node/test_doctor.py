"""``ncclsweep doctor``: the parsers on real and hand-written tool output, the judgement, and
the no-GPU path.

CAPTURED_* texts are real output of a 2 x H200 NVLink machine (driver 580.159.04), taken on
2026-11-30 with the commands run_doctor runs (see tests/fixtures/nccl/README.md). PCIE_*
texts are hand-written in the same formats for an 8-GPU PCIe box with the problems doctor
must catch (mixed models, a busy GPU, a narrowed link, P2P refused by the chipset, ACS on);
they are not captured output.
"""

from __future__ import annotations

import pytest

from orchestrator.core import versions
from orchestrator.node import doctor, nvidia_smi

# ---- captured on nvidia-h200-x2 -------------------------------------------------------------

CAPTURED_QUERY = """\
0, NVIDIA H200, 00000000:00:06.0, 143771, 0, 0, 580.159.04, 5, 5, 16, 16
1, NVIDIA H200, 00000000:00:07.0, 143771, 0, 0, 580.159.04, 5, 5, 16, 16
"""
CAPTURED_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
CAPTURED_P2P = (
    " \t\x1b[4mGPU0\tGPU1\t\x1b[0m\n"
    " GPU0\tX\tOK\t\n"
    " GPU1\tOK\tX\t\n"
    "\n"
    "Legend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
    "  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n  U    = Unknown\n"
)
CAPTURED_SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
"""

# ---- hand-written: an 8-GPU PCIe box with trouble ------------------------------------------------

PCIE_QUERY = """\
0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:18:00.0, 97887, 3, 0, 580.95.05, 5, 5, 16, 16
1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:2A:00.0, 97887, 3, 0, 580.95.05, 1, 5, 16, 16
2, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:3A:00.0, 97887, 3, 0, 580.95.05, 5, 5, 8, 16
3, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:5D:00.0, 97887, 61234, 97, 580.95.05, 5, 5, 16, 16
4, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:9A:00.0, 97887, 3, 0, 580.95.05, 5, 5, 16, 16
5, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:AB:00.0, 97887, 3, 0, 580.95.05, 5, 5, 16, 16
6, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:BA:00.0, 97887, 3, 0, 580.95.05, 5, 5, 16, 16
7, NVIDIA RTX 6000 Ada Generation, 00000000:DB:00.0, 49140, 3, 0, 580.95.05, [N/A], 4, 16, 16
"""
PCIE_APPS = "00000000:5D:00.0, 48213, /usr/bin/python3, 61220\n"
PCIE_TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tPIX\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tPIX\t X \tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tPXB\tPXB\t X \tPIX\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU3\tPXB\tPXB\tPIX\t X \tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A\n"
    "GPU4\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tPXB\tPXB\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU5\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tPXB\tPXB\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU6\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\t X \tPIX\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU7\tSYS\tSYS\tSYS\tSYS\tPXB\tPXB\tPIX\t X \tSYS\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)
PCIE_P2P = (
    " \t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\x1b[0m\n"
    " GPU0\tX\tOK\tOK\tCNS\t\n"
    " GPU1\tOK\tX\tOK\tCNS\t\n"
    " GPU2\tOK\tOK\tX\tCNS\t\n"
    " GPU3\tCNS\tCNS\tCNS\tX\t\n"
    "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
)
PCIE_LSPCI = """\
15:01.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tCapabilities: [168 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
15:02.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tCapabilities: [168 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
18:00.0 3D controller: NVIDIA Corporation Device 2bb5 (rev a1)
\tSubsystem: NVIDIA Corporation Device 204e
"""


@pytest.fixture(autouse=True)
def quick_versions(monkeypatch):
    """No subprocess that imports torch: doctor's version lines come from here."""
    monkeypatch.setattr(versions, "torch_versions", lambda python=None: {"torch": "2.11.0", "cuda": "13.0",
                                                                          "nccl": "2.28.9"})


# ---- parsers -------------------------------------------------------------------------------------

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


def test_parse_lspci_acs():
    acs = doctor.parse_lspci_acs(PCIE_LSPCI)
    assert len(acs) == 1 and acs[0]["device"].startswith("15:01.0 PCI bridge")
    assert "ReqRedir+" in acs[0]["acsctl"]
    assert doctor.parse_lspci_acs("00:00.0 Host bridge: Intel\n") == []


def test_parse_compute_apps_and_cuda():
    assert nvidia_smi.parse_compute_apps(PCIE_APPS) == [
        {"bus_id": "00000000:5D:00.0", "pid": 48213, "name": "/usr/bin/python3", "used_mib": 61220}]
    assert nvidia_smi.parse_compute_apps("") == []
    assert nvidia_smi.parse_cuda_version(CAPTURED_SMI_HEADER) == "13.0"


def test_iommu_state(tmp_path):
    assert doctor.iommu_state(tmp_path) == {"groups": 0, "cmdline": []}
    (tmp_path / "sys/kernel/iommu_groups/0").mkdir(parents=True)
    (tmp_path / "sys/kernel/iommu_groups/1").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on quiet\n")
    assert doctor.iommu_state(tmp_path) == {"groups": 2, "cmdline": ["intel_iommu=on"]}


# ---- judgement -------------------------------------------------------------------------------------

def test_assess_healthy_nvlink_box():
    lines, warnings = doctor.assess(nvidia_smi.parse_gpu_query(CAPTURED_QUERY), [],
                                    nvidia_smi.parse_topo_matrix(CAPTURED_TOPO),
                                    nvidia_smi.parse_topo_p2p(CAPTURED_P2P),
                                    None, {"groups": 0, "cmdline": []})
    assert warnings == []
    text = "\n".join(lines)
    assert "GPUs: 2" in text and "NVLink present" in text and "P2P (read): 1 of 1 pairs OK" in text
    assert "ACS: not checked" in text and "IOMMU: off" in text


def test_assess_troubled_pcie_box():
    lines, warnings = doctor.assess(nvidia_smi.parse_gpu_query(PCIE_QUERY), nvidia_smi.parse_compute_apps(PCIE_APPS),
                                    nvidia_smi.parse_topo_matrix(PCIE_TOPO), nvidia_smi.parse_topo_p2p(PCIE_P2P),
                                    doctor.parse_lspci_acs(PCIE_LSPCI),
                                    {"groups": 112, "cmdline": ["intel_iommu=on"]}, job_gpus=16)
    text = "\n".join(warnings)
    assert "GPU3 is in use (1 process(es), 61234 MiB, 97% busy)" in text
    assert "GPU2 PCIe link runs x8 of x16" in text
    assert "mixed GPU models" in text and "RTX 6000 Ada Generation x1" in text
    assert "P2P GPU0<->GPU3: chipset not supported" in text
    assert "ACS is enabled on 1 PCIe bridge" in text
    assert "IOMMU is on and not in passthrough" in text
    assert "wants up to 16 GPUs per node but this machine has 8" in text
    report = "\n".join(lines)
    assert "PCIe only" in report and "SYS x16" in report
    assert "link at gen 1 of 5" in report  # idle downshift: a note, not a warning
    assert not any(w.startswith("GPU1") for w in warnings)  # its gen-1 idle link is no warning


def test_assess_iommu_passthrough_is_fine():
    _, warnings = doctor.assess(nvidia_smi.parse_gpu_query(CAPTURED_QUERY), [], {}, {("GPU0", "GPU1"): "OK"}, [],
                                {"groups": 40, "cmdline": ["intel_iommu=on", "iommu=pt"]})
    assert warnings == []


# ---- run_doctor / main_doctor ------------------------------------------------------------------------

def fake_runner(outputs: dict[str, str | None]):
    def run(argv):
        key = " ".join(argv[:3]) if argv[:2] == ["nvidia-smi", "topo"] else argv[0] if len(argv) == 1 else \
            f"{argv[0]} {argv[1].split('=')[0]}"
        return outputs.get(key)
    return run


def test_run_doctor_with_captured_outputs(tmp_path):
    runner = fake_runner({"nvidia-smi --query-gpu": CAPTURED_QUERY, "nvidia-smi --query-compute-apps": "",
                          "nvidia-smi topo -m": CAPTURED_TOPO, "nvidia-smi topo -p2p": CAPTURED_P2P,
                          "nvidia-smi": CAPTURED_SMI_HEADER, "lspci -vvv": None})
    lines, warnings = doctor.run_doctor(runner=runner, sysfs_root=str(tmp_path))
    text = "\n".join(lines)
    assert warnings == []
    assert "GPU0 NVIDIA H200 [00000000:00:06.0]" in text and "CUDA (driver supports): 13.0" in text
    assert "torch: 2.11.0; its CUDA: 13.0; its NCCL: 2.28.9" in text
    assert "nvidia-smi topo -m:" in text and "Legend" not in text


def test_no_gpu_machine(capsys, monkeypatch):
    lines, warnings = doctor.run_doctor(runner=lambda argv: None, probe_versions=False)
    assert warnings == [] and "no NVIDIA GPU found" in lines[0]
    monkeypatch.setattr(doctor, "default_runner", lambda argv: None)
    assert doctor.main_doctor(None) == 0
    out = capsys.readouterr().out
    assert "no NVIDIA GPU found" in out and "no warnings" in out


def test_format_report():
    text = doctor.format_report(["a"], ["careful"])
    assert text.endswith("warnings:\n  ! careful")


def test_doctor_with_a_job_reports_the_runs_preflight(tmp_path, capsys, monkeypatch):
    """`doctor JOB` makes the checks `run` makes on every node before its first launch."""
    from conftest import write_job

    argv = [str(tmp_path / "bin" / "my-server"), "--port", "{port}", "--host", "{host}"]
    job_path = write_job(tmp_path, space_text="params:\n  tp_size: {choices: [1]}\n", baseline={"tp_size": 1},
                         backend={"kind": "command", "settings": {"argv": argv}})
    monkeypatch.setattr(doctor, "default_runner", lambda argv: None)
    assert doctor.main_doctor(str(job_path)) == 0
    out = capsys.readouterr().out
    assert f"! pre-flight: the server command {argv[0]!r} is not found on this node's PATH" in out
    exe = tmp_path / "bin" / "my-server"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert doctor.main_doctor(str(job_path)) == 0
    assert "pre-flight on this node: ok" in capsys.readouterr().out
