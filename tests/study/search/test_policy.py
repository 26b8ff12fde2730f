"""SearchPolicy: baseline first, dedup of measured configs, failure memory, budget, exhaustion."""

from __future__ import annotations

import itertools
import random

import optuna
import pytest
from optuna.trial import TrialState
from tiny_table import PLAN as PLAN_TABLE

from orchestrator.config.job import Objective
from orchestrator.core.outcome import DEFAULT_PRUNE_RATIO, early_stop
from orchestrator.core.records import COMPLETE, FAIL, PRUNED, FailureKind, TrialResult, config_key
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.search.feasible import FeasibleSampler
from orchestrator.study.search.policy import Proposal, SearchPolicy
from orchestrator.study.search.samplers import make_sampler
from orchestrator.study.search.strategies import picks
from orchestrator.study.search.strategies.sampler_led import SamplerLed
from orchestrator.study.simulation.replay import TableSpace, replay_levels
from orchestrator.study.simulation.replay_table import load_table
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage.storage import CONSTRAINT

optuna.logging.set_verbosity(optuna.logging.ERROR)

CHOICES = {"tp_size": [1, 2], "env.NCCL_PROTO": ["LL", "Simple", "LL128"], "graph": [False, True]}


class TinySpace:
    """SearchSpace-like: 12 raw combos; LL128 is infeasible; NCCL_* does not matter at TP=1."""

    def suggest(self, trial):
        return {name: trial.suggest_categorical(name, values) for name, values in CHOICES.items()}

    def active(self, config):
        return dict(config)

    def feasible(self, config):
        return "LL128 is not allowed on PCIe" if config.get("env.NCCL_PROTO") == "LL128" else None

    def enumerate(self):
        return [dict(zip(CHOICES, combo)) for combo in itertools.product(*CHOICES.values())]

    def distributions(self):
        return {n: optuna.distributions.CategoricalDistribution(v) for n, v in CHOICES.items()}


def normalize(config):
    out = dict(config)
    if out.get("tp_size") == 1:
        out.pop("env.NCCL_PROTO", None)
    if "env.NCCL_PROTO" in out:
        out["env.NCCL_PROTO"] = out["env.NCCL_PROTO"].lower()
    return out


DISTINCT = 6  # TP=1 x graph (2) + TP=2 x {LL, Simple} x graph (4)
BASELINE = {"tp_size": 2, "env.NCCL_PROTO": "Simple", "graph": False}


def make(study=None, *, baseline=BASELINE, budget=None, seed=0, **kw):
    study = study or optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    return study, SearchPolicy(study, TinySpace(), normalize, baseline=baseline, budget=budget, seed=seed, **kw)


def value_of(config):
    return 10.0 + 5 * config["tp_size"] + (3.0 if config["graph"] else 0.0) + (
        1.0 if config.get("env.NCCL_PROTO") == "ll" else 0.0)


def ok(proposal, value=None):
    v = value_of(proposal.config) if value is None else value
    return TrialResult(outcome=COMPLETE, config=proposal.config, value=v,
                       metrics={"decode_tok_s": v, "decode_samples": [v, v, v], "repeats": 3})


def drive(policy, answer=ok, limit=100):
    """Run the policy to the end like the driver does; return the launched proposals."""
    launched = []
    for _ in range(limit):
        p = policy.next()
        if p is None:
            return launched
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        launched.append(p)
        policy.record(p, answer(p))
    raise AssertionError("policy did not stop")


def test_baseline_is_the_first_trial_and_marked():
    study, policy = make()
    p = policy.next()
    assert p.trial.number == 0
    assert p.config == normalize(BASELINE) and p.role == "baseline"
    assert p.trial.user_attrs["is_baseline"] is True
    policy.record(p, ok(p))
    assert policy.baseline_trial().value == value_of(p.config)


def test_complete_result_stored_as_user_attrs_and_constraint():
    study, policy = make()
    p = policy.next()
    res = ok(p)
    res.node = {"hostname": "h"}
    frozen = policy.record(p, res)
    ua = frozen.user_attrs
    for name, value in res.to_attrs().items():
        assert ua[name] == value
    assert ua["config_key"] == config_key(p.config) == p.key
    assert ua["counted"] is True and "cached_from" not in ua
    assert frozen.state == TrialState.COMPLETE and frozen.value == res.value
    assert dict(frozen.constraints) == {CONSTRAINT: 0.0} == {"0": 0.0}


