"""Fig. 1: a 2-D section of the piecewise-constant loss L(w) = <a, rank(w)> beside two blackbox interpolations.

`python -m rambo.figures.fig1_landscape --out figures/out [--lams 0.002 0.01] [--resolution 300] [--seed 0]`

Writes `fig1_landscape.{png,pdf}` and `fig1_landscape.json` (per surface: the fraction of the
plane where the gradient is zero, and for each lam the largest gap `L - f_lam`, which is >= 0).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from rambo.core import exact_rank
from rambo.harness.numerics import start_command

from .blackbox_interpolation import blackbox_interpolation
from .figure_style import save_figure, save_numbers
from .landscape_plot import draw_section, flat_fraction
from .loss_section import LossSection


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--lams",
        type=float,
        nargs=2,
        default=[0.002, 0.01],
        help="two increasing interpolation strengths (rambo.core.rank's normalised lam)",
    )
    parser.add_argument("--dim", type=int, default=20, help="length N of the score vector w")
    parser.add_argument("--extent", type=float, default=1.0, help="half-width of the plotted square")
    parser.add_argument("--resolution", type=int, default=300, help="grid points per axis")
    parser.add_argument("--seed", type=int, default=0, help="seed of the section and of the loss's a")
    args = parser.parse_args(argv)
    if not 0 < args.lams[0] < args.lams[1]:
        parser.error(f"--lams must be two increasing positive numbers, got {args.lams}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    section = LossSection.random(args.dim, args.extent, args.seed)
    points = section.grid(args.resolution)
    true_loss = section.loss_of_ranks(exact_rank(points))
    surfaces = {"true": true_loss}
    for lam in args.lams:
        surfaces[f"lam={lam:g}"] = blackbox_interpolation(points, section.weights, lam)

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), constrained_layout=True)
    draw_section(axes[0], true_loss, args.extent, "(a) true loss: piecewise constant")
    for ax, lam, label in zip(axes[1:], args.lams, ("(b)", "(c)")):
        draw_section(
            ax,
            surfaces[f"lam={lam:g}"],
            args.extent,
            f"{label} blackbox interpolation, $\\lambda$ = {lam:g}",
            colorbar_label="interpolated loss $f_\\lambda(w)$",
        )
    fig.suptitle(f"L(w) = <a, rank(w)> on a random 2-D section of $R^{{{args.dim}}}$")
    save_figure(fig, args.out, "fig1_landscape")

    numbers = {
        "dim": args.dim,
        "resolution": args.resolution,
        "flat_fraction": {name: flat_fraction(values) for name, values in surfaces.items()},
        "max_gap_below_true": {
            f"lam={lam:g}": float((true_loss - surfaces[f"lam={lam:g}"]).max()) for lam in args.lams
        },
        "min_gap_below_true": {
            f"lam={lam:g}": float((true_loss - surfaces[f"lam={lam:g}"]).min()) for lam in args.lams
        },
    }
    save_numbers(numbers, args.out, "fig1_landscape")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    print(main())
