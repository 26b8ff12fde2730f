"""One outcome funnel and one ranking rule: ``outcome.decide`` keeps every field of a result
through every step, and on recorded studies (real GPU journals under docs/gpu, and a CPU
study with failures, constraint violations and cached answers) the driver's best equals
the exported best, and importance rates only what may be ranked (or was stopped early)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from orchestrator.config.job import OutcomeConstraint, load_job
from orchestrator.core import outcome
from orchestrator.core.correctness import Golden
from orchestrator.core.measurement import HostLoad, LevelResult, Measurement
from orchestrator.core.records import TrialResult, TrialRow
from orchestrator.results import importance
from orchestrator.results.export import export
from orchestrator.study.evidence.history import best_rows, trial_rows
from orchestrator.study.evidence.plan import HIGHER_MEDIAN
from orchestrator.study.search.policy import SearchPolicy

REPO = Path(__file__).resolve().parents[2]
RECORDED = sorted(REPO.glob("docs/gpu/*/study.journal")) + [REPO / "tests/data/recorded/cpu-faults/study.journal"]


def result(**kw) -> TrialResult:
    base = dict(outcome="COMPLETE", config={"tp_size": 2}, value=50.0, metrics={"decode_tok_s": 50.0},
                nccl={"version": "2.28.9", "env_applied": {"NCCL_PROTO": "LL"}}, warnings=["a warning"],
                server={"pid": 123, "argv": ["x"]}, log_tail="tail", node={"hostname": "h"},
                outputs={"texts": ["a b c", "d e f"]})
    base.update(kw)
    return TrialResult(**base)


KEPT = ("nccl", "warnings", "server", "log_tail", "node", "config")


def test_second_signal_interrupt_keeps_nccl_warnings_and_server():
    raw = result(outcome="FAIL", value=None, failure_kind="bench-error", failure_reason="killed")
    final = outcome.decide(raw, stop_signals=2)
    assert final.result.failure_kind == "interrupted" and final.blameless and final.requeue and not final.counted
    assert all(getattr(final.result, f) == getattr(raw, f) for f in KEPT)


@pytest.mark.parametrize("raw_kind,code,stop_signals,kind", [
    ("bench-error", -15, 1, "interrupted"),  # killed by SIGTERM while the run was being stopped: the same stop
    ("bench-error", 0, 1, "interrupted"),    # an engine's clean shutdown on that SIGTERM
    ("start-crash", 1, 1, "interrupted"),    # or one that exits with an error code as it shuts down
    ("hang", None, 1, "interrupted"),        # or whose front was still shutting down: it stopped answering
    ("bench-error", -15, 0, "bench-error"),  # no stop under way: nothing says it was not the config
    ("wrong-output", 0, 1, "wrong-output"),  # a wrong answer is not something a stop causes
    ("bench-timeout", None, 1, "bench-timeout"),  # nor a timeout (its own rule: the first is re-queued)
])
def test_a_server_that_ended_while_the_run_was_being_stopped_is_not_the_configs(raw_kind, code, stop_signals, kind):
    metrics = {} if code is None else {"server_exit_code": code}
    raw = result(outcome="FAIL", value=None, failure_kind=raw_kind, failure_reason="server exited", metrics=metrics)
    final = outcome.decide(raw, stop_signals=stop_signals, earlier_timeouts=1)
    assert final.result.failure_kind == kind
    assert final.blameless == (kind == "interrupted") and final.counted == (kind != "interrupted")
    if kind == "interrupted":
        assert final.result.failure_reason.startswith(outcome.ended_by_the_stop(raw, stop_signals))


def test_gate_and_constraints_are_replacements_of_the_result():
    golden = Golden(prompts=["p", "q"], texts=["a b c", "X Y Z"])
    final = outcome.decide(result(), golden=golden)
    r = final.result
    assert r.outcome == "FAIL" and r.failure_kind == "wrong-output" and "prompt 1" in r.failure_reason
    assert r.metrics["decode_tok_s_ignored"] == 50.0 and final.counted and not final.blameless
    assert all(getattr(r, f) == getattr(result(), f) for f in KEPT)
    rules = (OutcomeConstraint(concurrency=4, min_ratio=0.9),)
    base = Measurement(levels={1: LevelResult(1, samples=(50.0,)), 4: LevelResult(4, samples=(100.0,))})
    mine = Measurement(levels={1: LevelResult(1, samples=(50.0,)), 4: LevelResult(4, samples=(80.0,))})
    got = outcome.decide(result(measurement=mine), rules=rules, baseline=base).result
    assert got.outcome == "COMPLETE" and "0.80x the baseline" in got.metrics["constraint_violations"][0]
    assert got.nccl == result().nccl and got.warnings[0] == "a warning" and got.warnings[1].startswith("infeasible")


def test_a_timeout_is_the_configs_fault_only_once_it_reproduces():
    raw = result(outcome="FAIL", value=None, failure_kind="start-timeout", failure_reason="not ready after 60s")
    first = outcome.decide(raw, earlier_timeouts=0)
    assert first.blameless and first.requeue and not first.counted and "re-queued once" in first.result.failure_reason
    again = outcome.decide(raw, earlier_timeouts=1)
    assert again.counted and not again.blameless and not again.requeue
    crash = outcome.decide(result(outcome="FAIL", value=None, failure_kind="start-crash", failure_reason="exit 1"))
    assert crash.counted and not crash.blameless


def test_a_timeout_on_a_busy_host_is_not_the_configs_until_its_third():
    """Other work took 1.8 of the host's 2 CPUs while the benchmark ran: its timeout says as much
    about the neighbours as about the config, even when it reproduced; its third is the config's,
    or a config that never finishes would be launched all night on a host that stays busy."""
    busy = HostLoad(load_start=5.1, load_end=6.0, cpus=2, wall_s=60.0, host_cpu_s=118.0, server_cpu_s=8.0,
                    client_cpu_s=2.0)
    quiet = HostLoad(load_start=1.0, load_end=1.1, cpus=2, wall_s=60.0, host_cpu_s=70.0, server_cpu_s=60.0,
                     client_cpu_s=4.0)
    assert busy.busy and busy.others_cpus == pytest.approx(1.8) and not quiet.busy
    for host, blameless in ((busy, True), (quiet, False)):
        raw = result(outcome="FAIL", value=None, failure_kind="bench-timeout", failure_reason="did not finish",
                     measurement=Measurement(levels={1: LevelResult(1, samples=(9.0,))}, host=host))
        final = outcome.decide(raw, earlier_timeouts=1)
        assert final.blameless is blameless and final.requeue is blameless and final.counted is not blameless
        assert ("busy host" in final.result.failure_reason) is blameless
        third = outcome.decide(raw, earlier_timeouts=outcome.MAX_BLAMELESS_TIMEOUTS)
        assert third.counted and not third.blameless and not third.requeue
        assert ("busy host or not" in third.result.failure_reason) is blameless
    crash = result(outcome="FAIL", value=None, failure_kind="bench-error", failure_reason="HTTP 500",
                   measurement=Measurement(levels={1: LevelResult(1, samples=(9.0,))}, host=busy))
    assert outcome.decide(crash).counted  # only a timeout: an error is the config's on any host


def test_rankable_excludes_failures_wrong_configs_violations_and_cached_duplicates():
    def row(n, **kw):
        r = {"number": n, "state": "COMPLETE", "value": 10.0 + n, "counted": True, "cached_from": None,
             "config_key": f"k{n}", "metrics": {}, "correctness": {}, "failure_kind": None, "is_baseline": n == 0,
             "params": {}}
        r.update(kw)
        return TrialRow(**r)
    rows = [row(0), row(1), row(2, config_key="k1", state="FAIL", failure_kind="wrong-output", value=None),
            row(3, metrics={"constraint_violations": ["x"]}), row(4, cached_from=0, counted=False, config_key="k0"),
            row(5, counted=False), row(6, state="PRUNED")]
    assert [r.number for r in outcome.rankable(rows)] == [0]
    assert [r.number for r in best_rows(rows, 5)] == [0]


@pytest.mark.parametrize("journal", RECORDED, ids=lambda p: p.parent.name)
def test_the_drivers_best_is_the_exported_best_on_recorded_studies(journal, tmp_path):
    copy = tmp_path / "study.journal"
    shutil.copy(journal, copy)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(copy)))
    (name,) = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    study = optuna.load_study(study_name=name, storage=storage)
    rows = trial_rows(study)
    policy = SearchPolicy(study, space=SimpleNamespace(), normalize=dict, baseline=None, budget=None)
    driver_best = policy.best()
    exported = best_rows(rows, 1)
    assert (driver_best is None) == (not exported)
    if driver_best is None:
        return
    assert driver_best.number == exported[0].number
    job_file = REPO / "jobs" / f"{name}.yaml"  # its objective decides what the figure is (goodput: tok/s within it)
    objective = load_job(job_file).objective if job_file.exists() else None
    job = SimpleNamespace(study=name, storage=f"journal:{copy}", env={}, objective=objective,
                          backend=SimpleNamespace(kind="refserver", settings={"model": "tiny"}))
    doc = json.loads(export(job, rows, "json"))
    tie = doc["provenance"].get("tie_break")
    if tie and tie.get("rule") != HIGHER_MEDIAN:  # a tie the race left, broken by what else is known (said)
        assert doc["provenance"]["trial"] != driver_best.number and driver_best.number in tie["tied_trials"]
        assert "tie broken:" in export(job, rows, "env")
    else:
        assert doc["provenance"]["trial"] == driver_best.number
        # the figure a config is judged by is the median over its launches, as the export prints it
        assert policy.prune_threshold(0.8) == pytest.approx(0.8 * doc["provenance"]["figure"]["value"])
    ranked = {r.number for r in outcome.rankable(rows)}
    rated = [p for p in importance.measured_points(rows)]
    assert len([p for p in rated if not p[2]]) == len(ranked)  # importance rates the ranked trials (+ early stops)


def test_the_recorded_cpu_study_has_the_cases_the_rules_disagreed_on():
    """The recorded CPU study holds each case: config failures, a wrong output, cached
    answers and constraint violations; none of them is best."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(RECORDED[-1])))
    rows = trial_rows(optuna.load_study(study_name="cpu-faults", storage=storage))
    kinds = {r.failure_kind for r in rows if r.state == "FAIL"}
    assert {"start-crash", "wrong-output"} <= kinds
    assert any(r.cached_from is not None for r in rows)
    violators = [r for r in rows if (r.metrics or {}).get("constraint_violations")]
    assert violators and max(r.value for r in violators) > best_rows(rows, 1)[0].value  # faster, never best


