"""Fig. 6 (App. C): the Fig. 1 section of L(w) = <a, rank(w)> with the ranking replaced by each surrogate.

`python -m rambo.figures.fig6_surrogate_landscapes --out figures/out --sodeep figures/out/sodeep_sorter.pt
[--lam 0.005] [--bins 10] [--resolution 200] [--seed 0]`

Panels: (a) exact ranks (piecewise constant), (b) blackbox interpolation (Alg. 1), (c) FastAP's
soft-binning ranks, (d) the SoDeep LSTM sorter trained by `train_sodeep.py`. Writes
`fig6_surrogate_landscapes.{png,pdf}` and `.json` (per surface: the fraction of the plane with a
zero gradient and the mean absolute difference from the true loss).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import torch

from rambo.core import exact_rank
from rambo.harness.numerics import start_command
from rambo.harness.run_files import one_line_errors

from .blackbox_interpolation import blackbox_interpolation
from .fastap_soft_rank import fastap_soft_rank
from .figure_style import save_figure, save_numbers
from .landscape_plot import draw_section, flat_fraction
from .loss_section import LossSection
from .sodeep_sorter import load_sorter


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--sodeep", type=Path, required=True, help="checkpoint written by train_sodeep.py")
    parser.add_argument("--lam", type=float, default=0.005, help="blackbox strength (rambo.core.rank's lam)")
    parser.add_argument("--bins", type=int, default=10, help="FastAP histogram bins")
    parser.add_argument("--extent", type=float, default=1.0, help="half-width of the plotted square")
    parser.add_argument("--resolution", type=int, default=200, help="grid points per axis")
    parser.add_argument("--seed", type=int, default=0, help="seed of the section (the same as Fig. 1's)")
    return parser.parse_args(argv)


def sodeep_ranks(sorter, points: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """The sorter's ranks of `points: [..., N]`, in chunks of rows to bound memory."""
    rows = points.reshape(-1, points.shape[-1]).float()
    with torch.no_grad():
        ranks = torch.cat([sorter(rows[start : start + chunk]) for start in range(0, len(rows), chunk)])
    return ranks.double().reshape(points.shape)


def main(argv=None) -> dict:
    args = parse_args(argv)
    sorter, checkpoint = load_sorter(args.sodeep)
    dim = checkpoint["config"]["length"]
    section = LossSection.random(dim, args.extent, args.seed)
    points = section.grid(args.resolution)
    score_range = section.value_range(args.resolution)
    surfaces = {
        "true": section.loss_of_ranks(exact_rank(points)),
        "blackbox": blackbox_interpolation(points, section.weights, args.lam),
        "fastap": section.loss_of_ranks(fastap_soft_rank(points, args.bins, score_range)),
        "sodeep": section.loss_of_ranks(sodeep_ranks(sorter, points)),
    }
    titles = {
        "true": "(a) true loss (exact ranks)",
        "blackbox": f"(b) blackbox interpolation, $\\lambda$ = {args.lam:g}",
        "fastap": f"(c) FastAP soft binning, {args.bins} bins",
        "sodeep": "(d) SoDeep LSTM sorter",
    }
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8), constrained_layout=True)
    for ax, (name, values) in zip(axes, surfaces.items()):
        draw_section(ax, values, args.extent, titles[name], colorbar_label="loss with surrogate ranks")
    fig.suptitle(f"L(w) = <a, rank(w)> on a random 2-D section of $R^{{{dim}}}$, ranking replaced by each surrogate")
    save_figure(fig, args.out, "fig6_surrogate_landscapes")

    true_loss = surfaces["true"]
    numbers = {
        "dim": dim,
        "flat_fraction": {name: flat_fraction(values) for name, values in surfaces.items()},
        "mean_abs_difference_from_true": {
            name: float((values - true_loss).abs().mean()) for name, values in surfaces.items()
        },
    }
    save_numbers(numbers, args.out, "fig6_surrogate_landscapes")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    with one_line_errors():  # a bad SoDeep checkpoint: one error line naming it, exit code 2
        print(main())
