"""prescreen.json read back, every version: the file today's code wrote before it was a typed record
(tests/fixtures/prescreen, a real gloo pre-screen) prints the same table and CSV, drops and delays
the same settings and gives the same tuner rules, and is written back key for key (with its
version); the kept GPU studies' files of version 0 (no sweep) still read and decide."""

from __future__ import annotations

import json

from conftest import REPO
from orchestrator.core import prescreened
from orchestrator.core.prescreened import VERSION, Prescreen
from orchestrator.driver.prescreen_drop import dropped_settings, late_settings
from orchestrator.driver.prescreen_table import format_prescreen, sweep_csv
from orchestrator.results.report.sections import _prescreened_latency
from orchestrator.results.tuner_rules import tuner_sweep_rules

FIXTURES = REPO / "tests" / "fixtures" / "prescreen"
WINNER = {"tp_size": 2, "env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Ring"}


def what_it_says(data: Prescreen) -> str:
    """What the fixture's README says today's code made of the file, in its order."""
    decided = {"dropped": dropped_settings(data, 1.0), "late": sorted(late_settings(data, 1.0)),
               "rules": tuner_sweep_rules(WINNER, data)}
    return format_prescreen(data) + "\n" + sweep_csv(data) + json.dumps(decided, indent=1) + "\n"


def test_a_file_of_the_format_before_versions_says_the_same_and_writes_the_same_keys(tmp_path):
    stored = json.loads((FIXTURES / "prescreen.json").read_text())
    record = prescreened.read(FIXTURES / "prescreen.json")
    assert record is not None
    assert what_it_says(record) == (FIXTURES / "prescreen.txt").read_text()
    prescreened.write(tmp_path / "prescreen.json", record)
    written = json.loads((tmp_path / "prescreen.json").read_text())
    assert written.pop("version") == VERSION and written == stored  # every figure as that code wrote it
    again = prescreened.load(tmp_path / "prescreen.json")
    assert again == record and what_it_says(again) == what_it_says(record)


def test_the_kept_gpu_studies_files_without_a_sweep_still_read_and_decide():
    """Version 0 as the GPU sessions wrote it: no sweep, no decode sizes, no custom path: a row's one
    size is its ``bytes``, the decode size the file's ``message_bytes``."""
    path = REPO / "docs" / "gpu" / "h200x4-refserver-1b-tp4-nop2p" / "prescreen.json"
    stored = json.loads(path.read_text())
    record = prescreened.read(path)
    assert record is not None and "version" not in stored and not record.custom and not record.crossovers
    fastest = {tp: min(r["latency_us"] for r in stored["rows"] if r["tp_size"] == tp) for tp in (2, 4)}
    ratio = {row.key: row.latency_us / fastest[row.tp_size] for row in record.rows}
    assert sorted(ratio.values())[-3:] == sorted(r for r in ratio.values() if r >= 2.0)  # 2.02x, 2.09x, 2.10x
    assert late_settings(record) == {key for key, r in ratio.items() if r >= 2.0}
    dropped = dropped_settings(record, 2.1)
    assert set(dropped) == {key for key, r in ratio.items() if r > 2.1}
    (why,) = dropped.values()
    assert why == ("pre-screen all-reduce 52.8 us, 2.10x the fastest at TP=4 at the decode sizes (> 2.1x; fastest "
                   "25.1 us at 4096 B)")
    assert tuner_sweep_rules(WINNER | {"tp_size": 4}, record) is None  # no sweep: one rule from the trial
    text = format_prescreen(record)
    assert "| tp_size=4 NCCL_ALGO=Ring NCCL_PROTO=LL | 25.1 us |" in text and "Fastest path" not in text
    best = {"tp_size": 4, "env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "LL", "graph_capture": True}
    assert _prescreened_latency(path, best)[0] == fastest[4] * 1e-6  # the report's ceiling takes it

def test_no_file_or_not_a_prescreen_reads_as_none(tmp_path):
    assert prescreened.read(tmp_path / "prescreen.json") is None
    for text in ("[1, 2]", "{not json", '{"rows": [{"ok": true}]}'):
        (tmp_path / "prescreen.json").write_text(text)
        assert prescreened.read(tmp_path / "prescreen.json") is None
