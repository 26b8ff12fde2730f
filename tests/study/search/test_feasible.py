"""FeasibleSampler: on an enumerable space every draw of the study's sampler lands on a config
the study may launch, so infeasible layouts are never proposed at all (no trial number, no
row)."""

from __future__ import annotations

from pathlib import Path

import optuna

from orchestrator.config.job import load_job
from orchestrator.core.records import TrialResult
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.samplers import make_sampler


def test_the_default_vllm_space_proposes_only_feasible_layouts():
    """The motivating job's space (TP x PP == 8): two seeds, 48 proposals each, TPE as
    configured; not one infeasible layout is proposed (they used to be 31-40 PRUNED rows)."""
    job = load_job(str(Path(__file__).resolve().parents[3] / "jobs" / "glm5-vllm-8xpcie.yaml"))
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
