"""The votes on the golden reference, on plain values: gate failures are held while nothing
but the reference's own config has passed; two different configs that agree with each other
and not with the reference, and share no departure from the baseline but values that are
defaults, outvote it; a pass from another config confirms it and releases what was held. A
reference file whose output is degenerate is bad input, before any launch."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from conftest import TESTS, write_job
from orchestrator.config.job import load_job
from orchestrator.core.correctness import Golden
from orchestrator.core.outcome import Final
from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialResult
from orchestrator.driver.golden import GateVotes, GoldenSource, Launched

REFERENCE = ["garbage one", "garbage two"]
RIGHT = ["the right text", "and more of it"]
BASELINE = {"tp_size": 1, "backend.threads": 1, "backend.fault": "garbage"}
DEFAULTS = {"backend.fault": "none", "tp_size": 1}
OUTPUTS = json.loads((TESTS / "data" / "reference_outputs.json").read_text())  # real servers' outputs


@dataclass(frozen=True)
class Handle:
    number: int


def golden() -> Golden:
    return Golden(prompts=["a", "b"], texts=list(REFERENCE))


def wrong(config: dict, texts=RIGHT) -> Final:
    result = TrialResult(outcome=FAIL, config=config, failure_kind=FailureKind.WRONG_OUTPUT,
                         failure_reason="greedy text differs from the reference", outputs={"texts": list(texts)},
                         correctness={"ok": False})
    return Final(result, counted=True, blameless=False, requeue=False)


def passed(config: dict) -> Final:
    result = TrialResult(outcome=COMPLETE, config=config, value=10.0, outputs={"texts": list(REFERENCE)},
                         correctness={"ok": True})
    return Final(result, counted=True, blameless=False, requeue=False)


def trial(number: int, config: dict) -> Launched:
    return Launched(number, f"key-{number}", config)


def test_configs_that_share_only_defaults_outvote_a_garbage_reference():
    votes = GateVotes(BASELINE, DEFAULTS, reference_key="key-0")
    a = {"tp_size": 1, "backend.threads": 2, "backend.fault": "none"}
    b = {"tp_size": 2, "backend.threads": 1, "backend.fault": "none"}
    first = votes.consider(trial(1, a), Handle(1), wrong(a), golden())
    assert first.decision == "hold" and len(votes.held) == 1
    second = votes.consider(trial(2, b), Handle(2), wrong(b), golden())
    assert second.decision == "outvoted" and "trials 1, 2" in second.why and "odd one out" in second.why
    # every held trial is released as not the config's fault
    assert [h.number for h, _ in second.release] == [1, 2]
    assert all(f.blameless and not f.counted and f.result.correctness["outvoted_reference"]
               for _, f in second.release)
    assert votes.held == []


def test_configs_that_share_a_departure_are_no_vote():
    votes = GateVotes({"tp_size": 1, "env.NCCL_PROTO": "Simple"}, {}, reference_key="key-0")
    a = {"tp_size": 2, "env.NCCL_PROTO": "LL128"}
    b = {"tp_size": 4, "env.NCCL_PROTO": "LL128"}  # both carry LL128: their agreement may be its doing
    assert votes.consider(trial(1, a), Handle(1), wrong(a), golden()).decision == "hold"
    assert votes.consider(trial(2, b), Handle(2), wrong(b), golden()).decision == "hold"
    assert len(votes.held) == 2


def test_configs_that_disagree_with_each_other_are_no_vote():
    votes = GateVotes(BASELINE, DEFAULTS, reference_key="key-0")
    a, b = {"backend.threads": 2}, {"tp_size": 2}
    assert votes.consider(trial(1, a), Handle(1), wrong(a, ["x", "y"]), golden()).decision == "hold"
    assert votes.consider(trial(2, b), Handle(2), wrong(b, ["p", "q"]), golden()).decision == "hold"


def test_a_pass_from_another_config_confirms_the_reference_and_releases_the_held():
    votes = GateVotes(BASELINE, DEFAULTS, reference_key="key-0")
    a = {"backend.threads": 2}
    votes.consider(trial(1, a), Handle(1), wrong(a), golden())
    vote = votes.consider(trial(2, {"tp_size": 2}), Handle(2), passed({"tp_size": 2}), golden())
    assert vote.decision == "record" and [h.number for h, _ in vote.release] == [1]
    assert votes.confirmed and votes.held == []
    # once confirmed, a wrong config is simply recorded
    b = {"tp_size": 4}
    assert votes.consider(trial(3, b), Handle(3), wrong(b), golden()).decision == "record"


def test_the_references_own_config_passing_proves_nothing():
    votes = GateVotes(BASELINE, DEFAULTS, reference_key="key-5")
    a = {"backend.threads": 2}
    votes.consider(trial(1, a), Handle(1), wrong(a), golden())
    vote = votes.consider(Launched(5, "key-5", BASELINE), Handle(5), passed(BASELINE), golden())
    assert vote.decision == "record" and vote.release == [] and not votes.confirmed and len(votes.held) == 1


def test_other_failures_are_recorded_at_once():
    votes = GateVotes(BASELINE, DEFAULTS, reference_key="key-0")
    crash = Final(TrialResult.failed({"tp_size": 2}, FailureKind.START_CRASH, "died"), counted=True,
                  blameless=False, requeue=False)
    assert votes.consider(trial(1, {"tp_size": 2}), Handle(1), crash, golden()).decision == "record"
    same = wrong({"tp_size": 4}, REFERENCE)  # a wrong-output whose greedy text is the reference's (logprobs)
    assert votes.consider(trial(2, {"tp_size": 4}), Handle(2), same, golden()).decision == "record"
    assert votes.held == []


def test_a_resumed_study_whose_reference_was_confirmed_holds_nothing():
    votes = GateVotes(BASELINE, DEFAULTS, reference_key="key-0", confirmed=True)
    a = {"backend.threads": 2}
    assert votes.consider(trial(1, a), Handle(1), wrong(a), golden()).decision == "record"


def test_a_degenerate_reference_file_is_bad_input(tmp_path):
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"prompts": ["a", "b", "c"], "texts": OUTPUTS["gpu-1b-before-fix"]["texts"]}))
    job_path = write_job(tmp_path, study="reffile", correctness={"reference": str(ref), "prompts": ["a", "b", "c"]})
    job = load_job(job_path)
    from orchestrator.core.errors import BadInput

    with pytest.raises(BadInput, match="reference file .* is unusable: its output is not text"):
        GoldenSource(job, job.baseline_config(), print).from_file()
