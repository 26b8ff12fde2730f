"""Where the lines of a night go: the terminal, and ``driver.log`` in the study's folder.

A study runs unattended: what scrolled past on a terminal that is gone by morning (an
ssh session that dropped) must still be on disk, warnings included. So progress lines
are INFO records of the ``ncclsweep.progress`` logger and warnings are WARNING records of
any logger; ``configure`` (called once, by the CLI) sends both to stderr, and
``log_to_file`` adds the study's ``driver.log`` for a ``run``.

A run says what its trials are doing while they run: in a terminal one status line at the
bottom, redrawn in place (``status``; every other line is printed above it, and records
marked ``EVENT``, the phase changes it shows, are left to it); where stderr is not a
terminal (a pipe, a file, ``nohup``) there is no status line and those events are plain
lines. No line is wider than the terminal, or ``LOG_WIDTH`` in a log (stderr that is no
terminal; ``driver.log``, after its time stamp): a longer one wraps, its continuation
indented; one that must stay one line (the status line, a trial's result between its number
and the best so far) is shortened at clause and word boundaries with its figures kept
(``clip``). The status line is drawn with a carriage return and an erase-line code (what
pip does); tqdm's bars would add a monitor thread and their own width rules for a line
that is text anyway.

Trials may run in Ray actors, whose log records reach no handler of the driver.
``capture_warnings`` collects the warnings logged while a trial runs (any thread of its
process: a teardown from ``stop`` included) so they travel back in
``TrialResult.warnings``; the driver then logs them with the trial's number. Records it
captured are marked and not printed a second time where the trial runs in the driver
itself (``bench``, ``compare``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestrator.core.errors import StorageWriteError

PROGRESS = "ncclsweep.progress"
_CAPTURED = "ncclsweep_trial_warning"  # attribute set on records a trial took with it
EVENT = "ncclsweep_event"  # set (``extra={EVENT: True}``) on a line a terminal's status line shows instead
LOG_WIDTH = 120  # the widest line where stderr is not a terminal, and in driver.log
_ERASE = "\r\x1b[K"  # back to the line's start, erase it

progress = logging.getLogger(PROGRESS)


def fit(text: str, width: int) -> list[str]:
    """``text``'s lines, each at most ``width`` characters: a longer one wraps at spaces (or
    inside a word without one), its continuation indented 4 more than it."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
        out.extend(textwrap.wrap(line, width, subsequent_indent=indent[:max(0, width // 2)],
                                 break_long_words=True, break_on_hyphens=False) or [line[:width]])
    return out


ELLIPSIS = "..."  # where words were left out of a line
_DIGIT = re.compile(r"\d")
# a figure: a number with its unit or a ratio (12949.5 tok/s, 4.58x, 2%, 12 ms, 1.5GB)
_FIGURE = re.compile(r"\d(?:[\d.,]*\d)?\s?(?:x|%|tok/s|[mun]?s|[KMGT]i?B)(?![A-Za-z])")
_UNIT = re.compile(r"\(?(?:tok/s|[mun]?s|[KMGT]i?B|%|x|streams?|stream\(s\)|tokens?|launch(?:es)?)[.,;:)]*")


def clip(text: Any, width: int = 160) -> str:
    """``text`` on one line, at most ``width`` characters: a status line, a line's part, a cell of
    the report. A longer one is shortened at clause and word boundaries, its figures kept: first
    parenthesised clauses without a figure (the last first), then words without a number (the last
    first; a unit, or the word after a number, stays with it; ``...`` where words went), then clauses
    with a figure, then whatever is left from the end, whole words; only a single word wider
    than ``width`` is cut inside (``...``)."""
    line = " ".join(str(text or "").split())
    if len(line) <= width:
        return line
    units = _units(line)
    for drop in (_bare_clauses, _plain_clauses, _words, _figure_clauses, _anything):
        for i in drop(units):
            _drop(units, i)
            shown = _render(units)
            if len(shown) <= width:
                return shown
    shown = _render(units)
    return shown if len(shown) <= width else line[:max(0, width - len(ELLIPSIS))] + ELLIPSIS


class _Unit:
    """A word, or a parenthesised clause (its words, up to the closing parenthesis and what sticks
    to it: ``(4.58x baseline),``), of a line ``clip`` shortens."""

    def __init__(self, text: str, clause: bool, after_number: bool):
        self.text, self.clause, self.after_number = text, clause, after_number
        self.gone = False  # left out (a word: shown as one ``...`` per run of them)

    @property
    def number(self) -> bool:
        return bool(_DIGIT.search(self.text))

    @property
    def figure(self) -> bool:
        return bool(_FIGURE.search(self.text))

    @property
    def kept(self) -> bool:
        """A number, or a figure's part: the word after a number, a unit (``tok/s``)."""
        return self.number or self.after_number or bool(_UNIT.fullmatch(self.text))


def _units(line: str) -> list[_Unit]:
    out: list[_Unit] = []
    words = line.split(" ")
    i = 0
    while i < len(words):
        word = words[i]
        end = i
        if word.startswith("("):  # a clause: up to where its parentheses close
            depth = 0
            for end in range(i, len(words)):
                depth += words[end].count("(") - words[end].count(")")
                if depth <= 0:
                    break
            else:
                end = i  # never closed: a word
        text = " ".join(words[i:end + 1])
        out.append(_Unit(text, clause=end > i or (word.startswith("(") and ")" in word),
                         after_number=bool(out) and out[-1].number and not out[-1].clause))
        i = end + 1
    return out


def _live(units: list[_Unit]) -> list[int]:
    return [i for i, u in enumerate(units) if not u.gone]


def _bare_clauses(units: list[_Unit]) -> list[int]:
    return [i for i in reversed(_live(units)) if units[i].clause and not units[i].number]


def _plain_clauses(units: list[_Unit]) -> list[int]:
    return [i for i in reversed(_live(units)) if units[i].clause and not units[i].figure]


def _words(units: list[_Unit]) -> list[int]:
    return [i for i in reversed(_live(units)) if not units[i].clause and not units[i].kept and i > 0]


def _figure_clauses(units: list[_Unit]) -> list[int]:
    return [i for i in reversed(_live(units)) if units[i].clause]


def _anything(units: list[_Unit]) -> list[int]:
    return [i for i in reversed(_live(units)) if i > 0]


def _drop(units: list[_Unit], i: int) -> None:
    """``units[i]`` left out: a clause goes whole (what stuck to its closing parenthesis, a comma,
    stays with the word before it), a word leaves an ``...``."""
    unit = units[i]
    if unit.clause:
        tail = unit.text[unit.text.rfind(")") + 1:]
        before = next((j for j in reversed(range(i)) if not units[j].gone), None)
        if tail and before is not None:
            units[before].text += tail
    unit.gone = True


def _render(units: list[_Unit]) -> str:
    out: list[str] = []
    for u in units:
        if not u.gone:
            out.append(u.text)
        elif not u.clause and (not out or out[-1] != ELLIPSIS):
            out.append(ELLIPSIS)
    return " ".join(out)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced
        return False


def _terminal_width() -> int:
    """The terminal's columns (LOG_WIDTH where it does not say)."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return LOG_WIDTH
    return columns if columns > 0 else LOG_WIDTH


class _Terminal(logging.Handler):
    """stderr as it is at emit time; a terminal that went away (SIGHUP: EIO) is not an error.
    In a terminal, the status line stays below every line printed (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.status = ""  # the status line's text ("" : none)
        self._drawn = False  # the status line is on the screen now

    def emit(self, record: logging.LogRecord) -> None:
        live = _stderr_is_terminal()
        if live and getattr(record, EVENT, False):
            return  # the status line shows it
        width = _terminal_width() if live else LOG_WIDTH
        text = "\n".join(fit(self.format(record), width)) + "\n"
        self._write((_ERASE if self._drawn else "") + text + (self._status_text(width) if live else ""))
        self._drawn = live and bool(self.status)

    def show(self, text: str) -> None:
        """Draw ``text`` as the status line (a terminal only; "" erases it)."""
        with self._guard():
            if text == self.status and (self._drawn or not text):
                return
            self.status = text
            if not _stderr_is_terminal():
                return
            self._write(self._status_text(_terminal_width()) or (_ERASE if self._drawn else ""))
            self._drawn = bool(text)

    def _status_text(self, width: int) -> str:
        return (_ERASE + clip(self.status, width - 1)) if self.status else ""

    def _guard(self):
        return self.lock if self.lock is not None else contextlib.nullcontext()

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):  # driver.log still gets the line
            pass


_terminal: _Terminal | None = None  # the configured terminal handler, while one is


def status(text: str) -> None:
    """Show ``text`` as the terminal's status line ("" erases it); nothing where stderr is not
    a terminal or logging is not configured (module docstring)."""
    if _terminal is not None:
        _terminal.show(text)


class _DriverLog(logging.FileHandler):
    """Appends to the study's driver.log, opened on the first line (nothing written before).

    A write that fails (a full disk) prints no logging traceback: the handler stops
    writing and keeps the error, and the driver stops the run with one line
    (``check_driver_log``)."""

    def __init__(self, path: Path):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.path = Path(path)
        self.failure: OSError | None = None
        self.reported = False

    @property
    def opened(self) -> bool:
        return self.stream is not None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is not None:
            return
        try:
            super().emit(record)  # a failed write lands in handleError, a failed open here
        except OSError as exc:
            self.failure = exc

    def handleError(self, record: logging.LogRecord) -> None:  # logging's name for it
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self.failure = self.failure or exc
        else:
            super().handleError(record)

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # the line that could not be flushed is already counted as the failure
            pass


_driver_log: _DriverLog | None = None  # the run's driver.log handler while one is configured


def check_driver_log() -> None:
    """StorageWriteError, once, when driver.log could not be written."""
    handler = _driver_log
    if handler is not None and handler.failure is not None and not handler.reported:
        handler.reported = True
        raise StorageWriteError(handler.path.parent, handler.failure, handler.path.name)


class _Format(logging.Formatter):
    """Progress lines as they are; other records as ``warning: message`` (name with --debug);
    with ``width``, the message wrapped to it (``fit``), the time stamp before its first line."""

    def __init__(self, stamp: bool, names: bool, width: int | None = None):
        super().__init__("%(asctime)s %(message)s" if stamp else "%(message)s", "%Y-%m-%d %H:%M:%S")
        self.names = names
        self.width = width

    def format(self, record: logging.LogRecord) -> str:
        if record.name != PROGRESS:
            level = record.levelname.lower()
            where = f" ({record.name})" if self.names else ""
            record = logging.makeLogRecord({**record.__dict__, "msg": f"{level}{where}: {record.getMessage()}",
                                            "args": None})
        if not self.width:
            return super().format(record)
        lines = fit(record.getMessage(), self.width)  # the message fits; the time stamp comes before it
        record = logging.makeLogRecord({**record.__dict__, "msg": lines[0], "args": None})
        return "\n".join([super().format(record), *lines[1:]])


def _shown(record: logging.LogRecord) -> bool:
    """Progress, warnings and worse, and not what a trial captured (it reports those itself)."""
    if getattr(record, _CAPTURED, False):
        return False
    return record.name == PROGRESS or record.levelno >= logging.WARNING


class Logging:
    """The configuration ``configure`` made; ``close`` undoes it (tests call ``main`` in-process)."""

    def __init__(self, debug: bool):
        self.debug = debug
        self.terminal = _Terminal()
        self.terminal.setFormatter(_Format(stamp=False, names=debug))
        self.terminal.addFilter(_shown if not debug else (lambda r: not getattr(r, _CAPTURED, False)))
        self.file: _DriverLog | None = None
        self._levels: dict[str, int] = {}

    def log_to_file(self, path: str | Path) -> None:
        """Also write every progress line and warning to ``path`` (opened on the first line)."""
        global _driver_log
        self.file = _driver_log = _DriverLog(Path(path))
        self.file.setFormatter(_Format(stamp=True, names=True, width=LOG_WIDTH))
        self.file.addFilter(_shown)
        logging.getLogger().addHandler(self.file)

    def error_line(self, line: str) -> None:
        """The CLI's final error line, into driver.log when the run had started writing it."""
        if self.file is not None and self.file.opened:
            self.file.emit(logging.makeLogRecord({"name": PROGRESS, "levelno": logging.ERROR,
                                                  "levelname": "ERROR", "msg": line}))

    def close(self) -> None:
        global _driver_log, _terminal
        if _driver_log is self.file:
            _driver_log = None
        if _terminal is self.terminal:
            self.terminal.show("")
            _terminal = None
        root = logging.getLogger()
        for handler in (self.terminal, self.file):
            if handler is not None:
                root.removeHandler(handler)
                handler.close()
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)


def configure(debug: bool = False) -> Logging:
    """Progress and warnings to stderr (every orchestrator record with ``debug``)."""
    global _terminal
    state = Logging(debug)
    _terminal = state.terminal
    logging.getLogger().addHandler(state.terminal)
    for name, level in ((PROGRESS, logging.INFO), ("orchestrator", logging.DEBUG if debug else None)):
        if level is not None:
            logger = logging.getLogger(name)
            state._levels[name] = logger.level
            logger.setLevel(level)
    return state


class _Collector(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        setattr(record, _CAPTURED, True)
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is still a warning
            text = str(record.msg)
        if text not in self.into:
            self.into.append(text)


@contextmanager
def capture_warnings(into: list[str]) -> Iterator[list[str]]:
    """Append the text of every warning an ``orchestrator`` module logs meanwhile to ``into``."""
    logger = logging.getLogger("orchestrator")
    collector = _Collector(into)
    logger.addHandler(collector)
    try:
        yield into
    finally:
        logger.removeHandler(collector)