def test_config_failure_is_infeasible_complete_never_best_and_never_relaunched():
    study, policy = make()
    p = policy.next()
    frozen = policy.record(p, TrialResult.failed(p.config, "start-crash", "exit 1"))
    assert frozen.state == TrialState.COMPLETE and frozen.value == 0.0
    assert frozen.constraints == {CONSTRAINT: 1.0}
    assert frozen.user_attrs["outcome"] == FAIL and frozen.user_attrs["counted"] is True
    assert policy.best() is None
    assert [r.number for r in policy.rows() if r.config_key == p.key and r.counted] == [p.number]  # its answer
    # the sampler proposes the failed config again: answered from the study, not launched
    study.enqueue_trial(dict(p.trial.params))
    again = policy.next()
    assert again.cached is not None and again.cached.outcome == FAIL
    assert again.cached_from == p.trial.number and again.key == p.key
    frozen2 = policy.record(again, again.cached, counted=False)
    assert frozen2.user_attrs["cached_from"] == p.trial.number and frozen2.user_attrs["counted"] is False
    assert frozen2.constraints == {CONSTRAINT: 1.0}
    assert policy.budget_used() == 1


def test_wrong_output_config_is_never_best_even_if_measured_ok_elsewhere():
    study, first = make()
    p = first.next()
    first.record(p, ok(p, 100.0))
    assert first.best().number == p.trial.number
    _, policy = make(study, remeasure=True)  # a later run that re-measures
    study.enqueue_trial(dict(p.trial.params))
    q = policy.next()  # measured by an earlier run, so launched again
    assert q.cached is None and q.key == p.key
    policy.record(q, TrialResult.failed(q.config, "wrong-output", "tokens differ"))
    assert policy.best() is None
    assert policy.prune_threshold(0.9) is None


def test_interrupted_is_optuna_fail_uncounted_and_requeued_once():
    study, policy = make()
    p = policy.next()
    frozen = policy.record(p, TrialResult.failed(p.config, "interrupted", "driver killed"))
    assert frozen.state == TrialState.FAIL
    assert frozen.user_attrs["counted"] is False and frozen.user_attrs["outcome"] == FAIL
    assert not [r for r in policy.rows() if r.config_key == p.key and r.counted] and policy.budget_used() == 0
    assert policy.requeue(p.config) is True  # a normalized config works (values case-folded)
    assert policy.requeue(p) is False  # at most once
    again = policy.next()
    assert again.key == p.key and again.cached is None and again.role == "requeue"
    policy.record(again, ok(again))
    assert policy.budget_used() == 1


def test_pruned_reports_intermediate_first():
    study, policy = make()
    p = policy.next()
    policy.record(p, ok(p, 50.0))
    q = policy.next()
    res = TrialResult(outcome=PRUNED, config=q.config, value=20.0,
                      metrics={"intermediate": 20.0, "decode_samples": [20.0], "repeats": 1})
    frozen = policy.record(q, res)
    assert frozen.state == TrialState.PRUNED and frozen.intermediate_values == {1: 20.0}
    assert frozen.user_attrs["counted"] is True and frozen.user_attrs["outcome"] == PRUNED
    study.enqueue_trial(dict(q.trial.params))  # clearly worse: not launched again, answered from the study
    again = policy.next()
    assert again.cached is not None and again.cached_from == q.number and again.cached.outcome == PRUNED
    policy.record(again, again.cached, counted=False)
    assert policy.best().value == 50.0


def test_early_stop_rule_and_threshold():
    study, policy = make()
    assert policy.prune_threshold() is None
    p = policy.next()
    policy.record(p, ok(p, 40.0))
    assert policy.prune_threshold(0.5) == 20.0
    assert policy.prune_threshold() == pytest.approx(40.0 * DEFAULT_PRUNE_RATIO)
    assert early_stop({1: 10.0}, {1: 20.0}) and not early_stop({1: 30.0}, {1: 20.0}) and not early_stop({1: 1.0}, None)
    # a config below the threshold at one level but not at another is measured in full
    assert early_stop({1: 10.0, 64: 50.0}, {1: 20.0, 64: 60.0})
    assert not early_stop({1: 10.0, 64: 70.0}, {1: 20.0, 64: 60.0})
    assert not early_stop({1: 10.0}, {1: 20.0, 64: 60.0})  # a level not measured yet


