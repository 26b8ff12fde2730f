"""Whether a speed ratio is beyond noise: the one rule every verdict the tool prints follows.

A ratio of two measured speeds is only called "faster" or "slower" when its confidence
interval lies entirely on one side of 1.0; otherwise it is "within noise", and the interval
is shown so the reader sees how much a verdict would have needed. Where there is no interval
(the launch noise unknown: no config launched twice; too few rounds) nothing is shown either
way: the verdict is "not shown", with the reason, never "within noise" of a noise nobody
measured. Machines are noisy (a
loaded CPU box moves 30% between launches, an idle H200 ~1%), so the interval is computed
from the samples themselves, never from a fixed threshold:

- **paired** (``compare``: every round relaunches each config once, in alternating order):
  a Student-t interval on the per-round log ratios. Pairing removes what a round shares
  (drift of the machine over the minutes of a round); what is left is the noise between
  launches.
- **unpaired** (samples of one launch against another's: the nodes' baseline repeats):
  a Welch t-interval on the difference of the mean log samples (unequal variances,
  Welch-Satterthwaite degrees of freedom). Repeats of one launch miss the variation between
  launches, so this interval is the narrower, weaker claim.
- **over launches** (a study's verdicts: ``launch_interval``): the unit of evidence is a launch,
  each launch's figure one value (its median). The launch noise, ``LaunchNoise``, is the pooled
  standard deviation of the logs of the figures of every config launched more than once
  (``pooled_noise``: each config's launches about their own mean, the squares summed over configs,
  divided by the launches less one per config); the interval of b/a is Student's t with that sd and
  its degrees of freedom, half-width ``t * sd * sqrt(1/na + 1/nb)``. A config measured on one launch
  gets the study's launch noise in its interval (the text says so); while no config was launched
  twice there is no interval and so no verdict. ``robust`` (the study's verdicts): the interval is
  also held to the distribution-free one of the launches' ranks (Hodges-Lehmann, exact Mann-Whitney:
  ``rank_shift_interval``), the union of the two, wherever the launches are enough to bound it:
  launches that fall in two states (fast or slow for their whole life, or a machine that changed
  between the study and ``compare``) pool into a noise the t interval underweights, the ranks do
  not. ``looks``: a comparison judged again after every
  round of a race is judged at 1 - (1 - confidence) / looks (Bonferroni), so that looking again and
  again is no road to a verdict. ``shift_var``: where the box drifted (``core.drift``) the launches
  are read at one time, and the slope's own uncertainty adds to the interval.
  ``launch_range`` is where a fresh launch of a config should measure
  (a prediction interval: ``t * sd * sqrt(1 + 1/n)`` about the geometric mean of its launches).
- **over rounds of launches** (a race's finalists: ``round_interval``): a blocked design, each round
  launching every finalist once, so the two launches of a round are a pair and what the round
  shares (the box drifting over the race, a neighbour's load) cancels in their ratio. A Student-t
  interval on the per-round log ratios, held to the signed ranks' (Wilcoxon, on the Walsh averages)
  where the rounds can bound one, at the race's looks; none before ``MIN_ROUNDS`` rounds measured
  both. The rounds stand alone: the study's launch noise, pooled in, let a race whose relaunches had
  all fallen in one state (fast or slow for their whole life) crown the slower config in replays.

All work on logs, so the interval of b/a is the exponent of an interval of a difference,
and **the ratio shown is the estimate the interval is built on** (the geometric mean ratio at the
t interval's centre): a point and its interval always come from one estimator, never a ratio of
medians beside an interval of geometric means. With fewer than two pairs (or two samples on
either side, or the launch noise unknown) there is no interval: the verdict is "not shown" and the
text says why (``RatioInterval.why``). A config compared with itself never gets a verdict: any difference between two
launches of one config is noise by definition (``same_config``). Its launches paired with themselves
(the plan's best against itself) say nothing: "the same config", no interval; two sets of its launches
(``compare`` relaunching the baseline as the best) show their interval as a measure of that noise
(``describe_one_config``).

Student-t quantiles are computed here (no scipy): the t distribution's CDF through the
regularised incomplete beta function (continued fraction), inverted by bisection; exact to
~1e-9 for any degrees of freedom, fractional ones included (Welch's). The tests check it
against published table values and an independent numerical integration.

    ratio_interval(a, b, paired=..., confidence=0.95) -> RatioInterval   (b relative to a)
    pooled_noise(groups) -> LaunchNoise           the launch noise of groups of launch figures
    launch_interval(a, b, noise, looks=1)  -> RatioInterval   (b relative to a, over launches)
    round_interval(a, b, looks=1)         -> RatioInterval   (b relative to a, paired by round)
    launch_range(values, noise)           -> (lo, hi) where a fresh launch should measure
    verdict(interval, same_config=False)  -> FASTER | SLOWER | WITHIN_NOISE | NOT_SHOWN | SAME_CONFIG | NOT_MEASURED
    describe(interval, same_config=False) -> "1.31x faster (95% CI 1.22-1.41x)"; "the same config"
    describe_one_config(interval)         -> "the same config, its launches 0.96x apart (95% CI ...)"
    estimate_text(interval)               -> "by the geometric means over launches": what the ratio is
    t_quantile(p, df)                     -> the p-quantile of Student's t with df degrees of freedom
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

FASTER = "faster"
SLOWER = "slower"
WITHIN_NOISE = "within noise"
NOT_SHOWN = "not shown"  # no interval: the noise it would be judged by is unknown (``RatioInterval.why``)
SAME_CONFIG = "same config"
SAME_CONFIG_TEXT = "the same config"  # what ``describe`` says of a config compared with itself
NOT_MEASURED = "not measured"

DEFAULT_CONFIDENCE = 0.95
# Degrees of freedom the launch noise needs before it is trusted. Launches can fall in two states
# (fast and slow) for their whole life, and a pair of launches in the same state says the noise is
# nil: with even odds, every degree of freedom halves the chance that all of them did. At six (1 in
# 64) a server fast or slow by 35% crowned the slower of two configs 5% apart beyond noise in 1 of
# 200 replayed studies, at four in 3 (docs/benchmarks.md, "Racing the finalists"); the relaunches
# during the search provide them (``study.relaunch``), ~6 launches of a night.
MIN_NOISE_DF = 6
# Rounds two finalists of a race need, both measured, before their paired interval is trusted: a
# launch can be fast or slow for its whole life, and four rounds whose every pair fell the same way
# (1 in 128 for two configs alike at even odds) is the race's risk, as four launches each were before.
MIN_ROUNDS = 4


@dataclass(frozen=True)
class RatioInterval:
    """b relative to a: ``ratio`` (geometric mean ratio, None when a side has no sample) and
    its confidence interval ``lo``-``hi`` (both None when there are too few samples: unbounded).
    ``n`` is the number of pairs (paired) or the smaller side's sample count (unpaired)."""

    ratio: float | None
    lo: float | None
    hi: float | None
    n: int
    paired: bool
    confidence: float = DEFAULT_CONFIDENCE
    launches: tuple[int, int] | None = None  # over launches: how many of a and of b (``launch_interval``)
    noise: LaunchNoise | None = None  # over launches: the launch noise it carries
    why: str | None = None  # unbounded: why there is no interval (the words every reader prints)
    drift_removed: bool = False  # over launches: read at one time, the box's drift removed (``core.drift``)

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"ratio": self.ratio, "lo": self.lo, "hi": self.hi, "n": self.n,
                               "paired": self.paired, "confidence": self.confidence}
        if self.launches is not None:
            out["launches"] = list(self.launches)
            out["launch_noise"] = self.noise.to_dict() if self.noise is not None else None
        if not self.bounded and self.ratio is not None:
            out["why"] = why_unbounded(self)
        if self.drift_removed:
            out["drift_removed"] = True
        return out


