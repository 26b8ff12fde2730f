"""The run's log as a reader takes it: lines longer than the log's width are wrapped
(``core.logs.fit``), so a test that looks for a phrase reads the wrapped lines joined again."""

from __future__ import annotations

from orchestrator.core.logs import LOG_WIDTH


def said(text: str) -> str:
    """``text`` as one string, one space between words: a phrase is found wherever it wrapped."""
    return " ".join(text.split())


def log_lines(text: str, width: int = LOG_WIDTH) -> list[str]:
    """``text``'s lines as they were before wrapping: a line indented 4 more than the line it
    continues, whose first word would not have fitted on that line within ``width``, is joined
    to it (the rule ``textwrap`` wraps by)."""
    out: list[str] = []
    base = 0  # the indent of the line being continued
    previous = ""
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        words = line.split()
        wrapped = bool(out and words) and indent == base + 4 and len(previous) + 1 + len(words[0]) > width
        if wrapped:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
            base = indent
        previous = line
    return out
