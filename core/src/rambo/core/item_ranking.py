"""Alg. 1 for a loss that reads the ranks of a few items only (the relevant ones): the backward
pass re-ranks the items that move instead of sorting every score again.

Every RaMBO loss (Eq. 17-22) uses `rank_alpha(y)` at the P relevant items alone, so
`dL/drank` is zero everywhere else and the perturbed scores `y_lam = y + lam * dL/drank` of
Alg. 1 differ from `y` at those P items only. Given the forward's sort, the perturbed ranking
then follows exactly, in O(N + P log N) instead of a second O(N) sort with its scatters:

* a moved item's new position: the number of unmoved items before its new score (a binary search
  in the forward's sorted keys, ties by position searched within the run of equal keys) plus the
  number of moved items before it (a sort of the P new scores);
* an unmoved item's new rank: its old rank, plus one for each moved item that jumped over it from
  below, minus one for each that dropped past it from above. Over the sorted positions that is a
  difference array of 2P entries and one cumulative sum; one scatter through the forward's order
  brings it to the items.

The result equals `rank(y_lam) - rank(y)` of the dense Alg. 1 (the operator `rambo::blackbox_rank` of `ranking`)
bit for bit, ties included (tested against it), so [`rank_items`][rambo.core.rank_items] and `rank(scores, lam)[index]`
are the same function with the same gradient. It is used on the CPU, where the second sort was the
cost; on a GPU a sort is cheap and the dense path is used.
"""

from __future__ import annotations

import torch

from .counted_ranking import BlackboxCountedRank, counting_fits
from .ranking import rank_with_integers, sort_keys


def positions_in_sorted(
    sorted_keys: torch.Tensor, order: torch.Tensor, keys: torch.Tensor, index: torch.Tensor
) -> torch.Tensor:
    """Number of entries `(sorted_keys[p], order[p])` lexicographically before `(keys, index)`.

    `sorted_keys`/`order`: a stable ascending sort (values and indices) of 1-D keys, so equal
    keys appear by increasing index; `keys`/`index`: queries, 1-D. For a query that is itself
    an entry this is its position. A binary search over the keys, then, for the queries whose key
    is present, over the indices within the run of equal keys: O(P log N) for P queries. The
    queries are searched in ascending order, so that neighbouring searches share their path
    through the sorted keys (about 3x faster than in random order at N = 1e7).
    """
    by_key = torch.argsort(keys)
    keys, index = keys[by_key], index[by_key]
    low = torch.searchsorted(sorted_keys, keys, side="left")
    last = order.shape[0] - 1
    tied = (sorted_keys[low.clamp(max=last)] == keys).nonzero().view(-1)
    if tied.numel():
        tied_index = index[tied]
        tied_low = low[tied]
        high = torch.searchsorted(sorted_keys, keys[tied], side="right")
        while True:
            active = tied_low < high
            if not bool(active.any()):
                break
            middle = (tied_low + high) // 2
            before = order[middle.clamp_(max=last)] < tied_index
            tied_low = torch.where(active & before, middle + 1, tied_low)
            high = torch.where(active & ~before, middle, high)
        low[tied] = tied_low
    return torch.empty_like(low).scatter_(0, by_key, low)