@dataclass(frozen=True)
class LaunchNoise:
    """How much launches of one config differ (module docstring, "over launches"): ``sd`` of the
    logs of their figures, pooled with ``df`` degrees of freedom over ``configs`` configs launched
    more than once (``launches`` launches of them). ``df`` 0: not measured yet."""

    sd: float | None = None
    df: int = 0
    configs: int = 0
    launches: int = 0

    @property
    def known(self) -> bool:
        return self.df >= MIN_NOISE_DF and self.sd is not None

    @property
    def relative(self) -> float | None:
        """The sd as a share of a figure (exp(sd) - 1): "+-4.1%" is 0.041."""
        return math.expm1(self.sd) if self.sd is not None else None

    def text(self) -> str:
        """'launch noise +-4.1% (3 configs launched more than once, 8 launches)', or why unknown."""
        if not self.known:
            return ("launch noise unknown (no config launched twice)" if self.configs == 0 else
                    f"launch noise unknown yet ({self.launches} launches of {self.configs} config(s) launched "
                    f"more than once; a verdict needs {MIN_NOISE_DF + self.launches - self.df})")
        many = "config launched more than once" if self.configs == 1 else "configs launched more than once"
        return f"launch noise +-{100 * self.relative:.1f}% ({self.configs} {many}, {self.launches} launches)"  # type: ignore[operator]

    def to_dict(self) -> dict:
        return {"sd": self.sd, "relative": self.relative, "df": self.df, "configs": self.configs,
                "launches": self.launches}