def test_where_the_old_rules_disagreed_the_driver_now_agrees_with_export():
    """A config measured twice (100, then 60) and a baseline repeat on another node (uncounted)
    used to win the driver's best-so-far, and so set the pruning threshold, while export chose
    another config. One rule now: every launch of a config is evidence (a repeat on another node
    measures that node: not one), its figure the median of its launches (100 and 60: 80, above b's
    79), represented by its lower trial; the threshold is min_ratio x that figure."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    study = optuna.create_study(direction="maximize")
    dist = {"x": CategoricalDistribution(["a", "b", "base"])}

    def add(x, value, **attrs):
        ua = {"outcome": "COMPLETE", "value": value, "config": {"x": x}, "config_key": x, "counted": True, **attrs}
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=value, params={"x": x}, distributions=dist,
                                     user_attrs=ua, system_attrs={"constraints": [0.0]}))
    add("base", 50.0, is_baseline=True)
    add("a", 100.0)
    add("a", 60.0)
    add("b", 79.0)
    add("base", 200.0, counted=False, baseline_repeat=True)
    policy = SearchPolicy(study, space=SimpleNamespace(), normalize=dict, baseline=None, budget=None)
    rows = trial_rows(study)
    assert best_rows(rows, 1)[0].params == {"x": "a"} and best_rows(rows, 1)[0].n_measurements == 2
    assert policy.best().number == best_rows(rows, 1)[0].number == 2
    assert policy.prune_threshold(0.8) == pytest.approx(64.0)


def test_a_taken_port_in_a_real_server_log_is_env_error():
    """The reference server refuses a port another process holds; that is the node's fault."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "orchestrator.refserver", "--model", "tiny", "--port", str(port)],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    raw = TrialResult.failed({"tp_size": 1}, "start-crash", "server exited with code 2 before it was ready",
                             log_tail=out.stdout + out.stderr, nccl={"version": "2.28.9"}, warnings=["w"],
                             server={"port": port})
    final = outcome.decide(raw)
    assert final.result.failure_kind == "env-error" and "port was taken" in final.result.failure_reason
    assert final.blameless and not final.counted and final.requeue
    assert (final.result.nccl, final.result.warnings, final.result.server) == (raw.nccl, raw.warnings, raw.server)


