"""study.culprits: which values make launches fail, with failures explained away: a value a log
names takes the blame from its bystanders, a value two failures shared is cleared by a third that
names another, a combination that crashed though each value worked elsewhere is suspected as one."""

from __future__ import annotations

import pytest

from orchestrator.core.records import COMPLETE, FAIL, TrialRow
from orchestrator.study.model.culprits import PRIOR_BAD, Culprits

NAMES = ["tp", "proto", "algo", "capture"]


def row(n, state, **params):
    kind = params.pop("kind", None)
    log = params.pop("log", "")
    return TrialRow(number=n, state=state, params=params, counted=True, value=10.0 if state == COMPLETE else None,
                    failure_kind=kind, failure_reason="replayed" if kind else None, log_tail=log)


BASE = row(0, COMPLETE, tp=8, proto="Simple", algo="Ring", capture="small")


def works(culprits, **params):
    return culprits.works([params])[0]


def test_a_value_the_log_names_takes_the_blame_from_its_bystanders():
    """Issue 49: TP=4 failed once beside PAT and LL128 (NCCL named PAT); a share of the blame kept
    TP=4, the runner-up layout, off the rest of the night."""
    refused = row(1, FAIL, tp=4, proto="LL128", algo="PAT", capture="large", kind="nccl-invalid",
                  log="NCCL WARN Error : algorithm PAT is not supported on this platform")
    c = Culprits.fit([BASE, refused], NAMES)
    assert c.bad[("algo", "PAT")] > 0.85
    assert c.bad[("tp", 4)] < PRIOR_BAD + 0.03  # back to about what any untried value is
    assert works(c, tp=4, proto="Simple", algo="Ring", capture="small") == pytest.approx(1.0, abs=0.03)
    assert works(c, tp=8, proto="Simple", algo="PAT", capture="small") < 0.15


def test_two_failures_that_shared_two_values_leave_each_half_suspect_until_a_third_tells_them_apart():
    wrong = [row(1, FAIL, tp=8, proto="LL128", algo="Tree", capture="small", kind="wrong-output"),
             row(2, FAIL, tp=8, proto="LL128", algo="Tree", capture="large", kind="wrong-output")]
    c = Culprits.fit([BASE, *wrong], NAMES)
    assert 0.35 < c.bad[("proto", "LL128")] < 0.75 and 0.35 < c.bad[("algo", "Tree")] < 0.75
    worked = row(3, COMPLETE, tp=8, proto="Simple", algo="Tree", capture="large")  # Tree works: LL128 it is
    c = Culprits.fit([BASE, *wrong, worked], NAMES)
    assert c.bad[("proto", "LL128")] > 0.85 and ("algo", "Tree") in c.cleared
    assert works(c, tp=8, proto="Simple", algo="Tree", capture="small") == 1.0


def test_a_wrong_answer_after_a_full_start_clears_its_values_of_a_crash_at_start():
    wrong = row(1, FAIL, tp=4, proto="LL128", algo="Ring", capture="small", kind="wrong-output")
    crash = row(2, FAIL, tp=4, proto="Simple", algo="Ring", capture="large", kind="start-crash")
    c = Culprits.fit([BASE, wrong, crash], NAMES)
    assert c.bad[("capture", "large")] > 0.6  # TP=4 started once: the crash is the capture list's (or chance)
    assert c.bad[("tp", 4)] == pytest.approx(c.bad[("proto", "LL128")])  # suspects of the wrong answer only
    assert c.bad[("tp", 4)] < 0.5


def test_a_combination_that_crashed_where_each_value_worked_is_suspected_as_one():
    """Issue 49: a capture list too large for TP=2 crashed nine times in one night, each time with
    other bystanders, because each value had worked elsewhere and no value was blamed."""
    rows = [BASE, row(1, COMPLETE, tp=2, proto="Simple", algo="Ring", capture="small"),
            row(2, COMPLETE, tp=8, proto="Simple", algo="Ring", capture="large"),
            row(3, FAIL, tp=2, proto="Simple", algo="Ring", capture="large", kind="start-crash")]
    c = Culprits.fit(rows, NAMES)
    assert works(c, tp=2, proto="LL", algo="Tree", capture="large") < 0.2  # the same combination, new bystanders
    assert works(c, tp=2, proto="LL", algo="Tree", capture="small") == 1.0
    assert works(c, tp=8, proto="LL", algo="Tree", capture="large") == 1.0


def test_a_banned_value_never_works_and_explains_its_failures():
    refused = row(1, FAIL, tp=4, proto="Simple", algo="NVLS", capture="small", kind="nccl-invalid")
    c = Culprits.fit([BASE, refused], NAMES, bans=[("algo", "NVLS")])
    assert works(c, tp=8, proto="Simple", algo="NVLS", capture="small") == 0.0
    assert works(c, tp=4, proto="Simple", algo="Ring", capture="small") == 1.0  # TP=4: no blame left