# ---- Student's t ------------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, may be fractional) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, not {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (0 < p < 1)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, not {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df == 1:  # Cauchy: closed form
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    if df > 1e7:
        return statistics.NormalDist().inv_cdf(p)
    lo, hi = 0.0, max(2.0, statistics.NormalDist().inv_cdf(p) * 2)
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# ---- intervals ---------------------------------------------------------------------------------------
def _positive(values: Iterable[float | None]) -> list[float]:
    out = []
    for v in values:
        try:
            x = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if x > 0 and math.isfinite(x):
            out.append(x)
    return out


def ratio_interval(a_samples: Sequence[float | None], b_samples: Sequence[float | None], *, paired: bool = False,
                   confidence: float = DEFAULT_CONFIDENCE) -> RatioInterval:
    """The ratio b/a with its ``confidence`` interval.

    ``paired``: ``a_samples[i]`` and ``b_samples[i]`` were measured in the same round; a
    round where either is missing (None, 0: a failed measurement) is dropped. Unpaired: each
    side's positive samples, Welch's interval on their logs.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    q = 0.5 + confidence / 2.0
    if paired:
        if len(a_samples) != len(b_samples):
            raise ValueError(f"paired samples need one a and one b per round, "
                             f"got {len(a_samples)} and {len(b_samples)}")
        pairs = [(px[0], py[0]) for x, y in zip(a_samples, b_samples)
                 if (px := _positive([x])) and (py := _positive([y]))]
        diffs = [math.log(y) - math.log(x) for x, y in pairs]
        n = len(diffs)
        if n == 0:
            return RatioInterval(None, None, None, 0, True, confidence)
        centre = statistics.fmean(diffs)
        if n < 2:
            return RatioInterval(math.exp(centre), None, None, n, True, confidence)
        half = t_quantile(q, n - 1) * statistics.stdev(diffs) / math.sqrt(n)
        return RatioInterval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, True, confidence)
    xa, xb = [math.log(v) for v in _positive(a_samples)], [math.log(v) for v in _positive(b_samples)]
    n = min(len(xa), len(xb))
    if n == 0:
        return RatioInterval(None, None, None, 0, False, confidence)
    centre = statistics.fmean(xb) - statistics.fmean(xa)
    if n < 2:
        return RatioInterval(math.exp(centre), None, None, n, False, confidence)
    va, vb = statistics.variance(xa) / len(xa), statistics.variance(xb) / len(xb)
    se = math.sqrt(va + vb)
    if se == 0.0:  # identical samples on both sides: no spread to speak of
        return RatioInterval(math.exp(centre), math.exp(centre), math.exp(centre), n, False, confidence)
    df = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1))
    half = t_quantile(q, df) * se
    return RatioInterval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, False, confidence)


# ---- over launches ---------------------------------------------------------------------------------
def pooled_noise(groups: Iterable[Sequence[float | None]], *, fitted: int = 0) -> LaunchNoise:
    """The launch noise of ``groups`` (each: one config's launch figures): a group of one launch
    says nothing about it and is left out; none of two or more: not measured (df 0). ``fitted``:
    parameters fitted to the figures besides each group's mean (the drift's slope, ``core.drift``),
    each a degree of freedom less."""
    squares, df, configs, launches = 0.0, 0, 0, 0
    for group in groups:
        logs = [math.log(v) for v in _positive(group)]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        configs += 1
        launches += len(logs)
    df -= fitted if df else 0
    if df <= 0:
        return LaunchNoise(None, 0, configs, launches) if configs else LaunchNoise()
    return LaunchNoise(math.sqrt(squares / df), df, configs, launches)


def looked_confidence(confidence: float, looks: int) -> float:
    """The confidence a comparison judged ``looks`` times is held to (Bonferroni)."""
    return 1.0 - (1.0 - confidence) / max(1, int(looks))


def launch_interval(a_values: Sequence[float | None], b_values: Sequence[float | None], noise: LaunchNoise, *,
                    looks: int = 1, robust: bool = False, shift_var: float = 0.0, drift_removed: bool = False,
                    confidence: float = DEFAULT_CONFIDENCE) -> RatioInterval:
    """b/a over launches (module docstring): ``a_values``/``b_values`` one figure per launch; the
    ratio is of their geometric means, the centre of the t interval; unbounded while ``noise`` is
    unknown. ``robust``: also held to the distribution-free interval of the launches (the union of
    the two) wherever the launches are enough to bound one. ``shift_var``: the variance the figures'
    reading at one time adds (the drift's slope, ``core.drift``; ``drift_removed`` says so)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    conf = looked_confidence(confidence, looks)
    xa, xb = [math.log(v) for v in _positive(a_values)], [math.log(v) for v in _positive(b_values)]
    counts = (len(xa), len(xb))
    n = min(counts)
    if n == 0:
        return RatioInterval(None, None, None, 0, False, conf, counts, noise)
    centre = statistics.fmean(xb) - statistics.fmean(xa)
    if not noise.known:
        return RatioInterval(math.exp(centre), None, None, n, False, conf, counts, noise, why=noise.text(),
                             drift_removed=drift_removed)
    se = math.sqrt(noise.sd ** 2 * (1.0 / len(xa) + 1.0 / len(xb)) + max(0.0, shift_var))  # type: ignore[operator]
    half = t_quantile(0.5 + conf / 2.0, noise.df) * se
    lo, hi = centre - half, centre + half
    ranks = rank_shift_interval(xa, xb, conf) if robust else None
    if ranks is not None:
        lo, hi = min(lo, ranks[0]), max(hi, ranks[1])
    return RatioInterval(math.exp(centre), math.exp(lo), math.exp(hi), n, False, conf, counts, noise,
                         drift_removed=drift_removed)


def round_interval(a_values: Sequence[float | None], b_values: Sequence[float | None], *, looks: int = 1,
                   drift_removed: bool = False, confidence: float = DEFAULT_CONFIDENCE,
                   noise: LaunchNoise | None = None) -> RatioInterval:
    """b/a over rounds of launches (module docstring, "over rounds"): ``a_values[i]`` and
    ``b_values[i]`` launched in round i (a round where either failed, None or 0, is dropped). The
    ratio is the geometric mean of the rounds' ratios, the centre of the t interval on their logs at
    the looked confidence, which is held to the signed ranks' interval wherever the rounds can bound
    one; unbounded under ``MIN_ROUNDS`` rounds. A round's ratio carries two launches' noise: with the
    study's launch ``noise`` known, the rounds' variance is pooled with twice its variance (degrees of
    freedom added), so a verdict stands beyond the noise measured launch to launch, not only beyond
    how alike a few rounds happened to be (four rounds of launches fast or slow by 35% at random named
    the slower of two configs 2x faster with an interval of +-1%; issue 49's replay)."""
    if len(a_values) != len(b_values):
        raise ValueError(f"paired launches need one a and one b per round, got {len(a_values)} and {len(b_values)}")
    conf = looked_confidence(confidence, looks)
    diffs = [math.log(py[0]) - math.log(px[0]) for x, y in zip(a_values, b_values)
             if (px := _positive([x])) and (py := _positive([y]))]
    n = len(diffs)
    if n == 0:
        return RatioInterval(None, None, None, 0, True, conf, (0, 0), drift_removed=drift_removed)
    centre = statistics.fmean(diffs)
    if n < MIN_ROUNDS:
        return RatioInterval(math.exp(centre), None, None, n, True, conf, (n, n),
                             why=f"{n} round(s) measured both; a verdict between finalists needs {MIN_ROUNDS}",
                             drift_removed=drift_removed)
    var, df = statistics.variance(diffs), n - 1
    if noise is not None and noise.known and noise.sd is not None:
        var = (df * var + noise.df * 2.0 * noise.sd ** 2) / (df + noise.df)
        df += noise.df
    half = t_quantile(0.5 + conf / 2.0, df) * math.sqrt(var / n)
    lo, hi = centre - half, centre + half
    ranks = signed_rank_interval(diffs, conf)
    if ranks is not None:
        lo, hi = min(lo, ranks[0]), max(hi, ranks[1])
    return RatioInterval(math.exp(centre), math.exp(lo), math.exp(hi), n, True, conf, (n, n),
                         drift_removed=drift_removed)


def _signed_rank_counts(n: int) -> list[int]:
    """How many of the 2**n sign patterns give each value of the Wilcoxon signed-rank sum (0 .. n(n+1)/2)."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for w, c in enumerate(counts):
            grown[w + rank] += c
        counts = grown
    return counts


def signed_rank_interval(diffs: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """The distribution-free ``confidence`` interval of the centre of paired differences (Hodges-Lehmann
    on the Walsh averages): the k-th smallest and largest of the pairs' means (i <= j), k from the exact
    signed-rank distribution (past 40 rounds its normal approximation); None when so few rounds cannot
    bound it at that confidence."""
    n = len(diffs)
    if n == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    total_pairs = n * (n + 1) // 2
    if n > 40:
        k = _normal_rank(total_pairs / 2.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0), tail)
    else:
        k = _exact_rank(_signed_rank_counts(n), tail)
    if k == 0:
        return None
    walsh = sorted((diffs[i] + diffs[j]) / 2.0 for i in range(n) for j in range(i, n))
    return walsh[k - 1], walsh[len(walsh) - k]


def _exact_rank(counts: Sequence[int], tail: float) -> int:
    """The k of a rank interval from a statistic's exact distribution (``counts``: how many
    orderings give each value): the most values whose cumulative share stays within ``tail``."""
    total, k, cum = sum(counts), 0, 0
    for c in counts:
        cum += c
        if cum / total > tail:
            break
        k += 1
    return k


def _normal_rank(mean: float, sd: float, tail: float) -> int:
    """The same k from the statistic's normal approximation, with a continuity correction."""
    return max(0, math.floor(mean - statistics.NormalDist().inv_cdf(1.0 - tail) * sd - 0.5) + 1)


