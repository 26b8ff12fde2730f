"""A sampler wrapper that only proposes configs the study may launch.

Optuna numbers a trial when it is asked for, before any parameter is drawn, so a proposal
the space rules out (TP x PP != GPUs, a constraint, a pre-screened NCCL setting) or that
carries a banned value (``orchestrator.study.evidence.bans``) used to cost a trial number and a PRUNED
row (31-40 per study on the default vLLM space). ``FeasibleSampler`` makes the draws
themselves land on allowed configs: every value the wrapped sampler proposes is kept when
some allowed config agrees with it and with the values drawn before it; otherwise the
wrapped sampler draws again (a few times: its model still decides), and last a seeded
choice among the values that do complete to an allowed config. A joint (multivariate)
draw is checked as a whole, and replaced by the allowed config nearest to it.

``allowed()`` is the search policy's list of allowed configs, restricted to the parameters
that decide it (those of the space's constraints, the pre-screen's and the banned
values'), or None when the space is too large to enumerate or nothing is ever refused:
then the wrapper passes every draw through and the policy records what it must refuse.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import optuna

RETRIES = 8
_MISSING = object()


def agrees(partial: dict[str, Any], config: dict[str, Any]) -> bool:
    """``config`` has every value of ``partial`` (a parameter ``config`` does not have is
    inactive there, e.g. capture sizes without graphs, and cannot disagree)."""
    return all(config[k] == v for k, v in partial.items() if k in config)


def _checked(params: dict[str, Any], allowed: list[dict[str, Any]]) -> dict[str, Any]:
    """The values of ``params`` that decide whether a config is allowed."""
    names = set().union(*allowed)
    return {k: v for k, v in params.items() if k in names}


def completes(partial: dict[str, Any], allowed: list[dict[str, Any]]) -> bool:
    return any(agrees(partial, c) for c in allowed)


class FeasibleSampler(optuna.samplers.BaseSampler):
    """``base``, whose draws always complete to one of ``allowed()`` (module docstring)."""

    def __init__(self, base: optuna.samplers.BaseSampler, allowed: Callable[[], list[dict[str, Any]] | None],
                 seed: int = 0):
        self.base = base
        self._allowed = allowed
        self._rng = random.Random(seed)

    def infer_relative_search_space(self, study, trial):
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        params = self.base.sample_relative(study, trial, search_space)
        allowed = self._allowed() if params else None
        if not allowed or completes(_checked(params, allowed), allowed):
            return params
        for _ in range(RETRIES):
            again = self.base.sample_relative(study, trial, search_space)
            if completes(_checked(again, allowed), allowed):
                return again
        nearest = min(allowed, key=lambda c: (sum(1 for k, v in c.items() if params.get(k, _MISSING) != v),
                                              self._rng.random()))
        return {**params, **{k: v for k, v in nearest.items() if k in params}}

    def sample_independent(self, study, trial, param_name, param_distribution):
        value = self.base.sample_independent(study, trial, param_name, param_distribution)
        allowed = self._allowed()
        if not allowed or not any(param_name in c for c in allowed):
            return value
        partial = _checked(dict(trial.params), allowed)
        if completes({**partial, param_name: value}, allowed):
            return value
        for _ in range(RETRIES):
            value = self.base.sample_independent(study, trial, param_name, param_distribution)
            if completes({**partial, param_name: value}, allowed):
                return value
        options = sorted({repr(c[param_name]): c[param_name] for c in allowed
                          if param_name in c and agrees(partial, c)}.items())
        return self._rng.choice(options)[1] if options else value

    def before_trial(self, study, trial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
