"""nvidia-smi: the one place that runs it, and the pure parsers of what it prints.

Everything the tuner asks of a node's GPUs goes through ``call`` (GPU memory and compute
processes before a launch, the device check after a teardown, the GPU count of the
pre-flight, the model, driver and links a trial records, ``doctor``'s report), so a
missing tool, a failing one and a hung one are told apart in one way everywhere:
``Reply.status`` is ``ok``, ``missing``, ``failed`` or ``hung``. The parsers are pure
functions of captured text, tested on real output (tests/fixtures/).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

TOOL = "nvidia-smi"
GPU_FIELDS = ("index", "name", "pci.bus_id", "memory.total", "memory.used", "utilization.gpu", "driver_version",
              "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max")
APP_FIELDS = ("gpu_bus_id", "pid", "process_name", "used_memory")
CSV = "--format=csv,noheader,nounits"


@dataclass(frozen=True)
class Reply:
    """What one nvidia-smi call gave: ``status`` ok, missing (not on PATH), failed (a
    non-zero exit, or it could not be run) or hung (past its timeout)."""

    status: str
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def why(self) -> str:
        """One line for a reply that is not ok."""
        if self.status == "hung":
            return f"{TOOL} hung"
        if self.status == "missing":
            return f"{TOOL} is not on this node's PATH"
        return (self.stderr.strip().splitlines() or [f"{TOOL} failed"])[-1]


def available() -> bool:
    return shutil.which(TOOL) is not None


def call(args: list[str], timeout_s: float = 30.0) -> Reply:
    """Run ``nvidia-smi ARGS``; never raises."""
    if not available():
        return Reply("missing")
    try:
        done = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Reply("hung")
    except (OSError, subprocess.SubprocessError) as exc:
        return Reply("failed", stderr=str(exc))
    return Reply("ok" if done.returncode == 0 else "failed", done.stdout, done.stderr)


def csv_rows(args: list[str], timeout_s: float = 15.0) -> list[list[str]] | None:
    """The rows of a ``--query-*`` call in CSV without header or units; None when it failed."""
    reply = call([*args, CSV], timeout_s)
    if not reply.ok:
        return None
    return [[c.strip() for c in line.split(",")] for line in reply.stdout.splitlines() if line.strip()]


# ---- derived queries --------------------------------------------------------------------

def gpu_count(timeout_s: float = 20.0) -> int | None:
    """GPUs ``nvidia-smi -L`` lists on this node; None when it cannot say (no nvidia-smi),
    0 when it fails (a driver that does not answer has no usable GPU)."""
    reply = call(["-L"], timeout_s)
    if reply.status == "missing":
        return None
    if not reply.ok:
        return 0
    return sum(1 for line in reply.stdout.splitlines() if line.startswith("GPU "))


def gpu_name(device_id: str | None) -> str | None:
    """The name of one GPU (index or UUID, as in CUDA_VISIBLE_DEVICES; any GPU when None)."""
    for extra in ([[f"--id={device_id}"]] if device_id else []) + [[]]:
        rows = csv_rows(["--query-gpu=name", *extra], timeout_s=10.0)
        if rows:
            return rows[0][0]
    return None


def driver_version() -> str | None:
    rows = csv_rows(["--query-gpu=driver_version"], timeout_s=10.0)
    return rows[0][0] if rows and rows[0] and rows[0][0] else None


def topology(ids: list[str]) -> str | None:
    """The links between the GPUs ``ids`` (e.g. "GPU0-GPU1 PIX"), "single GPU", or None
    where nvidia-smi cannot tell: the provenance every export carries."""
    reply = call(["topo", "-m"], timeout_s=10.0)
    if not reply.ok:
        return None
    links = parse_topo_matrix(reply.stdout).get("links", {})
    names = {f"GPU{i}" for i in ids if i.isdigit()}
    pairs = sorted(f"{a}-{b} {kind}" for (a, b), kind in links.items() if a < b and (not names or {a, b} <= names))
    return ", ".join(pairs) if pairs else "single GPU"


# ---- pure parsers -----------------------------------------------------------------------

def _cell(text: str) -> str | None:
    text = text.strip()
    return None if not text or text.startswith("[") or text in ("N/A", "Not Supported") else text


def _num(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.match(r"-?\d+", text.strip())
    return int(m.group(0)) if m else None


def parse_gpu_query(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits`` -> one dict per
    GPU: index, name, bus_id, memory_total_mib, memory_used_mib, util_percent, driver,
    gen_current, gen_max, width_current, width_max (None where not reported)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip() or line.lower().startswith("index"):
            continue
        cells = [_cell(c) for c in line.split(",")]
        if len(cells) < len(GPU_FIELDS):
            continue
        index, name, bus, mem_total, mem_used, util, driver, gcur, gmax, wcur, wmax = cells[:len(GPU_FIELDS)]
        gpus.append({"index": _num(index), "name": name, "bus_id": bus, "memory_total_mib": _num(mem_total),
                     "memory_used_mib": _num(mem_used), "util_percent": _num(util), "driver": driver,
                     "gen_current": _num(gcur), "gen_max": _num(gmax), "width_current": _num(wcur),
                     "width_max": _num(wmax)})
    return gpus


def parse_compute_apps(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory
    --format=csv,noheader,nounits`` -> [{bus_id, pid, name, used_mib}]."""
    apps = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 4 or not cells[1].isdigit():
            continue
        apps.append({"bus_id": cells[0], "pid": int(cells[1]), "name": ",".join(cells[2:-1]).strip(),
                     "used_mib": _num(cells[-1])})
    return apps


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """``nvidia-smi topo -m`` -> {"gpus": ["GPU0", ...], "links": {("GPU0","GPU1"): "PIX"},
    "affinity": {"GPU0": {"cpu": "0-31", "numa": "0"}}, "nics": [...]}. Only GPU-to-GPU
    links are kept (the NIC columns and the legend are skipped)."""
    lines = [line.rstrip() for line in text.splitlines()]
    header_i = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line.replace("\x1b[4m", ""))), None)
    out: dict[str, Any] = {"gpus": [], "links": {}, "affinity": {}, "nics": []}
    if header_i is None:
        return out
    header = [h.strip() for h in re.split(r"\t+", strip_ansi(lines[header_i]).strip()) if h.strip()]
    columns = [h for h in header if re.fullmatch(r"GPU\d+|NIC\d+|mlx\S+", h)]
    extra = header[len(columns):]
    for line in lines[header_i + 1:]:
        clean = strip_ansi(line)
        if not clean.strip() or clean.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in re.split(r"\t+", clean.strip())]
        row = cells[0]
        if not re.fullmatch(r"GPU\d+", row):
            if re.fullmatch(r"NIC\d+|mlx\S+", row):
                out["nics"].append(row)
            continue
        out["gpus"].append(row)
        values = cells[1:]
        for col, value in zip(columns, values):
            if col.startswith("GPU"):
                out["links"][(row, col)] = value
        rest = values[len(columns):]
        aff = {}
        for name, value in zip(extra, rest):
            low = name.lower()
            if "cpu" in low:
                aff["cpu"] = value
            elif "gpu numa" in low:
                aff["gpu_numa"] = value
            elif "numa" in low:
                aff["numa"] = value
        out["affinity"][row] = aff
    return out


def parse_topo_p2p(text: str) -> dict[tuple[str, str], str]:
    """``nvidia-smi topo -p2p r`` (or ``w``) -> {("GPU0","GPU1"): "OK"|"CNS"|...}."""
    out: dict[tuple[str, str], str] = {}
    columns: list[str] = []
    for line in text.splitlines():
        clean = strip_ansi(line).strip()
        if clean.startswith("Legend"):
            break
        cells = clean.split()
        if cells and all(re.fullmatch(r"GPU\d+", c) for c in cells):
            columns = cells
            continue
        if columns and cells and re.fullmatch(r"GPU\d+", cells[0]):
            for col, value in zip(columns, cells[1:]):
                if col != cells[0]:
                    out[(cells[0], col)] = value
    return out


def parse_cuda_version(text: str) -> str | None:
    """The driver's CUDA version from plain ``nvidia-smi`` output (``CUDA Version: 13.0``)."""
    m = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return m.group(1) if m else None