def _mann_whitney_counts(n: int, m: int) -> list[int]:
    """How many of the C(n+m, n) rankings give each value of the Mann-Whitney U (0 .. n*m)."""
    # f[i][j][u]: rankings of i and j values with U = u; built by the last value's group
    table = {(0, 0): [1]}
    for i in range(n + 1):
        for j in range(m + 1):
            if (i, j) == (0, 0):
                continue
            out = [0] * (i * j + 1)
            if i > 0:  # the largest value is one of a's: it is above all j of b's
                for u, c in enumerate(table[(i - 1, j)]):
                    out[u + j] += c
            if j > 0:
                for u, c in enumerate(table[(i, j - 1)]):
                    out[u] += c
            table[(i, j)] = out
    return table[(n, m)]


def rank_shift_interval(xa: Sequence[float], xb: Sequence[float], confidence: float) -> tuple[float, float] | None:
    """The distribution-free ``confidence`` interval of the shift b - a (Hodges-Lehmann): the
    k-th smallest and largest of the pairwise differences, k from the exact Mann-Whitney
    distribution (past 20 x 20 launches its normal approximation, with a continuity correction);
    None when so few values cannot bound it at that confidence."""
    n, m = len(xa), len(xb)
    if n == 0 or m == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    if n * m > 400:
        k = _normal_rank(n * m / 2.0, math.sqrt(n * m * (n + m + 1) / 12.0), tail)
    else:
        k = _exact_rank(_mann_whitney_counts(n, m), tail)
    if k == 0:
        return None
    diffs = sorted(b - a for a in xa for b in xb)
    return diffs[k - 1], diffs[len(diffs) - k]


