"""The piecewise-affine interpolation whose gradient Alg. 1 returns, for a loss linear in the ranks.

For `L(w) = <a, rank(w)>` (`rank` as in [`rambo.core.rank`][rambo.core.rank]: 1 = highest score), Prop. 1
(Eq. 11) says `rank(v) = argmin_pi <v, pi>` over the permutations `pi` of `1..N`: the
rearrangement inequality pairs the largest entry of `v` with the smallest rank. Hence
`m(v) = min_pi <v, pi> = <v, rank(v)>` is concave and piecewise linear with gradient
`rank(v)` (Danskin's theorem), and

    f_lam(w) = (1 / lam_raw) * ( m(w + lam_raw * a) - m(w) )

has gradient `(rank(w + lam_raw * a) - rank(w)) / lam_raw = -(rank(w) - rank(w_lam)) / lam_raw`,
the output of Alg. 1 (Eq. 10) with incoming gradient `dL/drank = a`. `lam` is the paper's
normalised strength of [`rambo.core.rank`][rambo.core.rank], so `lam_raw = lam * N`. Since
`m(w + lam_raw a) <= <w + lam_raw a, rank(w)>`, `f_lam <= L` everywhere, with equality in the
limit `lam -> 0` away from ties (Vlastelica et al. 2020, Thm. 1).
"""

from __future__ import annotations

import torch

from rambo.core import exact_rank


def min_over_permutations(values: torch.Tensor) -> torch.Tensor:
    """`min_pi <v, pi>` over permutations of `1..N` (Eq. 11), attained at `pi = rank(v)`.

    `values: [..., N]` -> `[...]`.
    """
    return (values * exact_rank(values).to(values.dtype)).sum(-1)


def blackbox_interpolation(scores: torch.Tensor, weights: torch.Tensor, lam: float) -> torch.Tensor:
    """`f_lam(w)` for `L(w) = <a, rank(w)>` (see the module docstring).

    Args:
        scores: `w`, `[..., N]` points at which to evaluate.
        weights: `a`, `[N]` coefficients of the ranks in the loss.
        lam: interpolation strength in [`rambo.core.rank`][rambo.core.rank]'s normalised convention (> 0).

    Returns:
        `[...]` values of `f_lam`.
    """
    if not lam > 0:
        raise ValueError(f"lam must be > 0 (the interpolation strength), got {lam}")
    if weights.shape != scores.shape[-1:]:
        raise ValueError(
            f"weights must have shape [{scores.shape[-1]}] (one per ranked item), got {tuple(weights.shape)}"
        )
    lam_raw = lam * scores.shape[-1]
    return (min_over_permutations(scores + lam_raw * weights) - min_over_permutations(scores)) / lam_raw