def test_infeasible_proposals_are_pruned_uncounted_with_reason():
    study, policy = make(baseline=None)
    study.enqueue_trial({"tp_size": 2, "env.NCCL_PROTO": "LL128", "graph": True})
    p = policy.next()
    assert p is not None and p.config.get("env.NCCL_PROTO") != "ll128"
    skipped = study.trials[0]
    assert skipped.state == TrialState.PRUNED
    assert skipped.user_attrs["skipped"] == "infeasible" and skipped.user_attrs["counted"] is False
    assert "LL128" in skipped.user_attrs["failure_reason"]
    assert skipped.constraints == {CONSTRAINT: 1.0}


def test_exhausts_the_space_measuring_each_distinct_config_once():
    study, policy = make()
    launched = drive(policy)
    keys = [p.key for p in launched]
    assert len(keys) == len(set(keys)) == DISTINCT
    assert policy.exhausted and not policy.budget_reached
    assert policy.next() is None
    assert policy.best().user_attrs["config"] == {"tp_size": 2, "env.NCCL_PROTO": "ll", "graph": True}


@pytest.mark.parametrize("fill", ["random", "neighbor"])
def test_dedup_enqueues_an_unmeasured_config(fill):
    study, policy = make(strategy=SamplerLed(fill=fill))
    p = policy.next()
    policy.record(p, ok(p))
    study.enqueue_trial(dict(p.trial.params))  # the sampler re-proposes the baseline
    dup = policy.next()
    assert dup.cached is not None
    policy.record(dup, dup.cached, counted=False)
    nxt = policy.next()
    assert nxt.cached is None and nxt.key != p.key and nxt.role == "fill"
    if fill == "neighbor":  # one parameter away from the best (the baseline)
        assert sum(nxt.raw[k] != p.raw[k] for k in CHOICES) == 1


def test_budget_counts_launches_not_cached_answers():
    study, policy = make(budget=3)
    p = policy.next()
    policy.record(p, ok(p))
    study.enqueue_trial(dict(p.trial.params))
    dup = policy.next()
    policy.record(dup, dup.cached, counted=False)
    drive(policy)
    assert policy.budget_used() == 3 and policy.budget_reached and not policy.exhausted
    assert len([r for r in policy.rows() if r.counted]) == 3
    assert policy.next() is None


def test_several_in_flight_get_distinct_configs_and_respect_the_budget():
    study, policy = make(budget=4)
    flying = [policy.next() for _ in range(4)]
    assert all(isinstance(p, Proposal) and p.cached is None for p in flying)
    assert len({p.key for p in flying}) == 4
    assert policy.next() is None and policy.budget_reached  # 4 in flight fill the budget
    assert {p.trial.number for p in policy.in_flight()} == {p.trial.number for p in flying}
    for p in reversed(flying):
        policy.record(p, ok(p))
    assert policy.budget_used() == 4 and policy.in_flight() == []


def test_resume_continues_without_reenqueueing_baseline_and_recovers_running():
    study, policy = make(budget=10)
    p = policy.next()
    policy.record(p, ok(p))
    q = policy.next()  # left RUNNING by a driver that "dies" here
    study2, policy2 = make(study, budget=10)
    assert [t.number for t in policy2.pending_running()] == [q.trial.number]
    assert policy2.recover_interrupted() == [q.trial.number]
    lost = study.trials[q.trial.number]
    assert lost.state == TrialState.FAIL
    row = trial_rows(study)[q.trial.number]  # what `status` shows
    assert row.state == FAIL and row.failure_kind == "interrupted" and not row.counted
    assert row.failure_reason == "the driver died while this trial ran"
    r = policy2.next()
    assert r.key == q.key and r.role == "requeue"  # re-queued config comes first
    policy2.record(r, ok(r))
    launched = drive(policy2)
    keys = [p.key, r.key] + [x.key for x in launched]
    assert len(keys) == len(set(keys)) == DISTINCT
    assert sum(bool(t.user_attrs.get("is_baseline")) for t in study.trials) == 1


def test_measured_baseline_is_not_enqueued_again():
    study, policy = make()
    drive(policy)
    n = len(study.trials)
    _, policy2 = make(study)
    assert policy2.next() is None and policy2.exhausted
    assert len(study.trials) == n


def test_tpe_learns_from_failures_and_stops_proposing_them():
    """With the storage encoding, TPE stays away from a failing region (TP=1 crashes here)."""
    from orchestrator.study.search.samplers import make_sampler

    sampler = make_sampler("tpe", seed=1, budget=40)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    policy = SearchPolicy(study, TinySpace(), normalize, baseline=None, budget=None, seed=1)

    def answer(p):
        if p.config["tp_size"] == 1:
            return TrialResult.failed(p.config, "start-crash", "does not fit")
        return ok(p)

    launched = drive(policy, answer)
    assert len({p.key for p in launched}) == DISTINCT
    failed = [t for t in study.trials if t.user_attrs.get("outcome") == FAIL]
    assert failed and all(t.state == TrialState.COMPLETE and t.constraints["0"] == 1.0 for t in failed)
    assert policy.best().user_attrs["config"]["tp_size"] == 2


