"""The Gaussian process over parameter values (study/model/belief.py): additive truth recovered from a
few launches, values always seen together counted once, what a launch leaves unknown, launches in
flight narrowing the spread without moving the mean."""

from __future__ import annotations

import itertools
import math

import pytest

from orchestrator.study.model.belief import Belief

CHOICES = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"], "c": ["c0", "c1", "c2"]}
SPACE = [dict(zip(CHOICES, combo)) for combo in itertools.product(*CHOICES.values())]
EFFECT = {"a0": 0.0, "a1": 0.4, "a2": -0.3, "b0": 0.0, "b1": 0.2, "c0": 0.0, "c1": -0.5, "c2": 0.1}


def truth(cfg):
    return 3.0 + sum(EFFECT[v] for v in cfg.values())


def test_an_additive_truth_is_recovered_for_configs_never_launched():
    """Seven launches that see every value at least twice: every one of the other 11 configs is
    predicted within 0.05 (log) of its truth, the best of them ranked first."""
    launched = [SPACE[i] for i in (0, 4, 8, 9, 13, 15, 16)]
    assert {v for cfg in launched for v in cfg.values()} == set(EFFECT)
    belief = Belief.fit(SPACE, [(c, truth(c)) for c in launched], effect=0.5, noise=0.01, interaction=0.0)
    rest = [c for c in SPACE if c not in launched]
    means, sds = belief.predict(rest)
    assert max(abs(m - truth(c)) for m, c in zip(means, rest)) < 0.05
    assert rest[means.index(max(means))] == max(rest, key=truth)
    assert all(sd < 0.5 for sd in sds)


def test_a_value_never_launched_keeps_the_priors_spread():
    launched = [c for c in SPACE if c["c"] != "c2"][:6]
    belief = Belief.fit(SPACE, [(c, truth(c)) for c in launched], effect=0.5, noise=0.01, interaction=0.0)
    seen, unseen = belief.predict([{"a": "a0", "b": "b0", "c": "c0"}, {"a": "a0", "b": "b0", "c": "c2"}])[1]
    assert unseen > seen and unseen >= 0.5 * 0.99  # at least c2's own prior spread


def test_values_always_seen_together_are_one_choice_and_stay_uncertain_apart():
    """TP=8 with PP=1 (TP x PP = 8): one column, one prior. After one launch (the baseline), its
    values share what it measured: a config that keeps half of them is more uncertain than the
    baseline itself, whose sum was measured."""
    space = [{"tp": tp, "pp": 8 // tp, "g": g} for tp in (2, 4, 8) for g in (False, True)]
    belief = Belief.fit(space, [], effect=0.5, noise=0.01, interaction=0.0)
    assert belief.group[("tp", 8)] == belief.group[("pp", 1)] != belief.group[("tp", 4)]
    (sd_alone,) = belief.predict([space[0]])[1]
    assert sd_alone == pytest.approx(math.sqrt(2) * 0.5, rel=1e-6)  # two choices (layout, graphs), not three
    base = {"tp": 8, "pp": 1, "g": False}
    belief = Belief.fit(space, [(base, 3.0)], effect=0.5, noise=0.01)
    (m_base, m_half), (sd_base, sd_half) = belief.predict([base, {"tp": 8, "pp": 1, "g": True}])
    assert m_base == pytest.approx(3.0) and sd_base < 0.05 < sd_half


def test_a_launch_in_flight_narrows_the_spread_where_it_runs_without_moving_the_mean():
    data = [(SPACE[0], truth(SPACE[0])), (SPACE[13], truth(SPACE[13]))]
    before = Belief.fit(SPACE, data, effect=0.5, noise=0.01).predict([SPACE[7]])
    after = Belief.fit(SPACE, [*data, (SPACE[7], None)], effect=0.5, noise=0.01).predict([SPACE[7]])
    assert after[0][0] == pytest.approx(before[0][0])
    assert after[1][0] < 0.05 < before[1][0]


def test_interactions_let_a_pair_never_seen_together_stay_uncertain():
    """With every single value seen, a pair never launched together still carries spread when
    interactions are allowed, none without them (beyond what the singles leave)."""
    launched = [SPACE[i] for i in (0, 4, 8, 9, 13, 15, 16)]
    data = [(c, truth(c)) for c in launched]
    pair_never = next(c for c in SPACE if c not in launched)
    plain = Belief.fit(SPACE, data, effect=0.5, noise=0.01, interaction=0.0).predict([pair_never])[1][0]
    paired = Belief.fit(SPACE, data, effect=0.5, noise=0.01, interaction=0.25).predict([pair_never])[1][0]
    assert paired > plain


def test_weights_learned_from_the_launches_keep_an_additive_truth_additive():
    """``learn``: the same seven launches of an additive truth leave the kernel additive (no pair,
    no every-order term) and the other configs predicted as well as with the weights given."""
    launched = [SPACE[i] for i in (0, 4, 8, 9, 13, 15, 16)]
    belief = Belief.fit(SPACE, [(c, truth(c)) for c in launched], effect=0.5, noise=0.01, learn=True)
    assert belief.kernel.pair == 0.0 and belief.kernel.high == 0.0
    rest = [c for c in SPACE if c not in launched]
    means, _ = belief.predict(rest)
    assert max(abs(m - truth(c)) for m, c in zip(means, rest)) < 0.05
