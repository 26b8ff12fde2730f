"""FlagChecker (backends/flags.py): ``backend.<flag>`` params and pass-through arguments checked
against one release's flag table (the format parser_dump writes) and spelled for it: a flag
the release lacks (with "did you mean"), a deprecated spelling, a flag the tuner sets itself,
a value for a switch, a switch for a value, a value outside the recorded choices are each one
line naming the param; without a table only the backend's per-release spellings are enforced."""

from __future__ import annotations

import pytest

from orchestrator.backends.flags import FlagChecker, Spelling, spelling_for
from orchestrator.backends.known_flags import FlagTable
from orchestrator.core.errors import ConfigRejected

TABLE = FlagTable.from_json({"package": "toyserve", "version": "2.1.0", "flags": {
    "--max-num-seqs": {"kind": "value"},
    "--cuda-graph-sizes": {"kind": "list"},
    "--enforce-eager": {"kind": "switch", "negative": "--no-enforce-eager"},
    "--trust-remote-code": {"kind": "switch"},
    "--load-format": {"kind": "value", "choices": ["auto", "safetensors"]},
    "--old-knob": {"kind": "value", "deprecated": True, "replacement": "--new-knob"},
    "--new-knob": {"kind": "value"},
    "--tensor-parallel-size": {"kind": "value"},
}}, "the parser of toyserve 2.1.0")
MANAGED = {"--tensor-parallel-size": "tp_size", "--port": "the port the trial picks"}
# a setting whose spelling changed between releases: --graph-sizes until 2.0, --cuda-graph-sizes since
SPELLINGS = {"graph_sizes": [Spelling(None, (2, 0, 0), ("--graph-sizes",)),
                             Spelling((2, 0, 0), (3, 0, 0), ("--cuda-graph-sizes",)),
                             Spelling((3, 0, 0), None, None, "3.0 captures every size itself")]}


def checker(table=TABLE, version=(2, 1, 0)):
    return FlagChecker(table, version, (2, 1, 0), MANAGED, SPELLINGS, "Toyserve")


def refused(name, value, *words, check=None):
    with pytest.raises(ConfigRejected) as info:
        (check or checker()).param_words(name, value, "job.yaml")
    msg = str(info.value)
    assert msg.startswith(f"job.yaml: backend.{name}: "), msg
    for word in words:
        assert word in msg, msg
    return msg


def test_params_are_spelled_for_the_release():
    c = checker()
    assert c.param_words("max_num_seqs", 64, None) == ["--max-num-seqs", "64"]
    assert c.param_words("enforce_eager", True, None) == ["--enforce-eager"]
    assert c.param_words("enforce_eager", False, None) == ["--no-enforce-eager"]  # the release's negative
    assert c.param_words("trust_remote_code", False, None) == []  # no negative: left out
    assert c.param_words("cuda_graph_sizes", "1,2 4", None) == ["--cuda-graph-sizes", "1", "2", "4"]
    assert c.param_words("cuda_graph_sizes", [8, 16], None) == ["--cuda-graph-sizes", "8", "16"]
    assert c.param_words("max_num_seqs", None, None) == []
    assert c.release == "Toyserve 2.1.0"


def test_what_the_release_cannot_take_is_refused_naming_the_param():
    refused("max_num_seq", 8, "--max-num-seq is not a flag of Toyserve 2.1.0", "did you mean '--max-num-seqs'")
    refused("old_knob", 1, "--old-knob is deprecated in Toyserve 2.1.0; use --new-knob")
    refused("tensor_parallel_size", 8, "set by the tuner from tp_size")
    refused("trust_remote_code", "yes", "is a switch", "give true or false, not 'yes'")
    refused("max_num_seqs", True, "takes a value in Toyserve 2.1.0, not True")
    refused("load_format", "gguf", "--load-format 'gguf' is not a value Toyserve 2.1.0 accepts; allowed: auto, "
                                   "safetensors")


def test_pass_through_arguments_are_checked_alike():
    c = checker()
    assert c.extra_problem(["--max-num-seqs", "8", "--load-format=safetensors", "-x", "-5"]) is None
    assert "--load-format 'pt' is not a value" in c.extra_problem(["--load-format", "pt"])
    assert "--max-num-seqz" in c.extra_problem(["--max-num-seqz", "8"])
    assert "set by the tuner from tp_size" in c.extra_problem(["--tensor-parallel-size=2"])
    assert "--port is set by the tuner" in c.extra_problem(["--port", "9000"])
    assert "deprecated" in c.extra_problem(["--old-knob", "1"])


def test_spellings_follow_the_release_and_without_a_table_only_they_are_checked():
    assert spelling_for(SPELLINGS["graph_sizes"], (1, 9, 0)).words == ("--graph-sizes",)
    old = checker(version=(1, 9, 0))
    assert old.param_words("graph_sizes", "1,2", None) == ["--graph-sizes", "1,2"]  # a value flag in 1.9
    assert checker().param_words("graph_sizes", "1,2", None) == ["--cuda-graph-sizes", "1", "2"]
    refused("graph_sizes", "1,2", "Toyserve 3.0.0 cannot express backend.graph_sizes: 3.0 captures every size "
                                  "itself", check=checker(version=(3, 0, 0)))
    lenient = checker(table=None, version=None)  # no table of the release anywhere: flags pass unchecked
    assert lenient.release == "Toyserve 2.1.0 (assumed)"
    assert lenient.param_words("anything_new", 3, None) == ["--anything-new", "3"]
    assert lenient.extra_problem(["--whatever", "1"]) is None
    assert "set by the tuner" in lenient.extra_problem(["--tensor-parallel-size", "2"])  # the tuner's, still
