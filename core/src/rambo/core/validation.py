"""Input checks shared by every loss and metric: bad input fails early with a message that names it."""

from __future__ import annotations

import torch


def check_scores(scores: torch.Tensor, name: str = "scores", min_dim: int = 1, finite: bool = True) -> None:
    """Raise `ValueError` unless `scores` is a floating tensor of finite values.

    `min_dim` is the smallest number of dimensions accepted (2 for `[queries, items]`);
    `finite=False` checks the type and shape only (the values need a pass over the data).
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
    """Raise `ValueError` unless `relevant` is a bool tensor of the same shape as `scores`."""
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
    """`value` as a float; `ValueError` naming `name` for anything that is not a real number
    (a string, None, a bool, a tensor of more than one element)."""
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


# The range of lam. Alg. 1 perturbs by lam * N * dL/drank and divides by lam * N, in float32 for
# float32 and half scores: below LAM_MIN that product underflows (the gradient becomes 0/0 = NaN),
# and a tie then moves by 1 / (lam * N), beyond float32's range; above LAM_MAX the perturbation
# overflows (inf * 0 = NaN). The paper's values (Table 9) are 0.2 to 4.
LAM_MIN, LAM_MAX = 1e-20, 1e20
# The largest margin: the shifted scores s +- margin / 2 stay finite in float32 for any score below 1e38.
MARGIN_MAX = 1e30


def check_lam(lam: float) -> float:
    """Return `lam` as a float; raise `ValueError` unless `LAM_MIN <= lam <= LAM_MAX` (1e-20 to 1e20)."""
    lam = as_number(lam, "lam")
    if not LAM_MIN <= lam <= LAM_MAX:
        raise ValueError(
            f"lam must be a number in [{LAM_MIN:g}, {LAM_MAX:g}] (the blackbox interpolation strength; "
            f"the paper uses 0.2 to 4), got {lam}"
        )
    return lam


def check_margin(margin: float) -> float:
    """Return `margin` as a float; raise `ValueError` unless `0 <= margin <= MARGIN_MAX` (1e30)."""
    margin = as_number(margin, "margin")
    if not 0 <= margin <= MARGIN_MAX:
        raise ValueError(
            f"margin must be a number in [0, {MARGIN_MAX:g}] (in units of the scores; cosine scores: at most 2), "
            f"got {margin}"
        )
    return margin


def check_positive(value, name: str, meaning: str = "") -> float:
    """Return `value` as a float; raise `ValueError` unless it is a finite number > 0 (a
    temperature, a scale). `meaning` is added to the message."""
    number = as_number(value, name)
    if not (number > 0 and number != float("inf")):
        raise ValueError(f"{name} must be a finite number > 0{f' ({meaning})' if meaning else ''}, got {value!r}")
    return number


def check_integer(value, name: str, minimum: int, meaning: str = "") -> int:
    """Return `value` as an int; raise `ValueError` unless it is an integer (an int, or a float
    with an integer value) of at least `minimum`."""
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        number = None
    else:
        try:
            number = float(value)
        except (TypeError, ValueError, RuntimeError):
            number = None
    if number is None or not number == number or number in (float("inf"), float("-inf")) or int(number) != number:
        number = None
    if number is None or number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{f' ({meaning})' if meaning else ''}, got {value!r}")
    return int(number)


def refuse_embedding_call(
    scores,
    relevant,
    loss: str,
    wrapped: str | None = None,
    takes: str = "scores [queries, items] and relevant [queries, items] bool",
) -> None:
    """Raise `ValueError` naming the embedding-level entry point when a score-level `loss` is called
    the way metric-learning losses are: `loss(embeddings [B, D], labels [B] integer)`. `wrapped`:
    the loss to name inside [`rambo.core.EmbeddingLoss`][rambo.core.EmbeddingLoss] (default: `loss` itself)."""
    if (
        isinstance(scores, torch.Tensor)
        and isinstance(relevant, torch.Tensor)
        and scores.dim() == 2
        and relevant.dim() == 1
        and relevant.dtype != torch.bool
        and not relevant.is_floating_point()
        and relevant.shape[0] == scores.shape[0]
    ):
        b, d = scores.shape
        raise ValueError(
            f"{loss} takes {takes}, got a [{b}, {d}] tensor and "
            f"{b} integer labels; for embeddings and labels call "
            f"rambo.core.EmbeddingLoss({wrapped or loss}(...))(embeddings, labels)"
        )


def check_scores_and_relevance(
    scores: torch.Tensor,
    relevant: torch.Tensor,
    finite: bool = True,
    loss: str | None = None,
    wrapped: str | None = None,
    relevant_name: str = "relevant",
) -> None:
    """Both checks for the `loss(scores: [Q, N], relevant: [Q, N])` call signature (`finite`: as
    in [`check_scores`][rambo.core.validation.check_scores]; `loss`: the caller's name, which turns an embedding-level
    call into a message naming [`rambo.core.EmbeddingLoss`][rambo.core.EmbeddingLoss]; `wrapped`: the loss that message
    names; `relevant_name`: the relevance argument's name in the messages)."""
    if loss is not None:
        takes = f"scores [queries, items] and {relevant_name} [queries, items] bool"
        if wrapped is not None:  # MAPLoss, APCLoss
            takes = f"scores [items, classes] and {relevant_name} [items, classes] bool"
        refuse_embedding_call(scores, relevant, loss, wrapped, takes)
    check_scores(scores, min_dim=2, finite=finite)
    if scores.dim() != 2:
        raise ValueError(
            f"scores must be 2-D [queries, items] (one row per query), got shape {tuple(scores.shape)}; "
            "flatten the leading dimensions into the queries"
        )
    check_relevance(scores, relevant, name=relevant_name)
