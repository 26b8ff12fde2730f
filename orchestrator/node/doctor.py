"""``ncclsweep doctor [JOB]``: the pre-flight check a careful engineer runs before a night
of tuning. GPUs and whether they are busy, the topology (``nvidia-smi topo -m``), P2P
between each pair (``nvidia-smi topo -p2p r``, else ``torch.cuda.can_device_access_peer``),
PCIe link generation and width against the maximum, NCCL/CUDA/driver/torch/backend
versions, and the warnings that matter: ACS or IOMMU on a box that wants P2P, GPUs
already in use, mixed GPU models, fewer GPUs than the job needs.

For NCCL and the all-reduce: the NCCL release (torch's, and the one a job's rules use:
its ``nccl_version`` or torch's NCCL in the server's Python); the P2P level NCCL will use
(``NCCL_P2P_DISABLE``/``NCCL_P2P_LEVEL`` of the job and this environment, else NCCL's default,
PXB: no P2P across a CPU's root ports) and, for each GPU pair, its path and whether NCCL uses
P2P there and why (``nccl.p2p_decision``); and at each TP size the job may use, whether the
engines' custom all-reduce can run (the world sizes each engine declares with its backend,
``core.engines``: 2, 4, 6, 8 for vLLM and SGLang; more than two GPUs only when all are
NVLink-connected; P2P between every pair: vLLM's and SGLang's own conditions).

What it did not check it says so: without an NVIDIA tool the GPUs are "not checked", and a
job's pre-flight line lists each check and what it found (never "GPUs present" unseen).

The parsing of every tool's output is a pure function (``parse_*``), tested on captured
text; ``run_doctor`` only gathers the text (through ``runner``, replaceable in tests).
On a machine without NVIDIA GPUs it says so and succeeds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orchestrator.backends  # noqa: F401 - fills core.engines' registry with every backend's engine
from orchestrator.backends import backend_kinds, get_backend_class, shadowed
from orchestrator.config.job import load_job
from orchestrator.config.job_checks import nccl_release
from orchestrator.core import engines, nccl, versions
from orchestrator.node import (
    nvidia_smi,
    preflight,  # the checks `ncclsweep run` makes on every node before a launch
)
from orchestrator.node.nvidia_smi import (
    APP_FIELDS,
    CSV,
    GPU_FIELDS,
    TOOL,
    parse_compute_apps,
    parse_cuda_version,
    parse_gpu_query,
    parse_topo_matrix,
    parse_topo_p2p,
    strip_ansi,
)

P2P_STATUS = {"OK": "ok", "CNS": "chipset not supported", "GNS": "GPU not supported",
              "TNS": "topology not supported", "NS": "not supported", "U": "unknown"}
BUSY_MEMORY_MIB = 1024  # more used than this on an idle GPU means someone is there
BUSY_UTIL_PERCENT = 10

Runner = Callable[[list[str]], "str | None"]


# ---- pure parsers -------------------------------------------------------------------------

def parse_lspci_acs(text: str) -> list[dict[str, str]]:
    """``lspci -vvv`` -> the PCIe devices whose ACS control redirects or validates peer
    traffic (``ACSCtl: SrcValid+``, ``ReqRedir+`` or ``CmpltRedir+``): [{device, acsctl}].
    NCCL's troubleshooting guide: with ACS on, GPU peer-to-peer goes through the root
    complex (slow) or hangs."""
    out = []
    device = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            device = line.strip()
            continue
        m = re.search(r"ACSCtl:\s*(.*)$", line)
        if m and device:
            ctl = m.group(1).strip()
            if any(f"{bit}+" in ctl for bit in ("SrcValid", "ReqRedir", "CmpltRedir")):
                out.append({"device": device, "acsctl": ctl})
    return out


def iommu_state(sysfs_root: str | os.PathLike = "/") -> dict[str, Any]:
    """{"groups": number of /sys/kernel/iommu_groups entries, "cmdline": the iommu options on
    the kernel command line}. Groups present means an IOMMU is active."""
    root = Path(sysfs_root)
    groups_dir = root / "sys/kernel/iommu_groups"
    try:
        groups = sum(1 for _ in groups_dir.iterdir())
    except OSError:
        groups = 0
    try:
        cmdline = (root / "proc/cmdline").read_text()
    except OSError:
        cmdline = ""
    options = [w for w in cmdline.split() if "iommu" in w.lower()]
    return {"groups": groups, "cmdline": options}


# ---- judgement (pure) ---------------------------------------------------------------------

def assess(gpus: list[dict], apps: list[dict], topo: dict, p2p: dict, acs: list[dict] | None,
           iommu: dict, job_gpus: int | None = None) -> tuple[list[str], list[str]]:
    """(report lines, warnings) from the parsed facts."""
    lines: list[str] = []
    warnings: list[str] = []
    if not gpus:
        return ["no NVIDIA GPU found"], []
    lines.append(f"GPUs: {len(gpus)}")
    busy_by_bus = Counter(a["bus_id"].lower() for a in apps if a.get("bus_id"))
    for g in gpus:
        link = ""
        if g["gen_max"] or g["width_max"]:
            link = (f", PCIe gen {g['gen_current']}/{g['gen_max']} width x{g['width_current']}/x{g['width_max']}"
                    " (current/max)")
        mem = f"{g['memory_used_mib']}/{g['memory_total_mib']} MiB used" if g["memory_total_mib"] else "memory ?"
        util = f", {g['util_percent']}% busy" if g["util_percent"] is not None else ""
        lines.append(f"  GPU{g['index']} {g['name']} [{g['bus_id']}]: {mem}{util}{link}")
        bus = (g["bus_id"] or "").lower()
        procs = busy_by_bus.get(bus, 0)
        if procs or (g["memory_used_mib"] or 0) > BUSY_MEMORY_MIB or (g["util_percent"] or 0) > BUSY_UTIL_PERCENT:
            who = f"{procs} process(es), " if procs else ""
            warnings.append(f"GPU{g['index']} is in use ({who}{g['memory_used_mib']} MiB, {g['util_percent']}% "
                            f"busy): trials would compete with it and measure noise")
        if g["width_current"] and g["width_max"] and g["width_current"] < g["width_max"]:
            warnings.append(f"GPU{g['index']} PCIe link runs x{g['width_current']} of x{g['width_max']}: a "
                            f"narrowed link (riser, slot, seating) cuts all-reduce bandwidth")
        if g["gen_current"] and g["gen_max"] and g["gen_current"] < g["gen_max"]:
            lines.append(f"  note: GPU{g['index']} link at gen {g['gen_current']} of {g['gen_max']}; idle GPUs "
                         f"drop the link speed to save power, so re-check under load before worrying")
    names = Counter(g["name"] for g in gpus)
    if len(names) > 1:
        warnings.append("mixed GPU models: " + ", ".join(f"{n} x{c}" for n, c in names.items())
                        + "; tensor parallelism runs at the pace of the slowest")
    for a in apps:
        lines.append(f"  process {a['pid']} {a['name']} on {a['bus_id']}: {a['used_mib']} MiB")
    drivers = {g["driver"] for g in gpus if g["driver"]}
    if drivers:
        lines.append(f"driver: {', '.join(sorted(drivers))}")

    links = {k: v for k, v in (topo.get("links") or {}).items() if k[0] != k[1]}
    nvlink = any(v.startswith("NV") for v in links.values())
    if links:
        kinds = Counter(("NV#" if v.startswith("NV") else v) for (a, b), v in links.items() if a < b)
        described = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
        lines.append(f"topology: GPU pairs {described} ({'NVLink present' if nvlink else 'PCIe only'})")
        if kinds.get("SYS"):
            lines.append("  note: SYS pairs cross CPU sockets; all-reduce over them is the slowest path")
    pairs = {k: v for k, v in p2p.items() if k[0] < k[1]}
    if pairs:
        bad = {k: v for k, v in pairs.items() if v != "OK"}
        lines.append(f"P2P (read): {len(pairs) - len(bad)} of {len(pairs)} pairs OK")
        for (a, b), v in sorted(bad.items()):
            warnings.append(f"P2P {a}<->{b}: {P2P_STATUS.get(v, v)}; NCCL will route that pair through host memory")
    if job_gpus and job_gpus > len(gpus):
        warnings.append(f"the job wants up to {job_gpus} GPUs per node but this machine has {len(gpus)}")

    wants_p2p = len(gpus) > 1 and (not pairs or any(v == "OK" for v in pairs.values()))
    if acs is None:
        lines.append("ACS: not checked (lspci not available or not permitted)")
    elif acs:
        lines.append(f"ACS: enabled on {len(acs)} PCIe device(s)")
        if len(gpus) > 1:
            shown = "; ".join(a["device"][:60] for a in acs[:3])
            warnings.append(f"ACS is enabled on {len(acs)} PCIe bridge(s) ({shown}{'...' if len(acs) > 3 else ''}): "
                            f"GPU peer-to-peer traffic is redirected through the root complex, which is slow or "
                            f"hangs NCCL; disable ACS (BIOS, or setpci) on a bare-metal P2P box")
    else:
        lines.append("ACS: off on every PCIe device lspci shows")
    if iommu.get("groups"):
        mode = " ".join(iommu.get("cmdline") or []) or "no iommu option on the kernel command line"
        lines.append(f"IOMMU: on ({iommu['groups']} groups; {mode})")
        passthrough = any(o.lower() in ("iommu=pt", "iommu.passthrough=1") for o in iommu.get("cmdline") or [])
        if wants_p2p and not passthrough:
            warnings.append("IOMMU is on and not in passthrough mode while GPUs use P2P: NCCL can hang or run "
                            "slowly; on bare metal use iommu=pt (or disable the IOMMU), or set NCCL_P2P_DISABLE=1")
    else:
        lines.append("IOMMU: off (no /sys/kernel/iommu_groups)")
    return lines, warnings


_PATH_WHY = {"NVL": "NVLink", "PIX": "through at most one PCIe switch", "PXB": "through PCIe switches, not the CPU",
             "PHB": "through the CPU's root ports", "SYS": "across CPU sockets"}


def _pairs(topo: dict) -> list[tuple[str, str, str]]:
    """(GPUa, GPUb, link) once per pair, in index order."""
    def index(name: str) -> int:
        return int(name[3:]) if name[3:].isdigit() else 0
    return sorted(((a, b, v) for (a, b), v in (topo.get("links") or {}).items() if index(a) < index(b)),
                  key=lambda t: (index(t[0]), index(t[1])))


def p2p_lines(topo: dict, p2p: dict, env: dict[str, str], cpu_vendor: str | None) -> tuple[list[str], list[str]]:
    """(lines, warnings): the P2P level NCCL will use and why, then each GPU pair: its path,
    and whether NCCL uses P2P there (the level allows it and the driver reports P2P)."""
    pairs = _pairs(topo)
    if not pairs:
        return [], []
    level, why = nccl.p2p_level(env, cpu_vendor, len(topo.get("gpus") or []))
    lines = [f"P2P level NCCL will use: {level} ({why})"]
    beyond = []
    for a, b, link in pairs:
        path = nccl.nccl_path(link)
        allowed = nccl.p2p_decision(link, level)
        status = p2p.get((a, b)) or p2p.get((b, a))
        where = f"{link}" + (f" = NCCL {path}, {_PATH_WHY.get(path, '')}" if path else "")
        if allowed is None:
            lines.append(f"  {a}-{b}: {where}: not judged (nvidia-smi names this link in no way NCCL's paths cover)")
        elif not allowed:
            beyond.append(path)
            lines.append(f"  {a}-{b}: {where}: no P2P ({path} is beyond {level}): NCCL goes through host memory")
        elif status and status != "OK":
            lines.append(f"  {a}-{b}: {where}: the level allows P2P but the driver reports "
                         f"{P2P_STATUS.get(status, status)}: NCCL goes through host memory")
        else:
            lines.append(f"  {a}-{b}: {where}: P2P ({path} is within {level})")
    warnings = []
    if beyond and level == nccl.DEFAULT_P2P_LEVEL:
        farthest = max(beyond, key=nccl.PATH_TYPES.index)
        warnings.append(f"{len(beyond)} GPU pair(s) get no P2P at NCCL's default level {level} (their paths reach "
                        f"{farthest}); NCCL_P2P_LEVEL={farthest} would allow it, but raising it has deadlocked "
                        f"some PCIe boxes at start: tune it in the space (env.NCCL_P2P_LEVEL), where a hang ends "
                        f"in a timeout, rather than setting it for every server")
    return lines, warnings


def custom_world_sizes() -> tuple[int, ...]:
    """The world sizes where a registered engine's custom all-reduce runs
    (``Engine.custom_allreduce_world_sizes``, declared with each backend: vLLM's and SGLang's
    2, 4, 6, 8), in order."""
    return tuple(sorted({size for engine in engines.registered() for size in engine.custom_allreduce_world_sizes}))


def custom_allreduce_lines(topo: dict, p2p: dict, tp_sizes: list[int]) -> list[str]:
    """At each TP size, whether the engines' custom all-reduce can run on the first TP GPUs,
    by vLLM's and SGLang's own conditions (the module docstring; the world sizes the registered
    engines declare, ``custom_world_sizes``)."""
    sizes = custom_world_sizes()
    gpus = list(topo.get("gpus") or [])
    links = {frozenset((a, b)): v for a, b, v in _pairs(topo)}
    out = []
    for tp in sorted({t for t in tp_sizes if t > 1}):
        group = gpus[:tp]
        if len(group) < tp:
            out.append(f"  TP {tp}: not on this machine ({len(gpus)} GPUs)")
            continue
        pair_links = [(a, b, links.get(frozenset((a, b)), "")) for i, a in enumerate(group) for b in group[i + 1:]]
        nvlink = all(v.upper().startswith("NV") for _, _, v in pair_links)
        no_p2p = [(a, b) for a, b, _ in pair_links if (p2p.get((a, b)) or p2p.get((b, a)) or "OK") != "OK"]
        if tp not in sizes:
            verdict = f"no: it runs at TP {', '.join(map(str, sizes))} only"
        elif tp > 2 and not nvlink:
            verdict = ("no: more than two PCIe-only GPUs; vLLM and SGLang turn it off by themselves and only log "
                       "it (the trial warns once per study)")
        elif no_p2p:
            verdict = f"no: no P2P between {no_p2p[0][0]} and {no_p2p[0][1]} (the engines' P2P test fails)"
        else:
            verdict = "yes" + ("" if nvlink else " (two PCIe GPUs with P2P)")
        out.append(f"  TP {tp} on {group[0]}..{group[-1]}: {verdict}")
    return ["custom all-reduce (allreduce.backend custom) can run:", *out] if out else []


def cpu_vendor(sysfs_root: str | os.PathLike = "/") -> str | None:
    """The CPU's vendor_id from /proc/cpuinfo (AuthenticAMD, GenuineIntel), None unknown."""
    try:
        text = (Path(sysfs_root) / "proc/cpuinfo").read_text()
    except OSError:
        return None
    m = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
    return m.group(1) if m else None


