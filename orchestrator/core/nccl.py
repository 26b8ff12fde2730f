"""NCCL environment variables: allowed values, validation, PCIe safety, and what NCCL's
own log says it used.

Rules (NCCL 2.2x; read in NVIDIA/nccl ``src/graph/tuning.cc`` ``parseList``,
``src/graph/paths.cc`` ``ncclGetLevel``, ``src/misc/param.cc`` and ``src/init.cc``):

- ``NCCL_PROTO``: ``LL``, ``LL128``, ``Simple``. ``NCCL_ALGO``: ``Tree``, ``Ring``,
  ``CollNetDirect``, ``CollNetChain``, ``NVLS``, ``NVLSTree``, ``PAT``. Names compare
  case-insensitively (``strcasecmp``), lists are comma-separated, a leading ``^`` turns the
  list into an exclusion list, and from NCCL 2.24 entries can be per collective:
  ``allreduce:tree;broadcast:ring`` (collectives ``Broadcast``, ``Reduce``, ``AllGather``,
  ``ReduceScatter``, ``AllReduce``; only the first entry may lack a prefix). From 2.24 an
  unknown token fails communicator creation (``ncclInvalidUsage``); before 2.24 it is
  silently ignored, which is why ``verify_applied`` reads the log.
- A subtle one: LL128 is normally *auto* (enabled only where NCCL knows it is safe). Any
  exclusion list that does not name LL128 (``NCCL_PROTO=^LL``) marks every other protocol
  explicitly enabled, which *forces* LL128 on, as does naming it. ``unsafe_on_pcie``
  reports both, since LL128 forced over PCIe can silently corrupt data.
- ``NCCL_P2P_LEVEL``: ``LOC NVL PIX PXB PHB SYS`` (compared case-sensitively by NCCL, so the
  canonical spelling is upper case) or the old integers 0..5 (0 LOC, 1 PIX, 2 PXB, 3 PHB,
  4 and 5 SYS).
- Booleans ``NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_GRAPH_MIXING_SUPPORT NCCL_NVLS_ENABLE``
  (``NCCL_COLLNET_ENABLE`` too): ``0`` or ``1``. NCCL reads them with ``strtol``, so the
  string ``true`` would silently mean 0: only 0/1 (or a YAML boolean) are accepted.
- Integers ``NCCL_MIN_CTAS NCCL_MAX_CTAS NCCL_MIN_NCHANNELS NCCL_MAX_NCHANNELS
  NCCL_BUFFSIZE``: positive (decimal or 0x hex, as ``strtoll(.., 0)`` reads them).
  ``NCCL_NTHREADS``: 64, 128, 256 or 512.
- Any other ``NCCL_*`` name is passed through unchanged with an ``UnknownNcclVariable``
  warning (NCCL has many more knobs than the tuner knows).
- The canonical spelling of a per-collective value names collectives and elements as NCCL's
  own tables do (``LL,Simple;AllReduce:^LL``, ``AllReduce:Tree;Broadcast:Ring``): NCCL compares
  them case-insensitively, so the server gets the same setting as written, and config identities
  (and the studies recorded with them) stay what they were.
- Knobs a PCIe node cannot use (``unsafe_on_pcie``): LL128 forced, NVLS, CollNet, PAT alone for
  all-reduce (any release), and from NCCL 2.29 the symmetric kernels (``NCCL_SYM_*``: 2.29 runs
  them only on fully NVLink-connected systems, release notes of 2.29.2 and ``ncclSymkAvailable``
  in ``src/sym_kernels.cc``), so a PCIe box ignores them. Which release applies is the caller's
  to say (``nccl_version``); an unknown release is taken as 2.29 or later.

P2P between two GPUs (``p2p_decision``, read in ``src/graph/paths.cc`` ``ncclTopoCheckP2p``):
NCCL uses P2P when the PCI path between them is no farther than the P2P level; the level is
``NCCL_P2P_LEVEL`` when set (``NCCL_P2P_DISABLE=1``: ``LOC``, no P2P), else ``PXB`` (no P2P
across a CPU's root ports), except ``SYS`` on an AMD x86 CPU with at most two GPUs; NCCL 2.2x
path types in order: LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS.

What the log says (``NCCL_DEBUG=INFO``; ``debug_env()`` gives the settings):
``NCCL version 2.28.9+cuda13.0``; ``NCCL_PROTO set by environment to LL`` (parameters
read through ``NCCL_PARAM`` print ``NCCL_X set by environment to 4.``; ``NCCL_MIN_CTAS``
and ``NCCL_GRAPH_MIXING_SUPPORT`` may instead print ``Comm config minCTAs reset to
NCCL_MIN_CTAS=4``); ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`` transports;
``24 coll channels, ...``; ``ncclCommInitRank... nranks 2``; with ``TUNING`` per call
``AllReduce: 12288 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}`` (2.24+; under CUDA
graphs only at capture). See ``parse_log`` for the keys.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from typing import Any

from orchestrator.core.errors import brief
from orchestrator.core.records import FailureKind

# NCCL's own spellings (src/init.cc ncclFuncStr / ncclAlgoStr / ncclProtoStr).
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
_P2P_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")  # integer form, as NCCL maps it
NTHREADS = (64, 128, 256, 512)
PER_COLLECTIVE_SINCE = (2, 24)
SYMMETRIC_NVLINK_ONLY_SINCE = (2, 29)  # the symmetric kernels run only on fully NVLink-connected systems
SYMMETRIC_PREFIX = "NCCL_SYM_"  # NCCL_SYM_KERNEL, NCCL_SYM_CTAS, NCCL_SYM_TMA_ENABLE, ... (src/sym_kernels.cc)
# NCCL's path types, nearest first (src/graph/topo.cc topoPathTypeStr, 2.2x); P2P is used up to the level
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
DEFAULT_P2P_LEVEL = "PXB"
# what `nvidia-smi topo -m` calls a pair's connection, as NCCL's path type (NODE: through the host
# bridges of one CPU, which NCCL counts as PHB)
_SMI_PATH = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
# A trial warning about which all-reduce path an engine took (the backends write them) starts so:
# it is not one of NCCL's settings, which ``is_verification_warning`` tells apart.
ENGINE_PATH_WARNING = "all-reduce path: "

BOOLEAN_VARS = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_NVLS_ENABLE",
                "NCCL_COLLNET_ENABLE")
POSITIVE_INT_VARS = ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                     "NCCL_BUFFSIZE")
# Variables that are not settings of the collective but of NCCL's own logging.
DEBUG_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT")
KNOWN_VARS = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_NTHREADS", *BOOLEAN_VARS,
              *POSITIVE_INT_VARS, *DEBUG_VARS)

# Booleans whose default NCCL does not print when it is requested (paths.cc prints
# NCCL_P2P_DISABLE only when it is 1).
_SILENT_WHEN = {"NCCL_P2P_DISABLE": "0"}


class UnknownNcclVariable(UserWarning):
    """An NCCL_* name the tuner has no rule for; its value is passed through unchanged."""


def debug_env(tuning: bool = False) -> dict[str, str]:
    """NCCL_DEBUG settings for a launch (the one definition: trial servers, ``bench
    --verify-nccl``, the pre-screen's probes): start-up lines only (cheap enough for timed
    trials, and enough to verify the settings), or with per-call TUNING lines for a separate
    verification launch."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING" if tuning else "INIT,ENV"}


