"""Input checks shared by every loss and metric: bad input fails early with a message that names it."""

from __future__ import annotations

import torch


def check_scores(scores: torch.Tensor, name: str = "scores", min_dim: int = 1, finite: bool = True) -> None:
    """Raise ``ValueError`` unless ``scores`` is a floating tensor of finite values.

    ``min_dim`` is the smallest number of dimensions accepted (2 for ``[queries, items]``);
    ``finite=False`` checks the type and shape only (the values need a pass over the data).
    """
    if not isinstance(scores, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(scores).__name__}")
    if not scores.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got dtype {scores.dtype}")
    if scores.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(scores.shape)}")
    if scores.shape[-1] == 0:
        raise ValueError(f"{name} has an empty ranked (last) dimension: shape {tuple(scores.shape)}")
    # A finite sum proves every value finite (NaN or inf in the input make the sum NaN or inf) in one
    # cheap pass; only a non-finite sum (bad input, or finite values overflowing) checks each value.
    if finite and not bool(torch.isfinite(scores.sum())) and not bool(torch.isfinite(scores).all()):
        bad = "NaN" if bool(torch.isnan(scores).any()) else "inf"
        raise ValueError(f"{name} contains {bad} values; ranks are undefined for non-finite scores")


def check_relevance(scores: torch.Tensor, relevant: torch.Tensor, name: str = "relevant") -> None:
    """Raise ``ValueError`` unless ``relevant`` is a bool tensor of the same shape as ``scores``."""
    if not isinstance(relevant, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of dtype bool, got {type(relevant).__name__}")
    if relevant.dtype != torch.bool:
        raise ValueError(
            f"{name} must have dtype torch.bool (relevant / irrelevant), got {relevant.dtype}; "
            f"convert with `{name}.bool()` if it holds 0/1"
        )
    if relevant.shape != scores.shape:
        raise ValueError(f"shape mismatch: scores {tuple(scores.shape)} vs {name} {tuple(relevant.shape)}")
    if relevant.device != scores.device:
        raise ValueError(f"device mismatch: scores on {scores.device}, {name} on {relevant.device}")


def as_number(value, name: str) -> float:
    """``value`` as a float; ``ValueError`` naming ``name`` for anything that is not a real number
    (a string, None, a bool, a tensor of more than one element)."""
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def check_lam(lam: float) -> float:
    """Return ``lam`` as a float; raise ``ValueError`` unless it is a finite positive number."""
    lam = as_number(lam, "lam")
    if not lam > 0 or lam == float("inf"):
        raise ValueError(f"lam must be a finite number > 0 (the blackbox interpolation strength), got {lam}")
    return lam


def check_margin(margin: float) -> float:
    """Return ``margin`` as a float; raise ``ValueError`` unless it is finite and >= 0."""
    margin = as_number(margin, "margin")
    if not margin >= 0 or margin == float("inf"):
        raise ValueError(f"margin must be a finite number >= 0, got {margin}")
    return margin


def check_scores_and_relevance(scores: torch.Tensor, relevant: torch.Tensor, finite: bool = True) -> None:
    """Both checks for the ``loss(scores: [Q, N], relevant: [Q, N])`` call signature (``finite``: as
    in :func:`check_scores`)."""
    check_scores(scores, min_dim=2, finite=finite)
    if scores.dim() != 2:
        raise ValueError(
            f"scores must be 2-D [queries, items] (one row per query), got shape {tuple(scores.shape)}; "
            "flatten the leading dimensions into the queries"
        )
    check_relevance(scores, relevant)
