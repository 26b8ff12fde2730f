"""Reading what users write, strictly: YAML files, keys, typed values, one-line errors.

Every problem is one ``BadInput`` naming the file, the dotted key and what is allowed
(``unknown key 'repats' (did you mean 'repeats'?); allowed: ...``). Used by the job
(``orchestrator.job``) and the search space (``orchestrator.space``) loaders.

    read_yaml_mapping(path, ...)   a YAML file that must hold a mapping (duplicate keys refused)
    Section(data, file, prefix, allowed)
                                   one mapping, its keys checked; typed getters: integer,
                                   number, flag, text, duration, raw, section
    check_keys(data, allowed, ...) a mapping whose keys are all allowed, with did-you-mean
    shown(value), type_name(value) a value and its type as YAML users call it
    did_you_mean(word, options)    `` (did you mean 'x'?)`` or ""
    same(a, b)                     equality that keeps YAML ``true`` apart from ``1``
    scalar(value)                  a value a YAML scalar may hold here
    display_path(path)             a path relative to the current directory when below it
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from orchestrator.durations import parse_duration
from orchestrator.errors import BadInput


def display_path(path: str | os.PathLike) -> str:
    """A path as a user recognizes it: relative to the current directory when below it."""
    p = Path(path)
    try:
        absolute = p.resolve()
        rel = absolute.relative_to(Path.cwd().resolve())
        return str(rel)
    except (ValueError, OSError):
        return str(p)


def did_you_mean(word: str, options: Sequence[str], cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` for the closest option, or the empty string."""
    near = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=cutoff)
    return f" (did you mean {near[0]!r}?)" if near else ""


def type_name(value: Any) -> str:
    """How YAML users call the type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def shown(value: Any) -> str:
    """``value`` and its type, for 'not X' in messages."""
    return f"{value!r} ({type_name(value)})"


def check_keys(data: Any, allowed: Sequence[str], *, file: str | None, key: str | None,
               what: str = "a mapping") -> dict:
    """``data`` as a dict whose keys are all in ``allowed``; else BadInput with did-you-mean."""
    if not isinstance(data, Mapping):
        raise BadInput(f"must be {what} with keys {', '.join(allowed)}; not {shown(data)}",
                       file=file, key=key)
    for k in data:
        sub = f"{key}.{k}" if key else str(k)
        if not isinstance(k, str):
            raise BadInput(f"keys must be strings, not {shown(k)}; allowed: {', '.join(allowed)}",
                           file=file, key=sub)
        if k not in allowed:
            raise BadInput(f"unknown key {k!r}{did_you_mean(k, allowed)}; allowed: {', '.join(allowed)}",
                           file=file, key=sub)
    return dict(data)


def same(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from 0/1 (YAML ``true`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def scalar(value: Any) -> bool:
    """A value a YAML scalar may hold here: null, a boolean, an integer, a finite number, a string."""
    return value is None or isinstance(value, (bool, int, float, str)) and not (
        isinstance(value, float) and not math.isfinite(value))


def read_yaml_mapping(path: str | os.PathLike, *, file: str, what: str, allowed: Sequence[str]) -> dict:
    """Read a YAML file that must hold a mapping; every problem is a BadInput naming ``file``."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise BadInput(f"{what} file not found: {p}", file=file)
    if p.is_dir():
        raise BadInput(f"is a directory; expected a {what} YAML file", file=file)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the {what} file: {exc}", file=file) from None
    try:
        data = yaml.load(text, Loader=_strict_loader())  # a SafeLoader subclass: safe
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"not valid YAML{where}: {problem}", file=file) from None
    if data is None:
        raise BadInput(f"is empty; a {what} file is a mapping with keys {', '.join(allowed)}", file=file)
    if not isinstance(data, dict):
        raise BadInput(f"a {what} file must be a YAML mapping with keys {', '.join(allowed)}, "
                       f"not {type_name(data)}", file=file)
    return data


