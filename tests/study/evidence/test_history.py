"""history: rows as the user sees them, read from a real Optuna journal study
(tests/recorded_study.py: every user-facing outcome recorded through the driver's own
storage encoding)."""

from __future__ import annotations

import json

import optuna
import pytest
from recorded_study import BASE, BEST, GARBAGE, Space, build_study, failed, make_job, ok, record

from logtext import said
from orchestrator.core.records import TrialResult, config_key
from orchestrator.study.evidence import history
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage import storage


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One study for the module: these tests only read it."""
    job, study = build_study(tmp_path_factory.mktemp("history"))
    return job, history.trial_rows(storage.load_study(job))


def test_states_come_from_the_outcome_attr(built):
    _job, rows = built
    states = {r.number: r.state for r in rows}
    assert states == {0: "COMPLETE", 1: "COMPLETE", 2: "COMPLETE", 3: "FAIL", 4: "FAIL", 5: "FAIL", 6: "PRUNED",
                      7: "COMPLETE", 8: "COMPLETE", 9: "COMPLETE", 10: "COMPLETE", 11: "RUNNING", 12: "WAITING"}
    by = {r.number: r for r in rows}
    # storage says COMPLETE for the config-caused failure, the row says FAIL and has no value
    assert by[3].optuna_state == "COMPLETE" and by[3].value is None
    assert by[3].failure_kind == "wrong-output" and "differs" in by[3].failure_reason
    assert by[5].optuna_state == "FAIL" and by[5].failure_kind == "interrupted" and not by[5].counted
    assert by[6].value is None and by[6].failure_reason.startswith("first repeat")
    assert by[2].value == 57.0 and by[2].spread == pytest.approx(0.01) and by[2].node == "nodeA"
    assert by[2].params == BEST and by[2].durations["launch_s"] == 20.0
    assert by[2].started_at.startswith("2023-11-14T22:15") and by[2].ended_at > by[2].started_at
    assert by[7].cached_from == 2 and by[7].counted is False
    assert by[0].is_baseline and by[0].nccl_summary.startswith("NCCL 2.21.5")
    assert by[9].warnings and by[11].value is None
    assert list(history.ROW_KEYS) == list(rows[0].to_json())
    json.dumps([r.to_json() for r in rows])  # status --json prints them


def test_best_is_never_a_failure_nor_a_wrong_config(built):
    _job, rows = built
    best = history.best_rows(rows, 10)
    numbers = [r.number for r in best]
    assert numbers[0] == 2
    assert 3 not in numbers and 10 not in numbers  # the garbage config, even when it "completed" at 90
    assert 7 not in numbers  # a cached answer repeats trial 2, it is not a second config
    assert all(r.state == "COMPLETE" for r in best)
    assert len({r.config_key for r in best}) == len(best)
    # the baseline config was measured twice (20 on nodeA, 15 on nodeB): the baseline trial represents it
    base = next(r for r in best if r.config_key == config_key(BASE))
    assert base.n_measurements == 2 and base.number == 0 and base.value == 20.0
    assert history.baseline_row(rows).number == 0
    assert [r.number for r in history.baseline_repeats(rows)] == [0, 8]


def test_best_rows_empty_when_everything_failed(tmp_path):
    job = make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = SearchPolicy(study, Space(), lambda c: dict(c), baseline=None, budget=None)
    record(study, policy, BASE, failed(BASE, "start-crash", "exit 1"))
    rows = history.trial_rows(storage.load_study(job))
    assert history.best_rows(rows, 3) == []
    assert "best: none yet" in history.format_status(rows)


def test_format_status_is_compact(built):
    _job, rows = built
    text = history.format_status(rows, width=160)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["#", "state", "tok/s"]
    assert any(line.split()[:2] == ["3", "FAIL"] and "wrong-output" in line for line in lines)
    assert any("[cached #2]" in line for line in lines)
    # the baseline's config was launched twice (20 and 15 tok/s): its figure is their median
    assert "best: trial 2 57.00 tok/s (median of 1 launch), 3.26x baseline" in text
    assert max(len(line) for line in lines) <= 160


def _on(result: TrialResult, hostname: str, node_id: str) -> TrialResult:
    result.node = {**result.node, "hostname": hostname, "node_id": node_id}
    return result


def test_one_machine_resumed_in_a_new_ray_run_stays_one_node(tmp_path):
    """A resumed study gets a new Ray node id on the same host: still one node in status and
    the report. Several Ray nodes of one host running at the same time are told apart."""
    job = make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage),
                                direction="maximize")
    policy = SearchPolicy(study, Space(), lambda c: dict(c), baseline=None, budget=None)
    record(study, policy, BASE, _on(ok(BASE, 20.0, at=0), "gpu1", "run1-aaaa"), baseline=True)
    record(study, policy, BEST, _on(ok(BEST, 57.0, at=70), "gpu1", "run1-aaaa"))
    # second run of the driver, an hour later: same host, new Ray node id
    record(study, policy, GARBAGE, _on(ok(GARBAGE, 30.0, at=3600), "gpu1", "run2-bbbb"))
    # a local 2-node test cluster on host "box": both nodes busy at the same time
    tp1 = {"tp_size": 1, "graph_capture": False, "backend.max_batch": 8}
    tp1g = {**tp1, "graph_capture": True}
    record(study, policy, tp1, _on(ok(tp1, 10.0, at=4000), "box", "node-one"))
    record(study, policy, tp1g, _on(ok(tp1g, 11.0, at=4010), "box", "node-two"))
    rows = history.trial_rows(storage.load_study(job))
    assert [r.node for r in rows] == ["gpu1", "gpu1", "gpu1", "box/node-one", "box/node-two"]


def test_rows_read_again_follow_the_record_a_later_driver_keeps(tmp_path):
    # rows of finished trials are built once per study object (the policy reads them at every
    # proposal); a record kept for a trial afterwards (storage.recovered_attr) still shows
    job = make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = SearchPolicy(study, Space(), lambda c: dict(c), baseline=None, budget=None)
    record(study, policy, BASE, ok(BASE, 20.0), baseline=True)
    first = history.trial_rows(study)
    assert history.trial_rows(study)[0] is first[0]  # built once
    study.set_user_attr(storage.recovered_attr(0), {"outcome": "FAIL", "failure_kind": "interrupted",
                                                    "failure_reason": "kept by the next driver"})
    again = history.trial_rows(study)[0]
    assert again.state == "FAIL" and again.failure_reason == "kept by the next driver"
    # another study object on the same storage builds its own rows
    other = optuna.load_study(study_name=job.study, storage=storage.storage_for(job.storage))
    assert history.trial_rows(other)[0] == again and history.trial_rows(other)[0] is not again


# ---- a record edited by hand (issue 38) ---------------------------------------------------------
# A real journal of three measured trials (the best #2 at 40 tok/s), edited line by line as a user
# with an editor would; every command still works, names the edited record, and no figure uses it.

def edited_study(tmp_path, edit):
    """The job file of a recorded study whose journal ``edit(record)`` changed (a record: one line,
    as JSON; it returns the record to write)."""
    from conftest import write_job
    from orchestrator.config.job import load_job

    path = write_job(tmp_path, study="hand")
    job = load_job(path)
    study = storage.open_study(job)
    policy = SearchPolicy(study, Space(), lambda c: dict(c), baseline=None, budget=None)
    choices = {"tp_size": [1, 2], "backend.threads": [1, 2]}
    for i, config in enumerate([{"tp_size": 1, "backend.threads": 1}, {"tp_size": 2, "backend.threads": 2},
                                {"tp_size": 1, "backend.threads": 2}]):
        record(study, policy, config, ok(config, 20.0 + 10 * i, at=70 * i), baseline=i == 0, choices=choices)
    lines = job.journal_path.read_text().splitlines()
    job.journal_path.write_text("\n".join(json.dumps(edit(json.loads(ln)), separators=(",", ":")) for ln in lines)
                                + "\n")
    return path


def cli(capsys, *argv):
    from orchestrator.cli import main

    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out, got.err


def test_a_categorical_index_out_of_range_is_named_and_left_out(tmp_path, capsys):
    def edit(r):
        if r.get("op_code") == 5 and r.get("trial_id") == 1 and r["param_name"] == "tp_size":
            r["param_value_internal"] = 99
        return r

    job = edited_study(tmp_path, edit)
    code, out, err = cli(capsys, "status", str(job))
    assert code == 0, err  # was: every command failed with "tuple index out of range"
    assert "record " in err and "(trial id 1) is left out: parameter 'tp_size' holds choice index 99 of 2" in said(err)
    assert "best: trial 2 40.00 tok/s" in out
    code, out, err = cli(capsys, "export", str(job), "--format", "json")
    assert code == 0 and json.loads(out)["provenance"]["trial"] == 2


def test_a_config_outside_the_space_and_an_absurd_value_are_named_and_never_best(tmp_path, capsys):
    def edit(r):
        attr = r.get("user_attr") or {}
        if r.get("trial_id") == 1 and "config" in attr:
            attr["config"] = {"tp_size": 8, "backend.threads": 2}  # not a value of tp_size's choices
        if r.get("trial_id") == 0 and "value" in attr:
            attr["value"] = 1e9  # the baseline, "measured" at a billion tok/s
        return r

    job = edited_study(tmp_path, edit)
    code, out, err = cli(capsys, "status", str(job), "--json")
    assert code == 0, err
    rows = {r["number"]: r for r in json.loads(out)["trials"]}
    assert rows[1]["state"] == "FAIL" and rows[1]["value"] is None
    assert "its config's tp_size=8 is not a value of the space it was drawn from" in rows[1]["failure_reason"]
    assert rows[0]["state"] == "FAIL" and "its value 1e+09 tok/s lies outside the samples it was measured with " \
                                          "(19.8-20.2)" in rows[0]["failure_reason"]
    assert rows[2]["state"] == "COMPLETE" and rows[2]["value"] == 40.0
    assert "trial 1's record was changed after it was written" in said(err) and "trial 0's record" in said(err)
    code, out, _ = cli(capsys, "export", str(job), "--format", "json", "--top", "3")
    assert code == 0 and [d["provenance"]["trial"] for d in json.loads(out)] == [2]  # neither edited trial


def test_a_goodput_baseline_that_breaks_the_slo_at_one_stream_is_a_measured_zero(tmp_path, capsys):
    """Found on a real vLLM: an eager baseline over a 10 ms TPOT target at one stream measures
    0 tok/s within the SLO. That is its figure, not a record edited by hand; a 0 without a
    goodput measurement behind it still is."""
    job = make_job(tmp_path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage), direction="maximize")
    policy = SearchPolicy(study, Space(), lambda c: dict(c), baseline=None, budget=None)
    broke = ok(BASE, 0.0)
    broke.metrics.update(goodput={"max_concurrency": 128, "probes": [1], "holds": None, "breaks": 1},
                         decode_samples=[70.0, 76.0, 73.0],
                         slo_violations=["breaks the SLO at 1 stream(s) already: TPOT p99 14.3 ms at 1"])
    record(study, policy, BASE, broke, baseline=True)
    zero = ok(BEST, 0.0)  # a decode rate of 0 with nothing to say why
    record(study, policy, BEST, zero)
    rows = {r.number: r for r in history.trial_rows(study)}
    assert rows[0].state == "COMPLETE" and rows[0].value == 0.0
    assert rows[1].state == "FAIL" and "its value 0.0 is no decode rate" in rows[1].failure_reason


def test_a_config_edited_within_the_space_is_named_and_never_exported(tmp_path, capsys):
    """An edit a range check cannot see: trial 0's config moved to another point of the space
    (tp_size 1 -> 2, a valid choice), its draws and key left as they were."""
    def edit(r):
        attr = r.get("user_attr") or {}
        if r.get("trial_id") == 1 and "config" in attr:
            attr["config"] = {"tp_size": 1, "backend.threads": 2}  # trial 2's config, now also trial 1's
        return r

    job = edited_study(tmp_path, edit)
    code, out, err = cli(capsys, "status", str(job), "--json")
    assert code == 0, err
    rows = {r["number"]: r for r in json.loads(out)["trials"]}
    assert rows[1]["state"] == "FAIL" and "its config's tp_size=1 is not the value Optuna drew for it (2)" in \
        rows[1]["failure_reason"]
    assert rows[0]["state"] == rows[2]["state"] == "COMPLETE" and "trial 1's record was changed" in said(err)
    code, out, _ = cli(capsys, "export", str(job), "--format", "json", "--top", "3")
    assert code == 0 and sorted(d["provenance"]["trial"] for d in json.loads(out)) == [0, 2]
