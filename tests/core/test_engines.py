"""The engine registry (orchestrator/core/engines.py): engines come back in the order they were
registered, the same engine twice is one, a second engine under a known name is refused and the
first stays, and loaders run before every answer (how the backends bring in the engines of
backends other distributions register). Each case runs in a fresh interpreter that imports
core alone, so the registry holds exactly what the case put there; the built-in engines, which
importing the backends registers, are checked in this process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from orchestrator.backends import BUILTIN_ENGINES, get_backend_class
from orchestrator.core import engines

REPO = Path(__file__).resolve().parents[2]


def _fresh(script: str) -> dict:
    """What ``script`` printed as JSON, run in a new interpreter with only core imported."""
    code = "import json\nfrom orchestrator.core import engines\nfrom orchestrator.core.engines import Engine, pattern\n"
    done = subprocess.run([sys.executable, "-c", code + textwrap.dedent(script)], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_core_alone_knows_no_engine_and_keeps_the_order_engines_were_registered_in():
    got = _fresh("""
        before = [e.name for e in engines.registered()]
        a = Engine("alpha", pattern("^alpha"), (("ready", pattern("alpha ready")),))
        b = Engine("beta", pattern("^beta"), (("ready", pattern("beta ready")),))
        engines.register(b)
        engines.register(a)
        engines.register(Engine("beta", pattern("^beta"), (("ready", pattern("beta ready")),)))  # equal: the same
        print(json.dumps({"before": before, "after": [e.name for e in engines.registered()]}))
    """)
    assert got == {"before": [], "after": ["beta", "alpha"]}


def test_a_second_engine_under_a_known_name_is_refused_and_the_first_stays():
    got = _fresh("""
        first = engines.register(Engine("alpha", pattern("^alpha"), (("ready", pattern("alpha ready")),)))
        try:
            engines.register(Engine("alpha", pattern("^other"), (("ready", pattern("other ready")),)))
            refused = ""
        except ValueError as exc:
            refused = str(exc)
        print(json.dumps({"refused": refused, "kept": engines.registered() == (first,)}))
    """)
    assert got == {"refused": "engine 'alpha' is already registered", "kept": True}


def test_loaders_run_before_every_answer_and_may_register_engines():
    got = _fresh("""
        calls = []
        def load():
            calls.append(1)
            engines.register(Engine("late", pattern("^late"), (("ready", pattern("late ready")),)))
        engines.add_loader(load)
        engines.add_loader(load)  # once
        first = [e.name for e in engines.registered()]
        engines.registered()
        print(json.dumps({"first": first, "calls": len(calls)}))
    """)
    assert got == {"first": ["late"], "calls": 2}


def test_the_built_in_engines_come_first_in_the_order_a_log_is_matched_and_are_their_backends():
    assert [e.name for e in engines.registered()[:3]] == ["vllm", "sglang", "refserver"]
    assert engines.registered()[:3] == BUILTIN_ENGINES
    for engine in BUILTIN_ENGINES:
        assert get_backend_class(engine.name).ENGINE is engine
