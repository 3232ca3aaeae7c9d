"""Paired tests for comparing a method with B5 episode by episode: exact McNemar (binary
outcomes), Wilcoxon signed-rank and a TOST equivalence test (continuous ones)."""

from __future__ import annotations

import math


def mcnemar_exact(a: list[float], b: list[float]) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (pairs with a None skipped)."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    n01 = sum(1 for x, y in zip(a, b) if x and not y)
    n10 = sum(1 for x, y in zip(a, b) if y and not x)
    n = n01 + n10
    if n == 0:
        return 1.0
    k = min(n01, n10)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def wilcoxon(a: list[float], b: list[float]) -> float:
    d = [x - y for x, y in zip(a, b)]
    if all(v == 0 for v in d):
        return 1.0
    from scipy.stats import wilcoxon as w

    return float(w(a, b, zero_method="zsplit").pvalue)


def tost(a: list[float], b: list[float], margin: float) -> dict:
    """Paired equivalence test: is |mean(a − b)| < margin? Exact zero differences are
    equivalent at any margin (p = 0)."""
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    if n < 2 or all(v == d[0] for v in d):
        p = 0.0 if abs(mean) < margin else 1.0
        return {"margin": margin, "mean_diff": mean, "p": p, "equivalent": p < 0.05}
    from scipy.stats import t as tdist

    sd = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1))
    se = sd / math.sqrt(n)
    p_lo = 1 - tdist.cdf((mean + margin) / se, n - 1)
    p_hi = tdist.cdf((mean - margin) / se, n - 1)
    p = max(p_lo, p_hi)
    return {"margin": margin, "mean_diff": mean, "p": float(p), "equivalent": bool(p < 0.05)}
