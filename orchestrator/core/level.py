"""What a level is: requests in flight, and the prompt length they carry; spelled and parsed once.

A level has always been a number of concurrent requests (1: single-request decode tok/s, N: total
tok/s of N streams). With a context axis (``objective: {concurrency: [1, 64], context: [0, 8192]}``)
a level is a pair: N streams whose prompts are each made about ``context`` tokens long
(``config.prompts.with_context``). Its one spelling is ``N@CONTEXT`` (``64@8192``); a level at
context 0 (the prompts as they are) is the plain number, ``64``, exactly as every record, job and
reader has always spelled it.

So that every level-keyed mapping, record and comparison stays what it was, a level is an ``int``:
a context-0 level is a plain ``int`` (``make(64)`` is ``64``), and a level with a context is a
``ContextLevel``, an ``int`` whose value is its concurrency and that carries ``context``: it
equals and hashes as the pair, never as the bare number (``64@8192 != 64``), sorts by context
then concurrency (``1, 64, 1@8192, 64@8192``) and prints as ``64@8192``. Arithmetic on it gives
its concurrency. Readers use ``streams`` for what a level's number means (how many requests are
in flight), ``context_of`` for its prompt length, ``parse`` for a stored or typed key, and ``key``
for JSON (which writes any ``int`` as its bare number: a ``ContextLevel`` there must be its text).
"""

from __future__ import annotations

import re
from typing import Any

_SPELLING = re.compile(r"\s*(\d+)\s*(?:@\s*(\d+)\s*)?")


class ContextLevel(int):
    """``concurrency`` streams whose prompts are about ``context`` tokens long (module docstring);
    made by ``make``, which gives a plain ``int`` for context 0."""

    context: int

    def __new__(cls, concurrency: int, context: int) -> ContextLevel:
        obj = super().__new__(cls, concurrency)
        obj.context = int(context)
        return obj

    def __reduce__(self) -> tuple[type, tuple[int, int]]:  # pickling (Ray ships plans), copying
        return ContextLevel, (int(self), self.context)

    def _pair(self) -> tuple[int, int]:
        return self.context, int(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int) and not isinstance(other, bool):
            return self._pair() == _pair(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._pair())

    def __lt__(self, other: object) -> bool:
        return self._pair() < _pair(other) if isinstance(other, int) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self._pair() <= _pair(other) if isinstance(other, int) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self._pair() > _pair(other) if isinstance(other, int) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self._pair() >= _pair(other) if isinstance(other, int) else NotImplemented

    def __str__(self) -> str:
        return f"{int(self)}@{self.context}"

    def __repr__(self) -> str:
        return str(self)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec) if not spec or spec[-1:] not in "bcdoxXn" else format(int(self), spec)


def _pair(level: int) -> tuple[int, int]:
    return context_of(level), int(level)


def make(concurrency: int, context: int = 0) -> int:
    """The level of ``concurrency`` streams at ``context`` tokens (a plain int at context 0)."""
    return int(concurrency) if not context else ContextLevel(concurrency, context)


def streams(level: int) -> int:
    """How many requests are in flight at ``level`` (1: single-request decode)."""
    return int(level)


def context_of(level: int) -> int:
    """The prompt length (tokens) of ``level``; 0: the prompts as they are."""
    return level.context if isinstance(level, ContextLevel) else 0


def key(level: int) -> int | str:
    """``level`` as JSON keeps it: the plain number at context 0, else its text ``64@8192``."""
    return str(level) if context_of(level) else int(level)


def parse(value: Any) -> int:
    """The level ``value`` spells: an int, ``"64"`` or ``"64@8192"`` (``"64@0"`` is ``64``).

    Raises:
        ValueError: anything else (a bool, a float, a negative, another text).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    got = _SPELLING.fullmatch(value) if isinstance(value, str) else None
    if got is None:
        raise ValueError(f"not a level (N or N@CONTEXT, e.g. 64 or 64@8192): {value!r}")
    return make(int(got.group(1)), int(got.group(2) or 0))


def describe(level: int) -> str:
    """'64 streams at 8192 tokens of context', '1 stream' (what a level means, in words)."""
    n = streams(level)
    text = f"{n} stream{'s' if n != 1 else ''}"
    return text + (f" at {context_of(level)} tokens of context" if context_of(level) else "")
