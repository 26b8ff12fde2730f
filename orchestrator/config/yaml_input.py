"""Reading what users write, strictly: YAML files, keys, typed values, one-line errors.

Every problem is one ``BadInput`` naming the file, the dotted key and what is allowed
(``unknown key 'repats' (did you mean 'repeats'?); allowed: ...``). Used by the job
(``orchestrator.config.job``) and the search space (``orchestrator.config.space``) loaders.

    read_yaml_mapping(path, ...)   a YAML file that must hold a mapping (duplicate keys refused)
    read_text_bounded(path, ...)   a user's file as text, refused past MAX_FILE_BYTES
    load_yaml(text, ...), load_yaml_documents(text, ...)
                                   YAML text (a --set value, a config file) read the same way
    Section(data, file, prefix, allowed)
                                   one mapping, its keys checked; typed getters: integer,
                                   number, flag, text, duration, raw, section
    check_keys(data, allowed, ...) a mapping whose keys are all allowed, with did-you-mean
    shown(value), type_name(value) a value (a short prefix of it) and its type as YAML users call it
    brief(value)                   a value for a message: its repr, cut to a short prefix
                                   (``orchestrator.core.errors``; every message shows user values through it)
    did_you_mean(word, options)    `` (did you mean 'x'?)`` or ""
    same(a, b)                     equality that keeps YAML ``true`` apart from ``1``
    scalar(value)                  a value a YAML scalar may hold here
    display_path(path)             a path relative to the current directory when below it

Bounded, whatever the file holds: a file over ``MAX_FILE_BYTES`` is refused before it is
parsed; nesting deeper than ``MAX_DEPTH`` and documents that hold more than ``MAX_NODES``
values once their aliases (``*name``) are expanded are refused while the document is
composed, before any Python object is built (a few lines of anchors and aliases, the
"billion laughs", expand to billions of values); a recursive alias is refused too. A
message renders a user's value through ``brief`` only, so no message is longer than a
short prefix of what the user wrote.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

import yaml
from yaml.events import AliasEvent

from orchestrator.core.durations import parse_duration
from orchestrator.core.errors import BRIEF_CHARS, BadInput, brief

MAX_FILE_BYTES = 1_000_000  # a job, space or config file; real ones are a few KB
MAX_DEPTH = 64  # nesting of mappings and lists; real files nest a few levels
MAX_NODES = 100_000  # values of one document once its aliases are expanded


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
    return f" (did you mean {brief(near[0])}?)" if near else ""


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
    """``value`` (a short prefix of it) and its type, for 'not X' in messages."""
    return f"{brief(value)} ({type_name(value)})"


def check_keys(data: Any, allowed: Sequence[str], *, file: str | None, key: str | None,
               what: str = "a mapping") -> dict:
    """``data`` as a dict whose keys are all in ``allowed``; else BadInput with did-you-mean."""
    if not isinstance(data, Mapping):
        raise BadInput(f"must be {what} with keys {', '.join(allowed)}; not {shown(data)}",
                       file=file, key=key)
    for k in data:
        sub = key_path(key, k)
        if not isinstance(k, str):
            raise BadInput(f"keys must be strings, not {shown(k)}; allowed: {', '.join(allowed)}",
                           file=file, key=sub)
        if k not in allowed:
            raise BadInput(f"unknown key {brief(k)}{did_you_mean(k, allowed)}; allowed: {', '.join(allowed)}",
                           file=file, key=sub)
    return dict(data)


def key_path(prefix: str | None, key: Any) -> str:
    """``prefix.key`` for a message, the key cut to a short prefix when it is long."""
    name = key if isinstance(key, str) and len(key) <= BRIEF_CHARS else brief(key)
    return f"{prefix}.{name}" if prefix else str(name)


def same(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from 0/1 (YAML ``true`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def scalar(value: Any) -> bool:
    """A value a YAML scalar may hold here: null, a boolean, an integer, a finite number, a string."""
    return value is None or isinstance(value, (bool, int, float, str)) and not (
        isinstance(value, float) and not math.isfinite(value))


def read_text_bounded(path: str | os.PathLike, *, file: str, what: str) -> str:
    """A user's file as text: BadInput when it cannot be read, is not UTF-8, or holds more than
    ``MAX_FILE_BYTES`` (read no further than that, whatever the file is)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise BadInput(f"is a directory; expected a {what} file", file=file) from None
    except OSError as exc:
        raise BadInput(f"cannot read the {what} file: {exc.strerror or exc}", file=file) from None
    if len(raw) > MAX_FILE_BYTES:
        raise BadInput(f"is larger than {MAX_FILE_BYTES // 1_000_000} MB ({MAX_FILE_BYTES} bytes), the limit for "
                       f"a {what} file (real ones are a few KB)", file=file)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"cannot read the {what} file: not UTF-8 text (byte {exc.start})", file=file) from None


