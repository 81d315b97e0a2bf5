"""Sigmoid-relaxed ranks of the relevant items (the smooth rank of Smooth-AP and the Recall@k surrogate).

For query row `q` and relevant item `i`:

    rank_all(i) = 1 + sum_{j != i, valid j} sigmoid((s_j - s_i) / tau)
    rank_rel(i) = 1 + sum_{j != i, valid relevant j} sigmoid((s_j - s_i) / tau)

Memory. The pairwise differences of one row are `[P, N]` (P relevant items). They are computed in
blocks of at most `chunk_elements` under `torch.utils.checkpoint`: several rows at a time when a
row's `[P, N]` fits, else one row at a time and its relevant items in slices of `[p, N]` (a single
row of 1e6 items with 1e4 relevant would otherwise be a 1e10-element block). Autograd keeps only each
block's inputs and outputs and recomputes the differences in the backward pass: peak memory is one
block plus `O(Q * N)`, not the O(n^3) of materialising every `[Q, N, N]` difference.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

# Largest [chunk, P, N] block computed at once (elements); 2**24 float32 = 64 MiB. A block is then
# at least 2**23 elements whenever blocking is needed (N <= 2**23), above glibc's largest dynamic
# mmap threshold (32 MiB): every block is mmapped and handed back when freed. Blocks of 16 MiB came
# from the heap once that threshold had risen, fragmented it, and the process grew with P * N (one
# row of 2e5 items, 1% relevant: 2.2 GiB peak at 2**22 against 0.9 GiB at 2**24, same speed).
DEFAULT_CHUNK_ELEMENTS = 2**24


def _chunk_ranks(scores, relevant_index, relevant_mask, valid, relevant_valid, tau):
    """One chunk of rows: `scores [c, N]` -> `(rank_all, rank_rel)` each `[c, P]`; `valid` and
    `relevant_valid` as 0/1 in the scores' dtype, `[c, N]`.

    The block's one `[c, P, N]` tensor is the sigmoids (made in place). Its sums over the valid
    (resp. valid relevant) items are batched matrix-vector products; they include the item itself,
    which is valid and relevant and adds sigmoid(0) = 1/2: hence `1 + sum_{j != i} = 1/2 + sum_j`.
    """
    own = scores.gather(-1, relevant_index)  # [c, P]
    soft_above = torch.sub(scores.unsqueeze(1), own.unsqueeze(2)).div_(tau).sigmoid_()  # [c, P, N]
    rank_all = 0.5 + torch.bmm(soft_above, valid.unsqueeze(-1)).squeeze(-1)
    rank_rel = 0.5 + torch.bmm(soft_above, relevant_valid.unsqueeze(-1)).squeeze(-1)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    return torch.where(relevant_mask, rank_all, zero), torch.where(relevant_mask, rank_rel, zero)


def sigmoid_ranks_of_relevant(
    scores: torch.Tensor,
    relevant: torch.Tensor,
    tau: float,
    valid: torch.Tensor | None = None,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Smooth ranks of each row's relevant items.

    Args:
        scores: `[Q, N]`.
        relevant: `[Q, N]` bool.
        tau: sigmoid temperature.
        valid: `[Q, N]` bool, items that take part in the row (default: all); an invalid item is
            neither ranked nor counted.

    Returns:
        `(rank_all [Q, P], rank_rel [Q, P], mask [Q, P])` with P the largest number of valid
        relevant items in a row; `mask` marks the real entries (the rest are padding, value 0).
    """
    if valid is None:
        valid = torch.ones_like(relevant)
    relevant_valid = relevant & valid
    count = int(relevant_valid.sum(-1).max()) if relevant_valid.numel() else 0
    q, n = scores.shape
    if count == 0:
        empty = scores.new_zeros((q, 0))
        return empty, empty, relevant.new_zeros((q, 0))
    # Indices of the relevant items first (stable: in position order), then padding.
    relevant_index = torch.argsort((~relevant_valid).to(torch.int8), dim=-1, stable=True)[:, :count]
    relevant_mask = relevant_valid.gather(-1, relevant_index)
    if chunk_elements < 1:
        raise ValueError(f"chunk_elements must be >= 1, got {chunk_elements}")
    per_slice = min(count, max(1, chunk_elements // n))  # relevant items per block (all of them when a row fits)
    rows_per_chunk = max(1, chunk_elements // (per_slice * n))
    valid_weight, relevant_weight = valid.to(scores.dtype), relevant_valid.to(scores.dtype)  # once, not per block
    ranks_all, ranks_rel = [], []
    for start in range(0, q, rows_per_chunk):
        rows = slice(start, start + rows_per_chunk)
        parts = []
        for first in range(0, count, per_slice):
            items = slice(first, first + per_slice)
            args = (
                scores[rows],
                relevant_index[rows, items],
                relevant_mask[rows, items],
                valid_weight[rows],
                relevant_weight[rows],
                tau,
            )
            if torch.is_grad_enabled() and scores.requires_grad:
                parts.append(checkpoint(_chunk_ranks, *args, use_reentrant=False))
            else:
                parts.append(_chunk_ranks(*args))
        ranks_all.append(torch.cat([part[0] for part in parts], dim=-1))
        ranks_rel.append(torch.cat([part[1] for part in parts], dim=-1))
    return torch.cat(ranks_all), torch.cat(ranks_rel), relevant_mask