@pytest.mark.parametrize("reason", [
    # vLLM 0.26.0's two refusals (a prompt over the limit; a prompt plus max_tokens over it), as the client words them
    "request 2 failed: HTTP 400: This model's maximum context length is 4096 tokens. However, your request has 7500 "
    "input tokens. Please reduce the length of the input messages.",
    "concurrency 64: 3 of 192 requests failed: [\"HTTP 400: 'max_tokens' or 'max_completion_tokens' is too large: 64. "
    "This model's maximum context length is 4096 tokens and your request has 4050 input tokens (64 > 4096 - 4050).\"]",
    "warm-up request 1 failed: HTTP 400: The decoder prompt (length 5000) is longer than the maximum model length of "
    "4096. Make sure that `max_model_len` is no smaller than the number of text tokens.",  # vLLM's engine
    "request 1 failed: HTTP 400: The input (5000 tokens) is longer than the model's context length (4096 tokens).",
    "request 1 failed: HTTP 400: the request exceeds the available context size, try increasing it",  # llama.cpp
])
def test_a_request_longer_than_the_servers_limit_is_the_jobs_error_not_the_configs(reason):
    raw = result(outcome="FAIL", value=None, failure_kind="bench-error", failure_reason=reason)
    final = outcome.decide(raw, earlier_timeouts=3)
    assert final.job_error is not None and reason in final.job_error and outcome.TOO_LONG_FIX in final.job_error
    assert final.result.failure_kind == "interrupted" and final.blameless and not final.counted and not final.requeue
    assert all(getattr(final.result, f) == getattr(raw, f) for f in KEPT)
    # the same words only in the log (an engine names its limit at start) leave the failure the config's
    other = result(outcome="FAIL", value=None, failure_kind="bench-error", failure_reason="request 1 failed: HTTP 500",
                   log_tail="INFO maximum context length is 4096 tokens")
    assert outcome.decide(other).job_error is None and outcome.decide(other).counted


