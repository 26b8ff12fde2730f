"""What the loop holds: each launch's log number and the name the driver's log gives it, the
launches in flight by kind, whether the golden reference is still to be captured, and when
nothing more may start (a stop signal, the deadline)."""

from __future__ import annotations

from loop_parts import loop_state

from orchestrator.core.correctness import Golden
from orchestrator.driver.loop_state import EXTRA_NUMBERS, REFERENCE_RUN_NUMBER, REPEAT_NUMBERS, Launch


def test_launches_outside_the_search_have_their_own_log_numbers_and_names():
    repeat = Launch.repeat(2, "node-abcdef")
    assert (repeat.kind, repeat.number, repeat.node, repeat.label) == ("repeat", REPEAT_NUMBERS + 2, "node-abcdef",
                                                                       "baseline repeat")
    reference = Launch.reference_config()
    assert (reference.number, reference.label) == (REFERENCE_RUN_NUMBER, "reference config")
    race = Launch("race", EXTRA_NUMBERS + 3, key="k", config={"tp_size": 1}, shown="#5")
    assert race.label == "race of #5"
    assert Launch("relaunch", EXTRA_NUMBERS + 1, shown="#0").label == "relaunch of #0"


def test_a_search_launch_is_named_by_its_trial_number(tmp_path):
    with loop_state(tmp_path) as (_, run):
        proposal = run.policy.next()
        assert proposal is not None
        search, reference = Launch.of(proposal, reference=False), Launch.of(proposal, reference=True)
        assert (search.kind, reference.kind) == ("search", "reference")
        assert search.number == proposal.number and search.label == f"#{proposal.number}"


def test_the_launches_in_flight_by_kind(tmp_path):
    with loop_state(tmp_path) as (_, run):
        run.in_flight = {1: Launch("race", EXTRA_NUMBERS + 1, key="a"), 2: Launch.repeat(1, "n"),
                         3: Launch("race", EXTRA_NUMBERS + 2, key="b")}
        assert [launch.key for launch in run.flying("race")] == ["a", "b"]
        assert run.flying("relaunch") == []


def test_the_reference_is_needed_only_with_the_gate_on_and_none_captured(tmp_path):
    with loop_state(tmp_path) as (_, run):
        assert run.checks and run.need_reference
        run.golden = Golden(prompts=["a"], texts=["b"])
        assert not run.need_reference
        run.golden, run.checks = None, False
        assert not run.need_reference


def test_nothing_starts_after_a_stop_signal_or_past_the_deadline(tmp_path):
    with loop_state(tmp_path) as (_, run):
        assert not run.stop_starting()
        run.signals.count = 1
        assert run.stop_starting()
    late = tmp_path / "late"
    late.mkdir()
    with loop_state(late, timeout_s=1e-9) as (_, run):
        assert run.stop_starting()
