"""What a trial produces (core/records.py): a TrialResult refuses an outcome or failure kind
outside the closed lists, survives a real Optuna journal as user attributes unchanged (and
reads back a record that a later version wrote with more fields); failure kinds are their
strings, so records written before the enum read back equal; a config's key is its identity;
a TrialRow prints as ``status --json`` shows it."""

from __future__ import annotations

import json

import optuna
import pytest

from orchestrator.core.records import (
    FAIL,
    FAILURE_KINDS,
    NOT_THE_CONFIGS_FAULT,
    FailureKind,
    Signals,
    TrialResult,
    TrialRow,
    config_key,
)


def test_outcomes_and_failure_kinds_are_closed_lists():
    with pytest.raises(ValueError, match="outcome must be COMPLETE, FAIL or PRUNED"):
        TrialResult(outcome="CRASHED", config={})
    with pytest.raises(ValueError, match="failure_kind must be one of"):
        TrialResult.failed({}, "exploded", "boom")
    failed = TrialResult.failed({"tp_size": 2}, FailureKind.START_CRASH, "exit 1")
    assert failed.outcome == FAIL and failed.failure_kind == "start-crash" == FailureKind.START_CRASH
    assert f"{FailureKind.NODE_LOST}" == "node-lost" and str(FailureKind.ENV_ERROR) == "env-error"
    assert set(FAILURE_KINDS) == {k.value for k in FailureKind} and "interrupted" in NOT_THE_CONFIGS_FAULT


def test_a_result_survives_a_real_journal_as_user_attributes(tmp_path):
    result = TrialResult(outcome="COMPLETE", config={"tp_size": 2, "env.NCCL_PROTO": "LL"}, value=42.5,
                         metrics={"decode_tok_s": 42.5, "decode_samples": [42.0, 42.5, 43.0]},
                         timing={"launch_s": 20.0}, started_at=1.7e9, ended_at=1.7e9 + 60, node={"hostname": "h"},
                         warnings=["NCCL_PROTO=LL requested but NCCL used Simple"],
                         server={"pid": 7, "argv": ["srv", "--port", "1"], "path": tmp_path})  # a Path: not JSON
    attrs = result.to_attrs()
    assert json.loads(json.dumps(attrs)) == attrs and attrs["server"]["path"] == str(tmp_path)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.journal")))
    study = optuna.create_study(study_name="s", storage=journal)
    trial = study.ask()
    for name, value in attrs.items():
        trial.set_user_attr(name, value)
    study.tell(trial, 42.5)
    stored = optuna.load_study(study_name="s", storage=journal).trials[0].user_attrs
    back = TrialResult.from_attrs({**stored, "a_field_of_a_later_version": 1, "config_key": "k"})
    assert back == TrialResult.from_attrs(attrs) and back.config == result.config and back.value == 42.5
    assert back.warnings == result.warnings and back.metrics == result.metrics


def test_a_config_key_is_the_configs_identity():
    a = {"tp_size": 2, "env.NCCL_PROTO": "LL", "graph_capture": True}
    assert config_key(a) == config_key(dict(reversed(list(a.items()))))  # order does not matter
    assert config_key(a) != config_key({**a, "env.NCCL_PROTO": "Simple"})
    assert config_key({"x": 1}) != config_key({"x": "1"}) and len(config_key(a)) == 16


def test_a_row_prints_every_field_but_its_ranking_count():
    row = TrialRow(number=3, state="FAIL", params={"tp_size": 2}, failure_kind="wrong-output", n_measurements=4)
    printed = row.to_json()
    assert "n_measurements" not in printed and list(printed)[:3] == ["number", "state", "params"]
    assert json.loads(json.dumps(printed))["failure_kind"] == "wrong-output" and printed["counted"] is False
    with pytest.raises(AttributeError):
        row.state = "COMPLETE"  # type: ignore[misc]  # a row is what was stored: frozen


def test_the_signals_to_the_driver_are_typed_and_stored_where_every_version_kept_them():
    """How the server ended, whether the GPUs were usable, a write that failed: typed fields the
    driver reads (``Signals``), not metrics; stored in ``metrics`` under the names records always had,
    so a trial recorded before reads back the same."""
    stored = {"pruned_below": 12.0, "server_exit_code": -15, "gpus_usable": False,
              "write_failed": {"folder": "/r", "errno": 28, "cause": "No space left on device", "name": "t.log"}}
    result = TrialResult.failed({"tp_size": 1}, "env-error", "cannot write", metrics=stored)
    assert result.signals == Signals(server_exit_code=-15, gpus_usable=False, write_failed=stored["write_failed"])
    assert result.metrics == {"pruned_below": 12.0}  # the outcome's own keys only
    assert result.signals.write_error is not None and result.signals.write_error.hint == "free space there"
    assert result.to_attrs()["metrics"] == stored
    assert TrialResult.from_attrs(result.to_attrs()).signals == result.signals
    assert TrialResult(outcome="COMPLETE", config={}).signals.write_error is None
