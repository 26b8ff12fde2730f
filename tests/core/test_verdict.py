"""verdict: Student-t quantiles without scipy, paired and unpaired ratio intervals on sample sets
measured by this project, and the rule that a config against itself never gets a verdict."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from conftest import TESTS
from orchestrator.core import verdict as v
from orchestrator.core.verdict import describe, ratio_interval, t_quantile

DATA = TESTS / "data" / "verdict"

# Published two-sided table values (e.g. NIST/SEMATECH e-Handbook, Table of t critical values),
# 3-4 decimals: (p, df, t).
TABLE = [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 4, 2.776), (0.975, 5, 2.571),
    (0.975, 6, 2.447), (0.975, 7, 2.365), (0.975, 8, 2.306), (0.975, 9, 2.262), (0.975, 10, 2.228),
    (0.975, 15, 2.131), (0.975, 20, 2.086), (0.975, 30, 2.042), (0.975, 60, 2.000), (0.975, 120, 1.980),
    (0.95, 1, 6.314), (0.95, 4, 2.132), (0.95, 5, 2.015), (0.95, 10, 1.812), (0.95, 30, 1.697),
    (0.995, 1, 63.657), (0.995, 3, 5.841), (0.995, 10, 3.169), (0.995, 30, 2.750),
    (0.9, 2, 1.886), (0.9, 10, 1.372),
]


@pytest.mark.parametrize("p,df,t", TABLE)
def test_t_quantiles_match_the_published_table(p, df, t):
    assert t_quantile(p, df) == pytest.approx(t, abs=6e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-t, abs=6e-4)  # symmetric


def _t_cdf_by_integration(x: float, df: float, steps: int = 20000) -> float:
    """P(T <= x) by Simpson's rule on the density: independent of the incomplete beta."""
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    pdf = lambda t: math.exp(logc - (df + 1) / 2 * math.log1p(t * t / df))  # noqa: E731
    h = x / steps
    area = pdf(0) + pdf(x) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, steps))
    return 0.5 + area * h / 3


@pytest.mark.parametrize("df", [1.3, 2.5, 3.7, 7.2, 18.9])  # Welch's degrees of freedom are fractional
@pytest.mark.parametrize("p", [0.9, 0.975, 0.995])
def test_fractional_degrees_of_freedom_agree_with_numerical_integration(df, p):
    assert _t_cdf_by_integration(t_quantile(p, df), df) == pytest.approx(p, abs=1e-7)


def test_quantiles_between_integer_df_and_the_normal_limit():
    assert t_quantile(0.975, 3) > t_quantile(0.975, 3.5) > t_quantile(0.975, 4)
    assert t_quantile(0.975, 1e9) == pytest.approx(1.959964, abs=1e-6)
    assert t_quantile(0.5, 3) == 0.0
    for bad in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(*bad)


def _samples(text: str) -> list[float]:
    return [float(x) for x in text.split(";")]


# decode_samples of the H200 8b study (docs/gpu/h200-refserver-8b/trials.csv): 5 repeats each.
H200_8B = {
    "baseline": _samples("95.0141;91.6813;102.56;107.847;112.509"),      # trial 0: eager
    "best": _samples("193.257;193.232;193.597;194.538;194.523"),        # trial 3: graphs 1..64, 64 slots
    "graphs_1_8": _samples("194.184;191.081;191.821;192.747;193.586"),  # trial 4: graphs 1,2,4,8
}


def test_unpaired_interval_on_a_studys_trials():
    iv = ratio_interval(H200_8B["baseline"], H200_8B["best"])
    assert not iv.paired and iv.n == 5 and iv.bounded
    assert 1.5 < iv.lo < iv.ratio < iv.hi < 2.5
    assert iv.ratio == pytest.approx(1.90, abs=0.01)  # geometric means: 193.83 / 101.65
    assert v.verdict(iv) == v.FASTER
    assert describe(iv) == f"1.91x faster (95% CI {iv.lo:.2f}-{iv.hi:.2f}x)"
    # the reverse reads as slower, with the reciprocal interval
    rev = ratio_interval(H200_8B["best"], H200_8B["baseline"])
    assert v.verdict(rev) == v.SLOWER and rev.lo == pytest.approx(1 / iv.hi) and rev.hi == pytest.approx(1 / iv.lo)
    # two graph configs 0.4% apart with overlapping repeats: no verdict
    tie = ratio_interval(H200_8B["best"], H200_8B["graphs_1_8"])
    assert tie.lo < 1.0 < tie.hi and v.verdict(tie) == v.WITHIN_NOISE
    assert describe(tie).startswith("0.994x, within noise (95% CI 0.98")  # three decimals: a narrow interval


