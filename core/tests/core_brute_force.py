"""Brute-force loops over the paper's definitions; the tests compare the library against these.

Ties are broken by position (the earlier item ranks higher), the library's documented convention.
"""

from __future__ import annotations

import math


def ranks(y: list[float]) -> list[int]:
    """Eq. 2 with ties by position: 1 + |{j : y_j > y_i, or y_j == y_i and j < i}|."""
    return [1 + sum(1 for j, v in enumerate(y) if v > y[i] or (v == y[i] and j < i)) for i in range(len(y))]


def shifted(y: list[float], rel: list[bool], margin: float) -> list[float]:
    """Eq. 14."""
    return [v - margin / 2 if r else v + margin / 2 for v, r in zip(y, rel)]


def ranks_within_relevant(y: list[float], rel: list[bool]) -> dict[int, int]:
    """rank(y+)_i: the rank of relevant item i among the relevant items only."""
    idx = [i for i, r in enumerate(rel) if r]
    sub = ranks([y[i] for i in idx])
    return dict(zip(idx, sub))


def ap_row(y, rel, margin=0.0) -> float:
    """Eq. 21-22 with Eq. 14: 1 - mean_i rank(y+)_i / rank_alpha(y)_i."""
    ys = shifted(y, rel, margin)
    r = ranks(ys)
    rp = ranks_within_relevant(ys, rel)
    return 1 - sum(rp[i] / r[i] for i in rp) / len(rp)


def recall_row(y, rel, margin=0.0, weighting="log", rank_scale=1.0) -> float:
    """Eq. 17 and 20: mean over relevant i of l(r_i) or l(l(r_i)), l(k) = log(1 + k).
    ``rank_scale`` multiplies r_i (the authors' batch memory denormalises ranks by its rows)."""
    ys = shifted(y, rel, margin)
    r = ranks(ys)
    rp = ranks_within_relevant(ys, rel)
    values = []
    for i in rp:
        v = math.log1p((r[i] - rp[i]) * rank_scale)
        values.append(math.log1p(v) if weighting == "loglog" else v)
    return sum(values) / len(values)


def recall_row_by_eq19(y, rel, margin=0.0, weighting="log") -> float:
    """Eq. 16-19 summed over K directly (no closed form), with the weights of Appendix B."""
    ys = shifted(y, rel, margin)
    r = ranks(ys)
    rp = ranks_within_relevant(ys, rel)
    outrun = [r[i] - rp[i] for i in rp]
    total = 0.0
    for k in range(1, len(y) + 2):  # loss_K = 0 once K > max r_i
        if weighting == "log":
            w = math.log(1 + 1 / k)
        else:
            w = math.log(1 + math.log(1 + 1 / k) / (1 + math.log(k)))
        recall_k = sum(1 for o in outrun if o < k) / len(outrun)  # Eq. 16
        total += w * (1 - recall_k)  # Eq. 18-19
    return total


def mean_over_rows(fn, scores, relevant, **kwargs) -> float:
    rows = [fn(s, r, **kwargs) for s, r in zip(scores, relevant) if any(r)]
    return sum(rows) / len(rows) if rows else 0.0


def average_precision(y, rel) -> float:
    """Eq. 4-5 on tie-broken ranks: mean over relevant i of (relevant at or above i) / rank_i."""
    r = ranks(y)
    rel_ranks = sorted(r[i] for i in range(len(y)) if rel[i])
    return sum((k + 1) / rank for k, rank in enumerate(rel_ranks)) / len(rel_ranks)


def recall_at_k(y, rel, k) -> float:
    """Eq. 7."""
    r = ranks(y)
    return 1.0 if any(rel[i] and r[i] <= k for i in range(len(y))) else 0.0


def map_at_r(y, rel) -> float:
    r = ranks(y)
    big_r = sum(rel)
    order = sorted(range(len(y)), key=lambda i: r[i])
    total, hits = 0.0, 0
    for pos, i in enumerate(order[:big_r], start=1):
        if rel[i]:
            hits += 1
            total += hits / pos
    return total / big_r


def r_precision(y, rel) -> float:
    r = ranks(y)
    big_r = sum(rel)
    return sum(1 for i in range(len(y)) if rel[i] and r[i] <= big_r) / big_r


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def smooth_ranks(y, rel, tau, valid=None):
    valid = valid or [True] * len(y)
    out = {}
    for i in range(len(y)):
        if not (rel[i] and valid[i]):
            continue
        all_ = 1 + sum(sigmoid((y[j] - y[i]) / tau) for j in range(len(y)) if j != i and valid[j])
        pos = 1 + sum(sigmoid((y[j] - y[i]) / tau) for j in range(len(y)) if j != i and valid[j] and rel[j])
        out[i] = (all_, pos)
    return out


def recall_at_k_surrogate_row(
    y, rel, ks=(1, 2, 4, 8, 16), tau1=0.01, tau2=1.0, valid=None, clip_numerator=True
) -> float:
    """``1 - mean_k min(sum_{positives} sigmoid((k - r~) / tau2_k), k) / min(k, |P|)`` (no min: unclipped)."""
    sr = smooth_ranks(y, rel, tau1, valid)
    p = len(sr)
    taus = list(tau2) if isinstance(tau2, (list, tuple)) else [tau2] * len(ks)
    recalls = []
    for k, t in zip(ks, taus):
        numerator = 0.0
        for rank_all, _ in sr.values():
            numerator += sigmoid((k - rank_all) / t)
        if clip_numerator and numerator > k:
            numerator = k
        recalls.append(numerator / min(k, p))
    return 1 - sum(recalls) / len(recalls)


def recall_at_k_numerators(y, rel, ks, tau1=0.01, tau2=1.0, valid=None) -> list[float]:
    """The unclipped relaxed count of positives within the top k, one per k (to check a clip is active)."""
    sr = smooth_ranks(y, rel, tau1, valid)
    taus = list(tau2) if isinstance(tau2, (list, tuple)) else [tau2] * len(ks)
    return [sum(sigmoid((k - a) / t) for a, _ in sr.values()) for k, t in zip(ks, taus)]


def smooth_ap_row(y, rel, tau=0.01, valid=None) -> float:
    sr = smooth_ranks(y, rel, tau, valid)
    return 1 - sum(pos / all_ for all_, pos in sr.values()) / len(sr)


def fast_ap_row(y, rel, bins=10, lo=-1.0, hi=1.0, valid=None) -> float:
    valid = valid or [True] * len(y)
    delta = (hi - lo) / bins
    centres = [hi - l * delta for l in range(bins + 1)]
    h_all = [0.0] * (bins + 1)
    h_rel = [0.0] * (bins + 1)
    for v, r, ok in zip(y, rel, valid):
        if not ok:
            continue
        v = min(max(v, lo), hi)
        for l, z in enumerate(centres):
            w = max(0.0, 1 - abs(v - z) / delta)
            h_all[l] += w
            if r:
                h_rel[l] += w
    total, cum_all, cum_rel = 0.0, 0.0, 0.0
    for l in range(bins + 1):
        cum_all += h_all[l]
        cum_rel += h_rel[l]
        if cum_all > 0:
            total += h_rel[l] * cum_rel / cum_all
    return 1 - total / sum(1 for r, ok in zip(rel, valid) if r and ok)