# ---- gathering ----------------------------------------------------------------------------

def default_runner(argv: list[str]) -> str | None:
    """stdout of a command, or None when it is missing, fails or takes over 30 s
    (nvidia-smi through ``nvidia_smi.call``, the one place that runs it)."""
    if argv[0] == nvidia_smi.TOOL:
        reply = nvidia_smi.call(argv[1:])
        return reply.stdout if reply.ok else None
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _torch_p2p(count: int) -> dict[tuple[str, str], str]:
    try:
        import torch  # heavy: imported only where a measurement runs on the device

        if not torch.cuda.is_available():
            return {}
        return {(f"GPU{a}", f"GPU{b}"): "OK" if torch.cuda.can_device_access_peer(a, b) else "NS"
                for a in range(count) for b in range(count) if a != b}
    except Exception:  # noqa: BLE001 - a fallback; doctor must not fail on it
        return {}


@dataclass
class Report:
    """What ``doctor`` found: the report's lines and warnings, and the facts behind them (``gpus``
    None: not checked; ``versions`` None: not probed; ``preflight`` None: no job)."""

    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] | None = None
    versions: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None


def run_doctor(job=None, runner: Runner | None = None, sysfs_root: str = "/",
               probe_versions: bool = True) -> tuple[list[str], list[str]]:
    """(report lines, warnings) for this machine and, when given, a loaded ``Job``."""
    found = examine(job, runner, sysfs_root, probe_versions)
    return found.lines, found.warnings


