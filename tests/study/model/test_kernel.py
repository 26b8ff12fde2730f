"""The kernel of the study's Gaussian process (study/model/kernel.py): its weights as fractions of the
additive part, a valid covariance over a whole space, and the weights the launches' evidence picks:
the additive shape on an additive space and on few launches, more than it on a space whose pairs
matter."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from orchestrator.study.model.kernel import MIN_POINTS, Kernel, most_likely

SIZES = (3, 3, 2, 3, 2)  # five parameters: 108 configs, one-hot over 13 values


def one_hot(configs):
    out = np.zeros((len(configs), sum(SIZES)))
    for i, cfg in enumerate(configs):
        for p, v in enumerate(cfg):
            out[i, sum(SIZES[:p]) + v] = 1.0
    return out


SPACE = list(itertools.product(*(range(n) for n in SIZES)))
rng = random.Random(3)
MAIN = [[rng.gauss(0.0, 0.2) for _ in range(n)] for n in SIZES]
PAIRS = {(p, q, a, b): rng.gauss(0.0, 0.25) for p, q in itertools.combinations(range(len(SIZES)), 2)
         for a in range(SIZES[p]) for b in range(SIZES[q])}


def additive(cfg):
    return sum(MAIN[p][v] for p, v in enumerate(cfg))


def paired(cfg):
    return additive(cfg) + sum(PAIRS[(p, q, cfg[p], cfg[q])] for p, q in itertools.combinations(range(len(cfg)), 2))


def test_the_weights_are_fractions_of_what_single_values_vary_a_config():
    """A config of five values: its prior variance is the singles' (5 effect^2) times 1 + the
    pairs' fraction + the every-order term's."""
    k = Kernel.of(0.3, 5, interaction=0.5, high=0.25)
    assert k.own(one_hot(SPACE[:1]))[0] == pytest.approx(5 * 0.3 ** 2 * (1 + 0.5 + 0.25))
    assert Kernel.of(0.3, 5).own(one_hot(SPACE[:1]))[0] == pytest.approx(5 * 0.3 ** 2)


def test_the_kernel_is_a_covariance_over_the_whole_space():
    """Symmetric, its diagonal what ``own`` says, no negative eigenvalue; configs a setting apart
    are more alike than configs four settings apart."""
    x = one_hot(SPACE)
    k = Kernel.of(0.2, 5, interaction=1.0, high=4.0, reach=1.5)
    gram = k.between(x, x)
    assert np.allclose(gram, gram.T)
    assert np.allclose(np.diag(gram), k.own(x))
    assert np.linalg.eigvalsh(gram).min() > -1e-9
    near, far = one_hot([(0, 0, 0, 0, 1), (1, 1, 1, 1, 0)])
    base = one_hot([(0, 0, 0, 0, 0)])
    assert k.between(base, near[None])[0, 0] > k.between(base, far[None])[0, 0]


def test_few_launches_keep_the_additive_shape_and_the_given_spread():
    x = one_hot(SPACE[:MIN_POINTS - 1])
    ys = [paired(c) for c in SPACE[:MIN_POINTS - 1]]
    assert most_likely(x, ys, per_config=5, spread=0.2, noise=0.05) == (Kernel(0.2), 0.05)


def test_an_additive_space_keeps_the_additive_shape():
    launched = random.Random(0).sample(SPACE, 30)
    ys = [additive(c) + random.Random(i).gauss(0.0, 0.01) for i, c in enumerate(launched)]
    k, noise = most_likely(one_hot(launched), ys, per_config=5, spread=float(np.std(ys)), noise=0.05)
    assert k.pair == 0.0 and k.high == 0.0
    assert noise < 0.05  # the launches agree with the shape better than the default noise says


def test_a_space_whose_pairs_matter_is_read_as_more_than_additive_and_predicted_better():
    """30 launches of a space where every pair of values adds an effect as large as a value's: the
    evidence gives the kernel more than the additive part, and the configs never launched are
    predicted closer to their truth than with the additive shape at its default noise."""
    launched = random.Random(0).sample(SPACE, 30)
    rest = [c for c in SPACE if c not in launched]
    ys = np.array([paired(c) for c in launched])
    k, noise = most_likely(one_hot(launched), ys, per_config=5, spread=float(np.std(ys)), noise=0.05)
    assert k.pair > 0.0 or k.high > 0.0

    def error(kernel, noise):
        x, z = one_hot(launched), one_hot(rest)
        gram = kernel.between(x, x) + noise ** 2 * np.eye(len(x))
        means = ys.mean() + kernel.between(z, x) @ np.linalg.solve(gram, ys - ys.mean())
        return float(np.sqrt(np.mean((means - np.array([paired(c) for c in rest])) ** 2)))

    assert error(k, noise) < error(Kernel(float(np.std(ys))), 0.05)
