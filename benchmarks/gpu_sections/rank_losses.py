"""``rank_losses``: AP loss and recall loss forward+backward at 1e5 ... 1e8 elements beside the paper's
Table 6 V100 row, plus the 320k-element sequence of its detection runs ("< 5 ms"), with one float32 sort
of the same row beside them (the ranking's own cost)."""

from __future__ import annotations

import torch

from rambo.core.benchmark import LAM, MARGIN, RELEVANT_FRACTION, median_ms

from .common import (
    PAPER_DETECTION_MS,
    PAPER_V100_MS,
    Sizes,
    format_gib,
    format_ms,
    loss_fwd_bwd,
    peak_gib,
    random_row,
    reset_peak,
    section_table,
)


def run(device: torch.device, sizes: Sizes) -> dict:
    """AP and recall loss forward+backward per length, one float32 sort beside them, paper V100 row."""
    from rambo.core import APLoss, RecallLoss

    losses = {"ap": APLoss(MARGIN, LAM), "recall": RecallLoss(MARGIN, LAM, weighting="log")}
    rows = []
    for n in [*sizes.loss_lengths, sizes.detection_sequence]:
        scores, relevant = random_row(n, device)
        repeats = max(2, sizes.repeats // 3) if n >= 10**8 else sizes.repeats
        reset_peak(device)
        row = {"n": n, "detection_sequence": n == sizes.detection_sequence}
        for name, loss_fn in losses.items():
            row[f"{name}_ms"] = median_ms(lambda: loss_fwd_bwd(loss_fn, scores, relevant), device, repeats)
        flat = scores.view(-1)
        row["sort_ms"] = median_ms(lambda: torch.sort(flat), device, repeats)
        row["peak_gib"] = peak_gib(device)
        row["paper_v100_ms"] = PAPER_DETECTION_MS if row["detection_sequence"] else PAPER_V100_MS.get(n)
        rows.append(row)
        print(
            f"  n={n:.1e}: AP {row['ap_ms']:.2f} ms, recall {row['recall_ms']:.2f} ms, sort {row['sort_ms']:.2f} ms",
            flush=True,
        )
        scores = relevant = flat = None  # the next length allocates after these are freed
    return {
        "rows": rows,
        "repeats": sizes.repeats,
        "margin": MARGIN,
        "lam": LAM,
        "relevant_fraction": RELEVANT_FRACTION,
        "ok": True,
    }


def markdown(result: dict, report: dict) -> list[str]:
    """One row per length: both losses, the sort, AP / sort, the paper's V100 time, peak memory."""
    if not result.get("rows"):
        return []
    rows = []
    for row in result["rows"]:
        label = f"{row['n']:.1e}" + (" (detection)" if row["detection_sequence"] else "")
        paper = (
            ("< " if row["detection_sequence"] else "") + format_ms(row["paper_v100_ms"])
            if row["paper_v100_ms"]
            else "-"
        )
        rows.append(
            [
                label,
                format_ms(row["ap_ms"]),
                format_ms(row["recall_ms"]),
                format_ms(row["sort_ms"]),
                f"{row['ap_ms'] / row['sort_ms']:.2f}",
                paper,
                format_gib(row["peak_gib"]),
            ]
        )
    return section_table(
        "Rank losses, forward + backward (one row, 1 relevant in 100)",
        ["length", "AP loss", "recall loss (log)", "one float32 sort", "AP / sort", "paper V100 (AP)", "peak memory"],
        "rrrrrrr",
        rows,
    )
