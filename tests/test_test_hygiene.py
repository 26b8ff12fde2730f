"""The test suite ends only what it started: a server of other work on the same machine
(e.g. a live study) survives the leftover check, a server this session started does not.
And no test bounds wall-clock time by a bare number (``assert elapsed < 110``): on a busy
machine that fails for the machine's sake; a test asserts what it means (ordering,
overlap, counts) or bounds a time by what the wrong behaviour would take (the timeout it
must beat, the trials' own measured durations), named in the test."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import SESSION_TAG_VAR, end_leftover_servers, server_processes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)", "orchestrator.refserver"]


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def test_leftover_check_leaves_other_work_alone_and_ends_its_own():
    foreign_env = {k: v for k, v in os.environ.items() if k != SESSION_TAG_VAR}
    foreign = subprocess.Popen(SLEEPER, env=foreign_env, start_new_session=True)
    own = subprocess.Popen(SLEEPER, start_new_session=True)  # inherits this session's tag
    try:
        deadline = time.monotonic() + 10
        while own.pid not in {p for p, _ in server_processes()} and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = {p for p, _ in server_processes()}
        assert own.pid in seen and foreign.pid not in seen
        left = end_leftover_servers(before=set(), wait_s=0.5)
        assert [p for p, _ in left] == [own.pid]
        own.wait(timeout=10)
        time.sleep(0.3)
        assert _alive(foreign), "the leftover check ended a process this test session did not start"
    finally:
        for proc in (own, foreign):
            if _alive(proc):
                proc.kill()
            proc.wait(timeout=10)


_CLOCKS = {"monotonic", "time", "perf_counter"}
_TIME_NAMES = {"took", "elapsed", "wall", "wall_s", "duration", "seconds", "dt", "spent"}


def _clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr in _CLOCKS and isinstance(f.value, ast.Name)
            and f.value.id == "time") or (isinstance(f, ast.Name) and f.id in {"monotonic", "perf_counter"})


def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _number(node.left) and _number(node.right)
    return isinstance(node, ast.UnaryOp) and _number(node.operand)


def _seconds_like(node: ast.AST, timed: set[str]) -> bool:
    """A clock reading, a name holding a difference of them, or a ``..._s`` duration."""
    for x in ast.walk(node):
        if _clock_call(x) or isinstance(x, ast.Name) and (x.id in _TIME_NAMES or x.id in timed):
            return True
        key = x.slice.value if isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Constant) else \
            x.attr if isinstance(x, ast.Attribute) else None
        if isinstance(key, str) and key.endswith("_s") and not key.endswith("tok_s"):
            return True
    return False


def wall_clock_bounds(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every assert that bounds a time from above by a bare number."""
    found = []
    for fn in (n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        timed = {t.id for a in ast.walk(fn) if isinstance(a, ast.Assign) and isinstance(a.value, ast.BinOp)
                 and any(_clock_call(x) for x in ast.walk(a.value)) for t in a.targets if isinstance(t, ast.Name)}
        for a in (n for n in ast.walk(fn) if isinstance(n, ast.Assert)):
            for c in (n for n in ast.walk(a.test) if isinstance(n, ast.Compare)):
                sides = [c.left, *c.comparators]
                for left, op, right in zip(sides, c.ops, sides[1:]):
                    if (isinstance(op, (ast.Lt, ast.LtE)) and _seconds_like(left, timed) and _number(right)) or \
                            (isinstance(op, (ast.Gt, ast.GtE)) and _seconds_like(right, timed) and _number(left)):
                        found.append((a.lineno, ast.unparse(c)))
    return sorted(set(found))


def test_the_rule_catches_what_it_is_for():
    sample = """
def test_x():
    t0 = time.monotonic()
    took = time.monotonic() - t0
    wall = 3
    assert took < 110
    assert time.monotonic() - t0 < 5.0
    assert 60 > wall
    assert rows["total_s"] < 8
    assert took < job.timeouts.startup_s
    assert len(rows) < 3 and out["total_tok_s"] <= 3200 / 0.98
"""
    assert [line for line, _ in wall_clock_bounds(sample)] == [6, 7, 8, 9]


def test_no_test_bounds_wall_clock_time_by_a_bare_number():
    here = Path(__file__).resolve().parent
    offenders = [f"{path.relative_to(here.parent)}:{line}: assert {expr}"
                 for path in sorted(here.rglob("*.py")) for line, expr in wall_clock_bounds(path.read_text())]
    assert offenders == [], "\n".join(offenders)