def test_launch_proposals_carry_their_key_while_running_and_suggest_errors_do_not_linger():
    study, policy = make()
    p = policy.next()
    running = study.trials[p.trial.number]
    assert running.state == TrialState.RUNNING
    assert running.user_attrs["config_key"] == p.key and running.user_attrs["config"] == p.config
    policy.record(p, ok(p))
    study.enqueue_trial({"tp_size": 3, "env.NCCL_PROTO": "LL", "graph": True})  # 3 is not a choice
    with pytest.raises(ValueError):
        policy.next()
    assert study.trials[-1].state == TrialState.FAIL and study.trials[-1].user_attrs["skipped"] == "suggest-error"
    assert policy.next() is not None


def test_a_space_that_cannot_be_enumerated_ends_after_repeated_duplicates():
    class Unlisted(TinySpace):
        def enumerate(self):
            return None

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    policy = SearchPolicy(study, Unlisted(), normalize, baseline=None, budget=None, seed=0,
                          max_consecutive_duplicates=20)
    launched = drive(policy, limit=500)
    assert len({p.key for p in launched}) == len(launched) == DISTINCT
    assert policy.exhausted and policy.next() is None


def test_with_the_real_search_space_and_backend_normalize():
    """The shipped SGLang space (conditional params, constraints) + the backend's normalize."""
    from pathlib import Path

    from orchestrator.backends import get_backend_class
    from orchestrator.config.space import load_space
    from orchestrator.study.search.samplers import make_sampler

    root = Path(__file__).resolve().parents[3]
    space = load_space(root / "search_spaces" / "sglang-pcie.yaml",
                       {"gpus_per_node": 4, "cpus_per_trial": 1, "heads": 8, "kv_heads": 4, "layers": 4})
    backend = get_backend_class("sglang")({"model": "m"}, "job.yaml")
    size = space.size()
    study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", seed=0, budget=size,
                                                                           space_size=size))
    baseline = backend.normalize(space.active({"tp_size": 4, "graph_capture": False,
                                               "env.NCCL_PROTO": "simple", "env.NCCL_ALGO": "Ring"}))
    policy = SearchPolicy(study, space, backend.normalize, baseline=baseline, budget=None, seed=0)
    launched = drive(policy, answer=lambda p: ok(p, 10.0 + len(str(p.config))), limit=2000)
    keys = [p.key for p in launched]
    assert launched[0].key == config_key(baseline) and launched[0].role == "baseline"
    distinct = {config_key(backend.normalize(space.active(c))) for c in space.enumerate()}
    assert len(keys) == len(set(keys)) and set(keys) == distinct
    assert policy.exhausted