def examine(job=None, runner: Runner | None = None, sysfs_root: str = "/", probe_versions: bool = True) -> Report:
    """``run_doctor``'s report with its facts (``Report``)."""
    run = runner or default_runner
    report = Report()
    lines, warnings = report.lines, report.warnings
    query = run([TOOL, f"--query-gpu={','.join(GPU_FIELDS)}", CSV])
    gpus = parse_gpu_query(query or "")
    report.gpus = gpus if query is not None else None
    need = int(getattr(job, "gpus_per_node", 0) or 0) if job is not None else None
    if query is None or not gpus:
        lines.append("no NVIDIA GPU found (nvidia-smi is missing or lists no GPU): GPUs, topology, P2P and the "
                     "custom all-reduce not checked; " + (
                         f"this job needs {need} GPUs per node, so its trials cannot run on this machine" if need else
                         "this job is a CPU job (gpus_per_node: 0) and needs none" if job is not None else
                         "a CPU job (gpus_per_node: 0) can still run"))
        if need:
            warnings.append(f"the job needs {need} GPUs per node and this machine shows none: run doctor on a GPU "
                            f"node of the job")
    else:
        apps = parse_compute_apps(run([TOOL, f"--query-compute-apps={','.join(APP_FIELDS)}",
                                       CSV]) or "")
        topo_text = run([TOOL, "topo", "-m"]) or ""
        topo = parse_topo_matrix(topo_text)
        p2p = parse_topo_p2p(run([TOOL, "topo", "-p2p", "r"]) or "")
        if not p2p and len(gpus) > 1:
            p2p = _torch_p2p(len(gpus))
        lspci = run(["lspci", "-vvv"])
        acs = parse_lspci_acs(lspci) if lspci else None
        job_gpus = getattr(job, "gpus_per_node", None) if job is not None else None
        more, warns = assess(gpus, apps, topo, p2p, acs, iommu_state(sysfs_root), job_gpus)
        lines += more
        warnings += warns
        if topo_text.strip():
            lines.append("nvidia-smi topo -m:")
            matrix = strip_ansi(topo_text).split("Legend")[0]
            lines += ["  " + line for line in matrix.splitlines() if line.strip()][:40]
        cuda = parse_cuda_version(run([TOOL]) or "")
        if cuda:
            lines.append(f"CUDA (driver supports): {cuda}")
        env = {**{k: v for k, v in os.environ.items() if k.startswith("NCCL_")}, **dict(getattr(job, "env", {}) or {})}
        more, warns = p2p_lines(topo, p2p, env, cpu_vendor(sysfs_root))
        lines += more
        warnings += warns
        lines += custom_allreduce_lines(topo, p2p, _tp_sizes(job, len(gpus)))
    if probe_versions:
        lines += _version_lines(job)
        report.versions = {**versions.torch_versions(), "backends": _backend_releases()}
    nccl_env = {k: v for k, v in sorted(os.environ.items())
                if k.startswith("NCCL_") and k != "NCCL_VERSION"}  # NVIDIA images set NCCL_VERSION
    if nccl_env:
        lines.append("NCCL variables set in this environment (every server inherits them): "
                     + " ".join(f"{k}={v}" for k, v in nccl_env.items()))
    if job is not None:
        lines += _job_lines(job, warnings, len(gpus) if query is not None else None, report)
    return report


