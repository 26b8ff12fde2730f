"""The correctness gate's arithmetic: calibration from two captures, and verdicts."""

from orchestrator import correctness


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
