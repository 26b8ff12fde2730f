"""``ncclsweep doctor``: its judgement of a machine from real and hand-written tool output
(tests/node/smi_outputs.py), the ACS and IOMMU readers, the no-GPU path, and `doctor JOB`'s
pre-flight."""

from __future__ import annotations

import pytest
from smi_outputs import (
    CAPTURED_P2P,
    CAPTURED_QUERY,
    CAPTURED_SMI_HEADER,
    CAPTURED_TOPO,
    PCIE_APPS,
    PCIE_LSPCI,
    PCIE_P2P,
    PCIE_QUERY,
    PCIE_TOPO,
)

from orchestrator.backends import sglang_engine, vllm_engine
from orchestrator.core import versions
from orchestrator.node import doctor, nvidia_smi


@pytest.fixture(autouse=True)
def quick_versions(monkeypatch):
    """No subprocess that imports torch: doctor's version lines come from here."""
    monkeypatch.setattr(versions, "torch_versions", lambda python=None: {"torch": "2.11.0", "cuda": "13.0",
                                                                          "nccl": "2.28.9"})


# ---- readers -------------------------------------------------------------------------------------


def test_parse_lspci_acs():
    acs = doctor.parse_lspci_acs(PCIE_LSPCI)
    assert len(acs) == 1 and acs[0]["device"].startswith("15:01.0 PCI bridge")
    assert "ReqRedir+" in acs[0]["acsctl"]
    assert doctor.parse_lspci_acs("00:00.0 Host bridge: Intel\n") == []


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


# ---- NCCL's P2P and the custom all-reduce ----------------------------------------------------------

def test_p2p_level_and_each_pair_on_a_two_socket_pcie_box():
    topo, p2p = nvidia_smi.parse_topo_matrix(PCIE_TOPO), nvidia_smi.parse_topo_p2p(PCIE_P2P)
    lines, warnings = doctor.p2p_lines(topo, p2p, {}, "GenuineIntel")
    text = "\n".join(lines)
    assert lines[0].startswith("P2P level NCCL will use: PXB (NCCL's default: no P2P across a CPU's root ports")
    assert len(lines) == 1 + 28  # every pair of 8 GPUs, once
    assert "GPU0-GPU1: PIX = NCCL PIX, through at most one PCIe switch: P2P (PIX is within PXB)" in text
    assert "GPU0-GPU4: SYS = NCCL SYS, across CPU sockets: no P2P (SYS is beyond PXB)" in text
    assert "GPU0-GPU3: PXB" in text and "driver reports chipset not supported" in text
    assert len(warnings) == 1 and "16 GPU pair(s) get no P2P" in warnings[0] and "NCCL_P2P_LEVEL=SYS" in warnings[0]
    assert "deadlocked" in warnings[0]
    raised, warned = doctor.p2p_lines(topo, p2p, {"NCCL_P2P_LEVEL": "SYS"}, "GenuineIntel")
    assert "NCCL_P2P_LEVEL=SYS" in raised[0]
    assert "GPU0-GPU4: SYS = NCCL SYS, across CPU sockets: P2P" in "\n".join(raised)
    assert warned == []  # the user chose the level: no advice about the default
    off, _ = doctor.p2p_lines(topo, p2p, {"NCCL_P2P_DISABLE": "1"}, None)
    assert off[0].startswith("P2P level NCCL will use: LOC") and "GPU0-GPU1: PIX = NCCL PIX" in off[1]
    assert "no P2P" in off[1]


def test_custom_allreduce_by_the_engines_own_conditions():
    topo, p2p = nvidia_smi.parse_topo_matrix(PCIE_TOPO), nvidia_smi.parse_topo_p2p(PCIE_P2P)
    text = "\n".join(doctor.custom_allreduce_lines(topo, p2p, [1, 2, 3, 4, 8]))
    assert "TP 2 on GPU0..GPU1: yes (two PCIe GPUs with P2P)" in text
    assert "TP 3 on GPU0..GPU2: no: it runs at TP 2, 4, 6, 8 only" in text
    assert "TP 4 on GPU0..GPU3: no: more than two PCIe-only GPUs" in text
    assert "TP 8 on GPU0..GPU7: no: more than two PCIe-only GPUs" in text
    nvlink = nvidia_smi.parse_topo_matrix(CAPTURED_TOPO)
    assert "TP 2 on GPU0..GPU1: yes" in "\n".join(doctor.custom_allreduce_lines(nvlink, {}, [2]))
    no_p2p = {("GPU0", "GPU1"): "CNS"}
    assert "no P2P between GPU0 and GPU1" in "\n".join(doctor.custom_allreduce_lines(topo, no_p2p, [2]))
    # the world sizes are the ones vLLM and SGLang declare with their backends
    assert doctor.custom_world_sizes() == (2, 4, 6, 8)
    assert vllm_engine.ENGINE.custom_allreduce_world_sizes == sglang_engine.ENGINE.custom_allreduce_world_sizes


def test_cpu_vendor(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert doctor.cpu_vendor(tmp_path) == "AuthenticAMD"
    assert doctor.cpu_vendor(tmp_path / "nowhere") is None


def test_a_gpu_job_on_a_machine_without_gpus_is_never_told_gpus_are_present(tmp_path, capsys, monkeypatch):
    """Issue 39: doctor reports what it checked and what it found; no GPUs: it says so, and
    whether the job needs them."""
    from conftest import write_job

    exe = tmp_path / "bin" / "my-server"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    argv = [str(exe), "--port", "{port}", "--host", "{host}", "--tp", "{tp_size}"]
    job_path = write_job(tmp_path, space_text="params:\n  tp_size: {choices: [2]}\n", baseline={"tp_size": 2},
                         backend={"kind": "command", "settings": {"argv": argv}}, gpus_per_node=2)
    monkeypatch.setattr(doctor, "default_runner", lambda argv: None)
    monkeypatch.setattr(nvidia_smi, "gpu_count", lambda timeout_s=20.0: None)  # no NVIDIA tool here
    assert doctor.main_doctor(str(job_path)) == 0
    out = capsys.readouterr().out
    assert "present" not in out.split("model:")[0]  # GPUs are never "present" unseen
    assert "no NVIDIA GPU found" in out and "this job needs 2 GPUs per node" in out
    assert "GPUs: 2 needed per node, not counted (no NVIDIA tool answers here)" in out
    assert f"server command {exe}: found at {exe}" in out
    assert "! the job needs 2 GPUs per node and this machine shows none" in out
    cpu_job = write_job(tmp_path, space_text="params:\n  tp_size: {choices: [1]}\n", baseline={"tp_size": 1})
    assert doctor.main_doctor(str(cpu_job)) == 0
    out = capsys.readouterr().out
    assert "this job is a CPU job (gpus_per_node: 0) and needs none" in out and "GPUs: none needed" in out
