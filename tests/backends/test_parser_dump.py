"""parser_dump: a server release's flags read from its own argparse parser, by running the dumper
in a real interpreter (as it runs in a server's venv: nothing but the standard library and the
server imported, from a neutral directory), for a parser built the way a ``"DIST
MODULE:CALLABLE"`` recipe builds it: switches, valued and list flags, ``--no-x`` negatives,
choices, deprecated spellings and their replacements, the release's version."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap

import pytest

from orchestrator.backends import known_flags

SERVER_CLI = '''
import argparse


class DeprecatedAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


def add_args(parser):
    parser.add_argument("--model")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--cuda-graph-sizes", nargs="+", type=int)
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--load-format", choices=["auto", "safetensors", "pt"])
    parser.add_argument("--dtype", choices=[object(), "auto"])  # choices a table cannot hold: none recorded
    parser.add_argument("--old-knob", action=DeprecatedAction, help="use --new-knob")
    parser.add_argument("--older-knob", help="(Deprecated) no replacement")
    parser.add_argument("--hidden-flag", help=argparse.SUPPRESS)
    parser.add_argument("-q", type=int)  # no long spelling: not listed
    return parser
'''


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The dumper's output for the parser above, run as known_flags runs it in a server's Python."""
    where = tmp_path_factory.mktemp("server")
    (where / "toyserve_cli.py").write_text(textwrap.dedent(SERVER_CLI))
    neutral = tmp_path_factory.mktemp("neutral")
    done = subprocess.run([sys.executable, "-c", known_flags.DUMPER.read_text(), "optuna", "toyserve_cli:add_args"],
                          capture_output=True, text=True, timeout=120, cwd=neutral, check=True,
                          env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_release_and_where_its_flags_came_from(table):
    assert table["package"] == "optuna" and table["version"] == importlib.metadata.version("optuna")
    assert table["source"] == "toyserve_cli:add_args"


def test_every_long_option_with_its_kind(table):
    flags = table["flags"]
    assert flags["--max-num-seqs"] == {"kind": "value"} and flags["--cuda-graph-sizes"] == {"kind": "list"}
    assert flags["--trust-remote-code"] == {"kind": "switch"}
    assert flags["--enforce-eager"] == {"kind": "switch", "negative": "--no-enforce-eager"}
    assert "--no-enforce-eager" not in flags  # a negative is a spelling of its flag, not a flag
    assert "-q" not in flags and "--help" not in flags
    assert list(flags) == sorted(flags)


def test_choices_and_deprecated_spellings(table):
    flags = table["flags"]
    assert flags["--load-format"]["choices"] == ["auto", "safetensors", "pt"]
    assert "choices" not in flags["--dtype"]  # recorded only when they are plain strings and numbers
    assert flags["--old-knob"] == {"kind": "value", "deprecated": True}
    assert flags["--older-knob"] == {"kind": "value", "deprecated": True}
    assert flags["--hidden-flag"] == {"kind": "value"}  # hidden from --help, still a flag the server takes


def test_the_table_reads_back_as_the_release_flags(table):
    back = known_flags.FlagTable.from_json(table, "the parser")
    assert back.knows("--no-enforce-eager") and back.negatives["--no-enforce-eager"] == "--enforce-eager"
    assert back.flags["--load-format"].choices == ("auto", "safetensors", "pt")
    assert not back.knows("--max-num-seq")
