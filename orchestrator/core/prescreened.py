"""``prescreen.json`` as one typed record: what the all-reduce pre-screen measured, written by the
driver and read back by the driver, the report and the export, through this module only.

It lives in core because the driver writes it and the results read it (the two never import each
other). A record holds each setting's probe (``Probed``: a (tp_size, NCCL env) of the space, or
the custom path at a TP), its sweep over message sizes (``Point``), and the crossovers the driver
found (``Crossover``, stored as found: the text a user saw).

Versions (``version``; none: 0), each still read by ``Prescreen.from_record``:

- 0: no ``version``; the earliest files (the kept GPU studies) have no ``sweep``, ``decode_sizes``,
  ``sizes``, ``custom``, ``nccl_version`` nor ``crossovers``: a row's one size is its ``bytes``,
  the decode size its ``message_bytes``, a point without ``ci_us`` has its median at both ends;
- 1: ``version: 1``; the same keys otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.core import files
from orchestrator.core.records import config_key

VERSION = 1
TP = "tp_size"
ENV = "env."  # a setting's NCCL variables are config parameters: env.NCCL_PROTO, ...


@dataclass(frozen=True)
class Point:
    """One message size of a probe's sweep: the median microseconds per all-reduce, its 95%
    interval, each launch's median where rounds were merged, and what NCCL logged it chose."""

    nbytes: int
    latency_us: float
    ci_us: tuple[float, float] | None = None  # None: a file written before intervals
    rounds_us: tuple[float, ...] | None = None
    algo: str | None = None
    proto: str | None = None

    @property
    def interval(self) -> tuple[float, float, float]:
        """(median, low, high); the median at both ends where the file has no interval."""
        lo, hi = self.ci_us or (self.latency_us, self.latency_us)
        return self.latency_us, lo, hi

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bytes": self.nbytes, "latency_us": self.latency_us}
        if self.ci_us is not None:
            out["ci_us"] = list(self.ci_us)
        if self.rounds_us is not None:
            out["rounds_us"] = list(self.rounds_us)
        out.update({k: v for k, v in (("algo", self.algo), ("proto", self.proto)) if v is not None})
        return out

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Point:
        ci, rounds = rec.get("ci_us"), rec.get("rounds_us")
        return cls(int(rec["bytes"]), float(rec["latency_us"]),
                   ci_us=(float(ci[0]), float(ci[1])) if ci else None,
                   rounds_us=tuple(float(x) for x in rounds) if rounds is not None else None,
                   algo=rec.get("algo"), proto=rec.get("proto"))


@dataclass(frozen=True)
class Probed:
    """One setting's probe (its rounds merged): ``ok`` with its latencies, or why it failed
    (``kind``, ``reason``). ``env`` is the setting's ``env.*`` parameters as the space spells
    them; ``custom``: the custom all-reduce path at ``tp_size``, not an NCCL setting."""

    tp_size: int
    env: Mapping[str, Any] = field(default_factory=dict)
    ok: bool = False
    kind: str | None = None
    reason: str | None = None
    seconds: float | None = None
    latency_us: float = 0.0  # at the first size (the objective's first decode size)
    samples_us: tuple[float, ...] = ()
    graph: bool = False
    nbytes: int = 0  # the first size
    sweep: tuple[Point, ...] = ()
    nccl_version: str | None = None
    transports: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    rounds: int | None = None  # launches merged, where more than one
    predicted_tok_s: float | None = None
    custom: bool = False

    @property
    def setting(self) -> dict[str, Any]:
        """The (tp_size, NCCL env) the probe measured, as config parameters."""
        return {TP: self.tp_size, **{k: v for k, v in self.env.items() if k.startswith("env.NCCL_")}}

    @property
    def key(self) -> str:
        """``config_key`` of its setting: what the drop rule and the search name it by."""
        return config_key(self.setting)

    @property
    def label(self) -> str:
        """Its path as the tables name it: ``NCCL_PROTO=LL NCCL_ALGO=Ring``, ``custom`` or
        ``NCCL defaults``."""
        if self.custom:
            return "custom"
        return " ".join(f"{k.removeprefix(ENV)}={v}" for k, v in self.env.items()) or "NCCL defaults"

    def points(self) -> dict[int, tuple[float, float, float]]:
        """{bytes: (median, low, high)} over its sweep; a file without one: its one size."""
        sweep = self.sweep or (Point(self.nbytes, self.latency_us),)
        return {p.nbytes: p.interval for p in sweep}

    def latency_at(self, size: int) -> float:
        """Its median at ``size``; where it was not measured there, its ``latency_us``."""
        return next((p.latency_us for p in self.sweep if p.nbytes == size), self.latency_us)

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {TP: self.tp_size, **self.env, "ok": self.ok}
        if self.ok:
            out.update(latency_us=self.latency_us, samples_us=list(self.samples_us), graph=self.graph,
                       bytes=self.nbytes, seconds=self.seconds, sweep=[p.to_record() for p in self.sweep],
                       nccl_version=self.nccl_version, transports=list(self.transports),
                       warnings=list(self.warnings))
        else:
            out.update(kind=self.kind, reason=self.reason)
            if self.seconds is not None:
                out["seconds"] = self.seconds
        if self.rounds is not None:
            out["rounds"] = self.rounds
        if self.predicted_tok_s is not None:
            out["predicted_tok_s"] = self.predicted_tok_s
        return out

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], *, custom: bool = False) -> Probed:
        ok = bool(rec.get("ok"))
        seconds, rounds, predicted = rec.get("seconds"), rec.get("rounds"), rec.get("predicted_tok_s")
        return cls(tp_size=int(rec[TP]), env={k: v for k, v in rec.items() if k.startswith(ENV)}, ok=ok,
                   kind=rec.get("kind"), reason=rec.get("reason"),
                   seconds=float(seconds) if seconds is not None else None,
                   latency_us=float(rec.get("latency_us") or 0.0),
                   samples_us=tuple(float(x) for x in rec.get("samples_us") or ()), graph=bool(rec.get("graph")),
                   nbytes=int(rec.get("bytes") or 0), sweep=tuple(Point.from_record(p) for p in rec.get("sweep") or ()),
                   nccl_version=rec.get("nccl_version"), transports=tuple(rec.get("transports") or ()),
                   warnings=tuple(rec.get("warnings") or ()), rounds=int(rounds) if rounds is not None else None,
                   predicted_tok_s=float(predicted) if predicted is not None else None,
                   custom=custom or bool(rec.get("custom")))


