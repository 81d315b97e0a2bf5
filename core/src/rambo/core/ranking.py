"""Exact ranking with a blackbox-differentiation backward pass (paper Eq. 1-2, Alg. 1).

Forward: `rank(y)_i = 1 + |{j : y_j > y_i}|` (Eq. 2), ties broken by position (the earlier
item gets the better rank), computed by one stable sort. Backward (Alg. 1, Vlastelica et al. 2020):
`y_lam = y + lam_raw * dL/drank` and `dL/dy = -(rank(y) - rank(y_lam)) / lam_raw`.

The meaning of `lam`. The paper's tables and the authors' code rank *normalised* positions
`rank(y) / N` (N = length of the ranked dimension). For a loss written on normalised ranks,
`dL/d(rank/N) = N * dL/drank`, so their perturbation `y + lam * dL/d(rank/N)` is
`y + (lam * N) * dL/drank` and their gradient `-(rank/N - rank_lam/N) / lam` is
`-(rank - rank_lam) / (lam * N)`. Working on raw ranks 1..N, Alg. 1 is therefore run with
`lam_raw = lam * N`; with that, Table 9's values (4, 0.2, 0.5) mean what they mean in the paper.
`tests/test_ranking.py` checks the equivalence against the normalised formulation.

Speed. The sort runs on integer keys derived from the float bits (an order-preserving bijection),
which torch sorts by radix sort on the CPU; several rows are sorted as one 1-D array by putting the
row index in the high 32 bits of an int64 key. Ranks are the inverse permutation, written by one
scatter (no second sort).
"""

from __future__ import annotations

import torch

from .validation import check_lam, check_scores

_SIGN_MASK_32 = 0x7FFFFFFF
_SIGN_MASK_64 = 0x7FFFFFFFFFFFFFFF


def _descending_keys(values: torch.Tensor, owned: bool = False) -> torch.Tensor:
    """Integer keys whose ascending order is the descending order of `values` (float32/64).

    The float's sign and magnitude bits become a two's-complement integer (`-magnitude` for a
    negative float), whose order is the floats' order with -0.0 and +0.0 equal, as they are as
    floats; then `~` reverses the order. Integer operations only: a compiler cannot drop them
    (inductor dropped the `+ 0.0` that used to merge the zeros). One copy is made, the bit
    operations after it work in place (this runs on 1e8 elements); `owned`: `values` is a
    contiguous buffer of the caller's that may be overwritten, so not even that copy is made.
    """
    if not (owned and values.is_contiguous()):
        values = values.clone(memory_format=torch.contiguous_format)
    if values.dtype == torch.float32:
        bits, width, magnitude_mask = values.view(torch.int32), 31, _SIGN_MASK_32
    else:
        bits, width, magnitude_mask = values.view(torch.int64), 63, _SIGN_MASK_64
    sign = bits >> width  # -1 for a negative float (and -0.0), else 0
    # magnitude ^ sign - sign: the magnitude for sign 0, -magnitude for sign -1 (no overflow: |.| < 2**31)
    return bits.bitwise_and_(magnitude_mask).bitwise_xor_(sign).sub_(sign).bitwise_not_()


def descending_order(scores: torch.Tensor, owned: bool = False) -> torch.Tensor:
    """Indices that sort `scores` along the last dimension from highest to lowest, ties by position.

    `scores: [..., N]` -> `order: [..., N]` (int64); `order[..., 0]` is the best item.
    `owned`: `scores` is a buffer of the caller's that may be overwritten (it is, by the keys).
    """
    values = scores.detach()
    if values.dtype not in (torch.float32, torch.float64):
        values, owned = values.float(), True
    n = values.shape[-1]
    flat = values.reshape(-1, n)
    keys = sort_keys(flat, owned=owned)
    if keys is None:
        order = torch.sort(flat, dim=-1, descending=True, stable=True).indices
    else:
        # On the CPU the sorted keys overwrite the keys (torch sorts a copy of its input in place),
        # which saves a buffer of the keys' size; a GPU sort keeps separate input and output.
        out = (keys, torch.empty(keys.shape, dtype=torch.int64)) if keys.device.type == "cpu" else None
        order = torch.sort(keys, stable=True, out=out).indices.view(flat.shape)
        if flat.shape[0] > 1:
            order -= torch.arange(flat.shape[0], device=flat.device).unsqueeze(1) * n
    return order.view(values.shape)


