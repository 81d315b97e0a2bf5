"""Why RaMBO trails CE in the mini detection experiment: each suspect tested by runs.

    python -m rambo.detection.regime_study --work build/detection_variance --seeds 3 --jobs 2

Each hypothesis changes one setting of a mini row (`HYPOTHESES`) and trains it, with the
training app, from the same CE warm starts as the mini (`seed s` from warm start `s`, the
pipeline's design; the warm starts and the unchanged rows of [`variance_study`][rambo.detection.variance_study] in
`--work` are reused, or trained when missing). Every run is scored on a **validation split** of its own:
`--validation` images generated with another generator seed (1; the mini's train and test images
are seed 0's), so no choice reads the mini's test set. The classifier's logits on the validation
images' RoIs are recorded too (their standard deviation over the object classes, and the mean top-1
margin over the second logit): the scale the rank loss leaves the scores at.

The rule, fixed before the runs: a hypothesis is **supported** when its row's validation AP50
minus the unchanged row's, paired by seed, has a 95% Student-t interval above 0 (**refuted** when
below 0, else **not resolved**). A redesign of the mini adopts a setting only if it is supported,
the one with the largest mean gain when several are; the report also gives each hypothesis's
RaMBO-minus-CE difference (against CE at the same regime where the hypothesis changes CE too).
Outputs `regime.json` and `regime.md` in `--work`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from rambo.harness.atomic import write_json, write_text
from rambo.harness.paired_interval import paired_interval, verdict

from .evaluation_sampling import map_of_images
from .predict import collect_detections
from .synthetic import SYNTHETIC_CLASSES, generate
from .variance_study import prepare, run_folder, train, trained_detector
from .voc import VOCDetectionDataset

VALIDATION_SEED = 1  # the generator seed of the validation images (the mini's images are seed 0's)


@dataclass(frozen=True)
class Hypothesis:
    """A suspect for RaMBO's gap and the overrides that test it (`ce`: also applied to CE, else CE unchanged)."""

    name: str
    question: str
    rambo: tuple[str, ...]
    ce: tuple[str, ...] | None = None


HYPOTHESES = (
    Hypothesis(
        "lr_0.1",
        "the rank loss wants a larger step (the paper trains RaMBO at lr 0.1, 5x mmdetection's CE lr per image)",
        ("schedule.lr=0.1",),
    ),
    Hypothesis("lr_0.005", "the rank loss's steps are too large after the warm start", ("schedule.lr=0.005",)),
    Hypothesis(
        "epochs_8",
        "neither row has converged in 4 epochs (both rows trained 8, lr step after 6)",
        ("schedule.epochs=8", "schedule.steps=[6]"),
        ("schedule.epochs=8", "schedule.steps=[6]"),
    ),
    Hypothesis(
        "all_proposals",
        "the loss ranks the wrong RoIs: all proposals (Sec. 5.3's 320k) instead of the 512 sampled",
        ("loss.classifier_rois=all_proposals",),
    ),
    Hypothesis(
        "loss_weight_2",
        "the rank loss is too weak beside the box loss (gradient x2 after the rank)",
        ("loss.loss_weight=2.0",),
    ),
    Hypothesis(
        "loss_weight_0.5",
        "the rank loss is too strong beside the box loss (gradient x0.5 after the rank)",
        ("loss.loss_weight=0.5",),
    ),
    Hypothesis("no_margin", "the margin (0.15 on logits) hurts at the mini's logit scale", ("loss.margin=0.0",)),
    Hypothesis(
        "authors_margin",
        "the authors' random margin (mAP.py) instead of the paper's fixed one",
        ("loss.margin_mode=authors_random",),
    ),
)


def prepare_validation(work: Path, images: int) -> Path:
    """`images` validation images from generator seed `VALIDATION_SEED` (its `test` list)."""
    root = work / "data" / "validation"
    if not (root / "ImageSets" / "Main" / "test.txt").is_file():
        generate(root, seed=VALIDATION_SEED, num_trainval=1, num_test=images, image_size=96)
    return root


def scored(folder: Path, root: Path) -> dict:
    """A trained run's validation AP50 and the scale of its classifier logits on the validation RoIs.

    Kept beside the run (`validation.json`), so a rerun of the study reads it instead of evaluating again."""
    cached = folder / "validation.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    torch.set_num_threads(1)  # one process per run (``--jobs``), as the variance study scores
    model, config = trained_detector(folder)
    logits = []
    hook = model.roi_heads.box_predictor.register_forward_hook(lambda _m, _i, out: logits.append(out[0].detach()))
    dataset = VOCDetectionDataset([root], "test", SYNTHETIC_CLASSES, train=False)
    predictions, truths = collect_detections(model, dataset, torch.device("cpu"), config.eval.batch_size)
    hook.remove()
    objects = torch.cat(logits)[:, 1:]  # the object classes' columns (column 0: background)
    top2 = objects.topk(2, dim=1).values
    result = {
        "AP50": map_of_images(predictions, truths, sorted(truths), len(SYNTHETIC_CLASSES), config.eval.method),
        "logit_sd": objects.std().item(),
        "logit_top_margin": (top2[:, 0] - top2[:, 1]).mean().item(),
    }
    write_json(cached, result)
    return result


