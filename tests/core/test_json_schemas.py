"""The ``--json`` contract's schemas: valid JSON Schemas (draft 2020-12), one per command that takes
``--json`` and no other, the guide's section generated from them (it cannot drift from the code), the
trial record's fields the ones ``status --json`` prints, and the envelopes. The commands themselves
run with ``--json`` in tests/e2e/test_json_contract.py; ``validate`` and ``doctor`` here too, in
process (they launch nothing)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import REPO, write_job
from orchestrator.cli import _json_command, build_parser, main
from orchestrator.core import json_schemas
from orchestrator.core.json_schemas import COMMANDS, IDS, best, error, fields, record, render, schema
from orchestrator.study.evidence.history import ROW_KEYS

GUIDE = REPO / "docs" / "guide.md"


def valid(command: str, data: dict) -> dict:
    jsonschema.Draft202012Validator(schema(command)).validate(data)
    return data


@pytest.mark.parametrize("command", COMMANDS)
def test_every_schema_is_a_valid_draft_2020_12_schema_with_its_versioned_id(command):
    body = schema(command)
    jsonschema.Draft202012Validator.check_schema(body)
    assert body["$schema"] == "https://json-schema.org/draft/2020-12/schema" and body["title"] == IDS[command]
    assert IDS[command] == f"ncclsweep.{command}/1"
    for variant in body["oneOf"]:  # every record and the error record carry the id, and only it
        assert variant["properties"]["schema"]["const"] == IDS[command] and "schema" in variant["required"]


def test_the_commands_with_json_are_the_commands_with_a_schema():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    with_json = {name for name, p in sub.choices.items() if any("--json" in a.option_strings for a in p._actions)
                 and name != "simulate"}  # simulate --json FILE writes a file: not a record on stdout
    assert with_json == set(COMMANDS)


def test_the_guide_holds_the_section_the_schemas_render():
    assert json_schemas.committed(GUIDE) == render(), \
        "run: python -m orchestrator.core.json_schemas --write docs/guide.md"
    guide = GUIDE.read_text()
    for command in COMMANDS:  # every field of every record is in the guide, with its meaning
        for variant in schema(command)["oneOf"]:
            for path, _, meaning in fields(variant):
                assert f"| `{path}` |" in guide and meaning, (command, path)


def test_a_trial_record_has_the_fields_status_prints():
    trial = schema("status")["oneOf"][0]["properties"]["trials"]["items"]
    assert list(trial["properties"]) == [*ROW_KEYS, "capacity"]  # a new TrialRow field is described here first
    assert trial["additionalProperties"] is False


def test_every_outcome_a_study_records_is_a_valid_trial_record(tmp_path):
    """The recorded study's rows (COMPLETE, wrong-output, start-crash, interrupted, PRUNED, cached,
    RUNNING, WAITING) as `status --json` prints them, against the trial's schema."""
    from recorded_study import build_study

    from orchestrator.study.evidence.history import trial_rows

    _, study = build_study(tmp_path)
    trial = schema("status")["oneOf"][0]["properties"]["trials"]["items"]
    check = jsonschema.Draft202012Validator(trial)
    rows = [json.loads(json.dumps(r.to_json(), default=str)) for r in trial_rows(study)]
    assert {r["state"] for r in rows} == {"COMPLETE", "FAIL", "PRUNED", "RUNNING", "WAITING"}
    for row in rows:
        check.validate(row)


def test_the_envelopes():
    assert list(record("status", job="j")) == ["schema", "job"]
    said = valid("export", error("export", "no completed trial to export", 1))
    assert said == {"schema": "ncclsweep.export/1", "error": "no completed trial to export", "exit_code": 1}
    with pytest.raises(jsonschema.ValidationError):  # an error record is nothing but that
        valid("export", {**said, "format": "cmd"})
    with pytest.raises(jsonschema.ValidationError):  # another command's id is not this command's record
        valid("status", error("export", "x", 1))
    assert best(None, "decode tok/s") is None


def test_only_a_command_that_has_a_record_answers_its_errors_in_json():
    assert _json_command(["--debug", "status", "job.yaml", "--json"]) == "status"
    assert _json_command(["status", "job.yaml"]) is None
    assert _json_command(["simulate", "t.csv", "--json", "out.json"]) is None  # a file, not a record
    assert _json_command(["report", "job.yaml", "--json"]) is None


def test_validate_json_in_process(tmp_path, capsys):
    job = write_job(tmp_path, study="v")
    assert main(["validate", str(job), "--json"]) == 0
    got = valid("validate", json.loads(capsys.readouterr().out))
    assert got["ok"] and got["study"] == "v" and got["params"] == ["tp_size", "backend.threads"]
    assert got["configs"] == 4 and got["commands"] is None and got["backend"] == "refserver"
    assert main(["validate", str(job), "--json", "--commands"]) == 0
    got = valid("validate", json.loads(capsys.readouterr().out))
    assert got["commands"][0]["label"] == "baseline" and "orchestrator.refserver" in got["commands"][0]["line"]
    assert not (tmp_path / "reports").exists()  # validate writes nothing


def test_doctor_json_in_process(tmp_path, capsys):
    job = write_job(tmp_path, study="d")
    assert main(["doctor", str(job), "--json"]) == 0
    got = valid("doctor", json.loads(capsys.readouterr().out))
    assert got["job"] == str(job) and got["preflight"]["ok"] and got["versions"]["torch"]
    assert got["lines"] and got["ok"] == (not got["warnings"])
    assert any(check.startswith("GPUs: none needed") for check in got["preflight"]["checked"])


def test_the_module_prints_a_commands_schema(capsys):
    assert json_schemas.main(["--schema", "run"]) == 0
    assert json.loads(capsys.readouterr().out) == schema("run")
    assert json_schemas.main(["--schema", "report"]) == 2