# ---- start-up order: the policy picks a model-based sampler's start-up trials ----------------------
GRID3 = {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1", "c2"]}


class Grid3Space:
    """27 configs, three levels per parameter; ``enumerable=False`` hides the enumeration."""

    def __init__(self, enumerable=True):
        self.enumerable = enumerable

    def suggest(self, trial):
        return {n: trial.suggest_categorical(n, v) for n, v in GRID3.items()}

    def active(self, config):
        return dict(config)

    def feasible(self, config):
        return None

    def enumerate(self):
        if not self.enumerable:
            return None
        return [dict(zip(GRID3, combo)) for combo in itertools.product(*GRID3.values())]

    def distributions(self):
        return {n: optuna.distributions.CategoricalDistribution(v) for n, v in GRID3.items()}


def grid3_value(config):
    return 10.0 + sum(int(v[1]) for v in config.values())


def tpe_policy(startup, *, seed=0, baseline=None, study=None, startup_order="diverse", **kw):
    """A policy over TPE built as the driver builds them: the sampler's start-up count told to the policy."""
    from orchestrator.study.search.samplers import make_sampler, startup_trials

    study = study or optuna.create_study(
        direction="maximize", sampler=make_sampler("tpe", seed=seed, budget=40, n_startup_trials=startup))
    space = kw.pop("space", Grid3Space())
    strategy = SamplerLed(startup=startup_trials("tpe", budget=40, n_startup_trials=startup),
                          startup_order=startup_order)
    return study, SearchPolicy(study, space, dict, baseline=baseline, budget=12, seed=seed, strategy=strategy, **kw)


def launch(policy, n):
    """The next ``n`` launches (cached answers recorded and skipped, as the driver does)."""
    out = []
    while len(out) < n:
        p = policy.next()
        assert p is not None
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        out.append(p)
        policy.record(p, ok(p, grid3_value(p.config)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_startup_trials_cover_every_level_before_repeating_one(seed):
    _, policy = tpe_policy(3, seed=seed)
    assert policy.startup == 3  # the sampler's start-up trials
    first = launch(policy, 3)
    assert [p.role for p in first] == ["startup"] * 3
    for name, levels in GRID3.items():  # a Latin square: each level of each parameter exactly once
        assert sorted(p.config[name] for p in first) == levels
    assert launch(policy, 1)[0].role in ("sampler", "fill")  # then TPE models the objective


def test_startup_trials_in_flight_count_as_seen():
    _, policy = tpe_policy(3)
    running = [policy.next() for _ in range(3)]  # three workers, nothing recorded yet
    assert [p.role for p in running] == ["startup"] * 3
    for name, levels in GRID3.items():
        assert sorted(p.config[name] for p in running) == levels


def test_startup_after_the_baseline_differs_from_it_in_every_parameter_and_is_seeded():
    base = {"a": "a0", "b": "b0", "c": "c0"}
    orders = []
    for _ in range(2):
        _, policy = tpe_policy(3, seed=5, baseline=base)
        got = launch(policy, 3)
        assert [p.role for p in got] == ["baseline", "startup", "startup"]
        assert all(got[1].config[n] != base[n] for n in GRID3)
        for name, levels in GRID3.items():
            assert sorted(p.config[name] for p in got) == levels
        orders.append([p.key for p in got])
    assert orders[0] == orders[1]  # deterministic per seed


def test_startup_order_survives_a_restart_and_honours_inactive_parameters():
    study, policy = tpe_policy(3)
    first = launch(policy, 1)
    _, again = tpe_policy(3, study=study)  # a resumed driver: recomputed from the study
    rest = launch(again, 2)
    for name, levels in GRID3.items():
        assert sorted(p.config[name] for p in first + rest) == levels
    # TinySpace: NCCL_PROTO does not exist at TP=1, so the config most different from the
    # TP=2 baseline is a TP=1 one with graphs on (it differs in all three parameters)
    from orchestrator.study.search.samplers import make_sampler, startup_trials

    study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", seed=0, budget=6, space_size=6))
    _, policy = make(study, startup=startup_trials("tpe", budget=6, space_size=6))
    assert policy.startup == 2
    got = drive(policy)
    assert [p.role for p in got[:2]] == ["baseline", "startup"]
    assert got[1].config == {"tp_size": 1, "graph": True}


def test_random_search_and_the_sampler_order_keep_the_samplers_draws():
    _, policy = make()  # RandomSampler: no start-up trials, nothing enqueued by the policy
    assert policy.startup == 0
    assert "startup" not in [p.role for p in drive(policy)]
    _, policy = tpe_policy(3, startup_order="sampler")
    assert [p.role for p in launch(policy, 3)] == ["sampler"] * 3
    _, policy = tpe_policy(3, space=Grid3Space(enumerable=False))  # too large to enumerate
    assert [p.role for p in launch(policy, 3)] == ["sampler"] * 3
    with pytest.raises(ValueError, match="startup_order"):
        tpe_policy(3, startup_order="lhs")


@pytest.mark.parametrize("seed", range(4))
def test_the_baseline_is_exactly_the_jobs_first_requeued_and_as_the_reference(seed):
    """A parameter the baseline leaves unset (NCCL_PROTO) stays unset: never sampled, on
    any seed, when it is re-queued after an interruption, or launched again as the reference."""
    base = {"tp_size": 2, "graph": False}
    study, policy = make(baseline=base, seed=seed, budget=10)
    first = policy.next()
    assert first.config == base and first.trial.params == base and first.key == policy.baseline_key
    policy.record(first, TrialResult.failed(first.config, "interrupted", "killed"))
    policy.requeue(first)
    again = policy.next()
    assert again.config == base and again.trial.params == base
    policy.record(again, TrialResult(outcome=COMPLETE, config=again.config, value=20.0))
    policy.ensure_baseline_next()  # measured, but the golden reference must come from a launch of it
    ref = policy.next()
    assert ref.cached is None and ref.config == base and ref.trial.params == base
    assert study.trials[ref.number].user_attrs["enqueued_by"] == "reference"


def test_a_deferred_proposal_is_not_a_trial_and_comes_back():
    study, policy = make(baseline=None, budget=10)
    p = policy.next()
    policy.defer(p, "the reference first")
    assert study.trials[p.number].user_attrs["skipped"] == "deferred"
    assert study.trials[p.number].user_attrs["counted"] is False
    assert policy.next().key == p.key  # re-queued


def test_a_study_recorded_before_set_constraint_resumes_with_one_constraint_for_all_trials():
    """Journals written before Optuna 5 hold the list format (system attr ``constraints: [v]``);
    the policy's ``set_constraint(CONSTRAINT, v)`` must read as the same constraint, so the
    samplers (GP requires it) see one constraint on every trial of a resumed study."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    dists = TinySpace().distributions()
    old = {"tp_size": 1, "env.NCCL_PROTO": "LL", "graph": False}
    study.add_trial(optuna.trial.create_trial(
        value=0.0, params=old, distributions=dists, system_attrs={"constraints": [1.0]},
        user_attrs={"outcome": FAIL, "failure_kind": "start-crash", "counted": True, "config": normalize(old),
                    "config_key": config_key(normalize(old))}))
    _, policy = make(study, baseline=None)
    p = policy.next()
    assert p.key != config_key(normalize(old))  # the old failure is remembered
    policy.record(p, ok(p))
    assert [t.constraints for t in study.trials] == [{CONSTRAINT: 1.0}, {CONSTRAINT: 0.0}]


# The search policy for an objective over several levels (study/search/policy.py with
# study/storage/objective.py), on real in-memory Optuna studies over a per-level table: one direction per
# level through Optuna's public API (TPE, NSGA-II and random search, wrapped in FeasibleSampler),
# values per level, a config-caused failure 0.0 at every level and infeasible, an early stop
# PRUNED without an intermediate value, the cache of measured configs, the per-level early-stop
# thresholds, the neighbor fill from every level's best; the weighted mix as one value.
TABLE = PLAN_TABLE  # the best config differs by level (tests/tiny_table.py)
PLAN = Objective(concurrency=(1, 8))


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "levels.csv"
    path.write_text(TABLE)
    return load_table(path)


def make_plan_policy(table, sampler: str = "tpe", objective: Objective = PLAN, seed: int = 0):
    space = TableSpace(table)
    study = optuna.create_study(directions=objectives.directions(objective),  # type: ignore[arg-type]
                                sampler=make_sampler(sampler, seed=seed, budget=6, space_size=space.size(),
                                                     search_space=space.distributions()))
    base = table.baseline
    baseline = {p: base.params.get(p, vals[0]) for p, vals in table.choices.items()}
    policy = SearchPolicy(study, space, space.normalize, baseline=baseline, budget=None, seed=seed,
                          objective=objective)
    return study, policy


def run_all(table, study, policy, thresholds=None):
    """Every config once, as the replay harness and the driver do."""
    rows = table.by_key()
    rng = random.Random(0)
    for _ in range(40):
        p = policy.next()
        if p is None:
            break
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        policy.record(p, replay_levels(rows[p.key], p.config, rng, 3, thresholds(policy) if thresholds else None))
    return rows


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_a_plan_is_one_direction_per_level_and_every_value_is_told(table, sampler):
    study, policy = make_plan_policy(table, sampler)
    assert isinstance(study.sampler, FeasibleSampler) and len(study.directions) == 2
    rows = run_all(table, study, policy)
    assert policy.exhausted
    counted = {t.user_attrs["config_key"]: t for t in study.get_trials()
               if t.state.is_finished() and t.user_attrs.get("counted")}
    assert len(counted) == len(rows)  # every config measured exactly once
    for key, t in counted.items():
        row = rows[key]
        if row.failure:
            assert t.state == TrialState.COMPLETE and t.values == [0.0, 0.0]  # config-caused: 0 at every level
            assert t.system_attrs and t.user_attrs["outcome"] == FAIL
            assert study.get_trials()[t.number].user_attrs["failure_kind"] == FailureKind.START_CRASH
        else:
            levels = t.user_attrs["metrics"]["levels"]
            assert t.values == [levels["1"]["value"], levels["8"]["value"]]
    cached = [t for t in study.get_trials() if t.user_attrs.get("cached_from") is not None]
    for t in cached:  # a re-proposed measured config is answered from the study with its source's values
        assert t.values == study.get_trials()[t.user_attrs["cached_from"]].values
    assert {policy.best_row().params["size"], policy.best_row().params["mode"]} == {2, "solo"}


def test_an_early_stop_of_a_plan_is_pruned_without_an_intermediate_value(table):
    study, policy = make_plan_policy(table)
    run_all(table, study, policy, thresholds=lambda pol: pol.prune_thresholds(0.8))
    pruned = [t for t in study.get_trials() if t.state == TrialState.PRUNED and not t.user_attrs.get("skipped")]
    assert pruned, "mega/2 and solo/1 are below 0.8 x the best at both levels once the bests are measured"
    for t in pruned:
        assert t.values is None and t.intermediate_values == {}
        assert t.user_attrs["counted"] is True
    thresholds = policy.prune_thresholds(0.8)
    assert thresholds == {1: pytest.approx(0.8 * 250), 8: pytest.approx(0.8 * 700)}
    # a config best at one level is never stopped early: it is above the threshold there
    assert all(t.user_attrs["config"]["mode"] != "batch" or t.user_attrs["config"]["size"] != 2 for t in pruned)
    assert all(t.user_attrs["config"] != {"mode": "solo", "size": 2} for t in pruned)


def test_the_neighbor_fill_starts_from_every_levels_best(table):
    study, policy = make_plan_policy(table)
    run_all(table, study, policy)
    refs = sorted((c["mode"], c["size"]) for c in picks.bests(policy.view()))
    assert refs == [("batch", 2), ("solo", 2)]  # the best at 1 and the best at 8


def test_a_weighted_mix_is_one_value_the_weighted_geometric_mean(table):
    mix = Objective(concurrency=(1, 8), weights={1: 0.5, 8: 0.5})
    study, policy = make_plan_policy(table, objective=mix)
    assert len(study.directions) == 1
    run_all(table, study, policy, thresholds=lambda pol: pol.prune_thresholds(0.8))
    for t in study.get_trials():
        if t.state == TrialState.COMPLETE and t.user_attrs.get("outcome") == COMPLETE:
            lv = t.user_attrs["metrics"]["levels"]
            assert t.value == pytest.approx((lv["1"]["value"] * lv["8"]["value"]) ** 0.5)
        if t.state == TrialState.PRUNED and not t.user_attrs.get("skipped"):
            lv = t.user_attrs["metrics"]["levels"]  # the first round, on the mix's scale
            assert t.intermediate_values == {1: pytest.approx((lv["1"]["value"] * lv["8"]["value"]) ** 0.5)}


def test_a_plan_trial_a_dead_driver_left_with_its_record_is_told_as_recorded(table):
    study, policy = make_plan_policy(table)
    p = policy.next()
    result = replay_levels(table.by_key()[p.key], p.config, random.Random(0), 3, None)
    for name, value in {**result.to_attrs(), "config_key": p.key, "counted": True}.items():
        p.trial.set_user_attr(name, value)
    p.trial.set_constraint(CONSTRAINT, 0.0)  # the whole record, all but Optuna's final state
    fresh = SearchPolicy(study, TableSpace(table), TableSpace(table).normalize, baseline=None, budget=None,
                         objective=PLAN)
    assert fresh.finish_recorded() == [p.number]
    t = study.get_trials()[p.number]
    assert t.state == TrialState.COMPLETE and t.values == objectives.told_values(PLAN, result)


def test_a_complete_result_missing_a_level_is_refused(table):
    study, policy = make_plan_policy(table)
    p = policy.next()
    bad = TrialResult(outcome=COMPLETE, config=p.config, value=100.0,
                      metrics={"levels": {"1": {"value": 100.0, "samples": [100.0]}}})
    with pytest.raises(ValueError, match="at every level"):
        policy.record(p, bad)


def test_a_late_setting_is_tried_after_every_other_not_dropped():
    """The pre-screen's prior (``late``): a setting whose all-reduce was 2x slower is left out of
    the policy's own start-up choices while others remain, and still launched in the end."""
    def late(config):
        return config.get("env.NCCL_PROTO") == "ll"

    study, policy = make(startup=DISTINCT, late=late)
    launched = drive(policy)
    keys = [config_key(p.config) for p in launched]
    assert len(set(keys)) == DISTINCT  # every feasible config once: the late ones are not dropped
    order = [late(p.config) for p in launched]
    assert order.count(True) == 2 and order == sorted(order)  # both LL configs after every other


def timed(proposal):
    """A launch that cost 100 s with graphs and 20 s without (its spawn -> healthy and total)."""
    result = ok(proposal)
    seconds = 100.0 if proposal.config["graph"] else 20.0
    result.timing = {"total_s": seconds}
    result.startup_phases = {"ready_s": seconds - 5}
    return result


def test_the_eta_is_the_measured_cost_of_what_is_left():
    """``expected_seconds``: after measuring configs with and without graphs, the next launches
    are priced by what each remaining config's parameters cost so far, not by one average."""
    study, policy = make()
    assert policy.expected_seconds(1) is None  # nothing measured: no estimate
    for _ in range(3):
        p = policy.next()
        policy.record(p, timed(p) if p.cached is None else p.cached, counted=p.cached is None)
    left = policy.unmeasured_configs()
    assert left and len(left) < DISTINCT
    one, all_left = policy.expected_seconds(1), policy.expected_seconds(len(left))
    assert one is not None and all_left is not None and all_left > one
    graphs = sum(1 for c in left if c["graph"])
    # between every remaining launch at the cheap price and every one at the dear price
    assert 20.0 * len(left) <= all_left <= 100.0 * len(left)
    assert graphs == 0 or all_left > 20.0 * len(left)


class AlwaysTheBaseline(optuna.samplers.BaseSampler):
    """A sampler that proposes the baseline every time: every launch after it is the policy's own fill."""

    def __init__(self, config):
        self.config = config

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        return self.config[name]


def costed(proposal, value, seconds):
    result = ok(proposal, value)
    result.timing = {"total_s": seconds}
    result.startup_phases = {"ready_s": seconds - 5}
    return result


def fill_order_after_three_launches(seed, cost_aware=True):
    """Baseline (a0, b0, c0) 10 tok/s in 100 s; (a0, b0, c1) 10 tok/s in 400 s (c1: a dear value,
    like a graph mode that captures); (a1, b0, c0) 20 tok/s in 100 s, the best. Every config at
    one parameter from it is then equally near; returns the fill's next launches."""
    base = {"a": "a0", "b": "b0", "c": "c0"}
    study = optuna.create_study(direction="maximize", sampler=AlwaysTheBaseline(base))
    policy = SearchPolicy(study, Grid3Space(), dict, baseline=base, budget=None, seed=seed,
                          strategy=SamplerLed(cost_aware=cost_aware))
    for params, value, seconds in [(base, 10.0, 100.0), ({"a": "a0", "b": "b0", "c": "c1"}, 10.0, 400.0),
                                   ({"a": "a1", "b": "b0", "c": "c0"}, 20.0, 100.0)]:
        if params != base:
            study.enqueue_trial(params)
        p = policy.next()
        assert p.config == params
        policy.record(p, costed(p, value, seconds))
    order = []
    while len(order) < 5:
        p = policy.next()
        if p.cached is not None:
            policy.record(p, p.cached, counted=False)
            continue
        assert p.role == "fill"
        order.append((p.config["a"], p.config["b"], p.config["c"]))
        policy.record(p, costed(p, 20.0, 400.0 if p.config["c"] == "c1" else 100.0))
    return order


def test_among_equally_near_configs_the_fill_launches_the_most_decode_per_second_first():
    """Issue 26, cost-aware search: of the configs one parameter from the best, the one that
    should measure like the best at a quarter of the launch cost goes first ((a1, b1, c0) or
    (a1, b2, c0)); the dear value (c1) comes after both, and an untried a2 (expected to
    measure like a typical config, not like the best) after them too. Ties broken at random
    (``cost_aware=False``) launch the dear one or a2 first for some seed."""
    cheap_and_good = {("a1", "b1", "c0"), ("a1", "b2", "c0")}
    for seed in range(6):
        order = fill_order_after_three_launches(seed)
        assert set(order[:2]) == cheap_and_good, (seed, order)
        assert order.index(("a1", "b0", "c1")) > 1 and order.index(("a2", "b0", "c0")) > 1
    blind = [fill_order_after_three_launches(seed, cost_aware=False)[0] for seed in range(6)]
    assert any(first not in cheap_and_good for first in blind), blind


def test_a_config_that_counts_nowhere_under_the_slo_is_told_infeasible_by_how_far_over():
    study, policy = make()
    p = policy.next()
    res = ok(p)
    res.metrics.update(slo_violations=["breaks the SLO: TPOT p99 31.2 ms at 32, over the 20 ms target by 56%"],
                       slo_excess=0.56)
    frozen = policy.record(p, res)
    assert frozen.state == TrialState.COMPLETE and dict(frozen.constraints) == {CONSTRAINT: 0.56}
    assert policy.best_row() is None  # the baseline broke it: reported, never best, nothing stops
    nxt = policy.next()
    assert nxt is not None and nxt.number == 1
