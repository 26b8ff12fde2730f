"""What the study believes a config would measure, and how sure it is: a Gaussian process over
parameter values, nearly additive.

The search the per-value model leads (``strategies.value_led``) needs more than the point
estimates of ``study.promise``: it needs to know what the launches leave unknown. ``Belief`` is a
Gaussian process on the log of a launch's value whose kernel counts what two configs share:

    k(a, b) = effect^2 x s + pair^2 x s (s - 1) / 2,    s = the values a and b have in common

(a parameter a config does not have is its own value, ``additive.UNSET``). That is Bayesian
regression on one effect per parameter value, each N(0, effect^2), the additive shape of
``study.additive``, plus one effect per pair of values, each N(0, pair^2): an interaction (Tree
is slower than Ring with one protocol and faster with another) is possible but small.
``pair^2`` is set so that all pairs together vary a config's value ``interaction`` times as much
as all single values do (0: the additive shape alone; the spaces this tool tunes are nearly
additive in the log: a factor per layout, graph mode, protocol, algorithm, P2P). The kernel itself
is ``study.kernel.Kernel``; with ``learn`` its weights (a third term of every order among them) and
the noise are the ones the measured launches' evidence favours (``kernel.most_likely``, issue 49: on
the suite it did not find the optimum sooner, so it is an option, not the default).

- the center: the mean of the working launches' log values; a launch's log value is its
  config's plus N(0, ``noise``^2) (the benchmark's noise and what the kernel misses);
- a config's prediction: the posterior mean and standard deviation of its log value. Values
  seen only together (the baseline's, before anything else) share what they measured and stay
  uncertain apart; a value never launched keeps the prior's spread, and so does a pair of values
  never launched together, a little;
- values that appear in exactly the same configs of the space (TP=8 and PP=1 where TP x PP = 8;
  graphs off and "no capture mode") count as one: otherwise a choice made of values that always
  go together would carry several values' spread where it is one choice;
- a config in flight (``None`` for its value) narrows the spread where it will be measured
  without moving the mean, so several launches at once do not all go to the same uncertainty.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np  # the posterior's linear algebra (numpy comes with optuna, pandas and torch)

from orchestrator.core.records import Config
from orchestrator.study.model.additive import value_of
from orchestrator.study.model.kernel import Kernel, most_likely

Value = tuple[str, Any]  # (parameter, value as additive.value_of keys it)


@dataclass(frozen=True)
class Belief:
    """The posterior (module docstring)."""

    names: tuple[str, ...]
    group: dict[Value, int]  # each value's column: values always seen together share one
    kernel: Kernel  # the prior's weights: one value's effect, one pair's, every order's
    center: float
    seen: Any  # numpy (points x groups) 0/1: the launched configs (measured and in flight)
    inverse: Any  # (K + noise^2 I)^-1 over the launched configs
    weights: Any  # inverse @ (y - center), zero where the value is not known yet

    @classmethod
    def fit(cls, space: Sequence[Config], data: Iterable[tuple[Config, float | None]], *, effect: float,
            noise: float, interaction: float = 0.0, learn: bool = False) -> "Belief":
        """The posterior over the configs of ``space`` (those a study may launch) given ``data``:
        (config, log value) of each launch, None for one in flight; ``effect``: the prior spread
        of one value's effect (log), ``noise``: of a launch around its config's value,
        ``interaction``: how much all pairs of values vary a config against all single values;
        ``learn``: the kernel's weights and the noise chosen by the measured launches' evidence
        (``kernel.most_likely``, centered on ``effect`` and ``noise``; ``interaction`` unused)."""
        data = list(data)
        names = tuple(sorted(set().union(*space, *(cfg for cfg, _ in data))))
        where: dict[Value, set[int]] = {}
        for i, cfg in enumerate(space):
            for n in names:
                where.setdefault((n, value_of(cfg, n)), set()).add(i)
        columns: dict[frozenset[int], int] = {}
        group = {value: columns.setdefault(frozenset(at), len(columns))
                 for value, at in sorted(where.items(), key=lambda kv: repr(kv[0]))}
        for cfg, _ in data:  # a launched config outside the space: its own values
            for n in names:
                group.setdefault((n, value_of(cfg, n)), len(columns) + len(group))
        width = max(group.values(), default=-1) + 1
        seen = _matrix([cfg for cfg, _ in data], names, group, width)
        per_config = int(_matrix(space, names, group, width).sum(axis=1).max(initial=1.0))  # choices a config makes
        ys = np.array([np.nan if y is None else y for _, y in data], dtype=float)
        known = ~np.isnan(ys)
        kernel = Kernel.of(effect, per_config, interaction=interaction)
        if learn:
            kernel, noise = most_likely(seen[known], ys[known], per_config=per_config, spread=effect, noise=noise)
        center = statistics.fmean(ys[known]) if known.any() else 0.0
        gram = kernel.between(seen, seen) + noise ** 2 * np.eye(len(data))
        inverse = np.linalg.inv(gram) if len(data) else np.zeros((0, 0))
        # the mean from the measured points alone; the in-flight ones only narrow the spread
        weights = np.zeros(len(data))
        if known.any():
            kk = gram[np.ix_(known, known)]
            weights[known] = np.linalg.solve(kk, ys[known] - center)
        return cls(names, group, kernel, center, seen, inverse, weights)

    def predict(self, configs: Sequence[Config]) -> tuple[list[float], list[float]]:
        """(mean, standard deviation) of each config's log value."""
        x = _matrix(configs, self.names, self.group, self.seen.shape[1])
        cross = self.kernel.between(x, self.seen)
        means = self.center + cross @ self.weights
        own = self.kernel.own(x)
        var = own - np.einsum("ij,jk,ik->i", cross, self.inverse, cross)
        return [float(m) for m in means], [float(s) for s in np.sqrt(np.maximum(var, 0.0))]


def _matrix(configs: Sequence[Config], names: tuple[str, ...], group: dict[Value, int], width: int) -> Any:
    """0/1 (configs x groups): the groups of each config's values (a value unknown to ``group``: none)."""
    out = np.zeros((len(configs), width))
    for i, cfg in enumerate(configs):
        for n in names:
            j = group.get((n, value_of(cfg, n)))
            if j is not None:
                out[i, j] = 1.0
    return out

