"""The search the per-value model leads (study/search/strategies/value_led.py), through the real search
policy: the baseline's complement first, the model's argmax without exploration, an untried value
tried where the rest of the config is good, failures blamed on the values that never worked, and
a banned value never proposed."""

from __future__ import annotations

import itertools
import math

import optuna
import pytest

from orchestrator.core.records import COMPLETE, TrialResult
from orchestrator.study.model.belief import Belief
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.search.strategies.value_led import EQUAL_WITHIN, NOISE, ValueLed
from orchestrator.study.simulation.replay import SamplerSpec, replay_once
from orchestrator.study.simulation.replay_table import load_table

optuna.logging.set_verbosity(optuna.logging.ERROR)
GRID = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1", "c2"]}
EFFECT = {"a0": 0.0, "a1": 0.3, "a2": 0.6, "b0": 0.0, "b1": -0.2, "b2": 0.2, "c0": 0.0, "c1": 0.1, "c2": 0.5}


class Grid:
    """27 configs, every one feasible."""

    def suggest(self, trial):
        return {n: trial.suggest_categorical(n, v) for n, v in GRID.items()}

    def active(self, config):
        return dict(config)

    def feasible(self, config):
        return None

    def enumerate(self):
        return [dict(zip(GRID, combo)) for combo in itertools.product(*GRID.values())]

    def distributions(self):
        return {n: optuna.distributions.CategoricalDistribution(v) for n, v in GRID.items()}


def value(config):
    return 20.0 * math.exp(sum(EFFECT[v] for v in config.values()))


def policy(strategy=None, *, baseline=None, seed=0):
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    baseline = baseline or {"a": "a0", "b": "b0", "c": "c0"}
    return study, SearchPolicy(study, Grid(), dict, baseline=baseline, budget=None, seed=seed,
                               strategy=strategy or ValueLed())


def record(pol, params):
    """Enqueue ``params`` and launch it (what an earlier pick chose), recorded with its true value."""
    pol.study.enqueue_trial(params)
    p = pol.next()
    assert p.config == params
    v = value(p.config)
    pol.record(p, TrialResult(outcome=COMPLETE, config=p.config, value=v,
                              metrics={"decode_tok_s": v, "decode_samples": [v, v, v]}))


def launch(pol):
    p = pol.next()
    v = value(p.config)
    pol.record(p, TrialResult(outcome=COMPLETE, config=p.config, value=v,
                              metrics={"decode_tok_s": v, "decode_samples": [v, v, v]}))
    return p


@pytest.mark.parametrize("seed", range(3))
def test_after_the_baseline_the_first_pick_changes_every_parameter(seed):
    """Nothing is known but the baseline: every value not in it is as uncertain as the prior, so
    the highest bound is a config that shares none of the baseline's values."""
    _, pol = policy(seed=seed)
    base = launch(pol)
    assert base.role == "baseline"
    first = pol.next()
    assert first.role == "model" and all(first.config[n] != base.config[n] for n in GRID)


def test_without_exploration_it_launches_the_models_best_guess():
    """Exploration 0: the pick is the config the model predicts fastest (up to ``EQUAL_WITHIN``:
    scores that close are equal, and without launch costs the RNG picks among them)."""
    _, pol = policy(ValueLed(exploration=0.0))
    launch(pol)
    for params in ({"a": "a1", "b": "b1", "c": "c1"}, {"a": "a2", "b": "b2", "c": "c0"},
                   {"a": "a0", "b": "b2", "c": "c2"}, {"a": "a1", "b": "b0", "c": "c2"}):
        record(pol, params)
    view = pol.view()
    data = [(r.params, math.log(r.value)) for r in view.rows() if r.state == COMPLETE]
    belief = Belief.fit(list(view.configs.values()), data, effect=ValueLed.scale(data), noise=NOISE)
    means, _ = belief.predict([view.configs[k] for k in view.remaining])
    predicted = dict(zip(view.remaining, means))
    pick = pol.next()
    assert predicted[pick.key] >= max(means) - EQUAL_WITHIN


