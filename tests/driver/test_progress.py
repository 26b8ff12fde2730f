"""What a run prints (driver/progress.py): the final line states the best's ratio to the
baseline with its interval, "beyond noise" only when the interval excludes 1.0 (on the
decode samples of the H200 8b study), and no verdict without two samples a side."""

from __future__ import annotations

import statistics

from orchestrator.core.records import TrialRow
from orchestrator.driver.progress import vs_baseline_words


def _samples(text: str) -> list[float]:
    return [float(x) for x in text.split(";")]


# decode_samples of the H200 8b study (docs/gpu/h200-refserver-8b/trials.csv): 5 repeats each.
H200_8B = {
    "baseline": _samples("95.0141;91.6813;102.56;107.847;112.509"),      # trial 0: eager
    "best": _samples("193.257;193.232;193.597;194.538;194.523"),        # trial 3: graphs 1..64, 64 slots
    "graphs_1_8": _samples("194.184;191.081;191.821;192.747;193.586"),  # trial 4: graphs 1,2,4,8
}


def _trial(number: int, samples: list[float], key: str):
    value = statistics.median(samples)
    return TrialRow(number=number, state="COMPLETE", params={"k": key}, value=value, config_key=key, counted=True,
                    metrics={"decode_tok_s": value, "decode_samples": samples})


def test_the_runs_final_line_says_beyond_noise_only_beyond_noise():
    base = _trial(0, H200_8B["baseline"], "eager")
    best = _trial(3, H200_8B["best"], "graphs")
    words = vs_baseline_words(best, base)
    assert words.startswith("1.89x the baseline, beyond noise, 95% CI 1.") and "within" not in words
    # a best 0.4% above a baseline whose repeats overlap it: the ratio is stated, no verdict
    near = _trial(4, H200_8B["graphs_1_8"], "graphs-1-8")
    words = vs_baseline_words(best, near)
    assert words.startswith("1.004x the baseline, within noise of the baseline, 95% CI 0.99") and "beyond" not in words
    # the baseline itself, and no baseline
    assert vs_baseline_words(base, base) == "the baseline itself"
    assert vs_baseline_words(best, None) is None
    # one repeat each: no interval, no verdict
    words = vs_baseline_words(_trial(5, [190.0], "x"), _trial(0, [100.0], "y"))
    assert words == "1.90x the baseline, within noise of the baseline, no interval: needs 2 samples of each"
