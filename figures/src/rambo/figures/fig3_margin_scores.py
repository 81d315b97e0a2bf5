"""Fig. 3: distributions of positive and negative pair scores after training without and with the margin.

`python -m rambo.figures.fig3_margin_scores --out figures/out --without-margin A.npz --with-margin B.npz
[--margin 0.05]`

Each input holds `scores` and `relevant` (see `score_distributions.py`). Writes
`fig3_margin_scores.{png,pdf}` and `fig3_margin_scores.json` (per model: the means and standard
deviations of the positive and negative scores, and P(positive > negative), on the drawn pairs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from rambo.harness.numerics import start_command
from rambo.harness.run_files import one_line_errors

from .figure_style import NEGATIVE, POSITIVE, save_figure, save_numbers
from .score_distributions import load_pair_scores, summary


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--without-margin", type=Path, required=True, help="scores of the run trained with margin 0")
    parser.add_argument("--with-margin", type=Path, required=True, help="scores of the run trained with the margin")
    parser.add_argument("--margin", type=float, help="the margin alpha of the second run (Eq. 14), for the title")
    parser.add_argument("--bins", type=int, default=60, help="histogram bins")
    parser.add_argument(
        "--max-pairs",
        type=int,
        default=1_000_000,
        help="at most this many positive and this many negative pairs per run, drawn at random (seed 0)",
    )
    args = parser.parse_args(argv)
    if args.max_pairs < 1:
        parser.error("--max-pairs must be >= 1")
    return args


def at_most(values: torch.Tensor, count: int) -> torch.Tensor:
    """A seeded random subset of `count` of `values: [M]` (all of them if fewer): full test sets have ~1e9 pairs."""
    if len(values) <= count:
        return values
    return values[torch.randperm(len(values), generator=torch.Generator().manual_seed(0))[:count]]


def main(argv=None) -> dict:
    args = parse_args(argv)
    margin_title = "with margin" + (f" $\\alpha$ = {args.margin:g}" if args.margin is not None else "")
    runs = {
        name: tuple(at_most(values, args.max_pairs) for values in load_pair_scores(path))
        for name, path in (("without margin", args.without_margin), (margin_title, args.with_margin))
    }
    everything = torch.cat([torch.cat(pair) for pair in runs.values()])
    edges = np.linspace(float(everything.min()), float(everything.max()), args.bins + 1)

    fig, axes = plt.subplots(2, 1, figsize=(6.5, 5.5), sharex=True, constrained_layout=True)
    numbers = {}
    for ax, (name, (positives, negatives)) in zip(axes, runs.items()):
        for values, colour, label, hatch in (
            (negatives, NEGATIVE, "negative pairs", "//"),
            (positives, POSITIVE, "positive pairs", None),
        ):
            ax.hist(
                values.numpy(),
                bins=edges,
                density=True,
                color=colour,
                alpha=0.35,
                hatch=hatch,
                label=f"{label} ({len(values)})",
            )
            ax.hist(values.numpy(), bins=edges, density=True, color=colour, histtype="step", linewidth=1.5)
            ax.axvline(float(values.mean()), color=colour, linestyle="--", linewidth=1.2)
        numbers[name] = summary(positives, negatives)
        ax.set_title(f"{name}: P(positive > negative) = {numbers[name]['positive_above_negative']:.3f}")
        ax.set_ylabel("density (1 / score unit)")
        ax.legend(loc="upper left")
    axes[-1].set_xlabel("pair score (cosine similarity); dashed: means")
    save_figure(fig, args.out, "fig3_margin_scores")
    save_numbers(numbers, args.out, "fig3_margin_scores")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    with one_line_errors():  # a bad score dump: one error line naming it, exit code 2
        print(main())
