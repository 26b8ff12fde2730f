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


# ---- a server whose scores are not its model's (vLLM 0.26.0 with a draft model) -------------------
DISOWN_REF = dict(texts=[" kanoba jipeda", " tobufi"], logprobs=[[-0.9, -0.2], [-0.1]],
                  tokens=[[" kanoba", " jipeda"], [" tobufi"]], generated=[[-0.9, -0.2], [-0.1]])


def _disowning_trial(scores, generated, texts=None, tokens=None):
    """A trial's capture: ``scores`` of the reference text (echo), and its own generation whose
    picks had ``generated`` log-probabilities (each the best of two candidates)."""
    tokens = tokens or [[" kanoba", " jipeda"], [" tobufi"]]
    top = [[{tok: lp, " riside": lp - 5.0} for tok, lp in zip(toks, gen)] for toks, gen in zip(tokens, generated)]
    return {"texts": texts or DISOWN_REF["texts"], "logprobs": scores, "tokens": tokens, "top": top}


def test_a_server_that_disowns_its_scores_passes_with_a_warning():
    # greedy tokens and their generated log-probabilities as the reference's; echo scores 25 nats/token off
    golden = correctness.Golden(prompts=["a", "b"], tolerance=0.1, **DISOWN_REF)
    verdict = correctness.compare(golden, _disowning_trial([[-25.9, -25.2], [-0.1]], [[-0.92, -0.21], [-0.1]]))
    assert verdict["ok"], verdict["reason"]
    assert verdict["disowned_scores"] == {"prompts": [0], "generation_drift": pytest.approx(0.015)}
    assert "not its model's" in verdict["warning"] and "prompt 0" in verdict["warning"]


@pytest.mark.parametrize("case", ["its generation drifts too", "its text differs", "its tokens differ",
                                  "no generation log-probabilities in the reference",
                                  "no candidates from the trial"])
def test_a_score_drift_is_wrong_output_unless_the_server_disowns_its_scores(case):
    ref, scores, generated = dict(DISOWN_REF), [[-25.9, -25.2], [-0.1]], [[-0.92, -0.21], [-0.1]]
    texts, tokens = None, None
    if case == "its generation drifts too":  # a broken model: both of its channels say so
        generated = [[-6.0, -7.0], [-0.1]]
    elif case == "its text differs":
        texts = [" kanoba riside", " tobufi"]
    elif case == "its tokens differ":  # the same text, split otherwise
        tokens = [[" kan", "oba jipeda"], [" tobufi"]]
    elif case == "no generation log-probabilities in the reference":  # a golden captured before they were kept
        ref["generated"] = []
    golden = correctness.Golden(prompts=["a", "b"], tolerance=0.1, **ref)
    trial = _disowning_trial(scores, generated, texts, tokens)
    if case == "no candidates from the trial":
        trial["top"] = [None, None]
    verdict = correctness.compare(golden, trial)
    assert not verdict["ok"] and "warning" not in verdict
    assert ("differs" if case == "its text differs" else "drift by 25 nats/token on prompt 0") in verdict["reason"]


def test_calibration_keeps_the_generated_log_probabilities_and_their_noise():
    first = _disowning_trial([[-0.9, -0.2], [-0.1]], [[-0.9, -0.2], [-0.1]])
    second = _disowning_trial([[-0.9, -0.2], [-0.1]], [[-0.9, -0.2], [-0.14]])
    golden, why = correctness.calibrate(["a", "b"], first, second, floor=0.05)
    assert why is None
    assert golden.generated == [[-0.9, -0.2], [-0.1]]
    # the generation pass disagreed with itself by 0.04 nats/token on prompt 1: 5x that is the tolerance
    assert golden.self_drift == pytest.approx(0.04) and golden.tolerance == pytest.approx(0.2)
    assert correctness.Golden.from_dict(golden.to_dict()).generated == golden.generated
