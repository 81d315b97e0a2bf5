"""Alg. 1 for a few items per row, by counting instead of sorting.

The RaMBO losses read `rank_alpha(y)` (Eq. 17-22) at the relevant items only. With `k` of them
in a row of `N` scores, the rank of Eq. 2 needs no sort:
`rank(y)_i = 1 + |{j : y_j > y_i}| + |{j < i : y_j = y_i}|` (ties by position, as the sort's) is
one comparison of the row with `y_i`: `k N` comparisons for the row instead of an
`O(N log N)` sort, fewer operations while `k` is small (a batch of embeddings ranked against
the batch and its memory: a few images per class).

The backward pass of Alg. 1 perturbs the same items, `y_lam = y + lam_raw * dL/drank` (zero
elsewhere), and `dL/dy = -(rank(y) - rank(y_lam)) / lam_raw`. An item `e` that does not move
changes rank by the number of moved items that now lie before it less those that did before:
`rank(y_lam)_e - rank(y)_e = sum_i [i before e in y_lam] - [i before e in y]`, `k`
comparisons of the row again. A moved item's new rank is its rank among the old scores, corrected
for the `k` moved items (their old scores out, their new ones in): `k^2` comparisons per row.
Integers throughout, converted and divided as in `ranking.alg1_gradient`: the gradient is
the dense Alg. 1's (and [`item_ranking.BlackboxItemRank`][rambo.core.item_ranking.BlackboxItemRank]'s) bit for bit, ties
included (`core/tests/test_core_counted_ranking.py`).

`i before e` (Eq. 2's order): `y_i > y_e`, or `y_i = y_e` and `i < e`. The comparisons are
float comparisons, so -0.0 and +0.0 are equal, as in the sort keys. The rows are visited by
*slot*: slot `s` holds the `s`-th item of every row that has one, so the work is the number of
items times `N` whatever their spread over the rows.
"""

from __future__ import annotations

import torch

# The counting path is taken while the items per row (on average) are at most this many: past it,
# one sort of composite keys (item_ranking) does less work. Measured side by side on one CPU thread
# at [2048, 8191] with 4 items per row: counting 0.94 s, the sorting path 3.69 s, so about 14 ns per
# element and item against 220 ns per element: even near 15 items per row; at 8, counting takes half the time.
ITEMS_PER_ROW_LIMIT = 8
# The comparisons are written as 0/1 floats and summed: torch's float kernels are vectorised, its
# bool reductions and conversions are not (about 10x slower per element on one CPU thread).
# Exact: the counts are below n < 2**24.
_COUNT_DTYPE = torch.float32


def counting_fits(rows: int, n: int, items: int, dtype: torch.dtype) -> bool:
    """True when [`BlackboxCountedRank`][rambo.core.counted_ranking.BlackboxCountedRank] is the cheaper exact path for
    `items` items in a `[rows, n]` float32/float64 matrix (its counts are exact in float32 while n < 2**24)."""
    return dtype in (torch.float32, torch.float64) and n < 2**24 and 0 < items <= ITEMS_PER_ROW_LIMIT * rows


def _slots(rows_of_items: torch.Tensor, num_rows: int) -> list[torch.Tensor]:
    """For each slot s, the items (indices into the row-major item list) that are the s-th of their row."""
    per_row = torch.bincount(rows_of_items, minlength=num_rows)
    first = per_row.cumsum(0) - per_row
    slot = torch.arange(rows_of_items.shape[0], device=rows_of_items.device) - first[rows_of_items]
    return [(slot == s).nonzero().view(-1) for s in range(int(per_row.max()))]


def _rows_of(values: torch.Tensor, item_rows: torch.Tensor) -> torch.Tensor:
    """The rows of `values` that hold the slot's items (all of them, in order, without a copy)."""
    return values if item_rows.shape[0] == values.shape[0] else values.index_select(0, item_rows)