def _make_loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys (the second would silently win)."""

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                    except TypeError:
                        continue  # unhashable keys are reported by the constructor
                    if duplicate:
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"duplicate key {key!r}", key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


_LOADER: list = []


def _strict_loader():
    """The duplicate-refusing loader, built on first use."""
    if not _LOADER:
        _LOADER.append(_make_loader())
    return _LOADER[0]


class Section:
    """One mapping of a user's file with its dotted key path (``bench``, ``ray.node_selector``);
    its typed getters return the value or raise one ``BadInput`` naming the key and the rule."""

    def __init__(self, data: Any, file: str, prefix: str | None, allowed: Sequence[str]):
        self.file, self.prefix, self.allowed = file, prefix, tuple(allowed)
        self.data = {} if data is None else check_keys(data, allowed, file=file, key=prefix)

    def key(self, k: str) -> str:
        return f"{self.prefix}.{k}" if self.prefix else k

    def bad(self, k: str, message: str) -> BadInput:
        return BadInput(message, file=self.file, key=self.key(k))

    def raw(self, k: str, default: Any = None) -> Any:
        return self.data.get(k, default)

    @overload
    def integer(self, k: str, default: Any, *, low: int | None = ..., none_ok: Literal[False] = ...) -> int: ...
    @overload
    def integer(self, k: str, default: Any, *, low: int | None = ..., none_ok: bool) -> int | None: ...

    def integer(self, k: str, default: Any, *, low: int | None = None, none_ok: bool = False) -> int | None:
        value = self.data.get(k, default)
        if value is None and none_ok:
            return None
        rule = "an integer" + (f" >= {low}" if low is not None else "") + (" or null" if none_ok else "")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(k, f"must be {rule}, not {shown(value)}")
        if low is not None and value < low:
            raise self.bad(k, f"must be {rule}, not {value}")
        return value

    @overload
    def number(self, k: str, default: Any, *, above: float | None = ..., at_most: float | None = ...,
               none_ok: Literal[False] = ...) -> float: ...
    @overload
    def number(self, k: str, default: Any, *, above: float | None = ..., at_most: float | None = ...,
               none_ok: bool) -> float | None: ...

    def number(self, k: str, default: Any, *, above: float | None = None, at_most: float | None = None,
               none_ok: bool = False) -> float | None:
        value = self.data.get(k, default)
        if value is None and none_ok:
            return None
        parts = []
        if above is not None:
            parts.append(f"> {above}")
        if at_most is not None:
            parts.append(f"<= {at_most}")
        rule = "a number" + (" " + " and ".join(parts) if parts else "") + (" or null" if none_ok else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise self.bad(k, f"must be {rule}, not {shown(value)}")
        if (above is not None and value <= above) or (at_most is not None and value > at_most):
            raise self.bad(k, f"must be {rule}, not {value}")
        return float(value)

    def flag(self, k: str, default: bool) -> bool:
        value = self.data.get(k, default)
        if not isinstance(value, bool):
            raise self.bad(k, f"must be true or false, not {shown(value)}")
        return value

    @overload
    def text(self, k: str, default: Any, *, none_ok: Literal[False] = ..., nonempty: bool = ...) -> str: ...
    @overload
    def text(self, k: str, default: Any, *, none_ok: bool, nonempty: bool = ...) -> str | None: ...

    def text(self, k: str, default: Any, *, none_ok: bool = False, nonempty: bool = True) -> str | None:
        value = self.data.get(k, default)
        if value is None and none_ok:
            return None
        if not isinstance(value, str) or (nonempty and not value.strip()):
            rule = "a non-empty string" + (" or null" if none_ok else "")
            raise self.bad(k, f"must be {rule}, not {shown(value)}")
        return value

    @overload
    def duration(self, k: str, default: Any, *, none_ok: Literal[False] = ...) -> float: ...
    @overload
    def duration(self, k: str, default: Any, *, none_ok: bool) -> float | None: ...

    def duration(self, k: str, default: Any, *, none_ok: bool = False) -> float | None:
        value = self.data.get(k, default)
        if value is None and none_ok:
            return None
        return parse_duration(value, file=self.file, key=self.key(k))

    def section(self, k: str, allowed: Sequence[str]) -> Section:
        return Section(self.data.get(k), self.file, self.key(k), allowed)
