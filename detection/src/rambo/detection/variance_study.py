"""Where the mini detection experiment's variance comes from.

    python -m rambo.detection.variance_study --work build/detection_variance --seeds 4 --jobs 2

Trains, with the real training app (`python -m rambo.detection.train`, one subprocess per run),
the mini's CE warm start for each of `--seeds` seeds, then the two rows compared by the Table 5
claim (`mini_ce` and `mini_rambo`, or `--rows`) in three designs of (row seed, warm-start
seed) pairs:

* `pipeline`: row seed = warm-start seed (what `make reproduce` runs), seeds 0..n-1;
* `row_seed`: warm start 0, row seeds 0..n-1 (the row seed draws the data order, the flips and the
  RoI sampler's draws);
* `warm_start`: row seed 0, warm starts 0..n-1.

The training set is the mini's (the synthetic set's 160 trainval images, generator seed 0); the
test split is generated larger with the same seed: the generator draws trainval first, so its first
80 test images are the mini's test set (`mini_test`, what each run's own `metrics.json` scores)
and the next `--extra-test` are new (`extra_test`). Every trained row is evaluated on
`extra_test` ([`evaluation_sampling`][rambo.detection.evaluation_sampling]): AP50 on all of it, on its disjoint 80-image
parts (independent test sets of the mini's size) and by bootstrap. The report (`variance.json`,
`variance.md` in `--work`) gives each source's standard deviation of AP50 and of the
RaMBO-minus-CE difference paired by (row seed, warm start) and by test images, and the seeds a
+-2-point 95% interval would need at each size. Runs trained to the end are reused (their `metrics.json`), as are their
scores (`extra_test.json`); a run cut short resumes (`resume=auto`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rambo.harness.atomic import write_json, write_text
from rambo.harness.checkpoint import load_checkpoint
from rambo.harness.paired_interval import seeds_for_half_width

from .evaluation_sampling import bootstrap_maps, disjoint_maps, map_of_images
from .model import build_detector
from .predict import collect_detections
from .synthetic import SYNTHETIC_CLASSES, generate
from .voc import VOCDetectionDataset

MINI_TEST = 80  # the mini's test images (data/synthetic.yaml generate.test)


def designs(seeds: int) -> dict[str, list[tuple[int, int]]]:
    """`design -> [(row seed, warm-start seed)]` (see the module docstring)."""
    return {
        "pipeline": [(s, s) for s in range(seeds)],
        "row_seed": [(s, 0) for s in range(seeds)],
        "warm_start": [(0, w) for w in range(seeds)],
    }


def prepare(work: Path, extra: int) -> Path:
    """The mini's synthetic set with `extra` more test images, and the two test lists."""
    data_dir = work / "data"
    root = data_dir / "synthetic"
    if not (root / "ImageSets" / "Main" / "extra_test.txt").is_file():
        generate(root, seed=0, num_trainval=160, num_test=MINI_TEST + extra, image_size=96)
        ids = (root / "ImageSets" / "Main" / "test.txt").read_text().split()
        write_text(root / "ImageSets" / "Main" / "mini_test.txt", "".join(f"{i}\n" for i in ids[:MINI_TEST]))
        write_text(root / "ImageSets" / "Main" / "extra_test.txt", "".join(f"{i}\n" for i in ids[MINI_TEST:]))
    return data_dir


# The design the studies measured (commit bc482cd): every row 4 epochs, lr step after 3. The mini rows
# now train 8 (profile/mini.yaml, chosen by the regime study); the studies keep measuring the design
# they report, so their committed outputs stay what their command gives. An override wins over it.
STUDIED_SCHEDULE = ("schedule.epochs=4", "schedule.steps=[3]")