def test_welch_interval_widens_with_the_noisier_side_and_fewer_samples():
    quiet = ratio_interval(H200_8B["best"], H200_8B["graphs_1_8"])
    noisy = ratio_interval(H200_8B["baseline"], H200_8B["baseline"][::-1])  # same samples: ratio 1
    assert noisy.ratio == pytest.approx(1.0) and noisy.lo < 0.9 and noisy.hi > 1.1
    assert (quiet.hi - quiet.lo) < (noisy.hi - noisy.lo)
    three = ratio_interval(H200_8B["baseline"][:3], H200_8B["best"][:3])
    full = ratio_interval(H200_8B["baseline"], H200_8B["best"])
    assert math.log(three.hi / three.lo) > math.log(full.hi / full.lo)


def _compare_rounds(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _paired(data: dict, level: str) -> tuple[list[float], list[float]]:
    per = {}
    for r in data["rounds"]:
        per.setdefault(r["config"], {})[r["round"]] = r["levels"][level]["total_tok_s"]
    rounds = sorted(per["baseline"])
    return [per["baseline"][i] for i in rounds], [per["best"][i] for i in rounds]


def test_paired_interval_on_a_config_against_itself():
    """8 interleaved rounds of one config against itself on the shared 2-core CPU box: single
    launches differ by up to 2x (by over 25% at every concurrency), their ratio's interval
    contains 1.0 at every concurrency, and the verdict is never faster/slower."""
    data = _compare_rounds("self-compare-cpu-8-rounds.json")
    for level in ("1", "2", "10"):
        a, b = _paired(data, level)
        assert len(a) == 8 and max(max(x / y, y / x) for x, y in zip(a, b)) > 1.25  # noisy launches
        iv = ratio_interval(a, b, paired=True)
        assert iv.paired and iv.n == 8 and iv.lo < 1.0 < iv.hi, (level, iv)
        assert v.verdict(iv) == v.WITHIN_NOISE
        assert v.verdict(iv, same_config=True) == v.SAME_CONFIG
        assert describe(iv, same_config=True) == "the same config"
        assert v.describe_one_config(iv).startswith(f"the same config, its launches {iv.ratio:.2f}x apart (95% CI ")


def test_paired_interval_on_a_real_difference():
    """TP=2 (baseline) against TP=1 (best) of the reference server on CPU, 5 interleaved rounds:
    TP=1 is faster at every concurrency, beyond the noise of the rounds."""
    data = _compare_rounds("compare-tp2-vs-tp1-cpu-5-rounds.json")
    for level in ("1", "2", "10"):
        a, b = _paired(data, level)
        iv = ratio_interval(a, b, paired=True)
        assert iv.n == 5 and iv.lo > 1.0, (level, iv)
        assert v.verdict(iv) == v.FASTER
        assert describe(iv).startswith(f"{iv.ratio:.2f}x faster (95% CI ")
        # the same numbers unpaired: the interval ignores what each round shares
        assert ratio_interval(a, b).ratio == pytest.approx(iv.ratio)


def test_pairing_removes_what_a_round_shares():
    """Rounds drifting 20% (the machine got loaded) with a steady 5% win: the paired interval
    sees the win, the unpaired one is swamped by the drift."""
    drift = [100.0, 120.0, 90.0, 110.0, 80.0]
    a = [d * (1 + e) for d, e in zip(drift, (0.004, -0.003, 0.002, -0.004, 0.001))]
    b = [d * 1.05 * (1 + e) for d, e in zip(drift, (-0.002, 0.003, 0.001, 0.004, -0.003))]
    assert v.verdict(ratio_interval(a, b, paired=True)) == v.FASTER
    assert v.verdict(ratio_interval(a, b)) == v.WITHIN_NOISE


def test_too_few_samples_give_no_interval_and_no_verdict():
    one = ratio_interval([100.0], [130.0], paired=True)
    assert one.ratio == pytest.approx(1.3) and not one.bounded and one.n == 1
    assert v.verdict(one) == v.NOT_SHOWN  # no noise to be within: nothing shown either way
    assert describe(one) == "1.30x, not shown: needs 2 rounds"
    assert (describe(ratio_interval([100.0, 101.0], [130.0]))
            == "1.29x, not shown: needs 2 samples of each")
    # a failed measurement (None, 0) drops its round; nothing measured is no verdict at all
    dropped = ratio_interval([100.0, None, 101.0, 99.0], [110.0, 200.0, 0.0, 109.0], paired=True)
    assert dropped.n == 2
    empty = ratio_interval([], [130.0])
    assert empty.ratio is None and v.verdict(empty) == v.NOT_MEASURED and describe(empty) == "n/a (not measured)"
    with pytest.raises(ValueError, match="one a and one b per round"):
        ratio_interval([1.0, 2.0], [1.0], paired=True)


def test_a_config_against_itself_never_gets_a_verdict():
    """Even when its interval excludes 1.0 (the launches were noisier than the rounds show)."""
    iv = ratio_interval([100.0, 101.0, 100.5, 99.8], [90.0, 90.5, 91.0, 90.2], paired=True)
    assert v.verdict(iv) == v.SLOWER
    assert v.verdict(iv, same_config=True) == v.SAME_CONFIG
    assert describe(iv, same_config=True) == "the same config"  # its launches paired with themselves: nothing
    text = v.describe_one_config(iv)  # two sets of its launches: the interval, as the noise between them
    assert text.startswith("the same config, its launches 0.901x apart (95% CI ") and "excludes 1.0" in text
    assert "slower" not in text and "within noise" not in text




def test_the_ratio_shown_is_the_centre_of_its_own_interval():
    """One estimator for the point and its interval: launches in two clusters put the ratio of the medians
    (1.30x) far from the geometric means' (about 1.1x); what is printed is the t interval's own centre."""
    noise = v.LaunchNoise(sd=0.05, df=8, configs=2, launches=10)
    a, b = [100.0, 100.0, 100.0, 140.0, 140.0], [130.0, 130.0, 130.0, 110.0, 110.0]
    iv = v.launch_interval(a, b, noise)
    assert statistics.median(b) / statistics.median(a) == pytest.approx(1.30)
    centre = math.sqrt(iv.lo * iv.hi)  # the t interval is symmetric on logs about its estimate
    assert iv.ratio == pytest.approx(centre) and abs(iv.ratio - 1.30) > 0.1
    text = describe(iv)
    assert text.startswith(f"{iv.ratio:.2f}x") and "1.30x" not in text
    assert v.estimate_text(iv) == "by the geometric means over launches"


# ---- over launches (issue 34): the unit of evidence is a launch -------------------------------------
def test_the_launch_noise_is_pooled_over_configs_launched_more_than_once():
    noise = v.pooled_noise([[100.0, 110.0], [50.0], [200.0, 190.0, 210.0]])
    logs = [[math.log(100), math.log(110)], [math.log(200), math.log(190), math.log(210)]]
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in logs)
    assert noise.df == 3 and noise.configs == 2 and noise.launches == 5  # the single launch adds nothing
    assert noise.sd == pytest.approx(math.sqrt(ss / 3))
    assert not noise.known and "a verdict needs 8" in noise.text()  # three degrees of freedom: not trusted yet
    six = v.pooled_noise([[100.0, 101.0, 99.0, 100.5], [50.0, 50.5, 49.5, 50.2]])
    assert six.df == 6 and six.known and six.text().startswith("launch noise +-0.")
    assert not v.pooled_noise([[1.0], [2.0]]).known
    assert v.pooled_noise([[1.0], [2.0]]).text() == "launch noise unknown (no config launched twice)"
    one_pair = v.pooled_noise([[100.0, 100.1]])  # one pair in one state looks like no noise: not trusted
    assert one_pair.df == 1 and not one_pair.known and "launch noise unknown yet" in one_pair.text()
    # a slope fitted besides the means (the box's drift, ``core.drift``) takes a degree of freedom
    fitted = v.pooled_noise([[100.0, 101.0, 99.0, 100.5], [50.0, 50.5, 49.5, 50.2]], fitted=1)
    assert fitted.df == 5 and fitted.sd == pytest.approx(six.sd * math.sqrt(6 / 5)) and not fitted.known