# ---- validation -------------------------------------------------------------------------

def _version_tuple(version: str | tuple | None) -> tuple[int, ...] | None:
    if version is None:
        return None
    if isinstance(version, tuple):
        return version
    nums = re.findall(r"\d+", str(version).split("+")[0])
    return tuple(int(n) for n in nums[:3]) if nums else None


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _parse_list(name: str, text: str, elems: tuple[str, ...],
                nccl_version=None) -> list[tuple[str | None, bool, list[str]]]:
    """Parse NCCL's ``[prefix:][^]a,b;prefix:[^]c`` grammar into (prefix, exclude, elems)
    with canonical spellings; raises ValueError naming the rule and the bad token."""
    allowed = ", ".join(elems)
    rule = (f"{name} is a comma list of {allowed} (any case), optionally starting with ^ to exclude, "
            f"or per collective 'allreduce:tree;broadcast:ring' (NCCL >= 2.24)")
    if not text:
        raise ValueError(f"{name} must not be empty; {rule}")
    entries = []
    parts = text.split(";")
    for i, part in enumerate(parts):
        part = part.strip()
        if not part:
            raise ValueError(f"{name}={brief(text)}: empty entry between ';'; {rule}")
        prefix = None
        if ":" in part:
            prefix_text, _, part = part.partition(":")
            if ":" in part:
                raise ValueError(f"{name}={brief(text)}: more than one ':' in one entry; {rule}")
            prefix = _canonical(prefix_text.strip(), FUNCTIONS)
            if prefix is None:
                raise ValueError(f"{name}={brief(text)}: unknown collective {brief(prefix_text.strip())} before ':'; "
                                 f"allowed: {', '.join(FUNCTIONS)}")
        elif i > 0:
            raise ValueError(f"{name}={brief(text)}: every entry after the first needs a collective prefix "
                             f"(like allreduce:{part}); NCCL refuses it otherwise")
        exclude = part.startswith("^")
        body = part[1:] if exclude else part
        names = []
        for token in body.split(","):
            token = token.strip()
            if not token:
                raise ValueError(f"{name}={brief(text)}: empty element in a list; {rule}")
            canon = _canonical(token, elems)
            if canon is None:
                raise ValueError(f"{name}={brief(text)}: {brief(token)} is not a known value; allowed: {allowed} "
                                 f"(any case, ^ to exclude)")
            if canon not in names:
                names.append(canon)
        names.sort(key=elems.index)  # a set in NCCL: order cannot matter
        entries.append((prefix, exclude, names))
    if len(entries) > 1 or entries[0][0] is not None:
        version = _version_tuple(nccl_version)
        if version is not None and version < PER_COLLECTIVE_SINCE:
            raise ValueError(f"{name}={brief(text)}: the per-collective form needs NCCL >= 2.24 (found "
                             f"{nccl_version}); older NCCL ignores the whole value")
    return entries


