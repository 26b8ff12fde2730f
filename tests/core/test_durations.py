"""Durations as a job and the command line write them (90s, 5m, 1h30m, ...): parsed, refused
with the key path and the forms allowed, formatted back for the user."""

from __future__ import annotations

import pytest

from orchestrator.core.durations import format_duration, parse_duration
from orchestrator.core.errors import BadInput


@pytest.mark.parametrize("text,seconds", [
    ("90s", 90), ("5m", 300), ("8h", 28800), ("1h30m", 5400), ("2d", 172800), ("500ms", 0.5),
    ("90", 90), (90, 90), (1.5, 1.5), ("1.5h", 5400), (" 1h 30m ", 5400), ("1m30s", 90), ("1H", 3600),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "5x", "30m1h", "5m5m", "-5s", "h", True, None, [1], "1h30", "0"])
def test_parse_duration_rejects(text):
    with pytest.raises(BadInput) as info:
        parse_duration(text, file="f.yaml", key="budget.timeout")
    assert str(info.value).startswith("f.yaml: budget.timeout: must be a duration")


def test_duration_helpers():
    assert parse_duration(0, allow_zero=True) == 0
    assert [format_duration(s) for s in (5400, 90, 0.25, 3600, 86400 + 60, None)] == \
        ["1h30m", "1m30s", "0.25s", "1h", "1d0h1m", "-"]
