"""Fig. 4: example retrievals, one query per row followed by its top-k results; correct and wrong results framed.

`python -m rambo.figures.fig4_retrievals --out figures/out --retrievals R.npz [--image-root DATA] [--queries 6]
[--top-k 5]`

The input format is described in `retrieval_examples.py`. Correct results get a bluish-green
frame and a tick, wrong ones a vermillion frame and a cross (the shape tells them apart without
colour). Writes `fig4_retrievals.{png,pdf}` and `fig4_retrievals.json` (precision of the
shown results per query and over all, and the fraction of queries with a correct first result).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from rambo.harness.numerics import start_command
from rambo.harness.run_files import one_line_errors

from .figure_style import NEGATIVE, OKABE_ITO, POSITIVE, save_figure, save_numbers
from .retrieval_examples import as_image, load_retrievals, thumbnail, with_border


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--retrievals", type=Path, required=True, help=".npz with query, results, correct")
    parser.add_argument("--image-root", type=Path, help="folder that relative image paths start from")
    parser.add_argument("--queries", type=int, default=6, help="rows shown (the first queries of the file)")
    parser.add_argument("--top-k", type=int, default=5, help="results shown per query")
    parser.add_argument("--size", type=int, default=128, help="thumbnail side in pixels")
    args = parser.parse_args(argv)
    if args.queries < 1 or args.top_k < 1:
        parser.error("--queries and --top-k must be >= 1")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    dump = load_retrievals(args.retrievals)
    queries = min(args.queries, len(dump["query"]))
    k = min(args.top_k, dump["correct"].shape[1])
    border = max(2, args.size // 20)

    fig, axes = plt.subplots(
        queries, k + 1, figsize=(1.5 * (k + 1), 1.6 * queries), squeeze=False, constrained_layout=True
    )
    for row in range(queries):
        query = with_border(
            thumbnail(as_image(dump["query"][row], args.image_root), args.size), OKABE_ITO["black"], border
        )
        axes[row, 0].imshow(query)
        axes[row, 0].set_title("query" if row == 0 else "", fontsize=9)
        for rank in range(k):
            correct = bool(dump["correct"][row, rank])
            image = thumbnail(as_image(dump["results"][row, rank], args.image_root), args.size)
            ax = axes[row, rank + 1]
            ax.imshow(with_border(image, POSITIVE if correct else NEGATIVE, border))
            ax.text(
                0.93,
                0.93,
                "\u2713" if correct else "\u2717",
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize=12,
                fontweight="bold",
                color="white",
                bbox={"boxstyle": "round,pad=0.1", "facecolor": POSITIVE if correct else NEGATIVE, "edgecolor": "none"},
            )
            if row == 0:
                ax.set_title(f"result {rank + 1}", fontsize=9)
    for ax in axes.flat:
        ax.set_axis_off()
    fig.suptitle(
        f"top-{k} retrievals: green frame and tick = same class as the query, red frame and cross = other class"
    )
    save_figure(fig, args.out, "fig4_retrievals")

    shown = dump["correct"][:queries, :k]
    numbers = {
        "queries": queries,
        "k": k,
        "precision_per_query": shown.mean(axis=1).tolist(),
        "precision": float(shown.mean()),
        "first_result_correct": float(shown[:, 0].mean()),
    }
    save_numbers(numbers, args.out, "fig4_retrievals")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    with one_line_errors():  # a bad retrieval dump or image: one error line naming it, exit code 2
        print(main())