def _tp_sizes(job, gpus: int) -> list[int]:
    """The TP sizes a job may use (its space's and baseline's), or without a job 2 and all GPUs."""
    if job is None:
        return [2, gpus]
    sizes = {int(job.baseline.get("tp_size", 1))} if isinstance(job.baseline.get("tp_size", 1), int) else set()
    if "tp_size" in job.space:
        sizes |= {v for v in job.space.param("tp_size").values(10_000) or () if isinstance(v, int)}
    return sorted(sizes)


def _version_lines(job) -> list[str]:
    t = versions.torch_versions()
    out = [f"torch: {t['torch'] or 'not installed'}; its CUDA: {t['cuda'] or '-'}; its NCCL: {t['nccl'] or '-'}"]
    out += _backend_lines()
    return out


def _backend_lines() -> list[str]:
    """The release each registered backend finds installed here (asked of the backend)."""
    out = []
    for kind, release in _backend_releases(broken=True).items():
        out.append(f"{kind}: {release}")
    out += [f"entry point ignored, it names a built-in backend: {name}" for name in shadowed()]
    return out


def _backend_releases(broken: bool = False) -> dict[str, str]:
    """Backend kind -> the release it finds installed here (asked of the backend; with ``broken``,
    a backend that cannot be loaded too, saying so)."""
    out = {}
    for kind in backend_kinds():
        try:
            release = get_backend_class(kind).installed_release()
        except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, not fatal
            if broken:
                out[kind] = f"cannot be loaded ({exc})"
            continue
        if release:
            out[kind] = release
    return out


