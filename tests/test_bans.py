"""Learning from crashes at the value level: a value whose launches crash at start, for a
reason the log attributes to it, is not proposed after 2 such failures; infeasible layouts
are never proposed at all (no trial number, no row)."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
import pytest

from conftest import write_job
from orchestrator import bans
from orchestrator.history import trial_rows
from orchestrator.job import load_job
from orchestrator.records import TrialResult, TrialRow
from orchestrator.report import write_report
from orchestrator.samplers import make_sampler
from orchestrator.search import SearchPolicy
from orchestrator.study import StudyDriver, open_study

NCCL_LOGS = Path(__file__).with_name("fixtures") / "nccl"
LL129 = (NCCL_LOGS / "bad-proto-LL129-2.28.9.log").read_text(errors="replace")


def row(number, params, state="FAIL", kind="nccl-invalid", log="", reason="server exited with code 1"):
    return TrialRow(number=number, params=params, state=state, failure_kind=kind if state == "FAIL" else None,
                    failure_reason=reason, log_tail=log, counted=True, cached_from=None)


def test_a_token_nccl_refuses_is_banned_after_two_launches_with_it():
    a = {"tp_size": 2, "env.NCCL_PROTO": "LL129", "env.NCCL_ALGO": "Ring"}
    b = {"tp_size": 2, "env.NCCL_PROTO": "LL129", "env.NCCL_ALGO": "Tree"}
    assert "Unrecognized element token" in LL129
    assert bans.banned_values([row(0, a, log=LL129)]) == {}  # one failure is not yet consistent
    got = bans.banned_values([row(0, a, log=LL129), row(1, b, log=LL129)])
    assert list(got) == [("env.NCCL_PROTO", "LL129")] and "trials 0, 1" in got[("env.NCCL_PROTO", "LL129")]
    # Ring and Tree were not named by the log: not implicated


def test_nccl_refusal_without_a_named_token_implicates_only_what_never_worked():
    """NCCL refused "a setting" without naming it: every NCCL value of the config is a
    suspect, and the one that never got past start-up in any launch is banned. (The log is
    the real LL129 refusal with its token line dropped: the generic lines NCCL prints.)"""
    log = "\n".join(ln for ln in LL129.splitlines() if "LL129" not in ln)
    assert "invalid usage" in log
    rows = [row(0, {"env.NCCL_PROTO": "Simple", "env.NCCL_ALGO": "NVLS"}, log=log),
            row(1, {"env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "NVLS"}, log=log),
            row(2, {"env.NCCL_PROTO": "Simple", "env.NCCL_ALGO": "Ring"}, state="COMPLETE"),
            row(3, {"env.NCCL_PROTO": "LL", "env.NCCL_ALGO": "Tree"}, state="FAIL", kind="wrong-output")]
    assert list(bans.banned_values(rows)) == [("env.NCCL_ALGO", "NVLS")]


def test_a_start_crash_the_log_does_not_attribute_bans_nothing():
    log = "# ncclsweep: server --fault crash-on-start\nTraceback (most recent call last):\nRuntimeError: CUDA error\n"
    rows = [row(i, {"backend.fault": "crash-on-start", "x": i}, kind="start-crash", log=log) for i in range(3)]
    assert bans.banned_values(rows) == {}  # the launch command names every value: not evidence


def test_the_default_vllm_space_proposes_only_feasible_layouts():
    """The motivating job's space (TP x PP == 8): two seeds, 48 proposals each, TPE as
    configured; not one infeasible layout is proposed (they used to be 31-40 PRUNED rows)."""
    job = load_job(str(Path(__file__).resolve().parents[1] / "jobs" / "glm5-vllm-8xpcie.yaml"))
    for seed in (0, 1):
        sampler = make_sampler("tpe", seed=seed, budget=48, space_size=job.space.size(),
                               search_space=job.space.distributions())
        study = optuna.create_study(direction="maximize", sampler=sampler)
        policy = SearchPolicy(study, job.space, job.backend_obj().normalize, baseline=job.baseline_config(),
                              budget=48, seed=seed)
        while (p := policy.next()) is not None:
            if p.cached is not None:
                policy.record(p, p.cached, counted=False)
                continue
            assert job.space.feasible(p.raw) is None
            value = 20.0 + (20 if p.config.get("graph_capture") else 0) + p.number % 7
            policy.record(p, TrialResult(outcome="COMPLETE", config=p.config, value=value))
        assert not [t for t in study.trials if t.user_attrs.get("skipped")]
        assert len([t for t in study.trials if t.user_attrs.get("counted")]) == 48


@pytest.mark.slow
def test_two_always_crashing_values_are_each_launched_at_most_twice(tmp_path, ray_local, no_leftover_servers):
    """Acceptance: a preset the reference server does not know and its crash-on-start fault
    crash every server that carries them, and the logs say so; each is launched at most
    twice, then the study stops proposing it, says so, and the report lists it."""
    argv = ["{python}", "-m", "orchestrator.refserver", "--model", "{backend.preset}", "--fault", "{backend.fault}",
            "--device", "cpu", "--threads", "{backend.threads}", "--served-model-name", "tiny",
            "--host", "{host}", "--port", "{port}"]
    # slow-start:0 is a healthy server (the command backend passes the value as given)
    space = ("params:\n  backend.preset: {choices: [tiny, tinyy]}\n"
             "  backend.fault: {choices: [\"slow-start:0\", crash-on-start]}\n"
             "  backend.threads: {choices: [1, 2]}\n")
    job_path = write_job(tmp_path, study="bans", space_text=space, budget={"trials": 8}, max_consecutive_failures=10,
                         backend={"kind": "command", "settings": {"argv": argv, "model_name": "tiny"}},
                         baseline={"backend.preset": "tiny", "backend.fault": "slow-start:0", "backend.threads": 1},
                         sampler={"name": "tpe", "seed": 0})
    job = load_job(job_path)
    out = io.StringIO()
    summary = StudyDriver(job, out=out).run()
    log = out.getvalue()
    rows = [r for r in trial_rows(open_study(job, create=False)) if r.cached_from is None and not r.skipped]
    unknown = [r for r in rows if r.params["backend.preset"] == "tinyy"]
    crashing = [r for r in rows if r.params["backend.fault"] == "crash-on-start"]
    assert 1 <= len(unknown) <= 2 and 1 <= len(crashing) <= 2, log
    assert all(r.state == "FAIL" for r in unknown + crashing)
    healthy = [r for r in rows if r not in unknown + crashing]
    assert len(healthy) == 2 and all(r.state == "COMPLETE" for r in healthy)  # both healthy configs measured
    assert summary.reason == "space exhausted", log
    for value in ("backend.preset=tinyy", "backend.fault=crash-on-start"):
        if sum(1 for r in rows if value.split("=")[1] in r.params.values()) == 2:
            assert f"not proposing {value} any more" in log
    banned = bans.banned_values(trial_rows(open_study(job, create=False)))
    paths = write_report(job, out_dir=tmp_path / "report", bandwidth_bytes_s=50e9, allreduce_latency_s=20e-6)
    text = next(p for p in paths if p.suffix == ".md").read_text()
    assert banned and "values not proposed any more" in text
    for pair in banned:
        assert bans.describe(pair) in text