def launch_range(values: Sequence[float | None], noise: LaunchNoise,
                 confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float] | None:
    """Where a fresh launch of a config measured on ``values`` (one figure per launch) should
    measure with ``confidence``: a prediction interval about their geometric mean (module
    docstring); None without a launch or while the noise is unknown."""
    logs = [math.log(v) for v in _positive(values)]
    if not logs or not noise.known:
        return None
    centre = statistics.fmean(logs)
    half = t_quantile(0.5 + confidence / 2.0, noise.df) * noise.sd * math.sqrt(1.0 + 1.0 / len(logs))  # type: ignore[operator]
    return math.exp(centre - half), math.exp(centre + half)


# ---- verdicts ------------------------------------------------------------------------------------------
def verdict(interval: RatioInterval, *, same_config: bool = False) -> str:
    """FASTER / SLOWER only when the whole interval is above / below 1.0, WITHIN_NOISE when it
    holds 1.0, NOT_SHOWN when there is no interval (the noise unknown: nothing is shown either
    way); a config against itself is SAME_CONFIG whatever the numbers say; no sample on a side is
    NOT_MEASURED."""
    if same_config:
        return SAME_CONFIG
    if interval.ratio is None:
        return NOT_MEASURED
    if not interval.bounded:
        return NOT_SHOWN
    if interval.lo > 1.0:  # type: ignore[operator]
        return FASTER
    if interval.hi < 1.0:  # type: ignore[operator]
        return SLOWER
    return WITHIN_NOISE