def test_an_untried_value_is_tried_where_the_rest_of_the_config_is_good():
    """Every value of a and b measured, c2 never: its effect is as uncertain as the prior, so the
    pick is c2 with the best a and b the launches found, before any config of known values."""
    _, pol = policy(ValueLed(exploration=1.0, gaps=False))
    launch(pol)
    for params in ({"a": "a1", "b": "b1", "c": "c1"}, {"a": "a2", "b": "b2", "c": "c0"},
                   {"a": "a2", "b": "b0", "c": "c1"}, {"a": "a0", "b": "b2", "c": "c1"},
                   {"a": "a1", "b": "b2", "c": "c0"}):
        record(pol, params)
    pick = pol.next()
    assert pick.config == {"a": "a2", "b": "b2", "c": "c2"}


def test_a_failure_weighs_against_the_values_that_may_have_caused_it_not_their_bystanders():
    """Scores carry the chance a config works (``study.culprits``): after a crash whose log names
    NVLS, a config with NVLS scores far below the same config without it, and the crash's other
    untried value (LL) costs nothing."""
    strategy = ValueLed(exploration=0.0, gaps=False)
    _, pol = policy(strategy)
    launch(pol)
    pol.study.enqueue_trial({"a": "a1", "b": "b1", "c": "c1"})
    p = pol.next()
    pol.record(p, TrialResult.failed(p.config, "nccl-invalid", "server exited with code 1",
                                     log_tail="NCCL WARN Error : value b1 is not supported on this platform"))
    view = pol.view()
    keys = {tuple(cfg.values()): k for k, cfg in view.configs.items() if k in view.remaining}
    scores = strategy.scores(view, list(keys.values()))
    assert scores[keys[("a0", "b1", "c0")]] < scores[keys[("a0", "b2", "c0")]] - 2.0  # b1 named: the culprit
    assert scores[keys[("a1", "b0", "c0")]] == pytest.approx(scores[keys[("a2", "b0", "c0")]], abs=0.3)  # a1: cleared


def test_once_the_model_stalls_a_value_seen_only_in_a_slow_config_is_tried_beside_the_best():
    """Issue 49: a value measured only where other values made it slow (here a2, in the slow
    baseline) is tried in the best config's context, one setting changed, once the model's own
    picks stopped beating the best: the pick's role says so."""
    _, pol = policy(ValueLed(exploration=0.0), baseline={"a": "a2", "b": "b1", "c": "c0"})
    launch(pol)  # a2 b1 c0: slow for b1
    for params in ({"a": "a1", "b": "b2", "c": "c2"}, {"a": "a1", "b": "b0", "c": "c2"},
                   {"a": "a0", "b": "b2", "c": "c2"}, {"a": "a1", "b": "b2", "c": "c1"},
                   {"a": "a0", "b": "b0", "c": "c1"}):
        record(pol, params)  # a1 b2 c2 the best; four launches since without a gain
    pick = pol.next()
    assert pick.role == "gap" and pick.config == {"a": "a2", "b": "b2", "c": "c2"}  # a2 beside the best
    v = value(pick.config)
    pol.record(pick, TrialResult(outcome=COMPLETE, config=pick.config, value=v,
                                 metrics={"decode_tok_s": v, "decode_samples": [v, v, v]}))
    nxt = pol.next()
    assert nxt.role == "model"  # every other launch only


def test_a_banned_value_is_never_proposed_after_its_ban(tmp_path):
    """A replayed table where LL128 gives wrong output in every config (4 of 12 rows) and the
    budget covers the whole table: it is launched twice, then never again."""
    lines = ["graph,algo,proto,samples,failure,baseline,note"]
    for graph in ("false", "true"):
        for algo in ("Ring", "Tree"):
            for proto, base in (("Simple", 10.0), ("LL", 12.0), ("LL128", None)):
                fast = base and base + 8 * (graph == "true") + (algo == "Ring")
                flag = "1" if (graph, algo, proto) == ("false", "Ring", "Simple") else ""
                lines.append(f"{graph},{algo},{proto},{'' if fast is None else f'{fast};{fast * 1.01}'},"
                             f"{'wrong-output' if fast is None else ''},{flag},")
    path = tmp_path / "wrong.csv"
    path.write_text("\n".join(lines) + "\n")
    table = load_table(path)
    for seed in range(3):
        run = replay_once(table, "model", seed, budget=len(table.rows), prune_ratio=None)
        assert run.failed == 2 and run.launches == len(table.rows) - 2, (seed, run)