def sort_keys(flat: torch.Tensor, rows: torch.Tensor | None = None, owned: bool = False) -> torch.Tensor | None:
    """1-D integer keys of a `[R, N]` float matrix whose stable ascending sort orders each row's
    scores from highest to lowest, rows one after the other (ties by position): the
    order-preserving integer image of the floats, with the row index in the high 32 bits of an
    int64 key when R > 1. None when no such key exists (R > 1 and not float32, or R >= 2**31).

    `rows`: the keys of the entries of a 1-D `flat` (e.g. perturbed scores of a few items) that
    lie in these rows of an R > 1 matrix; without it `flat` is the whole matrix. `owned`:
    `flat` may be overwritten (`_descending_keys`).
    """
    if rows is None and flat.shape[0] == 1:
        return _descending_keys(flat, owned).view(-1)
    if flat.dtype != torch.float32 or (rows is None and flat.shape[0] >= 2**31):
        return None
    keys = _descending_keys(flat, owned).long().add_(2**31)  # in [0, 2^32)
    if rows is None:
        rows = torch.arange(flat.shape[0], device=flat.device).unsqueeze(1)
    return (keys | (rows << 32)).view(-1)


def ranks_from_order(order: torch.Tensor) -> torch.Tensor:
    """Inverse permutation along the last dimension, 1-based: `ranks[..., order[..., k]] = k + 1`.

    int32 (half the memory traffic of int64) while N < 2**31, else int64.
    """
    n = order.shape[-1]
    dtype = torch.int32 if n < 2**31 else torch.int64
    positions = torch.arange(1, n + 1, device=order.device, dtype=dtype).expand_as(order)
    return torch.empty(order.shape, dtype=dtype, device=order.device).scatter_(-1, order, positions)


def exact_rank(scores: torch.Tensor, owned: bool = False) -> torch.Tensor:
    """Ranks 1..N along the last dimension (Eq. 2, 1 = highest score, stable ties), integers, no gradient.

    `owned`: `scores` is a buffer the caller gives up (it is overwritten, and freed here as soon
    as the order is known when the caller holds no other reference to it).
    """
    order = descending_order(scores, owned)
    del scores
    return ranks_from_order(order)


def ranks_within_relevant_items(rows: torch.Tensor, ranks: torch.Tensor, num_rows: int) -> torch.Tensor:
    """`rank(y+)` of Eq. 17 and 21 for a list of relevant items, O(P log P) for P items.

    `rows`/`ranks`: row index and (integer) rank of each relevant item, e.g. at
    `relevant.nonzero(as_tuple=True)`. Returns each item's rank among the relevant items of its row.
    """
    n_items = rows.shape[0]
    key = rows.to(torch.int64) * (int(ranks.max()) + 1 if n_items else 1) + ranks.to(torch.int64)
    order = torch.argsort(key)
    per_row = torch.bincount(rows, minlength=num_rows)
    first_position = per_row.cumsum(0) - per_row
    positions = torch.arange(1, n_items + 1, device=rows.device)
    within = torch.empty_like(positions)
    within[order] = positions - first_position[rows[order]]
    return within


