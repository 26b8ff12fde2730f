"""How alike two configs are to the study's Gaussian process (``study.belief``), and how much of
each kind of likeness the study's own launches support.

The kernel counts the values two configs share, ``s`` (their Hamming distance is ``h = (n_a + n_b)
/ 2 - s``, ``n``: a config's values):

    k(a, b) = effect^2 x s + pair^2 x s (s - 1) / 2 + high^2 x exp(-reach x h)

the additive shape (one effect per value), pairs of values, and a term of every order: configs a
setting or two apart are alike beyond what their values add up to (a value slow alone and fastest
beside one partner makes the best config's neighbours alike, not its values).

``most_likely`` (issue 49) lets the launches say how interactive the space is instead of a fixed
prior weight: type-II maximum likelihood over a small grid of weights, each with a prior that keeps
a study of a few launches on the additive shape and the spread it was tuned with. One
eigendecomposition per shape of the kernel makes every spread and noise of the grid cheap (a few
milliseconds per ask at 40 launches).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# the grid: each weight with its prior's log-probability (relative). Pairs and the every-order term
# are as likely absent as present, so only evidence moves a study off the additive shape.
INTERACTIONS = ((0.0, math.log(0.5)), (0.25, math.log(0.25)), (1.0, math.log(0.25)))
HIGHS = ((0.0, math.log(0.5)), (0.25, math.log(1 / 6)), (1.0, math.log(1 / 6)), (4.0, math.log(1 / 6)))
REACHES = (0.7, 1.5)
SPREADS = tuple(np.exp(np.linspace(math.log(0.25), math.log(2.0), 10)))  # x the working launches' spread
NOISES = tuple(np.exp(np.linspace(math.log(0.005), math.log(0.2), 12)))
SPREAD_PRIOR = 0.5  # log-normal around the launches' spread: the exploration was tuned at 1x
NOISE_PRIOR = 1.0  # log-normal around the strategy's noise
MIN_POINTS = 4  # working launches before the evidence is asked: fewer keep the defaults


@dataclass(frozen=True)
class Kernel:
    """The kernel's weights (module docstring): ``effect``, ``pair``, ``high`` spreads (log),
    ``reach`` per setting apart."""

    effect: float
    pair: float = 0.0
    high: float = 0.0
    reach: float = 1.0

    @classmethod
    def of(cls, effect: float, per_config: int, *, interaction: float = 0.0, high: float = 0.0,
           reach: float = 1.0) -> "Kernel":
        """Weights from fractions: all pairs together vary a config ``interaction`` times as much as
        all single values do, the every-order term ``high`` times (a config makes ``per_config``
        choices)."""
        singles = effect ** 2 * per_config
        return cls(effect, (singles * interaction / max(1, per_config * (per_config - 1) / 2)) ** 0.5,
                   (singles * high) ** 0.5, reach)

    def between(self, a: Any, b: Any) -> Any:
        """(len(a) x len(b)) covariances of 0/1 rows (configs x value groups)."""
        shared = a @ b.T
        out = self.effect ** 2 * shared + self.pair ** 2 * shared * (shared - 1) / 2
        if self.high:
            apart = (a.sum(axis=1)[:, None] + b.sum(axis=1)[None, :]) / 2 - shared
            out = out + self.high ** 2 * np.exp(-self.reach * apart)
        return out

    def own(self, a: Any) -> Any:
        """Each row's variance: ``between(a, a)``'s diagonal."""
        n = a.sum(axis=1)
        return self.effect ** 2 * n + self.pair ** 2 * n * (n - 1) / 2 + self.high ** 2


def most_likely(seen: Any, ys: Any, *, per_config: int, spread: float, noise: float) -> tuple[Kernel, float]:
    """(kernel, noise) of the grid with the highest log marginal likelihood plus log prior, given
    the working launches ``seen`` (0/1 rows) and their log values ``ys`` (centered here); ``spread``:
    the prior's center for a value's effect, ``noise``: for a launch's. Fewer than ``MIN_POINTS``
    launches: ``Kernel(spread)`` and ``noise``, the additive shape."""
    ys = np.asarray(ys, dtype=float)
    if len(ys) < MIN_POINTS:
        return Kernel(spread), noise
    y = ys - ys.mean()
    effects = spread * np.array(SPREADS)
    noises = np.array(NOISES)
    prior_e = -0.5 * (np.log(np.array(SPREADS)) / SPREAD_PRIOR) ** 2
    prior_n = -0.5 * (np.log(noises / noise) / NOISE_PRIOR) ** 2
    best: tuple[float, Kernel, float] | None = None
    shapes = [(i, pi, h, ph, r) for i, pi in INTERACTIONS for h, ph in HIGHS
              for r in (REACHES if h else REACHES[:1])]
    for i, pi, h, ph, r in shapes:
        unit = Kernel.of(1.0, per_config, interaction=i, high=h, reach=r)
        lam, vec = np.linalg.eigh(unit.between(seen, seen))
        proj = (vec.T @ y) ** 2
        # every (effect, noise) at once: K = effect^2 x unit + noise^2 I shares unit's eigenvectors
        var = np.maximum(lam, 0.0)[None, None, :] * effects[:, None, None] ** 2 + noises[None, :, None] ** 2
        evidence = -0.5 * (proj / var).sum(axis=2) - 0.5 * np.log(var).sum(axis=2)
        score = evidence + prior_e[:, None] + prior_n[None, :] + pi + ph
        at = np.unravel_index(int(np.argmax(score)), score.shape)
        if best is None or score[at] > best[0]:
            best = (float(score[at]), Kernel.of(float(effects[at[0]]), per_config, interaction=i, high=h, reach=r),
                    float(noises[at[1]]))
    assert best is not None
    return best[1], best[2]