def why_unbounded(interval: RatioInterval) -> str:
    """Why ``interval`` has no bounds, in the words every reader prints: 'launch noise unknown (no
    config launched twice)', 'needs 2 rounds', '2 round(s) measured both; ...'."""
    if interval.why:
        return interval.why
    if interval.launches is not None:
        noise = interval.noise or LaunchNoise()
        return noise.text() if not noise.known else "a side was never launched"
    return "needs 2 rounds" if interval.paired else "needs 2 samples of each"


def _digits(interval: RatioInterval) -> int:
    """Two decimals, three when the interval is narrower than 0.05 (so "0.994x slower
    (95% CI 0.990-0.998x)" does not read as "0.99x slower (95% CI 0.99-1.00x)")."""
    if interval.bounded and interval.hi - interval.lo < 0.05:  # type: ignore[operator]
        return 3
    return 2


def interval_text(interval: RatioInterval) -> str:
    """'95% CI 1.22-1.41x', or why there is none ('no interval: needs 2 rounds'). Over launches:
    '95% CI 1.22-1.41x, 3 vs 4 launches, launch noise +-4.1%', and where a side was launched once,
    '..., 1 vs 3 launches (one launch: the study's launch noise +-4.1%)'; over a race's rounds,
    '98.75% CI 1.02-1.09x, 4 rounds paired'."""
    if not interval.bounded:
        return f"no interval: {why_unbounded(interval)}"
    d = _digits(interval)
    head = f"{confidence_text(interval.confidence)} CI {interval.lo:.{d}f}-{interval.hi:.{d}f}x"
    if interval.launches is None:
        return head
    drift = ", the box's drift removed" if interval.drift_removed else ""
    if interval.paired:
        return f"{head}, {interval.n} rounds paired{drift}"
    noise = interval.noise or LaunchNoise()
    na, nb = interval.launches
    head = f"{head}, {na} vs {nb} launches"
    spread = f"launch noise +-{100 * (noise.relative or 0.0):.1f}%"
    if min(na, nb) == 1:
        return f"{head} (one launch: the study's {spread}){drift}"
    return f"{head}, {spread}{drift}"


