"""compare.json and compare-plan.json read back, every version: the files today's code wrote before
they were typed records (tests/fixtures/compare, real compares on CPU) print the same tables and are
written back key for key (with their version); the oldest files (no rounds; rounds of ``total_tok_s``)
still judge."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import REPO
from orchestrator.results import compare_file
from orchestrator.results.compare import format_compare, format_compare_plan
from orchestrator.results.compare_file import VERSION, CompareFile

FIXTURES = REPO / "tests" / "fixtures" / "compare"
KEPT = sorted((REPO / "docs" / "gpu").glob("*/compare.json"))  # real compares on GPUs, written by older code


def test_a_compare_file_of_the_format_before_versions_prints_the_same_table_and_writes_the_same_keys(tmp_path):
    for name, table in (("compare", format_compare), ("compare-plan", format_compare_plan)):
        stored = json.loads((FIXTURES / f"{name}.json").read_text())
        record = compare_file.read(FIXTURES / f"{name}.json")
        assert record is not None and record.plan == (name == "compare-plan")
        assert table(record) + "\n" == (FIXTURES / f"{name}.txt").read_text()
        compare_file.write(tmp_path / f"{name}.json", record)
        written = json.loads((tmp_path / f"{name}.json").read_text())
        assert written.pop("version") == VERSION and written == stored  # every figure as that code wrote it
        again = compare_file.read(tmp_path / f"{name}.json")
        assert again is not None and table(again) == table(record)


def test_the_oldest_files_still_judge():
    """A file written before rounds were kept (each side's samples: unpaired), and one whose rounds
    hold a level's ``total_tok_s`` (no ``value``) with no ``rounds_done`` (counted from the rounds)."""
    unpaired = CompareFile.from_record({
        "concurrency": [10], "baseline_trial": 0, "best_trial": 2, "baseline": {"10": 154.0}, "best": {"10": 128.7},
        "baseline_samples": {"10": [150.0, 158.0]}, "best_samples": {"10": [128.0, 129.4]}, "rounds": []})
    iv = unpaired.level_verdicts()["10"].interval
    assert not iv.paired and iv.n == 2 and unpaired.median("best", 10) == 128.7
    assert "| 10 | 154.0 tok/s | 128.7 tok/s |" in format_compare(unpaired)
    rounds = [{"round": r, "config": label, "trial": 0, "levels": {"1": {"total_tok_s": v, "failures": 0}}}
              for r, (b, w) in enumerate([(10.0, 20.0), (11.0, 21.0)]) for label, v in (("baseline", b), ("best", w))]
    totals = CompareFile.from_record({"concurrency": [1], "baseline_trial": 0, "best_trial": 1, "rounds": rounds})
    assert totals.rounds_done == 2 and totals.per_round("best", 1) == {0: 20.0, 1: 21.0}
    assert totals.complete is None and "Stopped" not in format_compare(totals)  # it did not say: not stopped


def test_no_file_or_not_a_compare_file_reads_as_none(tmp_path):
    assert compare_file.read(tmp_path / "compare.json") is None
    (tmp_path / "compare.json").write_text("[1, 2]")
    assert compare_file.read(tmp_path / "compare.json") is None


@pytest.mark.parametrize("path", KEPT, ids=[p.parent.name for p in KEPT])
def test_a_kept_gpu_compare_file_writes_back_every_key_it_had(tmp_path, path):
    """Every key such a file holds is written back as it was (its ``constraints: []`` without rules
    included), but its rounds, whose level records are today's (``value`` beside ``total_tok_s``),
    with the same figure in every round; the table it prints is the same read back."""
    stored = json.loads(path.read_text())
    record = compare_file.read(path)
    assert record is not None and record.launches
    compare_file.write(tmp_path / "compare.json", record)
    written = json.loads((tmp_path / "compare.json").read_text())
    assert {k: written[k] for k in stored if k != "rounds"} == {k: v for k, v in stored.items() if k != "rounds"}
    again = compare_file.read(tmp_path / "compare.json")
    assert again is not None and format_compare(again) == format_compare(record)
    for label in record.labels:
        for c in record.concurrency:
            assert again.per_round(label, c) == record.per_round(label, c)


def test_stopped_stands_where_the_code_before_typed_records_wrote_it():
    """Last once a launch had finished (the derived figures were written before it); right after
    ``slo`` when none had (they were added after it): the file's key order as it always was."""
    for name in ("compare", "compare-plan"):
        record = compare_file.read(FIXTURES / f"{name}.json")
        assert record is not None
        keys = list(dataclasses.replace(record, stopped="KeyboardInterrupt").to_record())
        assert keys[-1] == "stopped" and keys.count("stopped") == 1
        keys = list(dataclasses.replace(record, stopped="KeyboardInterrupt", launches=()).to_record())
        assert keys[keys.index("slo") + 1] == "stopped" and keys.count("stopped") == 1
        assert "stopped" not in record.to_record()


def test_a_compare_without_rules_writes_its_empty_constraints():
    record = compare_file.read(FIXTURES / "compare.json")
    assert record is not None and record.rules
    assert dataclasses.replace(record, rules=()).to_record()["constraints"] == []
    plan = compare_file.read(FIXTURES / "compare-plan.json")
    assert plan is not None and "constraints" not in plan.to_record()  # a plan never had them
