"""Positive and negative pair scores of a trained model, read from the retrieval pipeline's score dumps.

A dump is a ``.npz`` (``numpy.savez``) or ``.pt`` (``torch.save`` of a dict) holding ``scores``
(float, any shape, e.g. ``[queries, items]``) and ``relevant`` (bool or 0/1, the same shape).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def load_pair_scores(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positive scores [P], negative scores [M])`` as float64 from a score dump."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"score file not found: {path}")
    if path.suffix == ".npz":
        with np.load(path) as archive:
            contents = {key: torch.from_numpy(archive[key]) for key in archive.files}
    elif path.suffix == ".pt":
        contents = {
            key: torch.as_tensor(value)
            for key, value in torch.load(path, map_location="cpu", weights_only=True).items()
        }
    else:
        raise ValueError(f"score file must be .npz or .pt, got {path.name}")
    missing = {"scores", "relevant"} - set(contents)
    if missing:
        raise ValueError(f"{path.name} lacks the array(s) {sorted(missing)}; it needs 'scores' and 'relevant'")
    scores, relevant = contents["scores"].double(), contents["relevant"]
    if scores.shape != relevant.shape:
        raise ValueError(
            f"{path.name}: scores {tuple(scores.shape)} and relevant {tuple(relevant.shape)} differ in shape"
        )
    if not bool(((relevant == 0) | (relevant == 1)).all()):
        raise ValueError(f"{path.name}: relevant must be bool or 0/1")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError(f"{path.name}: scores contain NaN or inf")
    relevant = relevant.bool()
    if not bool(relevant.any()) or bool(relevant.all()):
        raise ValueError(f"{path.name}: needs both relevant and irrelevant pairs")
    return scores[relevant].flatten(), scores[~relevant].flatten()


def positive_above_negative(positives: torch.Tensor, negatives: torch.Tensor) -> float:
    """``P(positive score > negative score)`` over all pairs, ties counting 1/2 (the ROC AUC).

    ``positives: [P]``, ``negatives: [M]``; O((P + M) log M) by binary search in the sorted negatives.
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
