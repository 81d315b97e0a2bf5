"""Drawing a 2-D loss section as a heat map: one panel per surface, labelled plane axes, a colour bar."""

from __future__ import annotations

import torch

from .figure_style import SEQUENTIAL_MAP


def draw_section(ax, values: torch.Tensor, extent: float, title: str, colorbar_label: str = "loss L(w)"):
    """Heat map of `values: [resolution (t), resolution (s)]` over `[-extent, extent]^2`."""
    image = ax.imshow(
        values.numpy(),
        origin="lower",
        extent=(-extent, extent, -extent, extent),
        cmap=SEQUENTIAL_MAP,
        interpolation="nearest",
    )
    ax.set_title(title)
    ax.set_xlabel("s, along u (score units)")
    ax.set_ylabel("t, along v (score units)")
    colorbar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    colorbar.set_label(colorbar_label)
    return image


def flat_fraction(values: torch.Tensor, tolerance: float = 1e-9) -> float:
    """Fraction of neighbouring grid pairs (along s and t) with equal values: where the gradient is 0."""
    steps = torch.cat([(values[:, 1:] - values[:, :-1]).flatten(), (values[1:, :] - values[:-1, :]).flatten()])
    return float((steps.abs() <= tolerance).double().mean())
