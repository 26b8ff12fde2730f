"""A shared study (study.shared) on a real PostgreSQL server of the test's own: the claim lock
excludes, the extras lock has one holder, a driver's trial in flight is busy for the others,
and a dead driver's trial is handed to one survivor, recorded interrupted and re-queued."""

from __future__ import annotations

import itertools
import time

import optuna
import pytest
import sqlalchemy

from orchestrator.core.errors import RuntimeFailure
from orchestrator.core.records import COMPLETE, TrialResult
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage.shared import SharedStudy, _lock_key, is_shared, shown
from postgres import postgres_server

optuna.logging.set_verbosity(optuna.logging.ERROR)

CHOICES = {"tp_size": [1, 2], "graph": [False, True]}


class Space:
    """SearchSpace-like: 4 configs, all feasible."""

    def suggest(self, trial):
        return {name: trial.suggest_categorical(name, values) for name, values in CHOICES.items()}

    def active(self, config):
        return dict(config)

    def feasible(self, config):
        return None

    def enumerate(self):
        return [dict(zip(CHOICES, combo)) for combo in itertools.product(*CHOICES.values())]

    def distributions(self):
        return {n: optuna.distributions.CategoricalDistribution(v) for n, v in CHOICES.items()}


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url


def driver(url: str, name: str, **kw) -> tuple[SharedStudy, SearchPolicy]:
    shared = SharedStudy(url, name, **kw)
    study = optuna.create_study(study_name=name, storage=shared.storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=len(name)), load_if_exists=True)
    policy = SearchPolicy(study, Space(), dict, baseline=None, budget=None, shared=True, on_ask=shared.beat_one)
    return shared, policy


def ok(proposal) -> TrialResult:
    return TrialResult(outcome=COMPLETE, config=proposal.config, value=1.0,
                       metrics={"decode_tok_s": 1.0, "decode_samples": [1.0], "repeats": 1})


def test_only_postgresql_is_shared():
    assert is_shared("postgresql+psycopg2://u:secret@db:5432/optuna")
    assert is_shared("postgresql://db/optuna")
    assert not is_shared("sqlite:///study.db")
    assert not is_shared("mysql+pymysql://db/optuna")
    assert not is_shared("journal:reports/x/study.journal")
    assert "secret" not in shown("postgresql+psycopg2://u:secret@db:5432/optuna")


def test_an_unreachable_server_is_one_line():
    with pytest.raises(RuntimeFailure) as err:
        SharedStudy("postgresql+psycopg2://postgres:pw@127.0.0.1:1/none", "x")
    assert "cannot open storage" in str(err.value) and "pw" not in str(err.value)
    assert "\n" not in str(err.value)


def test_the_claim_lock_excludes_and_the_extras_have_one_holder(pg_url):
    a, b = SharedStudy(pg_url, "locks"), SharedStudy(pg_url, "locks")
    probe = sqlalchemy.create_engine(pg_url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with probe.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            def free(what: str) -> bool:
                got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"),
                                   {"k": _lock_key("locks", what)}).scalar()
                if got:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": _lock_key("locks", what)})
                return bool(got)

            with a.claim():
                assert not free("claim")
            assert free("claim")
            assert a.take_extras() and a.take_extras()
            assert not b.take_extras()
            a.close()  # it gives its locks back
            assert b.take_extras()
            assert not free("extras")
    finally:
        b.close()
        probe.dispose()


def test_a_trial_in_flight_is_busy_for_the_other_driver(pg_url):
    a_shared, a = driver(pg_url, "busy")
    b_shared, b = driver(pg_url, "busy")
    try:
        first = a.next()
        assert first is not None and first.cached is None
        assert [t.number for t in b.others_running()] == [first.number]
        assert not a.others_running()
        taken = [b.next() for _ in range(3)]
        assert all(p is not None and p.cached is None for p in taken)
        keys = {first.key, *(p.key for p in taken if p is not None)}
        assert len(keys) == 4  # every config once: none is the one a runs
        assert b.next() is None and b.exhausted
        a.record(first, ok(first))
        assert not b.others_running()
    finally:
        a_shared.close()
        b_shared.close()


def test_a_dead_drivers_trial_goes_to_one_survivor_and_is_requeued(pg_url):
    dead_shared, dead = driver(pg_url, "stale", heartbeat_s=1, grace_s=2)
    b_shared, b = driver(pg_url, "stale", heartbeat_s=1, grace_s=2)
    c_shared, c = driver(pg_url, "stale", heartbeat_s=1, grace_s=2)
    try:
        lost = dead.next()
        assert lost is not None
        dead_shared.close()  # its heartbeats stop: the driver died
        by_b: list = []
        by_c: list = []
        while not by_b and not by_c:  # the database's clock passes the grace period
            time.sleep(0.5)
            by_b, by_c = b_shared.stale(b.study), c_shared.stale(c.study)
        assert [t.number for t in by_b + by_c] == [lost.number]  # handed to one survivor only
        assert b_shared.stale(b.study) == [] and c_shared.stale(c.study) == []
        kept, interrupted = (b if by_b else c).account_stale(by_b + by_c)
        assert (kept, interrupted) == ([], [lost.number])
        again = b.next()  # the re-queued config comes first
        assert again is not None and again.key == lost.key and again.cached is None
        b.record(again, ok(again))
        rows = {r.number: r for r in trial_rows(b.study)}
        assert rows[lost.number].failure_kind == "interrupted" and not rows[lost.number].counted
        assert rows[again.number].state == COMPLETE and rows[again.number].counted
    finally:
        for s in (b_shared, c_shared, dead_shared):
            s.close()
