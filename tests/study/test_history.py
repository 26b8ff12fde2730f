"""history: rows as the user sees them, read from a real Optuna journal study.

``build_study(tmp_path)`` (also used by test_report/test_export) records TrialResults through
``orchestrator.study.policy.SearchPolicy.record`` - the driver's own storage encoding: a config-caused
FAIL is an infeasible COMPLETE with value 0.0, an interrupted FAIL an Optuna FAIL, PRUNED
PRUNED; a RUNNING and a WAITING trial are left as Optuna has them.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState

from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.core.records import TrialResult, config_key
from orchestrator.study import history, storage
from orchestrator.study.policy import Proposal, SearchPolicy

T0 = 1_700_000_000.0
CHOICES = {
    "tp_size": [1, 2],
    "graph_capture": [False, True],
    "env.NCCL_ALGO": ["Ring", "Tree"],
    "env.NCCL_PROTO": ["Simple", "LL", "LL128"],
    "backend.max_batch": [8],
}
BASE = {"tp_size": 2, "graph_capture": False, "env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "Simple",
        "backend.max_batch": 8}
BEST = {**BASE, "graph_capture": True, "env.NCCL_PROTO": "LL"}
GARBAGE = {**BASE, "graph_capture": True, "env.NCCL_PROTO": "LL128"}


class _Space:
    """The four calls SearchPolicy makes of a search space (the real one needs a job file)."""

    def __init__(self, choices: dict | None = None):
        self.choices = choices or CHOICES

    def suggest(self, trial):
        return {k: trial.suggest_categorical(k, v) for k, v in self.choices.items()}

    def active(self, config):
        return dict(config)

    def feasible(self, config):
        return None

    def enumerate(self):
        return None


def node(name: str) -> dict:
    return {"hostname": name, "node_id": f"id-{name}", "gpus": "0,1", "gpu_model": "NVIDIA H200",
            "cuda_version": "12.4", "driver_version": "550.54.15"}


def ok(config, value, *, cv=0.01, rel_ci=0.01, at=0.0, on="nodeA", warnings=(), nccl=None) -> TrialResult:
    samples = [value * 0.99, value, value * 1.01]
    return TrialResult(
        outcome="COMPLETE", config=dict(config), value=value,
        metrics={"decode_tok_s": value, "decode_samples": samples, "ttft_s": 0.05, "e2e_tok_s": value * 0.9,
                 "cv": cv, "rel_ci": rel_ci, "repeats": 3, "output_tokens": 64},
        timing={"launch_s": 20.0, "bench_s": 30.0, "check_s": 5.0, "teardown_s": 3.0, "total_s": 60.0},
        started_at=T0 + at, ended_at=T0 + at + 60.0, node=node(on),
        nccl=nccl if nccl is not None else {"version": "2.21.5"}, warnings=list(warnings),
        correctness={"ok": True, "reason": None})


def failed(config, kind, reason, *, at=0.0, on="nodeA", **kw) -> TrialResult:
    return TrialResult.failed(dict(config), kind, reason, started_at=T0 + at, ended_at=T0 + at + 30.0,
                              node=node(on), timing={"launch_s": 25.0, "teardown_s": 5.0, "total_s": 30.0},
                              log_tail="NCCL WARN something\nTraceback: boom", **kw)


def record(study, policy, config, result, *, baseline=False, cached_from=None, counted=True, choices=None):
    trial = study.ask()
    for k in config:
        trial.suggest_categorical(k, (choices or CHOICES)[k])
    if baseline:
        trial.set_user_attr("is_baseline", True)
    proposal = Proposal(trial, dict(config), config_key(config),
                        cached=result if cached_from is not None else None, cached_from=cached_from,
                        raw=dict(config))
    return policy.record(proposal, result, counted=counted)


def make_job(tmp_path: Path, study: str = "demo"):
    return SimpleNamespace(study=study, storage=f"journal:{tmp_path / 'reports' / study / 'study.journal'}",
                           report_dir=tmp_path / "reports" / study, path=None, env={"NCCL_NVLS_ENABLE": "0"},
                           backend=SimpleNamespace(kind="refserver", settings={"model": "tiny"}))


def build_study(tmp_path: Path, study_name: str = "demo"):
    """A study with every user-facing outcome; returns (job, study). Best is trial 2 (57 tok/s)."""
    job = make_job(tmp_path, study_name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage),
                                direction="maximize")
    policy = SearchPolicy(study, _Space(), lambda c: dict(c), baseline=None, budget=None)
    record(study, policy, BASE, ok(BASE, 20.0, at=0), baseline=True)                          # 0 baseline
    record(study, policy, {**BASE, "graph_capture": True}, ok({**BASE, "graph_capture": True}, 42.7,
                                                                 at=70, on="nodeB"))       # 1
    record(study, policy, BEST, ok(BEST, 57.0, at=140))                                         # 2 best
    record(study, policy, GARBAGE, failed(GARBAGE, "wrong-output", "greedy output differs at char 3",
                                          at=210, correctness={"ok": False, "reason": "differs"}))  # 3
    crash = {**BASE, "graph_capture": True, "env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "LL"}
    record(study, policy, crash, failed(crash, "start-crash", "server exited with code 1", at=250))  # 4
    intr = {**BASE, "env.NCCL_ALGO": "Tree"}
    record(study, policy, intr, failed(intr, "interrupted", "stopped by the user", at=290))      # 5
    tp1 = {"tp_size": 1, "graph_capture": False, "backend.max_batch": 8}
    pruned = TrialResult(outcome="PRUNED", config=tp1, value=10.0, failure_reason="first repeat below 0.9x best",
                         metrics={"decode_tok_s": 10.0, "repeats": 1}, started_at=T0 + 330, ended_at=T0 + 360,
                         node=node("nodeB"), timing={"launch_s": 10.0, "bench_s": 5.0, "total_s": 30.0})
    record(study, policy, tp1, pruned)                                                           # 6
    record(study, policy, BEST, ok(BEST, 57.0, at=140), cached_from=2)                            # 7 cached
    record(study, policy, BASE, ok(BASE, 15.0, at=400, on="nodeB"), baseline=False)              # 8 base on B
    tp1g = {"tp_size": 1, "graph_capture": True, "backend.max_batch": 8}
    record(study, policy, tp1g, ok(tp1g, 30.0, at=470, warnings=["NCCL_PROTO=LL requested but NCCL used Simple"]))  # 9
    # a remeasure of the garbage config that happened to complete: still never "best"
    record(study, policy, GARBAGE, ok(GARBAGE, 90.0, at=540))                                    # 10
    running = study.ask()                                                                        # 11 RUNNING
    running.suggest_categorical("tp_size", CHOICES["tp_size"])
    study.enqueue_trial({"tp_size": 2})                                                          # 12 WAITING
    return job, study


# ---- tests --------------------------------------------------------------------------------------------
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
    assert by[2].value == 57.0 and by[2].spread == 0.01 and by[2].node == "nodeA"
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
    policy = SearchPolicy(study, _Space(), lambda c: dict(c), baseline=None, budget=None)
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
    assert "best: trial 2 57.00 tok/s, 2.85x baseline" in text
    assert max(len(line) for line in lines) <= 160


def test_storage_opens_like_optuna_dashboard(built):
    """optuna-dashboard takes the journal file path and opens it with JournalFileBackend."""
    job, _rows = built
    path = storage.journal_path(job.storage)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    study = optuna.load_study(study_name="demo", storage=journal)
    assert len(study.trials) == 13
    assert storage.dashboard_command(job.storage) == f"optuna-dashboard {path}"
    assert {t.state for t in study.trials} >= {TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED}


def test_open_storage_rdb_and_errors(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert storage.storage_for(url) == url
    with pytest.raises(BadInput):
        storage.storage_for("not-a-storage")
    missing = SimpleNamespace(study="x", storage=f"journal:{tmp_path / 'none' / 'study.journal'}")
    with pytest.raises(RuntimeFailure, match="no study storage"):
        storage.load_study(missing)
    assert not (tmp_path / "none").exists()  # reading never creates
    job = make_job(tmp_path)
    optuna.create_study(study_name="other", storage=storage.storage_for(job.storage))
    with pytest.raises(RuntimeFailure, match="no study named 'demo'"):
        storage.load_study(job)


def _on(result: TrialResult, hostname: str, node_id: str) -> TrialResult:
    result.node = {**result.node, "hostname": hostname, "node_id": node_id}
    return result


def test_one_machine_resumed_in_a_new_ray_run_stays_one_node(tmp_path):
    """A resumed study gets a new Ray node id on the same host: still one node in status and
    the report. Several Ray nodes of one host running at the same time are told apart."""
    job = make_job(tmp_path)
    study = optuna.create_study(study_name=job.study, storage=storage.storage_for(job.storage),
                                direction="maximize")
    policy = SearchPolicy(study, _Space(), lambda c: dict(c), baseline=None, budget=None)
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
