"""SoDeep (Engilberge et al., CVPR 2019): a recurrent net trained to map a score vector to its ranks.

Here a small bidirectional LSTM reads the `N` scores as a sequence and predicts each one's rank
divided by `N` (1/N = highest score, as [`rambo.core.rank`][rambo.core.rank]); it is trained on synthetic
sequences whose true ranks come from an exact sort, as SoDeep does, and then stands in for the
ranking as a differentiable surrogate. Synthetic sequences mix Gaussian and uniform shapes with random
location and scale, so that the sorter has seen the value ranges of the loss sections it is drawn on.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rambo.core import exact_rank
from rambo.harness.run_files import bad_file, read_torch

#: What is read of a checkpoint of `train_sodeep.py`.
CHECKPOINT = {"state_dict": dict, "config": {"hidden": int, "layers": int, "length": int}}


class SoDeepSorter(torch.nn.Module):
    """`scores: [..., N]` -> approximate ranks `[..., N]` (1 = highest), differentiable."""

    def __init__(self, hidden: int = 32, layers: int = 2):
        super().__init__()
        if hidden < 1 or layers < 1:
            raise ValueError(f"hidden and layers must be >= 1, got hidden={hidden}, layers={layers}")
        self.hidden, self.layers = int(hidden), int(layers)
        self.lstm = torch.nn.LSTM(1, self.hidden, self.layers, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(2 * self.hidden, 1)

    def normalised_ranks(self, scores: torch.Tensor) -> torch.Tensor:
        """Predicted `rank / N` of `scores: [..., N]`, the quantity the sorter is trained on."""
        n = scores.shape[-1]
        states, _ = self.lstm(scores.reshape(-1, n, 1).to(self.head.weight.dtype))
        return self.head(states).squeeze(-1).reshape(scores.shape)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return self.normalised_ranks(scores) * scores.shape[-1]


def synthetic_sequences(batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """`[batch, length]` score vectors: Gaussian or uniform, location in [-1, 1], scale in [0.2, 2]."""
    location = torch.rand(batch, 1, generator=generator) * 2 - 1
    scale = torch.exp(torch.empty(batch, 1).uniform_(math.log(0.2), math.log(2.0), generator=generator))
    gaussian = torch.randn(batch, length, generator=generator)
    uniform = (torch.rand(batch, length, generator=generator) * 2 - 1) * math.sqrt(3)  # unit variance
    shape = torch.where(torch.rand(batch, 1, generator=generator) < 0.5, gaussian, uniform)
    return location + scale * shape


def sorting_loss(sorter: SoDeepSorter, scores: torch.Tensor, kind: str = "l1") -> torch.Tensor:
    """Mean L1 or squared L2 distance between predicted and true `rank / N` of `scores: [B, N]`."""
    target = exact_rank(scores).to(torch.float32) / scores.shape[-1]
    error = sorter.normalised_ranks(scores) - target
    if kind == "l1":
        return error.abs().mean()
    if kind == "l2":
        return error.square().mean()
    raise ValueError(f"loss kind must be 'l1' or 'l2', got {kind!r}")


def load_sorter(path: Path) -> tuple[SoDeepSorter, dict]:
    """The trained sorter (eval mode) and its training record from a checkpoint of `train_sodeep.py`;
    a missing or bad checkpoint is a [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError]
    saying how to train it."""
    path = Path(path)
    fix = (
        f"train it (again) with `python -m rambo.figures.train_sodeep --out {path.parent}` "
        "(the pipeline: `dvc repro figures_sodeep`)"
    )
    checkpoint = read_torch(path, fix, CHECKPOINT)
    try:
        sorter = SoDeepSorter(checkpoint["config"]["hidden"], checkpoint["config"]["layers"])
        sorter.load_state_dict(checkpoint["state_dict"])
    except (RuntimeError, TypeError, ValueError) as error:  # sizes below 1; tensors missing, unexpected, misshapen
        raise bad_file(path, f"its state_dict does not fit its config ({str(error).splitlines()[0]})", fix) from None
    return sorter.eval(), checkpoint
