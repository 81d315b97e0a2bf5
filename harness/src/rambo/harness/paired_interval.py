"""A paired difference over seeds with its two-sided 95% Student-t interval, and its verdict.

Method A minus method B, run with the same seeds: the mean of the per-seed differences
`a[i] - b[i]` and `mean +- t_{0.975}(n - 1) * sd / sqrt(n)` (the one-sample t interval of the
differences). The claims table (`rambo.ablations.claims`) and the detection studies
(`rambo.detection.variance_study`, `rambo.detection.regime_study`) read their intervals here.
"""

from __future__ import annotations

import math
import statistics

# Two-sided 95% quantiles of Student's t, t_{0.975}(df), df = 1..30 (standard tables).
T_975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
Z_975 = 1.960


def t_quantile(df: int) -> float:
    """t_{0.975}(df); the normal quantile beyond the table."""
    if df < 1:
        raise ValueError(f"a paired interval needs at least 2 seeds (df >= 1), got df = {df}")
    return T_975[df - 1] if df <= len(T_975) else Z_975


def paired_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean of `a[i] - b[i]` and its two-sided 95% t interval `(mean, low, high)`."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same seeds, got {len(a)} and {len(b)}")
    differences = [x - y for x, y in zip(a, b)]
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return mean, float("nan"), float("nan")
    half = t_quantile(len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def verdict(low: float, high: float) -> str:
    """`holds` (interval above 0), `contradicted` (below 0) or `not resolved` (contains 0)."""
    if math.isnan(low):
        return "not resolved (one seed)"
    if low > 0:
        return "holds"
    if high < 0:
        return "contradicted"
    return "not resolved"


def seeds_for_half_width(sd: float, half_width: float, most: int = 1000) -> int | None:
    """The fewest seeds `n >= 2` whose interval half-width `t(n - 1) sd / sqrt(n)` is at most `half_width`."""
    return next((n for n in range(2, most + 1) if t_quantile(n - 1) * sd / math.sqrt(n) <= half_width), None)
