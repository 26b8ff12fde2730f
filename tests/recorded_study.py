"""A real Optuna journal study with every user-facing outcome, for the readers' tests (history,
storage, report, export, compare, importance). build_study(tmp_path) records TrialResults
through SearchPolicy.record, the driver's own storage encoding: a config-caused FAIL is an
infeasible COMPLETE with value 0.0, an interrupted FAIL an Optuna FAIL, PRUNED PRUNED; a
RUNNING and a WAITING trial are left as Optuna has them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import optuna

from orchestrator.core.records import TrialResult, config_key
from orchestrator.study.search.policy import Proposal, SearchPolicy
from orchestrator.study.storage import storage

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


class Space:
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
    """Record ``config`` as the driver does: Optuna draws exactly its values (a record whose config
    differs from its draws reads as edited by hand)."""
    study.enqueue_trial({k: v for k, v in config.items() if v in (choices or CHOICES)[k]})
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
    policy = SearchPolicy(study, Space(), lambda c: dict(c), baseline=None, budget=None)
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