def _job_lines(job, warnings: list[str], gpus_seen: int | None, report: Report | None = None) -> list[str]:
    out = [f"job: study {job.study}, backend {job.backend.kind}, gpus_per_node {job.gpus_per_node}"]
    try:
        backend = job.backend_obj()
        version = backend.version()
    except Exception as exc:  # noqa: BLE001 - the report says what went wrong instead
        warnings.append(f"backend {job.backend.kind}: {exc}")
        return out
    if version:
        out.append(f"backend {job.backend.kind}: {version}")
    lines, warns = backend.diagnose()
    out += lines
    warnings += warns
    found = nccl_release(job.nccl_version, backend)
    where = ("the job's nccl_version" if job.nccl_version
             else f"torch's NCCL in {backend.torch_python() or 'this Python'}")
    out.append(f"NCCL for this job's rules: {found} ({where})" if found else
               "NCCL for this job's rules: unknown (no torch NCCL in the server's Python and no nccl_version in the "
               "job): the per-collective form is accepted, NCCL_SYM_* and nccl_symm_mem are refused as on NCCL 2.29+")
    env = getattr(job, "env", {}) or {}
    if env:
        out.append("job env: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))

    need = preflight.needs(job)
    problems = preflight.node_problems(need)
    warnings += [f"pre-flight: {p}" for p in problems]
    checked = _checked(need, gpus_seen)
    out.append("pre-flight on this node: " + ("; ".join(problems) if problems else "ok")
               + f" (checked: {'; '.join(checked)})")
    if report is not None:
        report.preflight = {"ok": not problems, "problems": list(problems), "checked": checked}
    return out


def _checked(need: dict[str, Any], gpus_seen: int | None) -> list[str]:
    """What the pre-flight looked at, and what it found: each check named, none assumed."""
    out = []
    command = need.get("command")
    if command:
        where = preflight.resolve(command, {**os.environ, **need.get("env", {})})
        out.append(f"server command {command}: " + (f"found at {where}" if where else "not found"))
    wanted = need.get("gpus") or 0
    if not wanted:
        out.append("GPUs: none needed (a CPU job)")
    elif gpus_seen is None:
        out.append(f"GPUs: {wanted} needed per node, not counted (no NVIDIA tool answers here)")
    else:
        out.append(f"GPUs: {wanted} needed per node, {gpus_seen} listed by nvidia-smi")
    model = need.get("model")
    out.append(f"model path {model}: {'present' if Path(os.path.expanduser(model)).exists() else 'missing'}" if model
               else "model: not a local path (a Hub id or a preset), not checked here")
    for draft in need.get("draft_models") or ():
        out.append(f"draft model {draft}: {'present' if Path(os.path.expanduser(draft)).exists() else 'missing'}")
    return out


def format_report(lines: list[str], warnings: list[str]) -> str:
    text = "\n".join(lines)
    if warnings:
        text += "\n\nwarnings:\n" + "\n".join(f"  ! {w}" for w in warnings)
    else:
        text += "\n\nno warnings"
    return text


def main_doctor(job_path: str | None) -> int:
    """Print the pre-flight report for this machine (and the job, when given); 0 even with
    warnings and on a machine without GPUs. A bad job file raises BadInput (exit 2 in cli)."""
    job = None
    if job_path:
        job = load_job(job_path)
    lines, warnings = run_doctor(job)
    print(format_report(lines, warnings))
    return 0
