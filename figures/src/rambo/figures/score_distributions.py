"""Positive and negative pair scores of a trained model, read from the retrieval pipeline's score dumps.

A dump is a `.npz` (`numpy.savez`) or `.pt` (`torch.save` of a dict) holding `scores` (float, any shape, e.g.
`[queries, items]`) and `relevant` (bool or 0/1, the same shape). A dump that is missing, damaged or not of that form is
a [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError] naming the file and how to write it
again.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rambo.harness.run_files import bad_file, read_npz, read_torch

from .figure_style import export_fix


def load_pair_scores(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """`(positive scores [P], negative scores [M])` as float64 from a score dump."""
    path, fix = Path(path), export_fix(path)
    if path.suffix not in (".npz", ".pt"):
        raise bad_file(path, f"a score file must be .npz or .pt, not {path.suffix or 'a name without a suffix'}", fix)
    if path.suffix == ".npz":
        contents = read_npz(path, fix, ("scores", "relevant"))
    else:
        contents = read_torch(path, fix, {"scores": object, "relevant": object})
    try:
        scores, relevant = (torch.as_tensor(contents[key]) for key in ("scores", "relevant"))
        scores = scores.double()
    except (TypeError, ValueError, RuntimeError) as error:
        raise bad_file(path, f"scores and relevant must be numeric arrays ({error})", fix) from None
    if scores.shape != relevant.shape:
        raise bad_file(path, f"scores {tuple(scores.shape)} and relevant {tuple(relevant.shape)} differ in shape", fix)
    if not bool(((relevant == 0) | (relevant == 1)).all()):
        raise bad_file(path, "relevant must be bool or 0/1", fix)
    if not bool(torch.isfinite(scores).all()):
        raise bad_file(path, "scores contain NaN or inf", fix)
    relevant = relevant.bool()
    if not bool(relevant.any()) or bool(relevant.all()):
        raise bad_file(path, "needs both relevant and irrelevant pairs", fix)
    return scores[relevant].flatten(), scores[~relevant].flatten()


def positive_above_negative(positives: torch.Tensor, negatives: torch.Tensor) -> float:
    """`P(positive score > negative score)` over all pairs, ties counting 1/2 (the ROC AUC).

    `positives: [P]`, `negatives: [M]`; O((P + M) log M) by binary search in the sorted negatives.
    """
    ordered = torch.sort(negatives).values
    below = torch.searchsorted(ordered, positives, right=False).double()
    below_or_tied = torch.searchsorted(ordered, positives, right=True).double()
    return float((below + 0.5 * (below_or_tied - below)).sum() / (len(positives) * len(negatives)))


def summary(positives: torch.Tensor, negatives: torch.Tensor) -> dict:
    """Means, standard deviations and the pairwise ordering of one model's scores."""
    return {
        "positives": len(positives),
        "negatives": len(negatives),
        "positive_mean": float(positives.mean()),
        "positive_std": float(positives.std()),
        "negative_mean": float(negatives.mean()),
        "negative_std": float(negatives.std()),
        "positive_above_negative": positive_above_negative(positives, negatives),
    }
