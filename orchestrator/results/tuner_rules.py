"""NCCL tuner-plugin rules: the ``nccl-tuner`` export's content, apart from the export's
provenance and layout (``results.export`` renders them with its header and comments).

Rules come from the pre-screen's sweep where it ran at the winner's TP (``tuner_sweep_rules``:
one rule per measured size range), else one rule from the winner's own settings
(``nccl_tuner_rules``); ``rules_for`` picks between them and says which, ``tuner_api`` names the
plugin API of the NCCL release, ``PREAMBLE`` is the file's format and ``fit`` keeps every line
within what the plugin's reader takes.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from orchestrator.core import prescreened
from orchestrator.core.prescreened import Prescreen

# the example tuner plugin reads lines with fgets into a 256-byte buffer: keep every line shorter
MAX_LINE = 200

PREAMBLE = (
    "# NCCL tuner-plugin rules, the CSV of NCCL's example tuner plugin (NVIDIA/nccl plugins/tuner/example;",
    "# ext-tuner/example before 2.30): collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks",
    "# use: NCCL_TUNER_PLUGIN=<path>/libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=<this file>",
    "# sizes in bytes, both ends included; the first matching rule wins; -1 keeps NCCL's default channels",
)


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "", [], {})), None)


_TUNER_ALGOS = {"ring": "ring", "tree": "tree", "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain",
                "nvls": "nvls", "nvlstree": "nvls_tree", "pat": "pat"}
_TUNER_PROTOS = {"ll": "ll", "ll128": "ll128", "simple": "simple"}


def _allreduce_choice(value: Any, table: dict[str, str], var: str) -> tuple[str | None, str | None]:
    """(tuner name, None) for a single all-reduce choice in an NCCL_ALGO/NCCL_PROTO value,
    else (None, why not)."""
    if value in (None, ""):
        return None, f"{var} is not set"
    text = str(value).strip()
    if ":" in text:  # NCCL >= 2.24 per-collective form: allreduce:tree;broadcast:ring
        parts = dict(p.split(":", 1) for p in text.split(";") if ":" in p)
        found = {k.strip().lower(): v for k, v in parts.items()}.get("allreduce")
        if found is None:
            return None, f"{var}={text} sets nothing for allreduce"
        text = found.strip()
    if text.startswith("^"):
        return None, f"{var}={text} excludes values; a rule needs exactly one"
    choices = [c.strip() for c in text.split(",") if c.strip()]
    if len(choices) != 1:
        return None, f"{var}={text} allows several values; a rule needs exactly one"
    name = table.get(choices[0].lower().replace("_", ""))
    if name is None:
        return None, f"{var}={text} is not a value the tuner plugin knows"
    return name, None


def _observed(nccl: dict[str, Any], *keys: str) -> Any:
    return _first(*(nccl.get(k) for k in keys))


def nccl_tuner_rules(config: dict[str, Any], nccl: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """(rules, notes) for NCCL's example tuner plugin from a config's NCCL_ALGO/NCCL_PROTO.

    Format, from NVIDIA/nccl ``ext-tuner/example/README.md`` and ``nccl_tuner.conf``
    (parsed by ``ext-tuner/example/plugin.c``): one CSV rule per line,
    ``collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks``
    with optional ``numPipeOps,regBuff``; collective ``allreduce``; algorithms ``tree``,
    ``ring``, ``collnet_direct``, ``collnet_chain``, ``nvls``, ``nvls_tree``, ``pat``;
    protocols ``ll``, ``ll128``, ``simple`` (lower case, compared exactly); ``-1`` keeps
    NCCL's default channels or matches any node/rank count; ``0``..``4294967295`` covers
    all sizes; ``#`` at the start of a line is a comment; the first matching rule wins.
    The plugin is loaded with ``NCCL_TUNER_PLUGIN`` and reads ``NCCL_TUNER_CONFIG_FILE``
    (default ``nccl_tuner.conf``).

    One all-reduce rule is emitted when the config pins one algorithm and one protocol
    (a value missing from the config is taken from what NCCL logged, when it did).
    nNodes is 1 (a server's TP group lives on one node) and nRanks is ``tp_size``;
    channels are set only when the config pins min == max CTAs/channels.
    """
    nccl = nccl or {}
    algo, why_algo = _allreduce_choice(config.get("env.NCCL_ALGO"), _TUNER_ALGOS, "NCCL_ALGO")
    proto, why_proto = _allreduce_choice(config.get("env.NCCL_PROTO"), _TUNER_PROTOS, "NCCL_PROTO")
    if algo is None and proto is None:
        return [], [f"nothing to export: the config pins no all-reduce algorithm or protocol ({why_algo}; {why_proto})"]
    notes = []
    if algo is None:
        seen = _observed(nccl, "allreduce_algo", "algo", "algorithm")
        algo, _ = _allreduce_choice(seen, _TUNER_ALGOS, "NCCL_ALGO") if seen else (None, None)
        if algo:
            notes.append(f"algorithm {algo} as NCCL chose it in the measured run ({why_algo})")
    if proto is None:
        seen = _observed(nccl, "allreduce_proto", "proto", "protocol")
        proto, _ = _allreduce_choice(seen, _TUNER_PROTOS, "NCCL_PROTO") if seen else (None, None)
        if proto:
            notes.append(f"protocol {proto} as NCCL chose it in the measured run ({why_proto})")
    if algo is None or proto is None:
        missing = why_algo if algo is None else why_proto
        return [], [f"nothing to export: a rule needs both an algorithm and a protocol, and {missing}"]
    if algo == "pat":
        return [], ["nothing to export: NCCL never uses PAT for all-reduce"]
    tp = config.get("tp_size")
    n_ranks = int(tp) if isinstance(tp, (int, float)) and not isinstance(tp, bool) and int(tp) > 0 else -1
    return [f"allreduce,0,4294967295,{algo},{proto},{_channels(config)},1,{n_ranks}"], notes


# The example plugin's CSV reader and the tuner API it implements, by NCCL release (read in
# NVIDIA/nccl: ext-tuner/example/plugin.c of 2.28 and 2.29, plugins/tuner/example/plugin.c of 2.30;
# before 2.28 the example plugin reads no file)
_TUNER_APIS = (((2, 30), "v6 (the plugin also exports v5)"), ((2, 28), "v5"))
TUNER_BIN = 16 * 1024  # no rule below TUNER_FINE_UP_TO is wider: PCIe crossovers sit at 48-120 KB
TUNER_FINE_UP_TO = 512 * 1024


def tuner_api(nccl_version: str | None) -> str:
    """The tuner API of the example plugin that reads this file for an NCCL release."""
    nums = tuple(int(n) for n in re.findall(r"\d+", str(nccl_version or ""))[:2])
    if len(nums) < 2:
        return "v5 (NCCL 2.28, 2.29) or v6 (NCCL 2.30 and later); NCCL release unknown"
    for since, api in _TUNER_APIS:
        if nums >= since:
            return api
    return "none: NCCL before 2.28 has no file-reading example plugin; use NCCL 2.28 or later"


def _channels(config: dict[str, Any]) -> int:
    """Channels a rule pins: the config's min == max CTAs (or channels), else -1 (NCCL's)."""
    for lo, hi in (("env.NCCL_MIN_CTAS", "env.NCCL_MAX_CTAS"), ("env.NCCL_MIN_NCHANNELS", "env.NCCL_MAX_NCHANNELS")):
        if config.get(lo) is not None and str(config.get(lo)) == str(config.get(hi)):
            try:
                return int(config[lo])
            except (TypeError, ValueError):
                pass
    return -1


def tuner_sweep_rules(config: dict[str, Any], sweep: Prescreen) -> tuple[list[str], list[str]] | None:
    """Rules per measured size range from the pre-screen's sweep (``prescreen.json``), for the
    winner ``config``: its TP (nRanks) and channels; among the swept settings at that TP whose
    other NCCL variables are the winner's (P2P, channels: what moves latency besides the
    protocol and algorithm), the fastest at each size (the winner's own setting where it is within
    the noise of the fastest), spelled by the algorithm and protocol it pins for all-reduce or,
    where it pins none, the one NCCL logged at that size. Bins end at
    each measured size and at every 16 KB up to 512 KB (each bin takes the measured size
    nearest its end, on a log scale), so none there is wider than 16 KB; past the largest
    measured size there is no rule (NCCL's own choice). None: the sweep has nothing at this TP."""
    tp = config.get("tp_size")
    same_tp = [r for r in sweep.rows if r.ok and r.sweep and r.tp_size == tp]
    if not same_tp:
        return None
    others = {k: str(v) for k, v in config.items() if k.startswith("env.NCCL_") and k not in _PINNED}
    rows = [r for r in same_tp if {k: str(v) for k, v in r.env.items()
                                   if k.startswith("env.NCCL_") and k not in _PINNED} == others]
    notes = []
    if not rows:
        rows = same_tp
        notes.append(f"no swept setting at tp_size={tp} has the winner's other NCCL variables "
                     f"({' '.join(f'{k[4:]}={v}' for k, v in others.items()) or 'none'}); every swept one is used")
    best: dict[int, tuple[float, str, str] | None] = {}
    for size in sorted({p.nbytes for r in rows for p in r.sweep}):
        here = sorted(((p.latency_us, i, r, p) for i, r in enumerate(rows) for p in r.sweep
                       if p.nbytes == size), key=lambda h: (h[0], h[1]))
        # within 10% of the fastest (the pre-screen's CLEAR_MARGIN: less is launch noise), the winner's own setting
        top = here[0][0] if here else 0.0
        own = [h for h in here if h[0] < top * 1.10 and all(
            str(h[2].env.get(k, "")) == str(config.get(k, "")) for k in ("env.NCCL_ALGO", "env.NCCL_PROTO"))]
        best[size] = None
        for latency, _, r, p in (own or here)[:1]:
            algo = _allreduce_choice(r.env.get("env.NCCL_ALGO"), _TUNER_ALGOS, "NCCL_ALGO")[0] or \
                _allreduce_choice(p.algo, _TUNER_ALGOS, "NCCL_ALGO")[0]
            proto = _allreduce_choice(r.env.get("env.NCCL_PROTO"), _TUNER_PROTOS, "NCCL_PROTO")[0] or \
                _allreduce_choice(p.proto, _TUNER_PROTOS, "NCCL_PROTO")[0]
            best[size] = (latency, algo, proto) if algo and proto and algo != "pat" else None
    measured = sorted(best)
    edges = sorted({*measured, *(e for e in range(TUNER_BIN, TUNER_FINE_UP_TO + 1, TUNER_BIN) if e <= measured[-1])})
    rules, unknown, lo = [], 0, 0
    channels = _channels(config)
    for edge in edges:
        nearest = min(measured, key=lambda m: (abs(math.log(m / edge)), m))
        choice = best[nearest]
        if choice is None:
            unknown += 1
        else:
            rules.append(f"allreduce,{lo},{edge},{choice[1]},{choice[2]},{channels},1,{tp}")
        lo = edge + 1
    if unknown:
        notes.append(f"{unknown} size range(s) without a rule: their fastest setting pins no algorithm or protocol "
                     f"and NCCL logged none (TUNING runs on CUDA only)")
    for c in sweep.crossovers:
        if c.custom and c.tp_size == tp and c.below == "custom":
            notes.append(f"the custom all-reduce measured faster than NCCL up to about {c.nbytes} bytes at "
                         f"tp_size={tp} (allreduce.backend custom, which a tuner rule cannot choose)")
    return rules, notes


_PINNED = ("env.NCCL_ALGO", "env.NCCL_PROTO", "env.NCCL_DEBUG", "env.NCCL_DEBUG_SUBSYS")


def sweep_of(job: Any) -> Prescreen | None:
    """The pre-screen of the job's study, when it ran (``ncclsweep prescreen``); None for a job
    without a study folder (``job.dir``) or a study never pre-screened."""
    where = getattr(job, "dir", None)
    path = getattr(where, "prescreen", None)
    return prescreened.read(Path(path)) if path is not None else None


def rules_for(params: dict[str, Any], nccl: dict[str, Any] | None, number: int,
              sweep: Prescreen | None) -> tuple[str, list[str], list[str]]:
    """(what the rules come from, notes, rules) for trial ``number``'s config ``params`` and what
    NCCL logged in it (``nccl``): the sweep's rules where it has the config's TP, else the one rule
    of ``nccl_tuner_rules``. The first two are plain text, for the caller to comment."""
    made = tuner_sweep_rules(params, sweep) if sweep else None
    rules, notes = made if made is not None else nccl_tuner_rules(params, nccl)
    version = _first((nccl or {}).get("version"), sweep.nccl_version if sweep else None)
    source = (f"the pre-screen's sweep ({len(rules)} size ranges, prescreen.json) and trial {number}'s settings"
              if made is not None else f"trial {number}'s settings (no pre-screen sweep at its TP: one rule)")
    return f"rules from {source}; NCCL {version or 'unknown'}; tuner API {tuner_api(version)}", notes, rules


def fit(lines: list[str]) -> list[str]:
    """Every line shorter than ``MAX_LINE``: a longer one is cut and ends in "..." (the plugin
    would read it in 255-byte pieces, the rest as a line of its own)."""
    return [line if len(line) < MAX_LINE else line[: MAX_LINE - 4] + "..." for line in lines]
