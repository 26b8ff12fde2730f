"""Whether a speed ratio is beyond noise: the one rule every verdict the tool prints follows.

A ratio of two measured speeds is only called "faster" or "slower" when its confidence
interval lies entirely on one side of 1.0; otherwise it is "within noise", and the interval
is shown so the reader sees how much a verdict would have needed. Machines are noisy (a
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
  again is no road to a verdict, and ``raced`` finalists get no interval until their ranks can bound
  one. ``launch_range`` is where a fresh launch of a config should measure
  (a prediction interval: ``t * sd * sqrt(1 + 1/n)`` about the geometric mean of its launches).

Both work on logs, so the interval of b/a is the exponent of an interval of a difference,
and the ratio shown is the geometric mean ratio at its centre. With fewer than two pairs (or
two samples on either side) there is no interval: the verdict is "within noise" and the text
says why. A config compared with itself never gets a verdict: any difference between two
launches of one config is noise by definition (``same_config``), and its interval is shown
as a measure of that noise.

Student-t quantiles are computed here (no scipy): the t distribution's CDF through the
regularised incomplete beta function (continued fraction), inverted by bisection; exact to
~1e-9 for any degrees of freedom, fractional ones included (Welch's). The tests check it
against published table values and an independent numerical integration.

    ratio_interval(a, b, paired=..., confidence=0.95) -> RatioInterval   (b relative to a)
    pooled_noise(groups) -> LaunchNoise           the launch noise of groups of launch figures
    launch_interval(a, b, noise, looks=1)  -> RatioInterval   (b relative to a, over launches)
    launch_range(values, noise)           -> (lo, hi) where a fresh launch should measure
    verdict(interval, same_config=False)  -> FASTER | SLOWER | WITHIN_NOISE | SAME_CONFIG | NOT_MEASURED
    describe(interval, same_config=False) -> "1.31x faster (95% CI 1.22-1.41x)"
    median_ratio_text(interval, medians)  -> "1.30x by medians (1.13x by geometric means)" where it must
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
SAME_CONFIG = "same config"
NOT_MEASURED = "not measured"

DEFAULT_CONFIDENCE = 0.95
# Degrees of freedom the launch noise needs before it is trusted. Launches can fall in two states
# (fast and slow) for their whole life, and a pair of launches in the same state says the noise is
# nil: with even odds, every degree of freedom halves the chance that all of them did. At six (1 in
# 64) a server fast or slow by 35% crowned the slower of two configs 5% apart beyond noise in 1 of
# 200 replayed studies, at four in 3 (docs/benchmarks.md, "Racing the finalists"); the relaunches
# during the search provide them (``study.relaunch``), ~6 launches of a night.
MIN_NOISE_DF = 6


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

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"ratio": self.ratio, "lo": self.lo, "hi": self.hi, "n": self.n,
                               "paired": self.paired, "confidence": self.confidence}
        if self.launches is not None:
            out["launches"] = list(self.launches)
            out["launch_noise"] = self.noise.to_dict() if self.noise is not None else None
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
            return ("launch noise not measured yet (no config launched twice)" if self.df == 0 else
                    f"launch noise not measured well enough yet ({self.launches} launches of {self.configs} "
                    f"config(s) launched more than once; a verdict needs {self.configs + MIN_NOISE_DF})")
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
def pooled_noise(groups: Iterable[Sequence[float | None]]) -> LaunchNoise:
    """The launch noise of ``groups`` (each: one config's launch figures): a group of one launch
    says nothing about it and is left out; none of two or more: not measured (df 0)."""
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
    if df == 0:
        return LaunchNoise()
    return LaunchNoise(math.sqrt(squares / df), df, configs, launches)


def looked_confidence(confidence: float, looks: int) -> float:
    """The confidence a comparison judged ``looks`` times is held to (Bonferroni)."""
    return 1.0 - (1.0 - confidence) / max(1, int(looks))


def launch_interval(a_values: Sequence[float | None], b_values: Sequence[float | None], noise: LaunchNoise, *,
                    looks: int = 1, robust: bool = False, raced: bool = False,
                    confidence: float = DEFAULT_CONFIDENCE) -> RatioInterval:
    """b/a over launches (module docstring): ``a_values``/``b_values`` one figure per launch; the
    ratio is of their geometric means; unbounded while ``noise`` is unknown. ``robust``: also
    held to the distribution-free interval of the launches (the union of the two) wherever the
    launches are enough to bound one; ``raced`` (two finalists of a race): where they are not,
    there is no interval."""
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
        return RatioInterval(math.exp(centre), None, None, n, False, conf, counts, noise)
    half = t_quantile(0.5 + conf / 2.0, noise.df) * noise.sd * math.sqrt(1.0 / len(xa) + 1.0 / len(xb))  # type: ignore[operator]
    lo, hi = centre - half, centre + half
    ranks = rank_shift_interval(xa, xb, conf) if robust or raced else None
    if ranks is not None:
        lo, hi = min(lo, ranks[0]), max(hi, ranks[1])
    elif raced:
        return RatioInterval(math.exp(centre), None, None, n, False, conf, counts, noise)
    return RatioInterval(math.exp(centre), math.exp(lo), math.exp(hi), n, False, conf, counts, noise)


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
        sd = math.sqrt(n * m * (n + m + 1) / 12.0)
        k = max(0, math.floor(n * m / 2.0 - statistics.NormalDist().inv_cdf(1.0 - tail) * sd - 0.5) + 1)
    else:
        counts = _mann_whitney_counts(n, m)
        total = sum(counts)
        k, cum = 0, 0
        for c in counts:
            cum += c
            if cum / total > tail:
                break
            k += 1
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
    """FASTER / SLOWER only when the whole interval is above / below 1.0; a config against
    itself is SAME_CONFIG whatever the numbers say; no sample on a side is NOT_MEASURED."""
    if same_config:
        return SAME_CONFIG
    if interval.ratio is None:
        return NOT_MEASURED
    if interval.bounded and interval.lo > 1.0:  # type: ignore[operator]
        return FASTER
    if interval.bounded and interval.hi < 1.0:  # type: ignore[operator]
        return SLOWER
    return WITHIN_NOISE


def _digits(interval: RatioInterval) -> int:
    """Two decimals, three when the interval is narrower than 0.05 (so "0.994x slower
    (95% CI 0.990-0.998x)" does not read as "0.99x slower (95% CI 0.99-1.00x)")."""
    if interval.bounded and interval.hi - interval.lo < 0.05:  # type: ignore[operator]
        return 3
    return 2


def interval_text(interval: RatioInterval) -> str:
    """'95% CI 1.22-1.41x', or why there is none ('no interval: needs 2 rounds'). Over launches:
    '95% CI 1.22-1.41x, 3 vs 4 launches, launch noise +-4.1%', and where a side was launched once,
    '..., 1 vs 3 launches (one launch: the study's launch noise +-4.1%)'."""
    if interval.launches is not None:
        return _launches_text(interval)
    if interval.bounded:
        d = _digits(interval)
        return f"{confidence_text(interval.confidence)} CI {interval.lo:.{d}f}-{interval.hi:.{d}f}x"
    return "no interval: needs 2 rounds" if interval.paired else "no interval: needs 2 samples of each"


def confidence_text(confidence: float) -> str:
    """'95%', '98.75%', '98.3%' (a race's, 1 - 5% / looks): at most four digits."""
    return f"{100 * confidence:.4g}%"


def _launches_text(interval: RatioInterval) -> str:
    noise = interval.noise or LaunchNoise()
    if not interval.bounded:
        return f"no interval: {noise.text()}" if not noise.known else "no interval: a side was never launched"
    d = _digits(interval)
    na, nb = interval.launches  # type: ignore[misc]
    head = f"{confidence_text(interval.confidence)} CI {interval.lo:.{d}f}-{interval.hi:.{d}f}x, {na} vs {nb} launches"
    spread = f"launch noise +-{100 * (noise.relative or 0.0):.1f}%"
    if min(na, nb) == 1:
        return f"{head} (one launch: the study's {spread})"
    return f"{head}, {spread}"


def ratio_text(interval: RatioInterval, value: float | None = None) -> str:
    """'1.31x': the interval's ratio, or ``value`` (e.g. a ratio of medians) shown beside it, with
    three decimals where the interval is narrow."""
    value = interval.ratio if value is None else value
    return f"{value:.{_digits(interval)}f}x" if value is not None else "n/a"


def median_ratio_text(interval: RatioInterval, medians: float) -> str:
    """A ratio of medians (a trial's value is its median) shown beside ``interval``, which is of
    the geometric-mean ratio: "1.89x", or, where the medians' ratio lies outside the interval
    (samples spread unevenly, in two clusters say), "1.30x by medians (1.13x by geometric
    means)": never a point estimate printed beside an interval that excludes it."""
    text = ratio_text(interval, medians)
    if interval.bounded and interval.ratio is not None and not interval.lo <= medians <= interval.hi:  # type: ignore[operator]
        text += f" by medians ({ratio_text(interval)} by geometric means)"
    return text


def describe(interval: RatioInterval, *, same_config: bool = False) -> str:
    """The ratio, its verdict and its interval in one phrase:

    "1.31x faster (95% CI 1.22-1.41x)", "0.80x slower (95% CI 0.75-0.85x)",
    "0.96x, within noise (95% CI 0.81-1.14x)", "0.96x, within noise: same config (95% CI ...)".
    """
    word = verdict(interval, same_config=same_config)
    if word == NOT_MEASURED:
        return "n/a (not measured)"
    ratio = ratio_text(interval)
    if word in (FASTER, SLOWER):
        return f"{ratio} {word} ({interval_text(interval)})"
    if word == SAME_CONFIG:
        extra = ""
        if interval.bounded and not interval.lo <= 1.0 <= interval.hi:  # type: ignore[operator]
            extra = ", which excludes 1.0: launches of one config differ by more than this interval says"
        return f"{ratio}, within noise: same config ({interval_text(interval)}{extra})"
    return f"{ratio}, within noise ({interval_text(interval)})"