def read_yaml_mapping(path: str | os.PathLike, *, file: str, what: str, allowed: Sequence[str]) -> dict:
    """Read a YAML file that must hold a mapping; every problem is a BadInput naming ``file``."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{what} file not found: {p}", file=file)
    if p.is_dir():
        raise BadInput(f"is a directory; expected a {what} YAML file", file=file)
    data = load_yaml(read_text_bounded(p, file=file, what=what), file=file)
    if data is None:
        raise BadInput(f"is empty; a {what} file is a mapping with keys {', '.join(allowed)}", file=file)
    if not isinstance(data, dict):
        raise BadInput(f"a {what} file must be a YAML mapping with keys {', '.join(allowed)}, "
                       f"not {type_name(data)}", file=file)
    return data


def load_yaml(text: str, *, file: str | None, key: str | None = None) -> Any:
    """One YAML document read strictly and boundedly (see the module docstring), or BadInput
    naming ``file``/``key`` with the line and column of the problem."""
    documents = load_yaml_documents(text, file=file, key=key, single=True)
    return documents[0] if documents else None


def load_yaml_documents(text: str, *, file: str | None, key: str | None = None, single: bool = False) -> list:
    """Every document of a YAML stream (``---`` between them), each read like ``load_yaml``;
    the limits hold for each document; ``single``: more than one is refused."""
    if len(text) > MAX_FILE_BYTES:
        raise BadInput(f"is larger than {MAX_FILE_BYTES // 1_000_000} MB ({MAX_FILE_BYTES} characters)",
                       file=file, key=key)
    loader_class = _strict_loader()
    loader = loader_class(text)
    try:
        if single:
            return [loader.get_single_data()]
        out = []
        while loader.check_data():
            out.append(loader.get_data())
        return out
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        lead = "refused" if isinstance(exc, loader_class.Refused) else "not valid YAML"
        raise BadInput(f"{lead}{where}: {problem}", file=file, key=key) from None
    except RecursionError:  # guarded by MAX_DEPTH; kept so no input can end in a traceback
        raise BadInput(f"refused: nested deeper than {MAX_DEPTH} levels", file=file, key=key) from None
    finally:
        loader.dispose()


def _make_loader():
    class DocumentRefused(yaml.composer.ComposerError):
        """A document refused for its size, depth or a recursive alias (not a syntax error)."""

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys (the second would silently win) and documents
        too deep or too large once aliases are expanded, counted while composing."""

        Refused = DocumentRefused

        @staticmethod
        def _refused(problem: str, mark: Any) -> DocumentRefused:
            return DocumentRefused(None, None, problem, mark)

        def compose_document(self):
            self._open: list[list[int]] = []  # per open collection: [expanded values, deepest child]
            self._anchored: dict[int, tuple[int, int]] = {}  # id(anchored node) -> (values, depth) expanded
            self._values = 0  # values of the document so far, aliases expanded
            return super().compose_document()

        def _attach(self, values: int, depth: int, new: int, mark) -> None:
            """A finished child of ``values`` values, ``depth`` deep, ``new`` of them not counted yet."""
            self._values += new
            if self._values > MAX_NODES:
                raise self._refused(f"more than {MAX_NODES} values, counting each alias (*name) as the values "
                                    f"it stands for (the limit is {MAX_NODES})", mark)
            if len(self._open) + depth > MAX_DEPTH:
                raise self._refused(f"nested deeper than {MAX_DEPTH} levels once aliases (*name) are expanded",
                                    mark)
            if self._open:
                frame = self._open[-1]
                frame[0] += values
                frame[1] = max(frame[1], depth)

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, AliasEvent):
                target = self.anchors.get(event.anchor)
                if target is not None:
                    stats = self._anchored.get(id(target))
                    if stats is None:
                        raise self._refused(f"the alias *{event.anchor} is inside the node it refers to "
                                            f"(a recursive alias)", event.start_mark)
                    self._attach(*stats, stats[0], event.start_mark)
                return super().compose_node(parent, index)  # an undefined alias: PyYAML's own error
            if len(self._open) >= MAX_DEPTH:
                raise self._refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
            self._open.append([1, 0])
            node = super().compose_node(parent, index)
            values, deepest = self._open.pop()
            if event.anchor is not None:
                self._anchored[id(node)] = (values, deepest + 1)
            self._attach(values, deepest + 1, 1, event.start_mark)
            return node

        def construct_object(self, node, deep=False):
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, OverflowError) as exc:  # an integer past Python's digit limit, a bad date
                why = str(exc).split(";")[0]
                raise yaml.constructor.ConstructorError(None, None, f"cannot read {brief(node.value)}: {why}",
                                                        node.start_mark) from None

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
                            f"duplicate key {brief(key)}", key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


_LOADER: list = []


def _strict_loader():
    """The strict, bounded loader, built on first use."""
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
            raise self.bad(k, f"must be {rule}, not {brief(value)}")
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
            raise self.bad(k, f"must be {rule}, not {brief(value)}")
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
