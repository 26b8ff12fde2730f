"""The correctness gate's arithmetic: calibration from two captures, and verdicts."""

import pytest

from orchestrator.core import correctness


def capture(texts, logprobs):
    return {"texts": texts, "logprobs": logprobs}


def test_calibration_uses_the_reference_self_drift_with_a_floor():
    a = capture(["abc", "xyz"], [[-0.1, -0.2], [-0.3, -0.4]])
    b = capture(["abc", "xyz"], [[-0.1, -0.2], [-0.3, -0.4]])
    golden, why = correctness.calibrate(["p1", "p2"], a, b)
    assert why is None and golden.tolerance == correctness.DEFAULT_LOGPROB_FLOOR
    noisy = capture(["abc", "xyz"], [[-0.2, -0.3], [-0.3, -0.4]])
    golden, _ = correctness.calibrate(["p1", "p2"], a, noisy)
    assert golden.self_drift > 0.09 and golden.tolerance >= correctness.NOISE_MULTIPLIER * golden.self_drift - 1e-9


def test_a_reference_that_disagrees_with_itself_cannot_gate():
    golden, why = correctness.calibrate(["p"], capture(["abc"], None), capture(["abd"], None))
    assert golden is None and "not deterministic" in why


def test_identical_text_and_small_drift_pass():
    golden = correctness.Golden(prompts=["p"], texts=["hello"], logprobs=[[-0.5, -0.25]], tolerance=0.05)
    verdict = correctness.compare(golden, capture(["hello"], [[-0.51, -0.26]]))
    assert verdict["ok"] and verdict["text_matches"] == "1/1"


def test_different_greedy_text_fails_with_the_position():
    golden = correctness.Golden(prompts=["p"], texts=["hello world"], logprobs=[], tolerance=0.05)
    verdict = correctness.compare(golden, capture(["hello wxrld"], None))
    assert not verdict["ok"] and "character 7" in verdict["reason"]


def test_logprob_drift_beyond_tolerance_fails_even_with_same_text():
    golden = correctness.Golden(prompts=["p"], texts=["hello"], logprobs=[[-0.1, -0.1]], tolerance=0.05)
    verdict = correctness.compare(golden, capture(["hello"], [[-2.0, -3.0]]))
    assert not verdict["ok"] and "drift" in verdict["reason"]


def test_missing_outputs_fail():
    golden = correctness.Golden(prompts=["p", "q"], texts=["a", "b"])
    assert not correctness.compare(golden, capture(["a"], None))["ok"]


def test_golden_round_trips_through_a_dict_and_a_file(tmp_path):
    golden = correctness.Golden(prompts=["p"], texts=["a"], logprobs=[[-1.0]], tolerance=0.2)
    assert correctness.Golden.from_dict(golden.to_dict()) == golden
    path = tmp_path / "golden.json"
    import json

    path.write_text(json.dumps(golden.to_dict()))
    assert correctness.Golden.from_file(path).texts == ["a"]


def _golden_of(texts, logprobs, tokens, tolerance=0.1):
    return correctness.Golden(prompts=["a", "b"], texts=texts, logprobs=logprobs, tolerance=tolerance,
                              tokens=tokens)


REF = dict(texts=[" kanoba jipeda", " tobufi"], logprobs=[[-0.9, -0.2], [-0.1]],
           tokens=[[" kanoba", " jipeda"], [" tobufi"]])


def test_a_rounding_near_tie_that_flips_a_greedy_token_passes():
    # the trial (another TP size in bf16) picks " jipeda" where the reference had " kanoba", with
    # " kanoba" its runner-up 0.3 nats below; its scores of the reference text drift 0.05 nats/token
    outputs = {"texts": [" jipeda riside", " tobufi"], "logprobs": [[-0.95, -0.25], [-0.1]],
               "tokens": [[" jipeda", " riside"], [" tobufi"]],
               "top": [[{" jipeda": -0.6, " kanoba": -0.9}, {" riside": -0.2, " pekuge": -3.0}],
                       [{" tobufi": -0.1, " lubabe": -4.0}]]}
    verdict = correctness.compare(_golden_of(**REF), outputs)
    assert verdict["ok"], verdict["reason"]
    assert verdict["near_ties"] == {"0": pytest.approx(0.3)}


def test_a_differing_text_that_is_no_near_tie_fails_with_the_margin():
    # a wrong model: the reference's token is 6 nats below this config's pick, or not a candidate
    for top0, said in (({" jipeda": -0.1, " kanoba": -6.1}, "6 nats below"),
                       ({" jipeda": -0.1, " riside": -3.0}, "not among this config's candidates")):
        outputs = {"texts": [" jipeda riside", " tobufi"], "logprobs": [[-0.9, -0.2], [-0.1]],
                   "tokens": [[" jipeda", " riside"], [" tobufi"]], "top": [[top0, None], [None]]}
        verdict = correctness.compare(_golden_of(**REF, tolerance=10.0), outputs)
        assert not verdict["ok"]
        assert "prompt 0" in verdict["reason"] and said in verdict["reason"]


def test_a_differing_text_without_candidates_still_fails():
    outputs = {"texts": [" jipeda riside", " tobufi"], "logprobs": [[-0.9, -0.2], [-0.1]]}
    assert not correctness.compare(_golden_of(**REF), outputs)["ok"]


def test_a_near_tie_does_not_excuse_drift_beyond_tolerance():
    outputs = {"texts": [" jipeda riside", " tobufi"], "logprobs": [[-1.6, -0.9], [-0.1]],
               "tokens": [[" jipeda", " riside"], [" tobufi"]],
               "top": [[{" jipeda": -0.6, " kanoba": -0.9}, None], [None]]}
    verdict = correctness.compare(_golden_of(**REF), outputs)
    assert not verdict["ok"] and "drift" in verdict["reason"]


def test_the_golden_keeps_the_reference_tokens():
    first = {"texts": REF["texts"], "logprobs": REF["logprobs"], "tokens": REF["tokens"]}
    golden, why = correctness.calibrate(["a", "b"], first, dict(first))
    assert why is None and golden.tokens == REF["tokens"]
    assert correctness.Golden.from_dict(golden.to_dict()).tokens == REF["tokens"]
