"""Fig. 2: the mini-batch estimate of mAP against batch size, beside the dataset's true mAP, with score memory.

`python -m rambo.figures.fig2_minibatch_map --out figures/out [--items 2000] [--classes 10] [--tau 3]
[--batch-sizes 4 8 ... 1024] [--batches 200]`

Writes `fig2_minibatch_map.{png,pdf}` and `fig2_minibatch_map.json` (the true mAP and, per batch
size, the mean and standard deviation of the estimates without and with memory).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from rambo.core.metrics import average_precision
from rambo.harness.numerics import start_command

from .figure_style import OKABE_ITO, save_figure, save_numbers
from .minibatch_map import minibatch_map_estimates, synthetic_class_scores


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--items", type=int, default=2000, help="dataset size")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--signal", type=float, default=2.0, help="class evidence added to the true class's score")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64, 128, 256, 512, 1024])
    parser.add_argument("--batches", type=int, default=200, help="sampled mini-batches per batch size")
    parser.add_argument("--tau", type=int, default=3, help="batches remembered by the score memory")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    scores, relevant = synthetic_class_scores(args.items, args.classes, args.signal, args.seed)
    true_map = average_precision(scores, relevant)
    curves = {"no memory": 0, f"memory tau={args.tau}": args.tau}
    rows = []
    for batch_size in args.batch_sizes:
        row = {"batch_size": batch_size}
        for name, tau in curves.items():
            estimates = minibatch_map_estimates(scores, relevant, batch_size, args.batches, tau, args.seed + batch_size)
            row[name] = {
                "mean": float(estimates.mean()),
                "std": float(estimates.std()) if len(estimates) > 1 else 0.0,
                "batches": len(estimates),
            }
        rows.append(row)

    fig, (ax_map, ax_bias) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    sizes = [row["batch_size"] for row in rows]
    for (name, tau), colour, marker in zip(curves.items(), (OKABE_ITO["vermillion"], OKABE_ITO["blue"]), ("o", "s")):
        mean = [row[name]["mean"] for row in rows]
        std = [row[name]["std"] for row in rows]
        label = "mini-batch estimate" if tau == 0 else f"estimate with score memory ($\\tau$ = {tau})"
        ax_map.plot(sizes, mean, marker=marker, color=colour, label=label + ", mean")
        ax_map.fill_between(
            sizes,
            [m - s for m, s in zip(mean, std)],
            [m + s for m, s in zip(mean, std)],
            color=colour,
            alpha=0.2,
            label=label + ", $\\pm$1 std",
        )
        ax_bias.plot(sizes, [m - true_map for m in mean], marker=marker, color=colour, label=label)
    ax_map.axhline(
        true_map, color=OKABE_ITO["black"], linestyle="--", label=f"true mAP of the dataset ({true_map:.3f})"
    )
    for ax in (ax_map, ax_bias):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(size) for size in sizes])
    ax_map.set(xlabel="batch size (items)", ylabel="mAP", title="mini-batch estimate of mAP")
    ax_map.legend(loc="upper right")
    ax_bias.axhline(0.0, color=OKABE_ITO["black"], linestyle="--", linewidth=0.8)
    ax_bias.set(xlabel="batch size (items)", ylabel="bias: mean estimate - true mAP", title="bias of the estimate")
    ax_bias.legend(loc="upper right")
    fig.suptitle(
        f"{args.items} items, {args.classes} classes, scores = {args.signal:g} x class evidence + N(0, 1) noise"
    )
    save_figure(fig, args.out, "fig2_minibatch_map")

    numbers = {"true_map": true_map, "tau": args.tau, "curves": list(curves), "rows": rows}
    save_numbers(numbers, args.out, "fig2_minibatch_map")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    print(main())