def test_a_config_launched_once_gets_the_studys_launch_noise_and_says_so():
    noise = v.LaunchNoise(sd=0.02, df=6, configs=3, launches=9)
    iv = v.launch_interval([100.0, 102.0, 98.0], [130.0], noise)
    half = v.t_quantile(0.975, 6) * 0.02 * math.sqrt(1 / 3 + 1)
    assert iv.ratio == pytest.approx(130.0 / math.exp(statistics.fmean(map(math.log, [100, 102, 98]))))
    assert iv.hi / iv.ratio == pytest.approx(math.exp(half)) and iv.launches == (3, 1)
    assert v.verdict(iv) == v.FASTER
    assert v.interval_text(iv).endswith(", 3 vs 1 launches (one launch: the study's launch noise +-2.0%)")
    both = v.launch_interval([100.0, 102.0], [130.0, 129.0], noise)
    assert v.interval_text(both).endswith(", 2 vs 2 launches, launch noise +-2.0%")
    assert v.launch_interval([100.0], [130.0], v.LaunchNoise()).bounded is False
    # no config launched twice: the noise unknown, so neither a verdict nor "within noise" (issue 48)
    unknown = v.launch_interval([100.0], [219.0], v.LaunchNoise())
    assert v.verdict(unknown) == v.NOT_SHOWN and "within noise" not in v.describe(unknown)
    assert v.describe(unknown) == "2.19x, not shown: launch noise unknown (no config launched twice)"
    assert v.interval_text(unknown) == "no interval: launch noise unknown (no config launched twice)"