def confidence_text(confidence: float) -> str:
    """'95%', '98.75%', '98.3%' (a race's, 1 - 5% / looks): at most four digits."""
    return f"{100 * confidence:.4g}%"


def ratio_text(interval: RatioInterval) -> str:
    """'1.31x': the interval's own estimate, with three decimals where the interval is narrow."""
    return f"{interval.ratio:.{_digits(interval)}f}x" if interval.ratio is not None else "n/a"


def estimate_text(interval: RatioInterval) -> str:
    """What the ratio shown estimates, the centre of its interval: 'by the geometric means over
    launches', 'by the geometric mean of the rounds' paired ratios', 'by the geometric means of the
    samples'."""
    if interval.paired:
        return "by the geometric mean of the rounds' paired ratios"
    return "by the geometric means over launches" if interval.launches is not None else \
        "by the geometric means of the samples"


def describe(interval: RatioInterval, *, same_config: bool = False, words: tuple[str, str] = (FASTER, SLOWER)) -> str:
    """The ratio, its verdict and its interval in one phrase, the ratio the interval's own estimate:

    "1.31x faster (95% CI 1.22-1.41x)", "0.80x slower (95% CI 0.75-0.85x)",
    "0.96x, within noise (95% CI 0.81-1.14x)",
    "2.19x, not shown: launch noise unknown (no config launched twice)"; a config compared with itself
    (``same_config``: the plan's best against itself, one config's launches on both sides) is "the
    same config", with no verdict words and no interval, which would pair its launches with themselves.
    ``words``: what faster and slower are called ("lower", "higher" for a latency: ``core.objectives``).
    """
    word = verdict(interval, same_config=same_config)
    if word == NOT_MEASURED:
        return "n/a (not measured)"
    ratio = ratio_text(interval)
    if word in (FASTER, SLOWER):
        return f"{ratio} {words[0] if word == FASTER else words[1]} ({interval_text(interval)})"
    if word == NOT_SHOWN:
        return f"{ratio}, {NOT_SHOWN}: {why_unbounded(interval)}"
    if word == SAME_CONFIG:  # no verdict and no interval: a config's launches paired with themselves
        return SAME_CONFIG_TEXT
    return f"{ratio}, within noise ({interval_text(interval)})"


def describe_one_config(interval: RatioInterval) -> str:
    """Two sets of launches of one config (``compare`` relaunching the baseline as the best too): no
    verdict, the interval the measure of how much its launches differ: "the same config, its launches
    0.96x apart (95% CI 0.81-1.14x)", with a note where that excludes 1.0; "the same config" where
    there is no interval (one round)."""
    if interval.ratio is None:
        return "n/a (not measured)"
    if not interval.bounded:
        return SAME_CONFIG_TEXT
    extra = ""
    if not interval.lo <= 1.0 <= interval.hi:  # type: ignore[operator]
        extra = ", which excludes 1.0: launches of one config differ by more than this interval says"
    return f"{SAME_CONFIG_TEXT}, its launches {ratio_text(interval)} apart ({interval_text(interval)}{extra})"