def studied(overrides: list[str]) -> list[str]:
    """`overrides` after `STUDIED_SCHEDULE`, less the schedule keys that `overrides` sets itself."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return [o for o in STUDIED_SCHEDULE if o.split("=", 1)[0] not in keys] + list(overrides)


def run_folder(work: Path, experiment: str, seed: int, warm: int | None) -> Path:
    return work / "runs" / experiment / (f"seed{seed}" if warm is None else f"seed{seed}_warm{warm}")


def train(
    work: Path,
    data_dir: Path,
    experiment: str,
    seed: int,
    warm: int | None,
    overrides: list[str],
    folder: Path | None = None,
) -> Path:
    """One run of the training app (its log beside it), in `folder` (default `run_folder`); returns it."""
    folder = folder or run_folder(work, experiment, seed, warm)
    if (folder / "metrics.json").is_file():  # trained to the end by an earlier invocation of the study
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "rambo.detection.train",
        f"experiment={experiment}",
        f"seed={seed}",
        f"data_dir={data_dir}",
        "data.test_set=mini_test",
        f"hydra.run.dir={folder}",
        "hydra.output_subdir=null",
        "resume=auto",
        "wandb.mode=disabled",
        "progress=false",
        "threads=1",
        *studied(overrides),
    ]
    if warm is not None:
        command.append(f"init_checkpoint={run_folder(work, 'mini_warm_start', warm, None) / 'checkpoint.pt'}")
    with open(folder / "study.log", "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return folder


def trained_detector(folder: Path):
    """A run's detector with its trained weights, and the run's own resolved configuration."""
    state = load_checkpoint(folder / "checkpoint.pt")
    config = OmegaConf.create(state["config"])
    model = build_detector(config.model, config.loss, len(SYNTHETIC_CLASSES))
    model.load_state_dict(state["state"]["model"])
    return model, config


def extra_test_maps(folder: Path, data_dir: Path, draws: int) -> dict:
    """AP50 of a trained row on `extra_test`: all of it, its disjoint mini-sized parts, bootstrap.

    Kept beside the run (`extra_test.json`), so a rerun of the study reads it instead of evaluating again."""
    cached = folder / "extra_test.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    torch.set_num_threads(1)  # one process per row (``--jobs``): threads of one process stall on a busy machine
    model, config = trained_detector(folder)
    dataset = VOCDetectionDataset([data_dir / "synthetic"], "extra_test", SYNTHETIC_CLASSES, train=False)
    predictions, truths = collect_detections(model, dataset, torch.device("cpu"), config.eval.batch_size)
    method = config.eval.method
    own = json.loads((folder / "metrics.json").read_text())
    result = {
        "mini_test": own["AP50"],
        "extra_test": map_of_images(predictions, truths, sorted(truths), len(SYNTHETIC_CLASSES), method),
        "parts": disjoint_maps(predictions, truths, len(SYNTHETIC_CLASSES), MINI_TEST, method).tolist(),
        "bootstrap": bootstrap_maps(
            predictions, truths, len(SYNTHETIC_CLASSES), draws, seed=0, size=MINI_TEST, method=method
        ).tolist(),
    }
    write_json(cached, result)
    return result


def sd(values) -> float | None:
    values = [100 * v for v in values]
    return statistics.stdev(values) if len(values) > 1 else None


def report(maps: dict, rows: tuple[str, str], seeds: int) -> dict:
    """Each source's standard deviation (AP50 points) of a row and of the paired difference."""
    a, b = rows
    table = {}
    first = maps[(a, 0, 0)]
    table["test images (80, disjoint parts of extra_test, same model)"] = {
        a: statistics.fmean(sd(maps[(a, s, w)]["parts"]) for (s, w) in designs(seeds)["pipeline"]),
        b: statistics.fmean(sd(maps[(b, s, w)]["parts"]) for (s, w) in designs(seeds)["pipeline"]),
        "difference": statistics.fmean(
            sd(np.subtract(maps[(a, s, w)]["parts"], maps[(b, s, w)]["parts"])) for (s, w) in designs(seeds)["pipeline"]
        ),
    }
    table["test images (80, bootstrap, same model)"] = {
        a: sd(first["bootstrap"]),
        b: sd(maps[(b, 0, 0)]["bootstrap"]),
        "difference": sd(np.subtract(first["bootstrap"], maps[(b, 0, 0)]["bootstrap"])),  # the same resampled images
    }
    for design, pairs in designs(seeds).items():
        for split in ("mini_test", "extra_test"):
            table[f"{design} ({split})"] = {
                a: sd([maps[(a, s, w)][split] for s, w in pairs]),
                b: sd([maps[(b, s, w)][split] for s, w in pairs]),
                "difference": sd([maps[(a, s, w)][split] - maps[(b, s, w)][split] for s, w in pairs]),
            }
    means = {
        split: {
            name: 100 * statistics.fmean(maps[(name, s, w)][split] for s, w in designs(seeds)["pipeline"])
            for name in rows
        }
        for split in ("mini_test", "extra_test")
    }
    needed = {}
    for split in ("mini_test", "extra_test"):
        spread = table[f"pipeline ({split})"]["difference"]
        needed[split] = seeds_for_half_width(spread, 2.0)
    return {
        "rows": list(rows),
        "seeds": seeds,
        "sd_points": table,
        "pipeline_means": means,
        "seeds_for_2_points": needed,
    }


def markdown(result: dict) -> str:
    a, b = result["rows"]
    lines = [f"| source | {a} | {b} | {a} - {b} (paired) |", "|---|---|---|---|"]
    show = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for source, row in result["sd_points"].items():
        lines.append(f"| {source} | {show(row[a])} | {show(row[b])} | {show(row['difference'])} |")
    lines.append("")
    lines.append(
        f"Standard deviations in AP50 points over {result['seeds']} seeds. Seeds a paired 95% interval "
        f"of at most +-2 points needs (pipeline design): {result['seeds_for_2_points']}."
    )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for the data, runs and report")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--extra-test", type=int, default=640, help="new test images beyond the mini's 80")
    parser.add_argument("--rows", nargs=2, default=["mini_rambo", "mini_ce"], help="experiment A and B (A - B)")
    parser.add_argument("--draws", type=int, default=200, help="bootstrap resamples")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at once (one thread each)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        dest="overrides",
        help="a Hydra override for every run (repeatable, e.g. --override schedule.epochs=1)",
    )
    args = parser.parse_args(argv)
    if args.extra_test < MINI_TEST:
        parser.error(f"--extra-test must be at least {MINI_TEST} (one mini-sized part)")
    data_dir = prepare(args.work, args.extra_test)
    pairs = sorted({pair for listed in designs(args.seeds).values() for pair in listed})
    with ThreadPoolExecutor(args.jobs) as pool:
        list(
            pool.map(
                lambda w: train(args.work, data_dir, "mini_warm_start", w, None, args.overrides), range(args.seeds)
            )
        )
        jobs = [(row, s, w) for row in args.rows for s, w in pairs]
        folders = list(pool.map(lambda job: train(args.work, data_dir, job[0], job[1], job[2], args.overrides), jobs))
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        scored = pool.map(extra_test_maps, folders, [data_dir] * len(folders), [args.draws] * len(folders))
        maps = dict(zip(jobs, scored))
    result = report(maps, tuple(args.rows), args.seeds)
    result["runs"] = {f"{row} seed{s} warm{w}": value for (row, s, w), value in maps.items()}
    write_json(args.work / "variance.json", result)
    write_text(args.work / "variance.md", markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
