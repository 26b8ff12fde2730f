"""What `nvidia-smi`, `lspci` print, for the parser and doctor tests.

CAPTURED_* texts are real output of a 2 x H200 NVLink machine (driver 580.159.04), taken on
2026-11-30 with the commands run_doctor runs (see tests/fixtures/nccl/README.md). PCIE_*
texts are hand-written in the same formats for an 8-GPU PCIe box with the problems doctor
must catch (mixed models, a busy GPU, a narrowed link, P2P refused by the chipset, ACS on);
they are not captured output.
"""

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