@dataclass(frozen=True)
class Crossover:
    """Where the fastest path changes at ``tp_size``: ``below`` wins up to about ``nbytes``,
    ``above`` past it, between the measured sizes ``between``; ``custom``: the custom path against
    NCCL's fastest."""

    tp_size: int
    below: str
    above: str
    nbytes: int
    between: tuple[int, int]
    custom: bool = False

    def to_record(self) -> dict[str, Any]:
        return {TP: self.tp_size, "below": self.below, "above": self.above, "bytes": self.nbytes,
                "between": list(self.between), "custom": self.custom}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Crossover:
        lo, hi = rec["between"]
        return cls(int(rec[TP]), str(rec["below"]), str(rec["above"]), int(rec["bytes"]), (int(lo), int(hi)),
                   custom=bool(rec.get("custom")))


@dataclass(frozen=True)
class Prescreen:
    """The whole pre-screen: the decode message and its sizes, every NCCL setting's probe
    (``rows``), the custom path's per TP (``custom``), the sizes swept and the crossovers."""

    message_bytes: int | None = None  # the decode message at the objective's first level
    allreduces_per_step: int = 0
    device: str = ""
    rows: tuple[Probed, ...] = ()
    decode_sizes: Mapping[str, int] = field(default_factory=dict)  # {level: bytes}
    sizes: tuple[int, ...] = ()
    custom: tuple[Probed, ...] = ()
    nccl_version: str | None = None
    crossovers: tuple[Crossover, ...] = ()

    def decode(self) -> list[int]:
        """The sizes the objective's levels decode at; a file without them: ``message_bytes``."""
        return [int(v) for v in self.decode_sizes.values()] or [int(self.message_bytes or 0)]

    def ok_tps(self) -> list[int]:
        """The TP sizes where some NCCL setting was measured, ascending."""
        return sorted({r.tp_size for r in self.rows if r.ok})

    def paths(self, tp: int) -> list[tuple[str, dict[int, tuple[float, float, float]]]]:
        """(label, {bytes: (median, low, high)}) of every path measured at ``tp``: the NCCL
        settings, then the custom path."""
        out = [(r.label, r.points()) for r in self.rows if r.ok and r.tp_size == tp]
        return out + [("custom", r.points()) for r in self.custom if r.ok and r.tp_size == tp]

    def row_of(self, params: Mapping[str, Any]) -> Probed | None:
        """The measured row whose setting (tp_size and env, compared as text) ``params`` has."""
        for row in self.rows:
            setting = {TP: row.tp_size, **row.env}
            if row.ok and all(str(params.get(k)) == str(v) for k, v in setting.items()):
                return row
        return None

    def to_record(self) -> dict[str, Any]:
        return {"version": VERSION, "message_bytes": self.message_bytes,
                "allreduces_per_step": self.allreduces_per_step, "device": self.device,
                "rows": [r.to_record() for r in self.rows], "decode_sizes": dict(self.decode_sizes),
                "sizes": list(self.sizes), "custom": [r.to_record() for r in self.custom],
                "nccl_version": self.nccl_version, "crossovers": [c.to_record() for c in self.crossovers]}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Prescreen:
        """A stored pre-screen, any version (module docstring)."""
        message = data.get("message_bytes")
        return cls(message_bytes=int(message) if message is not None else None,
                   allreduces_per_step=int(data.get("allreduces_per_step") or 0), device=str(data.get("device") or ""),
                   rows=tuple(Probed.from_record(r) for r in data.get("rows") or ()),
                   decode_sizes={str(k): int(v) for k, v in (data.get("decode_sizes") or {}).items()},
                   sizes=tuple(int(s) for s in data.get("sizes") or ()),
                   custom=tuple(Probed.from_record(r, custom=True) for r in data.get("custom") or ()),
                   nccl_version=data.get("nccl_version"),
                   crossovers=tuple(Crossover.from_record(c) for c in data.get("crossovers") or ()))


def write(path: Path, record: Prescreen) -> None:
    """Write ``path`` whole or not at all (``files.write_whole``)."""
    files.write_whole(path, json.dumps(record.to_record(), indent=2))


def load(path: Path) -> Prescreen:
    """The driver's own file: one that is not JSON raises (``ValueError``), as it always did."""
    data = json.loads(path.read_text())
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: not a pre-screen (a JSON object)")
    return Prescreen.from_record(data)


def read(path: Path) -> Prescreen | None:
    """The record in ``path`` for a reader of the study (report, export); None where there is none
    or it is not a pre-screen (not JSON, not an object, a row without its ``tp_size``)."""
    try:
        return load(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None
