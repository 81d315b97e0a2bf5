"""``ranks_identical``: ranks, AP-loss and recall-loss gradients on the device bit-identical to the CPU on the
same input, ties (and -0.0 / +0.0) included, one row and several rows; where a gradient differs, whether the
gradient reaching the ranking already differed (so a difference is placed before or inside the blackbox)."""

from __future__ import annotations

import torch

from rambo.core.benchmark import LAM, MARGIN

from .common import Sizes, loss_fwd_bwd, section_table


def tied_scores(shape, seed: int) -> torch.Tensor:
    """Scores with many exact ties, and both zeros (which tie)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(-50, 50, shape, generator=generator, device="cpu").float() / 8
    scores.view(-1)[: shape[-1] // 10] = -0.0
    return scores


def _with_incoming_gradient(run, relevant: torch.Tensor):
    """``(run(), dL/drank at the relevant items as the ranking's backward received it, on the CPU)``.

    The CPU takes the item path (``BlackboxItemRank``: the gradient at the P relevant items), a GPU
    the dense operator (``alg1_gradient``: a dense ``[rows, N]`` gradient, read at the same items).
    """
    from rambo.core import item_ranking, ranking

    received = []
    dense, items = ranking.alg1_gradient, item_ranking.BlackboxItemRank.backward

    def dense_spy(scores, ranks, grad_ranks, lam_raw):
        received.append(grad_ranks.detach().cpu()[relevant.nonzero(as_tuple=True)])
        return dense(scores, ranks, grad_ranks, lam_raw)

    def items_spy(ctx, grad_ranks, *rest):
        received.append(grad_ranks.detach().cpu().clone())
        return items(ctx, grad_ranks, *rest)

    ranking.alg1_gradient = dense_spy
    item_ranking.BlackboxItemRank.backward = staticmethod(items_spy)
    try:
        result = run()
    finally:
        ranking.alg1_gradient = dense
        item_ranking.BlackboxItemRank.backward = staticmethod(items)
    return result, received[0]


def run(device: torch.device, sizes: Sizes) -> dict:
    """Ranks and loss gradients on the device equal the CPU's, bit for bit, on tied input."""
    from rambo.core import APLoss, RecallLoss, exact_rank

    one_row, several = sizes.identical_lengths
    cases = []
    for label, shape in (("one row", (1, one_row)), ("several rows", several)):
        scores = tied_scores(shape, seed=len(cases))
        relevant = torch.rand(shape, generator=torch.Generator().manual_seed(7), device="cpu") < 0.05
        relevant[:, 0] = True
        case = {"case": label, "shape": list(shape), "ties": int(scores.numel() - scores.unique().numel())}
        case["ranks_equal"] = torch.equal(exact_rank(scores), exact_rank(scores.to(device)).cpu())
        # The recall loss at the retrieval rows' margin and lambda (0.02, 4): at make bench's 0.1 and 0.5
        # its gradient on these rows is 0 everywhere, and comparing zeros would prove nothing.
        for name, loss_fn in (("ap", APLoss(MARGIN, LAM)), ("recall", RecallLoss(0.02, 4.0, weighting="log"))):
            (value_cpu, grad_cpu), incoming_cpu = _with_incoming_gradient(
                lambda: loss_fwd_bwd(loss_fn, scores, relevant), relevant
            )
            (value_dev, grad_dev), incoming_dev = _with_incoming_gradient(
                lambda: loss_fwd_bwd(loss_fn, scores.to(device), relevant.to(device)), relevant
            )
            case[f"{name}_gradient_equal"] = torch.equal(grad_cpu, grad_dev.cpu())
            case[f"{name}_gradient_entries_differing"] = int((grad_cpu != grad_dev.cpu()).sum())
            case[f"{name}_gradient_entries_nonzero"] = int((grad_cpu != 0).sum())  # 0: the comparison proves nothing
            # dL/drank reaching the blackbox: where a difference starts, if there is one
            case[f"{name}_incoming_gradient_equal"] = torch.equal(incoming_cpu, incoming_dev)
            case[f"{name}_loss_difference"] = float((value_cpu - value_dev.cpu()).abs())
        cases.append(case)
    ok = all(c["ranks_equal"] and c["ap_gradient_equal"] and c["recall_gradient_equal"] for c in cases)
    return {"compared": f"cpu vs {device}", "cases": cases, "ok": ok}


def markdown(result: dict, report: dict) -> list[str]:
    """One row per case: tied items, ranks and both gradients equal, and how many gradient entries are not 0."""
    if not result.get("cases"):
        return []
    rows = [
        [
            c["case"],
            c["shape"],
            c["ties"],
            c["ranks_equal"],
            c["ap_gradient_equal"],
            c.get("ap_gradient_entries_nonzero", "-"),
            c["recall_gradient_equal"],
            c.get("recall_gradient_entries_nonzero", "-"),
        ]
        for c in result["cases"]
    ]
    return section_table(
        f"Ranks and gradients, {result['compared']}, tied input",
        [
            "case",
            "shape",
            "tied items",
            "ranks equal",
            "AP gradient equal",
            "AP entries != 0",
            "recall gradient equal",
            "recall entries != 0",
        ],
        "llrllrlr",
        rows,
    )
