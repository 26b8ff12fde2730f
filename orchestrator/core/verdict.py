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
- **unpaired** (a study's trials: one config's repeated requests against another's):
  a Welch t-interval on the difference of the mean log samples (unequal variances,
  Welch-Satterthwaite degrees of freedom). Repeats of one launch miss the variation between
  launches, so this interval is the narrower, weaker claim; ``compare`` makes the stronger one.

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
    verdict(interval, same_config=False)  -> FASTER | SLOWER | WITHIN_NOISE | SAME_CONFIG | NOT_MEASURED
    describe(interval, same_config=False) -> "1.31x faster (95% CI 1.22-1.41x)"
    median_ratio_text(interval, medians)  -> "1.30x by medians (1.13x by geometric means)" where it must
    t_quantile(p, df)                     -> the p-quantile of Student's t with df degrees of freedom
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

FASTER = "faster"
SLOWER = "slower"
WITHIN_NOISE = "within noise"
SAME_CONFIG = "same config"
NOT_MEASURED = "not measured"

DEFAULT_CONFIDENCE = 0.95


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

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "lo": self.lo, "hi": self.hi, "n": self.n, "paired": self.paired,
                "confidence": self.confidence}


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
    """'95% CI 1.22-1.41x', or why there is none ('no interval: needs 2 rounds')."""
    if interval.bounded:
        d = _digits(interval)
        return f"{100 * interval.confidence:g}% CI {interval.lo:.{d}f}-{interval.hi:.{d}f}x"
    return "no interval: needs 2 rounds" if interval.paired else "no interval: needs 2 samples of each"


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