class BlackboxItemRank(torch.autograd.Function):
    """Ranks of the items at `flat_index` of a `[R, N]` score matrix, Alg. 1 backward by re-ranking
    only the moved items. `lam_raw` as in `ranking.blackbox_rank`.

    Returns `(ranks as floats [P], differentiable; ranks as integers [P])`.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, flat_index: torch.Tensor, lam_raw: float):  # noqa: D102
        values = scores.detach()
        rows, n = values.shape
        keys = sort_keys(values)
        sorted_keys, order = torch.sort(keys, stable=True)
        positions = positions_in_sorted(sorted_keys, order, keys[flat_index], flat_index)
        row_of_item = torch.div(flat_index, n, rounding_mode="floor")
        ranks = positions - row_of_item * n + 1
        item_values = values[row_of_item, flat_index - row_of_item * n]  # (scores may be a transposed view)
        ctx.lam_raw, ctx.shape, ctx.dtype = lam_raw, (rows, n), scores.dtype
        ctx.save_for_backward(item_values, flat_index, row_of_item, positions, sorted_keys, order)
        ctx.mark_non_differentiable(ranks)
        return ranks.to(torch.promote_types(scores.dtype, torch.float32)), ranks

    @staticmethod
    def backward(ctx, grad_ranks: torch.Tensor, _grad_integer_ranks: torch.Tensor | None = None):  # noqa: D102
        item_values, flat_index, row_of_item, positions, sorted_keys, order = ctx.saved_tensors
        rows, n = ctx.shape
        compute_dtype = torch.promote_types(ctx.dtype, torch.float32)
        # y + lam * dL/drank at the P items, two separately rounded operations (as alg1_gradient).
        moved = grad_ranks.to(compute_dtype).mul(ctx.lam_raw).add_(item_values.to(compute_dtype))
        moved_keys = sort_keys(moved.view(1, -1)) if rows == 1 else sort_keys(moved, rows=row_of_item)
        # Entries of the old ranking before each moved item's new place (its own old entry included
        # when it moved down), and the moved items among them (by their old positions).
        slot = positions_in_sorted(sorted_keys, order, moved_keys, flat_index)
        moved_before_slot = torch.searchsorted(torch.sort(positions).values, slot, side="left")
        # Moved items before each one in the new order: a stable sort of the new keys, the items
        # being in increasing index order (checked by rank_items), so ties go by index.
        new_order = torch.sort(moved_keys, stable=True).indices
        moved_ahead = torch.empty_like(new_order).scatter_(
            0, new_order, torch.arange(new_order.shape[0], device=new_order.device)
        )
        new_positions = slot - moved_before_slot + moved_ahead

        # Unmoved items: +1 over [slot, position) for an item that moved up, -1 over
        # (position, slot) for one that moved down; exact in float32 while P < 2**24.
        count_dtype = compute_dtype if positions.shape[0] < 2**24 else torch.float64
        up = slot <= positions
        one = torch.ones_like(slot, dtype=count_dtype)
        difference = torch.zeros(rows * n + 1, dtype=count_dtype, device=slot.device)
        difference.index_add_(0, torch.where(up, slot, positions + 1), torch.where(up, one, -one))
        difference.index_add_(0, torch.where(up, positions, slot), torch.where(up, -one, one))
        shift = difference[:-1].cumsum_(0)
        gradient = torch.empty(rows * n, dtype=count_dtype, device=slot.device).scatter_(0, order, shift)
        gradient[flat_index] = (new_positions - positions).to(count_dtype)
        # -(rank(y) - rank(y_lam)) / lam, as alg1_gradient.
        gradient = gradient.to(compute_dtype).div_(ctx.lam_raw)
        return gradient.view(rows, n).to(ctx.dtype), None, None


def rank_items(
    scores: torch.Tensor, index: tuple[torch.Tensor, torch.Tensor], lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`rank(scores, lam)[index]` and the same ranks as integers, for `scores: [R, N]` and
    `index = (rows, columns)` in row-major order (as `relevant.nonzero(as_tuple=True)`).

    Inputs are assumed checked (the losses check them). On the CPU, with a few items per row
    ([`counted_ranking.counting_fits`][rambo.core.counted_ranking.counting_fits]), float32 or float64, the ranks are
    counted ([`counted_ranking.BlackboxCountedRank`][rambo.core.counted_ranking.BlackboxCountedRank]: no sort); else,
    for float32 (or one row of float64), the backward re-ranks only the P indexed items (module docstring); otherwise it
    is the dense Alg. 1. Same values and gradients every way.
    """
    rows, n = scores.shape
    keyed = scores.dtype == torch.float32 and rows < 2**31 or rows == 1 and scores.dtype == torch.float64
    counted = scores.device.type == "cpu" and counting_fits(rows, n, index[0].numel(), scores.dtype)
    if scores.device.type != "cpu" or not (keyed or counted) or index[0].numel() == 0:
        ranks, integer_ranks = rank_with_integers(scores, lam, validate=False)
        return ranks[index], integer_ranks[index]
    flat_index = index[0] * n + index[1]
    if flat_index.numel() > 1 and not bool((flat_index[1:] > flat_index[:-1]).all()):
        raise ValueError("rank_items needs distinct item indices in row-major order (as relevant.nonzero() gives)")
    if counted:
        return BlackboxCountedRank.apply(scores, flat_index, lam * n)
    return BlackboxItemRank.apply(scores, flat_index, lam * n)