def compare(a: list[float], b: list[float]) -> dict:
    mean, low, high = paired_interval([100 * x for x in a], [100 * y for y in b])
    return {"difference": mean, "interval": [low, high], "verdict": verdict(low, high)}


def report(scores: dict, seeds: int, hypotheses=HYPOTHESES) -> dict:
    """`scores[(hypothesis or 'baseline', row, seed)]` -> per hypothesis: its gain and RaMBO - CE."""
    values = lambda h, row, key="AP50": [scores[(h, row, s)][key] for s in range(seeds)]  # noqa: E731
    result = {
        "baseline": {
            "rambo": values("baseline", "rambo"),
            "ce": values("baseline", "ce"),
            "rambo_minus_ce": compare(values("baseline", "rambo"), values("baseline", "ce")),
            "logit_sd": {r: statistics.fmean(values("baseline", r, "logit_sd")) for r in ("rambo", "ce")},
            "logit_top_margin": {
                r: statistics.fmean(values("baseline", r, "logit_top_margin")) for r in ("rambo", "ce")
            },
        },
        "hypotheses": [],
    }
    for hypothesis in hypotheses:
        ce = hypothesis.name if hypothesis.ce is not None else "baseline"
        row = {
            "name": hypothesis.name,
            "question": hypothesis.question,
            "rambo": values(hypothesis.name, "rambo"),
            "gain": compare(values(hypothesis.name, "rambo"), values("baseline", "rambo")),
            "rambo_minus_ce": compare(values(hypothesis.name, "rambo"), values(ce, "ce")),
            "logit_sd": statistics.fmean(values(hypothesis.name, "rambo", "logit_sd")),
        }
        if hypothesis.ce is not None:
            row["ce"] = values(hypothesis.name, "ce")
            row["ce_gain"] = compare(values(hypothesis.name, "ce"), values("baseline", "ce"))
        result["hypotheses"].append(row)
    supported = [row for row in result["hypotheses"] if row["gain"]["verdict"] == "holds"]
    result["adopted"] = max(supported, key=lambda row: row["gain"]["difference"])["name"] if supported else None
    return result


def markdown(result: dict) -> str:
    interval = lambda c: f"{c['difference']:+.1f} [{c['interval'][0]:+.1f}, {c['interval'][1]:+.1f}] {c['verdict']}"  # noqa: E731
    mean = lambda v: f"{100 * statistics.fmean(v):.1f}"  # noqa: E731
    base = result["baseline"]
    lines = [
        "| hypothesis | RaMBO val AP50 | gain over mini_rambo | RaMBO - CE | CE gain | logit sd |",
        "|---|---|---|---|---|---|",
        (
            f"| mini settings | {mean(base['rambo'])} (CE {mean(base['ce'])}) | - | {interval(base['rambo_minus_ce'])} | - | "
            f"{base['logit_sd']['rambo']:.2f} (CE {base['logit_sd']['ce']:.2f}) |"
        ),
    ]
    for row in result["hypotheses"]:
        ce_gain = interval(row["ce_gain"]) if "ce_gain" in row else "-"
        lines.append(
            f"| `{row['name']}`: {row['question']} | {mean(row['rambo'])} | {interval(row['gain'])} | "
            f"{interval(row['rambo_minus_ce'])} | {ce_gain} | {row['logit_sd']:.2f} |"
        )
    lines += [
        "",
        f"Validation AP50 (points), paired 95% intervals over seeds. Adopted by the rule: {result['adopted']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--work", type=Path, required=True, help="the variance study's folder (its warm starts are reused)"
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--validation", type=int, default=320, help="validation images (generator seed 1)")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at once (one thread each)")
    parser.add_argument("--only", nargs="*", help="these hypotheses only (default: all)")
    parser.add_argument("--extra-test", type=int, default=640, help="as the variance study's (its data folder)")
    args = parser.parse_args(argv)
    data_dir = prepare(args.work, args.extra_test)
    validation = prepare_validation(args.work, args.validation)
    chosen = [h for h in HYPOTHESES if not args.only or h.name in args.only]
    jobs = [("baseline", "rambo", s, ()) for s in range(args.seeds)] + [
        ("baseline", "ce", s, ()) for s in range(args.seeds)
    ]
    for h in chosen:
        jobs += [(h.name, "rambo", s, h.rambo) for s in range(args.seeds)]
        jobs += [(h.name, "ce", s, h.ce) for s in range(args.seeds)] if h.ce is not None else []

    def run(job):
        name, row, seed, overrides = job
        experiment = f"mini_{row}"
        if name == "baseline":  # the variance study's own run of this row and seed
            return train(args.work, data_dir, experiment, seed, seed, [])
        return train(
            args.work,
            data_dir,
            experiment,
            seed,
            seed,
            list(overrides),
            run_folder(args.work, f"{experiment}-{name}", seed, seed),
        )

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda w: train(args.work, data_dir, "mini_warm_start", w, None, []), range(args.seeds)))
        folders = list(pool.map(run, jobs))
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        values = pool.map(scored, folders, [validation] * len(folders))
        scores = {(name, row, seed): value for (name, row, seed, _), value in zip(jobs, values)}
    result = report(scores, args.seeds, chosen)
    result["runs"] = {f"{name} {row} seed{seed}": value for (name, row, seed), value in scores.items()}
    write_json(args.work / "regime.json", result)
    write_text(args.work / "regime.md", markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
