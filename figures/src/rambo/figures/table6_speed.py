"""Table 6 as a figure: AP-loss forward+backward time against sequence length, log-log.

`python -m rambo.figures.table6_speed --out figures/out --bench core/benchmarks/ap_loss.json [more.json ...]`

Each `--bench` file is the JSON of `python -m rambo.core.benchmark` (`make bench`):
`{"meta": {...}, "rows": [{"n", "device", "ours_ms", "reference_ms"?, "sort_ms", ...}]}`; give a
CPU and a GPU run to draw both. The paper's CPU and GPU rows come from
`rambo.core.benchmark.PAPER_TABLE_6`. Writes `table6_speed.{png,pdf}` and `table6_speed.json`
(per run and length: the times and the speed-up over the reference algorithm).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from rambo.core.benchmark import PAPER_TABLE_6
from rambo.harness.numerics import start_command
from rambo.harness.run_files import ListOf, one_line_errors, read_json

from .figure_style import OKABE_ITO, save_figure, save_numbers

PAPER_LABELS = {"cpu": "paper Table 6, 1 Xeon Gold core", "cuda": "paper Table 6, Tesla V100"}
_TIME = (float, None)
#: What is read of a benchmark JSON (the schema of `rambo.core.benchmark`).
BENCHMARK = {
    "meta?": {"threads?": (int, None), "device_name?": (str, None)},
    "rows": ListOf({"n": int, "ours_ms": float, "sort_ms": float, "reference_ms?": _TIME, "device?": str}, least=1),
}


def load_benchmark(path: Path) -> dict:
    """A benchmark JSON, checked: rows sorted by length, each with `n`, `ours_ms` and `sort_ms`;
    a missing or bad file is a [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError] saying how
    to write it."""
    path = Path(path)
    bench = read_json(path, "write it with `make bench` (python -m rambo.core.benchmark)", BENCHMARK)
    bench["rows"] = sorted(bench["rows"], key=lambda row: row["n"])
    bench.setdefault("meta", {})
    return bench


def run_label(bench: dict) -> str:
    meta, device = bench["meta"], bench["rows"][0].get("device", "cpu")
    threads = f", {meta['threads']} thread(s)" if "threads" in meta and device == "cpu" else ""
    return f"{meta.get('device_name') or device}{threads}"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--bench", type=Path, nargs="+", required=True, help="JSON file(s) of rambo.core.benchmark")
    args = parser.parse_args(argv)
    benches = [load_benchmark(path) for path in args.bench]

    fig, ax = plt.subplots(figsize=(6.5, 4.8), constrained_layout=True)
    for device, marker in (("cpu", "o"), ("cuda", "s")):
        sizes = sorted(PAPER_TABLE_6[device])
        ax.plot(
            sizes,
            [PAPER_TABLE_6[device][n] for n in sizes],
            color=OKABE_ITO["black"],
            linestyle=":" if device == "cpu" else "-.",
            marker=marker,
            markerfacecolor="none",
            label=PAPER_LABELS[device],
        )
    numbers = {"runs": []}
    run_colours = [
        (OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["sky_blue"]),
        (OKABE_ITO["vermillion"], OKABE_ITO["reddish_purple"], OKABE_ITO["bluish_green"]),
    ]
    for bench, (ours_colour, reference_colour, sort_colour) in zip(benches, run_colours * len(benches)):
        label, rows = run_label(bench), bench["rows"]
        sizes = [row["n"] for row in rows]
        ax.plot(
            sizes,
            [row["ours_ms"] for row in rows],
            color=ours_colour,
            marker="o",
            linewidth=2,
            label=f"this project, {label}",
        )
        with_reference = [row for row in rows if row.get("reference_ms") is not None]
        if with_reference:
            ax.plot(
                [row["n"] for row in with_reference],
                [row["reference_ms"] for row in with_reference],
                color=reference_colour,
                marker="^",
                label=f"reference algorithm, {label}",
            )
        ax.plot(
            sizes,
            [row["sort_ms"] for row in rows],
            color=sort_colour,
            marker="x",
            linestyle="--",
            label=f"one float32 sort, {label}",
        )
        numbers["runs"].append(
            {
                "label": label,
                "rows": [
                    {
                        "n": row["n"],
                        "ours_ms": row["ours_ms"],
                        "reference_ms": row.get("reference_ms"),
                        "sort_ms": row["sort_ms"],
                        "speedup_vs_reference": row["reference_ms"] / row["ours_ms"]
                        if row.get("reference_ms")
                        else None,
                        "paper_ms": PAPER_TABLE_6.get(row.get("device", "cpu"), {}).get(row["n"]),
                    }
                    for row in rows
                ],
            }
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length n (scores)",
        ylabel="forward + backward time (ms)",
        title="AP loss: time against sequence length (paper Table 6)",
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=7)
    save_figure(fig, args.out, "table6_speed")
    save_numbers(numbers, args.out, "table6_speed")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    with one_line_errors():  # a bad benchmark file: one error line naming it, exit code 2
        print(main())
