"""The samplers a job may name, the options each takes and the packages each needs: the one
table both the job's validation (``orchestrator.config.job``, ``validate``) and the sampler's
construction (``orchestrator.study.search.samplers``) read."""

from __future__ import annotations

import importlib.util

SAMPLER_NAMES = ("model", "tpe", "gp", "random", "grid", "bruteforce", "nsga2")
# the per-value model leads (orchestrator.study.search.strategies.value_led): on the motivating space an
# optimal config at launch 9 (median, 20 seeds) against 34 for TPE, and no worse at the median on
# any shipped table at 20 seeds (docs/benchmarks.md, "Search strategies")
DEFAULT_SAMPLER = "model"
# samplers that draw random start-up trials before modelling ("model": the TPE it falls back on
# where the space is too large to enumerate)
MODEL_BASED = ("tpe", "gp", "model")

# Options each sampler accepts in ``options`` (the job's ``sampler.options``).
_TPE_OPTIONS: dict[str, type] = {"multivariate": bool, "group": bool, "constant_liar": bool, "n_ei_candidates": int,
                                 "n_startup_trials": int}
_GP_OPTIONS: dict[str, type] = {"deterministic_objective": bool, "n_startup_trials": int}
_NSGA2_OPTIONS: dict[str, type] = {"population_size": int, "mutation_prob": float, "crossover_prob": float,
                                   "swapping_prob": float}
_BRUTEFORCE_OPTIONS: dict[str, type] = {"avoid_premature_stop": bool}
# "model": the per-value model leads (orchestrator.study.search.strategies.value_led); gaps: false leaves the
# study's gaps to the model's bound alone (the search of issue 37); learn: true lets the launches'
# evidence choose the model's kernel weights and noise (study.kernel; not better on the suite, see
# docs/benchmarks.md, "Search on spaces it has not seen"); cover: N, the first N launches after the baseline a
# pairwise covering design (study.pairs), cover_near: X, once stalled every other launch the config within X
# of the best bound that covers the most value pairs never launched together (both off by default). These are
# the strategy's own (``MODEL_STRATEGY_OPTIONS``); n_startup_trials is TPE's, where the space is too large to enumerate.
MODEL_STRATEGY_OPTIONS: dict[str, type] = {"exploration": float, "interaction": float, "gaps": bool, "learn": bool,
                                           "cover": int, "cover_near": float}
_MODEL_OPTIONS: dict[str, type] = {**MODEL_STRATEGY_OPTIONS, "n_startup_trials": int}
OPTIONS: dict[str, dict[str, type]] = {"tpe": _TPE_OPTIONS, "gp": _GP_OPTIONS, "random": {}, "grid": {},
                                       "bruteforce": _BRUTEFORCE_OPTIONS, "nsga2": _NSGA2_OPTIONS,
                                       "model": _MODEL_OPTIONS}

# Packages a sampler needs beyond Optuna's own (Optuna imports them only when it is built).
NEEDS: dict[str, tuple[str, ...]] = {"gp": ("scipy",)}


def missing_packages(name: str) -> str | None:
    """Why the sampler ``name`` cannot be built here (a package it needs is not installed), in
    the words ``run`` and ``validate`` both print; None: nothing is missing."""
    missing = [pkg for pkg in NEEDS.get(name, ()) if importlib.util.find_spec(pkg) is None]
    if not missing:
        return None
    return (f"the {name} sampler needs {', '.join(missing)} (pip install {' '.join(missing)}); "
            f"or use sampler {DEFAULT_SAMPLER}")