def rank_within_relevant(ranks: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
    """`rank(y+)` of Eq. 17 and 21, dense: each relevant item's rank among the relevant items.

    `ranks`: integer ranks 1..N along the last dimension (from [`exact_rank`][rambo.core.exact_rank]) of a
    `[Q, N]` matrix; `relevant`: bool, same shape. Irrelevant items get 0.
    """
    rows, cols = relevant.nonzero(as_tuple=True)
    out = torch.zeros(ranks.shape, dtype=torch.int64, device=ranks.device)
    out[rows, cols] = ranks_within_relevant_items(rows, ranks[rows, cols], ranks.shape[0])
    return out


def _float_rank_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _integer_rank_dtype(n: int) -> torch.dtype:
    return torch.int32 if n < 2**31 else torch.int64


def _blackbox_rank_forward(
    scores: torch.Tensor, lam_raw: float, check_finite: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact ranks along the last dimension as `(floats, differentiable by Alg. 1; integers)`.

    `lam_raw`: the perturbation on raw ranks (`lam * N`). `check_finite`: refuse NaN/inf
    here, at run time (inside a compiled graph too, where a check in Python would break the graph).
    """
    if check_finite:
        check_scores(scores, min_dim=1)
    ranks = exact_rank(scores)
    return ranks.to(_float_rank_dtype(scores.dtype)), ranks


def alg1_gradient(scores: torch.Tensor, ranks: torch.Tensor, grad_ranks: torch.Tensor, lam_raw: float) -> torch.Tensor:
    """The gradient of Alg. 1 w.r.t. the scores, given the forward's integer ranks and dL/drank."""
    compute_dtype = _float_rank_dtype(scores.dtype)
    # y + lam * dL/drank as two separately rounded operations, never one fused multiply-add
    # (which a GPU kernel may use, and a CPU kernel may not): the perturbed scores, hence the
    # ranks of the backward pass, are then the same bits on every device.
    # The buffer is this function's own: the sort keys are built in it, and it is freed once sorted.
    ranks_perturbed = exact_rank(
        grad_ranks.to(compute_dtype).mul(lam_raw).add_(scores.detach().to(compute_dtype)), owned=True
    )
    # Alg. 1: -(rank(y) - rank(y_lam)) / lam, the difference taken exactly in integers.
    grad_scores = ranks_perturbed.sub_(ranks).to(compute_dtype).div_(lam_raw)
    if (
        compute_dtype != scores.dtype
    ):  # half scores: a tie moved by a tiny lam stays finite (at the dtype's largest value)
        largest = torch.finfo(scores.dtype).max
        grad_scores = grad_scores.clamp_(-largest, largest)
    return grad_scores.to(scores.dtype)


if hasattr(torch.library, "custom_op"):  # torch >= 2.4
    # Alg. 1 as two custom operators: torch.compile sees each as one opaque node with a known output
    # shape, so a compiled model or loss has no graph break around the ranking, and the autograd
    # formula is registered with the forward operator.
    blackbox_rank = torch.library.custom_op("rambo::blackbox_rank", mutates_args=())(_blackbox_rank_forward)

    @blackbox_rank.register_fake
    def _(scores, lam_raw, check_finite):
        float_ranks = scores.new_empty(scores.shape, dtype=_float_rank_dtype(scores.dtype))
        return float_ranks, scores.new_empty(scores.shape, dtype=_integer_rank_dtype(scores.shape[-1]))

    @torch.library.custom_op("rambo::blackbox_rank_backward", mutates_args=())
    def blackbox_rank_backward(
        scores: torch.Tensor, ranks: torch.Tensor, grad_ranks: torch.Tensor, lam_raw: float
    ) -> torch.Tensor:
        """Alg. 1's backward: `-(rank(y) - rank(y + lam_raw * grad_ranks)) / lam_raw`, in `scores`' dtype."""
        return alg1_gradient(scores, ranks, grad_ranks, lam_raw)

    @blackbox_rank_backward.register_fake
    def _(scores, ranks, grad_ranks, lam_raw):
        return scores.new_empty(scores.shape)  # contiguous, as the kernel's result (scores may be a transposed view)

    def _blackbox_rank_setup(ctx, inputs, output):
        scores, lam_raw, _ = inputs
        ctx.lam_raw = lam_raw
        ctx.save_for_backward(scores, output[1])

    def _blackbox_rank_grad(ctx, grad_ranks, _grad_integer_ranks):
        scores, ranks = ctx.saved_tensors
        if grad_ranks is None:
            return None, None, None
        return torch.ops.rambo.blackbox_rank_backward(scores, ranks, grad_ranks, ctx.lam_raw), None, None

    blackbox_rank.register_autograd(_blackbox_rank_grad, setup_context=_blackbox_rank_setup)
    _apply_blackbox_rank = torch.ops.rambo.blackbox_rank
else:  # older torch (e.g. the mmdetection environment's 2.1): the same function as an autograd.Function
    _apply_blackbox_rank = None  # set below


class _BlackboxRank(torch.autograd.Function):
    """The ranking operator as an `autograd.Function`, for torch < 2.4 (no `torch.library.custom_op`)."""

    @staticmethod
    def forward(ctx, scores, lam_raw, check_finite):  # noqa: D102
        float_ranks, ranks = _blackbox_rank_forward(scores, lam_raw, check_finite)
        ctx.lam_raw = lam_raw
        ctx.save_for_backward(scores, ranks)
        ctx.mark_non_differentiable(ranks)
        return float_ranks, ranks

    @staticmethod
    def backward(ctx, grad_ranks, _grad_integer_ranks=None):  # noqa: D102
        scores, ranks = ctx.saved_tensors
        return alg1_gradient(scores, ranks, grad_ranks, ctx.lam_raw), None, None


if _apply_blackbox_rank is None:
    _apply_blackbox_rank = _BlackboxRank.apply


def rank(scores: torch.Tensor, lam: float) -> torch.Tensor:
    """Ranks along the last dimension, 1 = highest score, differentiable by Alg. 1.

    Args:
        scores: `[..., N]` float tensor; leading dimensions are independent rows.
        lam: interpolation strength in the paper's normalised convention (Table 9: 4, 0.2, 0.5);
            the raw-rank perturbation is `lam * N` (see the module docstring).

    Returns:
        `[..., N]` ranks 1..N as floats (float32 for half inputs, else the input dtype).
        Ties are broken by position, identically on CPU and GPU.
    """
    return rank_with_integers(scores, lam)[0]


def rank_with_integers(scores: torch.Tensor, lam: float, validate: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """[`rank`][rambo.core.rank] that also returns the same ranks as integers (exact beyond 2**24, no gradient).

    `validate=False` skips the input checks, for callers that have already made them.
    """
    if validate:
        check_scores(scores, finite=False)  # the values are checked inside the operator
        lam = check_lam(lam)
    return _apply_blackbox_rank(scores, lam * scores.shape[-1], validate)
