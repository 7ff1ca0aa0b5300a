"""Small-sample statistics for the netperf regression runner.

Runs are expensive, so a suite typically yields 3-10 samples per metric.  With
so few samples a normal approximation overstates confidence; Student's t is
used instead, and Welch's variant because the base and new builds need not
have equal variance (a regression often shows up as jitter first).  Only the
standard library is used so the runner works on a bare appliance image without
numpy/scipy.  The t distribution comes from the regularized incomplete beta
function (continued fraction, as ``betacf`` in Numerical Recipes), which also
handles the non-integer degrees of freedom that Welch-Satterthwaite produces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

_EPS = 3e-16
_TINY = 1e-300


def mean(xs: Sequence[float]) -> Optional[float]:
    """Arithmetic mean; None for no samples (a failed run, not a zero)."""
    return math.fsum(xs) / len(xs) if xs else None


def stdev(xs: Sequence[float]) -> Optional[float]:
    """Sample standard deviation (n-1); None below two samples, where spread is unknown."""
    if len(xs) < 2:
        return None
    m = math.fsum(xs) / len(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def jain(xs: Sequence[float]) -> Optional[float]:
    """Jain's fairness index (sum x)^2 / (n * sum x^2), in [1/n, 1].

    None for no samples, and None when every value is zero: nobody got anything,
    so "fair" is undefined (0/0) and reporting 1.0 would hide a total stall.
    """
    sq = math.fsum(x * x for x in xs)
    if not xs or sq == 0:
        return None
    return math.fsum(xs) ** 2 / (len(xs) * sq)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    bt = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    # the continued fraction converges fast only on this side of the mean; use symmetry otherwise
    if x < (a + 1.0) / (a + b + 2.0):
        return bt * _betacf(a, b, x) / a
    return 1.0 - bt * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """Two-sided p-value P(|T| > |t|) for Student's t with ``df`` (possibly fractional) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    return _betai(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """Inverse CDF of Student's t: the t with P(T <= t) = p.

    Bisection on the CDF: robust for any df (including fractional Welch df) and
    p, and 200 halvings reach float precision, which is cheap at this scale.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    target = 2.0 * (1.0 - p)  # two-sided tail mass beyond the quantile
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > target:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Interval:
    """A mean with its t confidence half width; half_width is None for one sample (spread unknown)."""

    mean: float
    half_width: Optional[float]
    n: int
    level: float = 0.95

    @property
    def low(self) -> Optional[float]:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> Optional[float]:
        return None if self.half_width is None else self.mean + self.half_width

    def to_json(self) -> dict:
        return {
            "mean": self.mean,
            "half_width": self.half_width,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "level": self.level,
        }


def ci(xs: Sequence[float], level: float = 0.95) -> Optional[Interval]:
    """Two-sided t interval mean +- t * s / sqrt(n); None for no samples."""
    m = mean(xs)
    if m is None:
        return None
    s = stdev(xs)
    if s is None:
        return Interval(m, None, len(xs), level)
    n = len(xs)
    return Interval(m, t_quantile(1.0 - (1.0 - level) / 2.0, n - 1) * s / math.sqrt(n), n, level)


@dataclass(frozen=True)
class Comparison:
    """Base vs new means; p_value/significant are None when the data cannot support a test."""

    base: float
    new: float
    change_pct: Optional[float]
    p_value: Optional[float]
    significant: Optional[bool]
    method: str

    def to_json(self) -> dict:
        return {
            "base": self.base,
            "new": self.new,
            "change_pct": self.change_pct,
            "p_value": self.p_value,
            "significant": self.significant,
            "method": self.method,
        }


def welch(base: Sequence[float], new: Sequence[float], alpha: float = 0.05) -> Comparison:
    """Welch's two-sample t-test of new against base (two-sided).

    Edge cases, reported instead of raised because the runner prints a table either way:
    - either side has fewer than two samples: no variance estimate, so p_value and
      significant are None (method "single sample: not testable");
    - both sides have zero variance (e.g. identical quantised rates): the t statistic is
      undefined, but any difference is then exact, so significant = means differ with
      p_value 0.0 or 1.0 (method "no variance").
    change_pct is None when the base mean is 0 (relative change undefined).
    Raises ValueError if either side is empty: there is nothing to compare.
    """
    mb, mn = mean(base), mean(new)
    if mb is None or mn is None:
        raise ValueError("welch() needs at least one sample on each side")
    change = None if mb == 0 else (mn - mb) / mb * 100.0
    if len(base) < 2 or len(new) < 2:
        return Comparison(mb, mn, change, None, None, "single sample: not testable")
    vb = stdev(base) ** 2 / len(base)  # type: ignore[operator]
    vn = stdev(new) ** 2 / len(new)  # type: ignore[operator]
    if vb == 0 and vn == 0:
        differ = mb != mn
        return Comparison(mb, mn, change, 0.0 if differ else 1.0, differ, "no variance")
    t = (mn - mb) / math.sqrt(vb + vn)
    df = (vb + vn) ** 2 / (vb**2 / (len(base) - 1) + vn**2 / (len(new) - 1))
    p = t_sf(t, df)
    return Comparison(mb, mn, change, p, p < alpha, "welch t-test")