def test_a_comparison_judged_again_and_again_is_held_to_more_confidence():
    noise = v.LaunchNoise(sd=0.03, df=10, configs=2, launches=12)
    once = v.launch_interval([100.0] * 3, [106.0] * 3, noise)
    four = v.launch_interval([100.0] * 3, [106.0] * 3, noise, looks=4)
    assert four.confidence == pytest.approx(0.9875) and four.lo < once.lo and four.hi > once.hi
    assert v.interval_text(four).startswith("98.75% CI ")


def test_ranks_keep_launches_of_one_state_from_looking_noiseless():
    """Launches fast or slow for their whole life: four of one config all slow and four of another all
    fast agree so well that a t interval is sure; by ranks four against four cannot say it at 98.75%,
    five against five can when every launch of one is above every launch of the other."""
    noise = v.pooled_noise([[65.0, 65.2, 64.9, 65.1], [128.0, 128.4, 127.8, 128.1]])
    slow, fast = [65.0, 65.2, 64.9, 65.1], [128.0, 128.4, 127.8, 128.1]
    assert v.verdict(v.launch_interval(slow, fast, noise, looks=4)) == v.FASTER
    # the ranks hold where they can bound an interval, and leave it to t where they cannot
    assert v.verdict(v.launch_interval(slow, fast, noise, looks=4, robust=True)) == v.FASTER
    assert v.rank_shift_interval([0.0, 0.1, 0.2, 0.3, 0.4], [1.0, 1.1, 1.2, 1.3, 1.4], 0.9875) == \
        pytest.approx((0.6, 1.4))  # the extreme pairwise differences: P(U = 0) = 1/252 <= 0.625%
    assert v.rank_shift_interval([0.0] * 4, [1.0] * 4, 0.9875) is None  # 1/70 > 0.625%


