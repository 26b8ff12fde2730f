"""Durations as users write them: ``90s``, ``5m``, ``8h``, ``1h30m``, ``2d``, ``500ms``.

A plain number (``90``, ``1.5``, ``"90"``) is seconds. Units, largest first, each at
most once: ``d`` (days), ``h``, ``m``, ``s``, ``ms``. ``parse_duration`` raises
``BadInput`` (so the job loader and the CLI report it the same way).
"""

from __future__ import annotations

import math
import re
from typing import Any

from orchestrator.core.errors import BadInput, brief

_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001))
_UNIT_SECONDS = dict(_UNITS)
_UNIT_ORDER = [u for u, _ in _UNITS]
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|d|h|m|s)")
_NUMBER = re.compile(r"[+]?(\d+(?:\.\d+)?|\.\d+)")

RULE = "a duration such as 90s, 5m, 8h, 1h30m (units d, h, m, s, ms) or a number of seconds"


def parse_duration(value: Any, *, file: str | None = None, key: str | None = None,
                   allow_zero: bool = False) -> float:
    """Seconds in ``value``; ``BadInput`` naming ``file``/``key`` when it is not a duration.

    Zero is refused unless ``allow_zero``; negative durations always are.
    """
    seconds = _parse(value)
    if seconds is None:
        raise BadInput(f"must be {RULE}, not {brief(value)}", file=file, key=key)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        need = ">= 0" if allow_zero else "> 0"
        raise BadInput(f"must be a duration {need}, not {brief(value)}", file=file, key=key)
    return seconds


def format_duration(seconds: float | None) -> str:
    """Short human form: 5400 -> '1h30m', 90 -> '1m30s', 0.25 -> '0.25s', None -> '-'."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 60:
        text = f"{seconds:.2f}".rstrip("0").rstrip(".")
        return f"{text}s"
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    # drop leading zeros, and trailing zeros after the first non-zero part
    while parts and parts[0][0] == 0:
        parts.pop(0)
    while len(parts) > 1 and parts[-1][0] == 0:
        parts.pop()
    return "".join(f"{n}{u}" for n, u in parts)


def _parse(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if not text:
        return None
    if _NUMBER.fullmatch(text):
        return float(text)
    pos, total, last_unit = 0, 0.0, -1
    compact = re.sub(r"\s+", "", text)
    for match in _PART.finditer(compact):
        if match.start() != pos:
            return None
        unit = match.group(2)
        rank = _UNIT_ORDER.index(unit)
        if rank <= last_unit:  # units largest first, each once: "30m1h" / "5m5m" are typos
            return None
        last_unit = rank
        total += float(match.group(1)) * _UNIT_SECONDS[unit]
        pos = match.end()
    if pos != len(compact) or pos == 0:
        return None
    return total