def _canonical(token: str, elems: tuple[str, ...]) -> str | None:
    low = token.lower()
    return next((e for e in elems if e.lower() == low), None)


def _format_list(entries) -> str:
    out = []
    for prefix, exclude, names in entries:
        body = ("^" if exclude else "") + ",".join(names)
        out.append(f"{prefix}:{body}" if prefix else body)
    return ";".join(out)


def enable_matrix(name: str, value: str) -> dict[str, dict[str, int]]:
    """What NCCL enables per collective for an NCCL_PROTO/NCCL_ALGO value, replaying
    ``parseList``: 1 enabled, 0 disabled, 2 auto (LL128's default: on only where NCCL
    deems it safe). Raises ValueError for a value NCCL would refuse."""
    elems = PROTOCOLS if name == "NCCL_PROTO" else ALGORITHMS
    matrix = {f: {e: (2 if e == "LL128" else 1) for e in elems} for f in FUNCTIONS}
    for prefix, exclude, names in _parse_list(name, _as_text(value), elems):
        for func in ([prefix] if prefix else FUNCTIONS):
            for e in elems:
                matrix[func][e] = 1 if exclude else 0
            for e in names:
                matrix[func][e] = 0 if exclude else 1
    return matrix


def validate_value(name: str, value: Any, nccl_version: str | tuple | None = None) -> str:
    """The canonical spelling of ``value`` for NCCL variable ``name``; raises ValueError
    stating the rule, the bad value and the allowed values. Unknown NCCL_* names pass
    through unchanged with an ``UnknownNcclVariable`` warning. ``nccl_version`` (when
    known) refuses the per-collective form before NCCL 2.24."""
    text = _as_text(value)
    if name in ("NCCL_PROTO", "NCCL_ALGO"):
        elems = PROTOCOLS if name == "NCCL_PROTO" else ALGORITHMS
        entries = _parse_list(name, text, elems, nccl_version)
        canon = _format_list(entries)
        matrix = enable_matrix(name, canon)
        for func, row in matrix.items():
            if not any(row.values()):
                what = "protocol" if name == "NCCL_PROTO" else "algorithm"
                raise ValueError(f"{name}={brief(text)} leaves {func} no {what} at all; allowed: {', '.join(elems)}")
        return canon
    if name == "NCCL_P2P_LEVEL":
        upper = text.upper()
        if upper in P2P_LEVELS:
            return upper
        if re.fullmatch(r"\d+", text):
            return str(int(text))
        raise ValueError(f"NCCL_P2P_LEVEL must be one of {', '.join(P2P_LEVELS)} or an integer 0..5, not {brief(text)}")
    if name in BOOLEAN_VARS:
        if text in ("0", "1"):
            return text
        raise ValueError(f"{name} must be 0 or 1 (NCCL reads it as an integer, so 'true' would mean 0), "
                         f"not {brief(text)}")
    if name in POSITIVE_INT_VARS or name == "NCCL_NTHREADS":
        number = _int_or_none(text)
        if number is None or number <= 0:
            raise ValueError(f"{name} must be a positive integer, not {brief(text)}")
        if name == "NCCL_NTHREADS" and number not in NTHREADS:
            raise ValueError(f"NCCL_NTHREADS must be one of {', '.join(map(str, NTHREADS))}, not {brief(text)}")
        return str(number)
    if name.startswith("NCCL_") and name not in KNOWN_VARS and not name.startswith(SYMMETRIC_PREFIX):
        warnings.warn(f"{name} is not an NCCL variable the tuner knows; its value {brief(text)} is passed "
                      f"through unchecked", UnknownNcclVariable, stacklevel=2)
    return text