def test_launches_of_a_machine_that_changed_are_not_averaged_into_a_verdict():
    """Four launches of the best at 1.5x the baseline, then three fresh ones (``compare``) on a machine
    where it is no faster: the t interval over the pooled noise still excludes 1.0, the ranks do not."""
    base = [66.2, 66.7, 66.6, 65.3, 66.6, 66.6, 66.3]
    best = [100.2, 98.9, 99.9, 99.9, 66.5, 66.5, 66.5]
    noise = v.pooled_noise([base, best])
    assert v.verdict(v.launch_interval(base, best, noise)) == v.FASTER
    robust = v.launch_interval(base, best, noise, robust=True)
    assert v.verdict(robust) == v.WITHIN_NOISE and robust.lo < 1.0 < robust.hi
    # many launches: the ranks' normal approximation, as wide as the exact count at 20 x 20
    xa, xb = [0.01 * i for i in range(20)], [0.05 + 0.01 * i for i in range(21)]
    lo, hi = v.rank_shift_interval(xa, xb, 0.95)
    assert lo < 0.05 < hi and (lo, hi) == pytest.approx(v.rank_shift_interval(xa, xb[:20], 0.95), abs=0.011)


def test_where_a_fresh_launch_should_measure():
    noise = v.LaunchNoise(sd=0.05, df=8, configs=3, launches=11)
    lo, hi = v.launch_range([100.0, 104.0, 98.0], noise)
    centre = math.exp(statistics.fmean(map(math.log, [100, 104, 98])))
    half = v.t_quantile(0.975, 8) * 0.05 * math.sqrt(1 + 1 / 3)
    assert lo == pytest.approx(centre * math.exp(-half)) and hi == pytest.approx(centre * math.exp(half))
    assert v.launch_range([100.0], v.LaunchNoise()) is None


# ---- over rounds (issue 48): a race reads its rounds as pairs ----------------------------------------
def test_rounds_of_a_box_that_drifts_are_read_as_pairs():
    """A box 2% slower every launch, two configs 6% apart raced in rounds A B | B A | ...: over launches
    the drift swells the spread past the difference; per round it cancels, and the faster one is faster
    beyond noise at the race's confidence."""
    speed = [0.98 ** i for i in range(8)]
    a = [100.0 * speed[2 * r + (r % 2)] for r in range(4)]  # A first in even rounds, second in odd ones
    b = [106.0 * speed[2 * r + 1 - (r % 2)] for r in range(4)]
    unpaired = v.launch_interval(a, b, v.pooled_noise([a, b]), looks=1)
    assert v.verdict(unpaired) != v.FASTER  # the drift is the launches' noise: no verdict
    paired = v.round_interval(a, b)
    assert v.verdict(paired) == v.FASTER and paired.n == 4 and paired.lo < 1.06 < paired.hi
    assert paired.ratio == pytest.approx(math.sqrt(paired.lo * paired.hi))  # one estimator: its centre
    assert v.interval_text(paired).endswith(", 4 rounds paired")
    assert v.estimate_text(paired) == "by the geometric mean of the rounds' paired ratios"
    # held to the race's looks, and none before ``MIN_ROUNDS`` rounds measured both (a failed launch drops its round)
    assert v.round_interval(a, b, looks=4).confidence == pytest.approx(0.9875)
    three = v.round_interval(a[:3] + [None], b)
    assert not three.bounded and v.verdict(three) == v.NOT_SHOWN
    assert v.describe(three).endswith("not shown: 3 round(s) measured both; a verdict between finalists needs 4")


def test_signed_ranks_keep_rounds_of_one_state_from_looking_noiseless():
    """Eight rounds: seven say 5%, one launch fell 40% slow for its whole life. The t interval on the
    rounds' log ratios is swamped or sure by chance; the signed ranks (Walsh averages) bound it where
    eight rounds can, and the union holds both."""
    diffs = [0.05, 0.051, 0.049, 0.05, 0.052, 0.048, 0.05, -0.45]
    lo, hi = v.signed_rank_interval(diffs, 0.95)
    assert lo < 0.05 < hi
    assert v.signed_rank_interval(diffs[:5], 0.95) is None  # five rounds: 2/32 > 5%, no interval by ranks
    assert v.signed_rank_interval([0.1] * 6, 0.95) == pytest.approx((0.1, 0.1))  # 2/64 <= 5%
    # the exact distribution: every sign pattern of ranks 1..3 counted once
    assert v._signed_rank_counts(3) == [1, 1, 1, 2, 1, 1, 1]
