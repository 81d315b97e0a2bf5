"""What a GPU user should budget for each paper experiment: training time on one
GPU, computed from the step times that ``make gpu-check`` measured (``benchmarks/gpu_check.json``),
the training-set sizes and the paper's epochs, with every assumption in the table's notes.

    python benchmarks/gpu_budget.py                     # Markdown table on stdout
    python benchmarks/gpu_budget.py --check benchmarks/gpu_check.json --markdown out.md

Measured rows only: an experiment whose step gpu-check did not time (ResNet-101, ResNeXt-101) says
so instead of being extrapolated.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Training-split sizes (images) as the paper states them (Sec. 5.1, 5.2) and the datasets define them.
TRAIN_IMAGES = {
    "sop": 59_551,  # Sec. 5.1: 59,551 images of 11,318 classes
    "cub": 5_864,  # the first 100 classes of CUB-200-2011 (Sec. 5.1)
    "inshop": 25_882,  # Sec. 5.1: 25,882 images of 3,997 classes
    "voc07": 5_011,  # VOC 2007 trainval
    "voc0712": 16_551,  # VOC 2007 + 2012 trainval
}


@dataclass(frozen=True)
class Experiment:
    """One paper experiment: which gpu-check step stands for it, its data, epochs and images per
    epoch (and their sources)."""

    name: str
    step: str  # "retrieval_step", "recall_k_step", or a detection_step experiment name
    dataset: str
    epochs: int
    epochs_source: str
    images_per_epoch: int | None = None  # None: one pass over the training split
    epoch_source: str = "one pass over the training split"


EXPERIMENTS = (
    Experiment(
        "sop_log, sop_loglog, ablations",
        "retrieval_step",
        "sop",
        80,
        "App. A: at most 80 epochs",
        660 * 128,
        "660 batches of 128: 66 super-label pairs x 10 (FastAP's epoch, data.sampler.epoch_length)",
    ),
    Experiment("cub_log, cub_loglog, ablations", "retrieval_step", "cub", 80, "App. A"),
    Experiment(
        "inshop_log, inshop_loglog, ablations",
        "retrieval_step",
        "inshop",
        80,
        "App. A",
        1012 * 128,
        "at most 1,012 batches of 128: 253 super-label pairs x 4",
    ),
    Experiment(
        "sop_recallk(_simix)",
        "recall_k_step",
        "sop",
        55,
        "Recall@k code, src/main.py (sop: 55)",
        14 * 4000,
        "14 batches of 4,000 (59,551 // 4,000)",
    ),
    Experiment(
        "cub_recallk(_simix)",
        "recall_k_step",
        "cub",
        40,
        "Recall@k code (cub: 40); rate measured at batch 4,000",
        14 * 400,
        "14 batches of 400",
    ),
    Experiment(
        "inshop_recallk(_simix)",
        "recall_k_step",
        "inshop",
        55,
        "SOP's (no In-shop setting in the Recall@k code)",
        6 * 4000,
        "6 batches of 4,000",
    ),
    Experiment("table5_r50_voc07_rambo, table8_*", "table5_r50_voc07_rambo", "voc07", 12, "Sec. 5.2: 12 epochs"),
    Experiment("table5_r50_voc07_ce", "table5_r50_voc07_ce", "voc07", 12, "Sec. 5.2"),
    Experiment("table5_r50_voc0712_rambo", "table5_r50_voc07_rambo", "voc0712", 12, "Sec. 5.2"),
    Experiment("table5_r50_voc0712_ce", "table5_r50_voc07_ce", "voc0712", 12, "Sec. 5.2"),
    Experiment("table5_r101_voc0712_*, table5_x101_voc0712_*", "not measured", "voc0712", 12, "Sec. 5.2"),
)


def step_rates(check: dict) -> dict[str, dict]:
    """``{step name: {"images_per_second", "batch", "peak_gib"}}`` of the measured training steps."""
    sections = check["sections"]
    rates = {}
    for name in ("retrieval_step", "recall_k_step"):
        section = sections.get(name, {})
        if section.get("ok") and section.get("images_per_second"):
            rates[name] = {k: section[k] for k in ("images_per_second", "batch", "peak_gib")}
    for run in sections.get("detection_step", {}).get("runs", []):
        if run.get("images_per_second"):
            rates[run["experiment"]] = {k: run[k] for k in ("images_per_second", "batch", "peak_gib")}
    return rates


def budget(check: dict) -> list[dict]:
    """One row per experiment: hours of training on the measured GPU (``None`` where not measured)."""
    rates = step_rates(check)
    rows = []
    for experiment in EXPERIMENTS:
        per_epoch = experiment.images_per_epoch or TRAIN_IMAGES[experiment.dataset]
        images = per_epoch * experiment.epochs
        rate = rates.get(experiment.step)
        hours = None if rate is None else images / rate["images_per_second"] / 3600
        rows.append(
            {
                "experiment": experiment.name,
                "dataset": experiment.dataset,
                "epochs": experiment.epochs,
                "epochs_source": experiment.epochs_source,
                "images_per_epoch": per_epoch,
                "epoch_source": experiment.epoch_source,
                "training_images": images,
                "images_per_second": None if rate is None else rate["images_per_second"],
                "peak_gib": None if rate is None else rate["peak_gib"],
                "hours": hours,
            }
        )
    return rows


def markdown(rows: list[dict], check: dict) -> str:
    meta = check.get("meta", {})
    lines = [
        f"Training time per run on one {meta.get('device_name', 'GPU')} (torch {meta.get('torch', '?')}, "
        f"`make gpu-check` of {meta.get('date', '?')}), from the measured step throughput:",
        "",
        "| experiment | data (train images) | images per epoch | epochs | images/s measured | peak GiB | hours per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rate = "not measured" if row["images_per_second"] is None else f"{row['images_per_second']:.0f}"
        peak = "-" if row["peak_gib"] is None else f"{row['peak_gib']:.1f}"
        hours = "not measured" if row["hours"] is None else f"{row['hours']:.2f}"
        lines.append(
            f"| {row['experiment']} | {row['dataset']} ({TRAIN_IMAGES[row['dataset']]:,}) | "
            f"{row['images_per_epoch']:,} ({row['epoch_source']}) | "
            f"{row['epochs']} ({row['epochs_source']}) | {rate} | {peak} | {hours} |"
        )
    lines += [
        "",
        "Assumptions: the images per epoch above (the configs' epochs: the super-label sampler's "
        "FastAP epoch, m-per-class batches of the Recall@k rows) at the measured rate of the training "
        "step alone (random inputs made in memory: retrieval's on the GPU, detection's copied from "
        "host memory each step; no decoding, augmentation or data loader, no evaluation, no "
        "checkpointing); every paper epoch run in full (the paper reports the best evaluation of "
        "at most 80 epochs). Multiply by 3 seeds per row. The retrieval rows' ablations train like "
        "their row. Periodic evaluation is extra: embedding the test split is a forward pass (faster "
        "than a training step) and the Recall@K search at SOP scale took the measured "
        "`recall_at_k_eval` time per evaluation.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, default=HERE / "gpu_check.json", help="gpu_check.json of a GPU run")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if not args.check.is_file():
        raise SystemExit(f"{args.check} not found: run `make gpu-check` on a GPU first")
    check = json.loads(args.check.read_text())
    if check.get("meta", {}).get("toy") or not check.get("meta", {}).get("gpu_found"):
        raise SystemExit(f"{args.check} is a toy run without a GPU: its step times say nothing about a GPU")
    text = markdown(budget(check), check)
    if args.markdown:
        args.markdown.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