def _int_or_none(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def normalize_value(name: str, value: Any) -> str:
    """Canonical spelling (case-folded, list order NCCL's own) for config identity; never
    raises: a value it cannot parse comes back as ``str(value)``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnknownNcclVariable)
            return validate_value(name, value)
    except (ValueError, TypeError):
        return str(value)


def unsafe_on_pcie(name: str, value: Any) -> str | None:
    """Why this NCCL setting is unsafe on a single PCIe node, or None. LL128 forced (named,
    or implied by an exclusion list), NVLS (needs NVSwitch), CollNet (needs a network
    plugin), PAT as the only all-reduce algorithm (NCCL never uses it for all-reduce)."""
    text = _as_text(value)
    if name == "NCCL_PROTO":
        try:
            matrix = enable_matrix(name, text)
        except ValueError:
            return None
        forced = [f for f in FUNCTIONS if matrix[f]["LL128"] == 1]
        if forced:
            how = ("the exclusion list marks every protocol it does not name as enabled, LL128 included"
                   if any(ex and "LL128" not in names for _, ex, names in _parse_list(name, text, PROTOCOLS))
                   else "it names LL128")
            which = "all collectives" if len(forced) == len(FUNCTIONS) else ", ".join(forced)
            return (f"forces LL128 for {which} ({how}); NCCL enables LL128 by itself only where it is "
                    f"safe, and forced over PCIe it can silently corrupt data")
        return None
    if name == "NCCL_ALGO":
        try:
            entries = _parse_list(name, text, ALGORITHMS)
            matrix = enable_matrix(name, text)
        except ValueError:
            return None
        named = {n for _, ex, names in entries if not ex for n in names}
        if named & {"NVLS", "NVLSTree"}:
            return "asks for NVLS, which needs NVSwitch (NVLink multicast); a PCIe box has none"
        if named & {"CollNetDirect", "CollNetChain"}:
            return "asks for CollNet, which needs a CollNet network plugin (e.g. SHARP); a single PCIe node has none"
        usable = [a for a, on in matrix["AllReduce"].items() if on and a != "PAT"]
        if not usable:
            return "leaves AllReduce only PAT, which NCCL never uses for all-reduce"
        return None
    if name == "NCCL_NVLS_ENABLE" and text == "1":
        return "enables NVLS, which needs NVSwitch multicast; keep NCCL_NVLS_ENABLE=0 on PCIe and shared machines"
    if name == "NCCL_COLLNET_ENABLE" and text == "1":
        return "enables CollNet, which needs a CollNet network plugin (e.g. SHARP)"
    return None


def release_text(nccl_version: str | tuple | None) -> str:
    """How a message names the NCCL release it judged by."""
    version = _version_tuple(nccl_version)
    return f"NCCL {'.'.join(map(str, version))}" if version else "an NCCL release not known here"


def symmetric_kernels_ignored(nccl_version: str | tuple | None) -> str | None:
    """Why NCCL's symmetric kernels cannot run on a PCIe node with this release, or None
    (before 2.29 they could). An unknown release is taken as 2.29 or later: what current
    engines ship."""
    version = _version_tuple(nccl_version)
    if version is not None and version < SYMMETRIC_NVLINK_ONLY_SINCE:
        return None
    return (f"from NCCL 2.29 the symmetric kernels run only on fully NVLink-connected systems, so a PCIe node "
            f"ignores them ({release_text(nccl_version)})")


def ignored_on_pcie(name: str, value: Any, nccl_version: str | tuple | None) -> str | None:
    """Why the NCCL release ``nccl_version`` ignores this setting on a PCIe node, or None: the
    version-dependent rules (``NCCL_SYM_*`` from 2.29); ``unsafe_on_pcie`` holds the others."""
    if name.startswith(SYMMETRIC_PREFIX):
        return symmetric_kernels_ignored(nccl_version)
    return None


def needs_release(name: str, value: Any) -> bool:
    """Whether a rule about this setting depends on the NCCL release (the per-collective form,
    the symmetric kernels): only then is the release looked up at validate time."""
    if name.startswith(SYMMETRIC_PREFIX):
        return True
    return name in ("NCCL_PROTO", "NCCL_ALGO") and (";" in _as_text(value) or ":" in _as_text(value))


# ---- P2P between two GPUs -----------------------------------------------------------------

def p2p_level(env: dict[str, str], cpu_vendor: str | None = None, gpu_count: int = 0) -> tuple[str, str]:
    """(the P2P level NCCL will use, why) for a server with environment ``env``:
    ``NCCL_P2P_DISABLE=1`` (LOC: no P2P), ``NCCL_P2P_LEVEL`` (a name or NCCL's old integers),
    else NCCL's default: PXB, or SYS on an AMD CPU with at most two GPUs (module docstring)."""
    if str(env.get("NCCL_P2P_DISABLE", "")).strip() in ("1", "true", "True"):
        return "LOC", "NCCL_P2P_DISABLE=1"
    given = str(env.get("NCCL_P2P_LEVEL", "")).strip()
    if given:
        if given in PATH_TYPES:
            return given, f"NCCL_P2P_LEVEL={given}"
        if given.isdigit():
            return _P2P_OLD_LEVELS[min(int(given), 5)], f"NCCL_P2P_LEVEL={given} (NCCL's old numbering)"
        # NCCL compares the names case-sensitively: anything else is ignored and the default stands
        default, why = p2p_level({}, cpu_vendor, gpu_count)
        return default, f"{why}; NCCL_P2P_LEVEL={given} is not a level NCCL recognises, so it is ignored"
    if (cpu_vendor or "").lower().startswith(("amd", "authenticamd")) and 0 < gpu_count <= 2:
        return "SYS", "NCCL's default on an AMD CPU with at most two GPUs"
    return DEFAULT_P2P_LEVEL, "NCCL's default: no P2P across a CPU's root ports"


def nccl_path(smi_link: str) -> str | None:
    """NCCL's path type for a pair as ``nvidia-smi topo -m`` shows it (NV#: NVLink), or None."""
    link = smi_link.strip().upper()
    if link.startswith("NV"):
        return "NVL"
    return _SMI_PATH.get(link)


def p2p_decision(smi_link: str, level: str) -> bool | None:
    """Whether NCCL's level check lets a pair with this ``nvidia-smi`` link use P2P (None:
    a link nvidia-smi names in a way NCCL's path types do not cover)."""
    path = nccl_path(smi_link)
    if path is None or level not in PATH_TYPES:
        return None
    return PATH_TYPES.index(path) <= PATH_TYPES.index(level)


# ---- the log ----------------------------------------------------------------------------

_RE_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(\S*)")
_RE_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\s*$")
_RE_RESET = re.compile(r"Comm config \w+ reset to (?:\S+ by )?(NCCL_[A-Z0-9_]+)=(\S+)")
_RE_VIA = re.compile(r"\bvia ((?:P2P|SHM|NET|CollNet|NVLS)[/\w]*)")
_RE_CHANNEL_TOTAL = re.compile(r"NCCL INFO Channel \d+/(\d+) :(?!.*\bvia\b)")
_RE_COLL_CHANNELS = re.compile(r"\b(\d+) coll channels\b")
_RE_NRANKS = re.compile(r"\bn[Rr]anks (\d+)\b")
_RE_TUNING = re.compile(r"\b([A-Za-z]+): (\d+) Bytes -> Algo (\w+) proto (\w+)")
_RE_WARN = re.compile(r"NCCL WARN (.*?)\s*$")
_RE_DRIVER = re.compile(r"cudaDriverVersion (\d+)")
_INVALID_MARKERS = ("ncclInvalidUsage", "invalid usage", "Unrecognized element token", "Unrecognized prefix token",
                    "All entries except the first must have a prefix")
_ERROR_MARKERS = (*_INVALID_MARKERS, "NCCL error", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError",
                  "ncclRemoteError")


def parse_log(text: str) -> dict[str, Any]:
    """What NCCL's INFO/WARN lines in a server log say it did. Keys:

    ``version`` ("2.28.9", None if NCCL printed nothing), ``cuda_version`` ("13.0", from
    ``+cuda13.0``), ``cuda_driver_version`` ("13.0"), ``env_applied`` {VAR: value as
    printed, trailing '.' dropped}, ``transports`` (distinct, first-seen order, NET
    trimmed to ``NET/<name>``), ``channels`` (collective channels: the largest ``N coll
    channels``, else ``Channel xx/N`` totals), ``nranks`` (largest communicator),
    ``per_call`` (distinct ``[collective, bytes, algo, proto]`` from TUNING lines, in
    order), ``per_call_count`` (all TUNING lines), ``per_collective`` ({collective: {"algo",
    "proto"}}: the most frequent choice of each collective the TUNING lines show, so a
    per-collective NCCL_ALGO/NCCL_PROTO can be checked collective by collective),
    ``allreduce_algo``/``allreduce_proto`` (AllReduce's, when TUNING ran), ``enabled_matrix`` ({collective:
    {proto-or-algo: 0/1/2}} from NCCL's "Enabled NCCL Func/Proto/Algo Matrix" when
    printed), ``errors`` (distinct error messages: WARN lines and NCCL error lines),
    ``warnings`` (other NCCL WARN lines) and ``invalid`` (NCCL refused a value).
    """
    out: dict[str, Any] = {"version": None, "env_applied": {}, "transports": [], "channels": None, "nranks": None,
                           "per_call": [], "errors": [], "invalid": False}
    per_call_seen: set = set()
    per_call_count = 0
    algos_of: dict[str, Counter] = {}
    protos_of: dict[str, Counter] = {}
    coll_channels: list[int] = []
    channel_totals: list[int] = []
    warn_other: list[str] = []
    lines = text.splitlines()
    matrix_at = None
    for i, line in enumerate(lines):
        if out["version"] is None and (m := _RE_VERSION.search(line)):
            out["version"] = m.group(1)
            cuda = re.search(r"cuda(\d+\.\d+)", m.group(2))
            if cuda:
                out["cuda_version"] = cuda.group(1)
        if "cuda_driver_version" not in out and (m := _RE_DRIVER.search(line)):
            num = int(m.group(1))
            out["cuda_driver_version"] = f"{num // 1000}.{num % 1000 // 10}"
        if "set by environment" in line and (m := _RE_ENV.search(line)):
            value = m.group(2)
            if re.fullmatch(r"-?\d+\.", value):
                value = value[:-1]
            out["env_applied"][m.group(1)] = value
        elif "reset to" in line and (m := _RE_RESET.search(line)):
            out["env_applied"][m.group(1)] = m.group(2)
        if " via " in line and (m := _RE_VIA.search(line)):
            transport = m.group(1)
            if transport.startswith("NET/"):
                transport = "/".join(transport.split("/")[:2])
            if transport not in out["transports"]:
                out["transports"].append(transport)
        if m := _RE_COLL_CHANNELS.search(line):
            coll_channels.append(int(m.group(1)))
        elif m := _RE_CHANNEL_TOTAL.search(line):
            channel_totals.append(int(m.group(1)))
        if "ncclCommInit" in line or "nRanks" in line:
            for m in _RE_NRANKS.finditer(line):
                out["nranks"] = max(out["nranks"] or 0, int(m.group(1)))
        if "Bytes -> Algo" in line and (m := _RE_TUNING.search(line)):
            per_call_count += 1
            call = (m.group(1), int(m.group(2)), m.group(3), m.group(4))
            if call not in per_call_seen:
                per_call_seen.add(call)
                out["per_call"].append(list(call))
            algos_of.setdefault(call[0], Counter())[call[2]] += 1
            protos_of.setdefault(call[0], Counter())[call[3]] += 1
        if "Enabled NCCL Func/Proto/Algo Matrix" in line and matrix_at is None:
            matrix_at = i
        if m := _RE_WARN.search(line):
            message = m.group(1)
            bucket = out["errors"] if _is_error(message) else warn_other
            if message not in bucket:
                bucket.append(message)
        elif any(marker in line for marker in _ERROR_MARKERS):
            message = line.strip()
            if message and message not in out["errors"]:
                out["errors"].append(message)
        if any(marker in line for marker in _INVALID_MARKERS):
            out["invalid"] = True
    if coll_channels:
        out["channels"] = max(coll_channels)
    elif channel_totals:
        out["channels"] = max(channel_totals)
    out["per_call_count"] = per_call_count
    out["per_collective"] = {coll: {"algo": algos_of[coll].most_common(1)[0][0],
                                    "proto": protos_of[coll].most_common(1)[0][0]} for coll in algos_of}
    if "AllReduce" in out["per_collective"]:
        out["allreduce_algo"] = out["per_collective"]["AllReduce"]["algo"]
        out["allreduce_proto"] = out["per_collective"]["AllReduce"]["proto"]
    if matrix_at is not None:
        matrix = _parse_matrix(lines[matrix_at + 1: matrix_at + 12])
        if matrix:
            out["enabled_matrix"] = matrix
    if warn_other:
        out["warnings"] = warn_other
    return out


def _is_error(message: str) -> bool:
    return any(marker.lower() in message.lower() for marker in _ERROR_MARKERS) or "failed" in message.lower()


def _parse_matrix(lines: list[str]) -> dict[str, dict[str, int]]:
    """The table after "Enabled NCCL Func/Proto/Algo Matrix:" (rank 0 prints it when
    NCCL_PROTO or NCCL_ALGO is set): header ``Function | LL LL128 Simple | Tree Ring ...``."""
    header: list[str] | None = None
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != 3:
            if out:
                break
            continue
        name = cells[0].split()[-1] if cells[0].split() else ""
        if name == "Function":
            header = cells[1].split() + cells[2].split()
            continue
        if header and name in FUNCTIONS:
            values = cells[1].split() + cells[2].split()
            if len(values) == len(header) and all(v.lstrip("-").isdigit() for v in values):
                out[name] = {h: int(v) for h, v in zip(header, values)}
    return out


def classify_failure(log_text: str) -> str | None:
    """``FailureKind.NCCL_INVALID`` when the log shows NCCL refused a value (ncclInvalidUsage,
    "Unrecognized element token", "invalid usage"), else None."""
    return FailureKind.NCCL_INVALID if any(marker in log_text for marker in _INVALID_MARKERS) else None


def _same_value(name: str, requested: str, printed: str) -> bool:
    if name == "NCCL_P2P_LEVEL":
        def level(v: str) -> str:
            v = v.strip().upper()
            return _P2P_OLD_LEVELS[min(int(v), 5)] if v.isdigit() else v
        return level(requested) == level(printed)
    if name in ("NCCL_PROTO", "NCCL_ALGO"):
        return normalize_value(name, requested) == normalize_value(name, printed)
    a, b = _int_or_none(requested.strip()), _int_or_none(printed.strip())
    if a is not None and b is not None:
        return a == b
    return requested.strip() == printed.strip()


def is_verification_warning(text: str) -> bool:
    """A trial warning ``verify_applied`` wrote (each names NCCL or an NCCL_ variable), told from
    a trial's other warnings (the benchmark's, the correctness gate's, the engine's all-reduce
    path: ``ENGINE_PATH_WARNING``), which the report lists apart."""
    return "NCCL" in text and not text.startswith(ENGINE_PATH_WARNING)


def verify_applied(requested_env: dict[str, Any], parsed: dict[str, Any]) -> list[str]:
    """Warnings for requested NCCL settings that NCCL's log does not show it took: no
    ``set by environment`` line, a different value, NCCL's printed enable matrix differing
    from the requested NCCL_PROTO/NCCL_ALGO, or TUNING per-call choices outside what they
    allow. Empty when all is confirmed, and when every communicator had one rank (NCCL
    then reads no tuning variable: nothing requested can matter)."""
    requested = {k: _as_text(v) for k, v in requested_env.items()
                 if k.startswith("NCCL_") and k not in DEBUG_VARS}
    if not requested:
        return []
    if not parsed.get("version"):
        return [f"NCCL printed no start-up lines (NCCL_DEBUG=INFO missing, or NCCL never initialised), so "
                f"{', '.join(sorted(requested))} could not be verified"]
    if parsed.get("nranks") == 1:
        return []  # one-rank communicators only: NCCL never reads PROTO/ALGO, nothing can matter
    out = []
    applied = parsed.get("env_applied") or {}
    for name, value in sorted(requested.items()):
        if name not in applied:
            if _SILENT_WHEN.get(name) == value:
                continue
            out.append(f"requested {name}={value} but NCCL did not report taking it (no '{name} set by "
                       f"environment' line in the log; NCCL reads some variables only where they apply)")
        elif not _same_value(name, value, str(applied[name])):
            out.append(f"requested {name}={value} but NCCL reports {name}={applied[name]}")
    allowed = {}
    for name in ("NCCL_PROTO", "NCCL_ALGO"):
        if name in requested:
            try:
                allowed[name] = enable_matrix(name, requested[name])
            except ValueError:
                pass
    printed = parsed.get("enabled_matrix") or {}
    for name, matrix in allowed.items():  # NCCL's own "Enabled ... Matrix" vs what we asked for
        differ = [f for f, row in matrix.items() if f in printed
                  and any(e in printed[f] and printed[f][e] != v for e, v in row.items())]
        if differ:
            out.append(f"NCCL's enabled matrix for {', '.join(differ)} differs from what {name}="
                       f"{requested[name]} asks for")
    seen = set()
    for coll, nbytes, algo, proto in parsed.get("per_call") or []:
        func = _canonical(str(coll), FUNCTIONS)
        if func is None:
            continue
        for name, got in (("NCCL_PROTO", proto), ("NCCL_ALGO", algo)):
            if name not in allowed:
                continue
            elems = PROTOCOLS if name == "NCCL_PROTO" else ALGORITHMS
            canon = _canonical(str(got).replace("_", ""), elems)
            if canon is None or allowed[name][func].get(canon):
                continue
            key = (func, name, canon)
            if key in seen:
                continue
            seen.add(key)
            ok = [e for e, on in allowed[name][func].items() if on]
            out.append(f"{func} of {nbytes} bytes ran {'proto' if name == 'NCCL_PROTO' else 'algo'} {got}, "
                       f"but {name}={requested[name]} allows only {', '.join(ok)} for {func}")
    return out
