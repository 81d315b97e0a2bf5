"""Fig. 5 (App. C): how the Fig. 1 section changes with lambda (blackbox) and with the number of bins (FastAP).

`python -m rambo.figures.fig5_landscape_evolution --out figures/out [--lams 0.001 0.003 0.01 0.03]
[--bins 5 10 20 40] [--resolution 200] [--seed 0]`

Top row: the blackbox interpolation `f_lam` for increasing lambda (smoother, further below the
true loss). Bottom row: the loss on FastAP's soft ranks for increasing bins (closer to the exact,
piecewise-constant loss). Writes `fig5_landscape_evolution.{png,pdf}` and `.json` (per panel:
the fraction of the plane with a zero gradient and the mean absolute difference from the true loss).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from rambo.core import exact_rank
from rambo.harness.numerics import start_command

from .blackbox_interpolation import blackbox_interpolation
from .fastap_soft_rank import fastap_soft_rank
from .figure_style import save_figure, save_numbers
from .landscape_plot import draw_section, flat_fraction
from .loss_section import LossSection


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--lams",
        type=float,
        nargs="+",
        default=[0.001, 0.003, 0.01, 0.03],
        help="increasing blackbox strengths (rambo.core.rank's lam)",
    )
    parser.add_argument("--bins", type=int, nargs="+", default=[5, 10, 20, 40], help="increasing FastAP bin counts")
    parser.add_argument("--dim", type=int, default=20, help="length N of the score vector w")
    parser.add_argument("--extent", type=float, default=1.0, help="half-width of the plotted square")
    parser.add_argument("--resolution", type=int, default=200, help="grid points per axis")
    parser.add_argument("--seed", type=int, default=0, help="seed of the section (the same as Fig. 1's)")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    section = LossSection.random(args.dim, args.extent, args.seed)
    points = section.grid(args.resolution)
    score_range = section.value_range(args.resolution)
    true_loss = section.loss_of_ranks(exact_rank(points))
    rows = {
        "blackbox": {f"lam={lam:g}": blackbox_interpolation(points, section.weights, lam) for lam in args.lams},
        "fastap": {
            f"bins={bins}": section.loss_of_ranks(fastap_soft_rank(points, bins, score_range)) for bins in args.bins
        },
    }
    columns = max(len(args.lams), len(args.bins))
    fig, axes = plt.subplots(2, columns, figsize=(4.3 * columns, 7.2), squeeze=False, constrained_layout=True)
    labels = {"blackbox": ("(a) blackbox, $\\lambda$ = ", args.lams), "fastap": ("(b) FastAP, bins = ", args.bins)}
    for row_axes, (name, surfaces) in zip(axes, rows.items()):
        prefix, values = labels[name]
        for ax, value, surface in zip(row_axes, values, surfaces.values()):
            draw_section(ax, surface, args.extent, f"{prefix}{value:g}", colorbar_label="loss with surrogate ranks")
        for ax in row_axes[len(surfaces) :]:
            ax.set_axis_off()
    fig.suptitle(f"Evolution of the section of L(w) = <a, rank(w)>, $R^{{{args.dim}}}$, with the surrogates' parameter")
    save_figure(fig, args.out, "fig5_landscape_evolution")

    numbers = {
        name: {
            key: {
                "flat_fraction": flat_fraction(surface),
                "mean_abs_difference_from_true": float((surface - true_loss).abs().mean()),
            }
            for key, surface in surfaces.items()
        }
        for name, surfaces in rows.items()
    }
    numbers["true"] = {"flat_fraction": flat_fraction(true_loss)}
    save_numbers(numbers, args.out, "fig5_landscape_evolution")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    print(main())