# ---- latency targets (issue 35) -------------------------------------------------------------------
def test_a_config_that_counts_nowhere_under_the_slo_stays_complete_infeasible_by_how_much():
    from orchestrator.core.measurement import Latency, LevelResult, Measurement
    from orchestrator.core.slo import Slo, Targets, judge

    targets = Targets(every=(Slo.named("tpot_p99", 0.020),))

    def measured(tpot_at_32: float) -> TrialResult:
        levels = {1: LevelResult(1, samples=(400.0,), tpot=Latency(0.002, 0.002, 0.0025, 9)),
                  32: LevelResult(32, samples=(2600.0,), tpot=Latency(0.02, 0.03, tpot_at_32, 9))}
        return TrialResult(outcome="COMPLETE", config={}, value=400.0, measurement=Measurement(levels=levels))

    def plan(m):
        return judge(m, targets, (1, 32), each_level=True)

    def one_level(m):
        return judge(m, targets, (32,), each_level=False)

    partly = outcome.decide(measured(0.0312), slo=plan).result  # a plan: infeasible at 32 only
    assert partly.outcome == "COMPLETE" and "slo_violations" not in partly.metrics
    assert partly.warnings == ["SLO broken at 32: TPOT p99 31.2 ms at 32, over the 20 ms target by 56%"]
    assert outcome.infeasibility(partly) == 0.0
    whole = outcome.decide(measured(0.0312), slo=one_level).result  # one level: nowhere to count
    assert whole.outcome == "COMPLETE" and whole.metrics["slo_excess"] == pytest.approx(0.56)
    assert whole.warnings[-1].startswith("infeasible: breaks the SLO: TPOT p99 31.2 ms at 32")
    assert outcome.infeasibility(whole) == pytest.approx(0.56)  # what Optuna's constraint is told
    assert outcome.decide(measured(0.015), slo=one_level).result.warnings == []
    assert outcome.decide(measured(0.0312)).result.warnings == []  # no targets: nothing judged


def test_rankable_leaves_out_a_config_that_counts_nowhere_under_the_slo():
    rows = [TrialRow(number=0, state="COMPLETE", value=10.0, counted=True, config_key="a"),
            TrialRow(number=1, state="COMPLETE", value=50.0, counted=True, config_key="b",
                     metrics={"slo_violations": ["breaks the SLO: ..."], "slo_excess": 0.5})]
    assert [r.number for r in outcome.rankable(rows)] == [0]
    assert outcome.infeasibility(TrialResult(outcome="COMPLETE", config={}, value=1.0,
                                             metrics={"constraint_violations": ["x"]})) == 1.0