def test_a_space_too_large_to_enumerate_is_left_to_the_sampler():
    class Unlisted(Grid):
        def enumerate(self):
            return None

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    pol = SearchPolicy(study, Unlisted(), dict, baseline=None, budget=5, seed=0, strategy=ValueLed())
    roles = [launch(pol).role for _ in range(3)]
    assert roles == ["sampler"] * 3


def test_the_exploration_is_checked():
    with pytest.raises(ValueError, match="exploration must be >= 0"):
        ValueLed(exploration=-1.0)


def test_a_run_that_continues_a_study_starts_at_its_first_gap():
    """Issue 49: `run --trials N` on a finished study goes first where the study has not explored:
    its first launch is the first gap beside the best (b0, never measured), although the model had
    not stalled."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    first = SearchPolicy(study, Grid(), dict, baseline={"a": "a2", "b": "b1", "c": "c0"}, budget=None, seed=0,
                         strategy=ValueLed(exploration=0.0), run="night-1")
    launch(first)
    for params in ({"a": "a1", "b": "b2", "c": "c1"}, {"a": "a0", "b": "b2", "c": "c2"},
                   {"a": "a1", "b": "b2", "c": "c2"}):  # the last one the best: the model is still improving
        record(first, params)
    again = SearchPolicy(study, Grid(), dict, baseline={"a": "a2", "b": "b1", "c": "c0"}, budget=None, seed=0,
                         strategy=ValueLed(exploration=0.0), run="night-2")
    pick = again.next()
    assert pick.role == "gap" and pick.config == {"a": "a1", "b": "b0", "c": "c2"}  # one setting from the best
    # had night 1 gone on, its model still improving, only a value seen in the baseline alone would be tried so
    view = first.view()
    assert [view.configs[k] for k in ValueLed(exploration=0.0).gap_candidates(view, view.remaining)] == [
        {"a": "a2", "b": "b2", "c": "c2"}]


def test_learned_weights_are_a_sampler_option_and_pick_from_the_same_candidates():
    """``model:learn=true``: the kernel's weights from the launches' evidence (``study.kernel``);
    the search still picks an unmeasured config, and on this additive grid the same one."""
    assert SamplerSpec.parse("model:learn=true").strategy(0).learn is True
    picks = []
    for strategy in (ValueLed(exploration=0.0, gaps=False), ValueLed(exploration=0.0, gaps=False, learn=True)):
        _, pol = policy(strategy)
        launch(pol)
        for params in ({"a": "a1", "b": "b1", "c": "c1"}, {"a": "a2", "b": "b2", "c": "c0"},
                       {"a": "a0", "b": "b2", "c": "c2"}, {"a": "a1", "b": "b0", "c": "c2"},
                       {"a": "a2", "b": "b0", "c": "c1"}):
            record(pol, params)
        picks.append(pol.next().config)
    assert picks[0] == picks[1] == {"a": "a2", "b": "b2", "c": "c2"}


def test_a_pairwise_cover_leads_the_first_launches_when_asked():
    """``model:cover=3``: after the baseline, three launches each carry three value pairs no launch
    carried together (a Latin square on this grid), then the model's bound leads again. Off by
    default; ``cover_near`` is parsed as the strategy's too."""
    assert ValueLed().cover == 0 and ValueLed().cover_near == 0.0
    assert SamplerSpec.parse("model:cover=3:cover_near=0.05").strategy(0).cover == 3
    _, pol = policy(ValueLed(cover=3))
    seen = [launch(pol).config]
    for _ in range(3):
        p = launch(pol)
        assert p.role == "cover"
        carried = {frozenset(pair) for cfg in seen for pair in itertools.combinations(cfg.items(), 2)}
        assert not carried & {frozenset(pair) for pair in itertools.combinations(p.config.items(), 2)}
        seen.append(p.config)
    assert launch(pol).role != "cover"