def _ties_before(block: torch.Tensor, value: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """`|{j < c : y_j = v}|` per row of `block` (value `v` and column `c` of each row's item)."""
    left = torch.arange(block.shape[1], device=block.device) < columns.unsqueeze(1)
    return ((block == value.unsqueeze(1)) & left).sum(1)


def _before_after_tie(block: torch.Tensor, value: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """`[y_e = v and c < e]` per entry `e` of `block`: the entries an item at `(v, c)` ties and precedes."""
    right = torch.arange(block.shape[1], device=block.device) > columns.unsqueeze(1)
    return (block == value.unsqueeze(1)) & right


class BlackboxCountedRank(torch.autograd.Function):
    """Ranks of the items at `flat_index` (row-major, distinct) of a `[R, N]` score matrix by
    counting (module docstring); `lam_raw` as in `ranking.blackbox_rank`.

    Returns `(ranks as floats [P], differentiable by Alg. 1; ranks as integers [P])`.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, flat_index: torch.Tensor, lam_raw: float):  # noqa: D102
        values = scores.detach()
        num_rows, n = values.shape
        item_rows = torch.div(flat_index, n, rounding_mode="floor")
        columns = flat_index - item_rows * n
        item_values = values[item_rows, columns]
        slots = _slots(item_rows, num_rows)
        ranks = torch.empty_like(flat_index)
        ties = torch.empty_like(flat_index)  # |{j : y_j = y_i}|, the item itself included
        buffer = torch.empty(
            values.shape, dtype=_COUNT_DTYPE, device=values.device
        )  # one buffer: no page faults per slot
        for items in slots:
            block, value = _rows_of(values, item_rows[items]), item_values[items].unsqueeze(1)
            mask = buffer[: block.shape[0]]
            # Eq. 2: rank = 1 + |{j : y_j > y_i}| + |{j < i : y_j = y_i}|
            greater = torch.gt(block, value, out=mask).sum(1).long()
            equal = torch.eq(block, value, out=mask).sum(1).long()
            tied = (equal > 1).nonzero().view(-1)
            if tied.numel():
                greater[tied] += _ties_before(block[tied], value[tied, 0], columns[items[tied]])
            ranks[items], ties[items] = greater + 1, equal
        ctx.lam_raw, ctx.dtype, ctx.slots = lam_raw, scores.dtype, slots
        ctx.save_for_backward(values, item_values, flat_index, item_rows, columns, ranks, ties)
        ctx.mark_non_differentiable(ranks)
        return ranks.to(torch.promote_types(scores.dtype, torch.float32)), ranks

    @staticmethod
    def backward(ctx, grad_ranks: torch.Tensor, _grad_integer_ranks: torch.Tensor | None = None):  # noqa: D102
        values, item_values, flat_index, item_rows, columns, ranks, ties = ctx.saved_tensors
        num_rows, n = values.shape
        compute_dtype = torch.promote_types(ctx.dtype, torch.float32)
        # y + lam * dL/drank at the P items, two separately rounded operations (as alg1_gradient).
        moved = grad_ranks.to(compute_dtype).mul(ctx.lam_raw).add_(item_values.to(compute_dtype))
        old = item_values.to(compute_dtype)
        values = values.to(compute_dtype)
        shift = None  # rank(y_lam) - rank(y); the first full slot's differences, or zeros
        buffers = [torch.empty(values.shape, dtype=compute_dtype, device=values.device) for _ in range(2)]
        new_ranks = torch.empty_like(ranks)
        for items in ctx.slots:
            slot_rows = item_rows[items]
            block, new, was = _rows_of(values, slot_rows), moved[items], old[items]
            # an entry the item now precedes and did not (+1), or did and now does not (-1): strict part
            delta = torch.lt(block, new.unsqueeze(1), out=buffers[0][: block.shape[0]])
            below_new = delta.sum(1).long()
            mask = torch.lt(block, was.unsqueeze(1), out=buffers[1][: block.shape[0]])
            delta.sub_(mask)
            equal_new = torch.eq(block, new.unsqueeze(1), out=mask).sum(1).long()
            # the moved item's rank among the old scores: 1 + |{y_j > y_lam_i}| + |{j < i : y_j = y_lam_i}|
            rank_among_old = n - below_new - equal_new + 1
            tied = ((equal_new > 0) | (ties[items] > 1)).nonzero().view(-1)
            if tied.numel():  # the tie part of "before": equal scores, the item's column first
                cols = columns[items[tied]]
                rank_among_old[tied] += _ties_before(block[tied], new[tied], cols)
                correction = _before_after_tie(block[tied], new[tied], cols).to(compute_dtype)
                delta[tied] += correction.sub_(_before_after_tie(block[tied], was[tied], cols).to(compute_dtype))
            new_ranks[items] = rank_among_old
            if shift is None and slot_rows.shape[0] == num_rows:
                shift, buffers[0] = delta, torch.empty_like(delta)
            elif shift is None:
                shift = torch.zeros(values.shape, dtype=compute_dtype, device=values.device).index_add_(
                    0, slot_rows, delta
                )
            elif slot_rows.shape[0] == num_rows:
                shift.add_(delta)
            else:
                shift.index_add_(0, slot_rows, delta)
        # The moved items among themselves: their old scores out of the count, their new ones in.
        new_ranks += _moved_correction(ctx.slots, item_rows, columns, old, moved, num_rows)
        shift.view(-1)[flat_index] = (new_ranks - ranks).to(compute_dtype)
        # -(rank(y) - rank(y_lam)) / lam, as alg1_gradient.
        return shift.div_(ctx.lam_raw).to(ctx.dtype), None, None


def _moved_correction(slots, item_rows, columns, old, moved, num_rows) -> torch.Tensor:
    """Per moved item `i`: `|{moved k : k before i in y_lam}| - |{moved k : (y_k, k) before (y_lam_i, i)}|`
    over the moved items `k` of its row (`k = i` included: it is never before itself in
    `y_lam`, and before `(y_lam_i, i)` in `y` when it moved down), as `[R, slots]` tables."""
    width = len(slots)
    table_old = old.new_full((num_rows, width), float("nan"))  # nan: no item in that slot (never before anything)
    table_new = table_old.clone()
    table_columns = torch.zeros(num_rows, width, dtype=columns.dtype, device=columns.device)
    for s, items in enumerate(slots):
        table_old[item_rows[items], s] = old[items]
        table_new[item_rows[items], s] = moved[items]
        table_columns[item_rows[items], s] = columns[items]
    value, column = moved.unsqueeze(1), columns.unsqueeze(1)
    peers_old, peers_new, peer_columns = table_old[item_rows], table_new[item_rows], table_columns[item_rows]

    def before(peer_values):  # (peer value, peer column) before (y_lam_i, i) in Eq. 2's order
        return (peer_values > value) | ((peer_values == value) & (peer_columns < column))

    return before(peers_new).sum(1) - before(peers_old).sum(1)
