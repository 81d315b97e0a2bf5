"""Train and evaluate Faster R-CNN with the ``ce`` or ``rambo`` classifier loss (paper 5.2, Tables 5 and 8).

``python -m rambo.detection.train +experiment=mini_rambo seed=1`` (Hydra; configs in ``conf/``).
Writes ``checkpoint_path`` after every epoch (atomically), ``curve_path`` (per-epoch mean losses)
and, after evaluation on the test split (VOC 2007 test, or the synthetic test split), the metrics
JSON at ``metrics_path``. ``resume=true`` continues from the checkpoint to the same weights as an
uninterrupted run, and refuses a checkpoint written under a different configuration.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from .augmentation import random_flips
from .checkpoint import load_checkpoint, save_checkpoint
from .evaluation import evaluate_voc
from .model import build_detector
from .predict import collect_detections
from .synthetic import SYNTHETIC_CLASSES, generate
from .voc import VOC_CLASSES, VOCDetectionDataset, collate_detection
from .wandb_run import init_wandb

CLASS_LISTS = {"voc": VOC_CLASSES, "synthetic": SYNTHETIC_CLASSES}


def class_names(data: DictConfig) -> tuple[str, ...]:
    if data.classes not in CLASS_LISTS:
        raise ValueError(f"data.classes must be one of {sorted(CLASS_LISTS)}, got {data.classes!r}")
    return CLASS_LISTS[data.classes]


def prepare_data(data: DictConfig) -> None:
    """Generate the synthetic dataset when it is configured and absent; VOC must be downloaded first."""
    if data.get("generate") and not (Path(data.test_root) / "ImageSets" / "Main" / f"{data.test_set}.txt").is_file():
        spec = data.generate
        generate(data.root, seed=spec.seed, num_trainval=spec.trainval, num_test=spec.test, image_size=spec.size)
    for root in list(data.train_roots) + [data.test_root]:
        if not Path(root).is_dir():
            raise FileNotFoundError(
                f"dataset folder {root} not found; for Pascal VOC run\n"
                f"  python -m rambo.detection.download {data.root}\n(it prints the manual steps if the network is missing)"
            )


def learning_rate_factor(iteration: int, iterations_per_epoch: int, schedule: DictConfig) -> float:
    """Linear warm-up over ``warmup_iterations`` from ``warmup_ratio``, then x0.1 at each epoch in ``steps``.

    Paper: 12 epochs, "reduced by a factor of 10 after 9 epochs" -> ``steps: [9]``.
    """
    epoch = iteration // iterations_per_epoch
    factor = 0.1 ** sum(epoch >= step for step in schedule.steps)
    if iteration < schedule.warmup_iterations:
        progress = iteration / schedule.warmup_iterations
        factor *= schedule.warmup_ratio + (1.0 - schedule.warmup_ratio) * progress
    return factor


# Keys that may change between a run and its resumption: where things are written or read from,
# how the run is displayed, and the number of epochs (to extend a finished run).
RESUMABLE_CHANGES = {
    "resume", "progress", "wandb", "threads", "device", "num_workers", "output_dir", "metrics_path",
    "curve_path", "checkpoint_path", "data_dir", "data.root", "data.train_roots", "data.test_root", "schedule.epochs",
}


def run_identity(cfg: DictConfig) -> dict:
    """The resolved configuration without :data:`RESUMABLE_CHANGES`, flattened to ``{"a.b": value}``."""
    flat = {}

    def walk(node, prefix):
        for key, value in node.items():
            name = f"{prefix}{key}"
            if name in RESUMABLE_CHANGES:
                continue
            if isinstance(value, dict):
                walk(value, f"{name}.")
            else:
                flat[name] = value

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return flat


def check_same_run(saved: dict, current: dict, path: Path) -> None:
    differing = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    if differing:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in differing[:5])
        raise ValueError(f"{path} was written by a different configuration ({details}); "
                         "use another checkpoint_path or resume=false")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def write_json_atomic(payload: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(handle, "w") as out:
        json.dump(payload, out, indent=2)
    os.replace(temporary, path)


def train(cfg: DictConfig) -> dict:
    """Train per ``cfg``, evaluate on the test split, write the metrics JSON; returns the metrics."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    classes = class_names(cfg.data)
    prepare_data(cfg.data)
    train_set = VOCDetectionDataset(cfg.data.train_roots, cfg.data.train_set, classes, train=True, max_images=cfg.data.max_train_images)
    test_set = VOCDetectionDataset([cfg.data.test_root], cfg.data.test_set, classes, train=False, max_images=cfg.data.max_test_images)

    model = build_detector(cfg.model, cfg.loss, len(classes)).to(device)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(parameters, lr=cfg.schedule.lr, momentum=cfg.schedule.momentum, weight_decay=cfg.schedule.weight_decay)
    iterations_per_epoch = -(-len(train_set) // cfg.schedule.batch_size)
    if cfg.schedule.max_iterations_per_epoch:
        iterations_per_epoch = min(iterations_per_epoch, cfg.schedule.max_iterations_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda iteration: learning_rate_factor(iteration, iterations_per_epoch, cfg.schedule)
    )

    output_dir = Path(cfg.output_dir)
    checkpoint_path = Path(cfg.checkpoint_path)
    identity = run_identity(cfg)
    start_epoch, train_seconds, train_images, history = 0, 0.0, 0, []
    state = load_checkpoint(checkpoint_path) if cfg.resume and checkpoint_path.is_file() else None
    if state is not None:
        try:
            check_same_run(state["config"], identity, checkpoint_path)
        except ValueError as error:
            if cfg.resume != "auto":
                raise
            # resume=auto (the pipeline's): a checkpoint of another configuration is set aside.
            stale = checkpoint_path.with_name(checkpoint_path.name + ".stale")
            os.replace(checkpoint_path, stale)
            print(f"{error}: moved it to {stale} and starting over", flush=True)
            state = None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        start_epoch, train_seconds, train_images, history = state["epoch"], state["train_seconds"], state["train_images"], state["history"]

    run = init_wandb(cfg.wandb.mode, cfg.wandb.project, cfg.experiment, f"{cfg.experiment}-seed{cfg.seed}",
                     OmegaConf.to_container(cfg, resolve=True), output_dir / "wandb")
    for epoch in range(start_epoch, cfg.schedule.epochs):
        model.train()
        # Order and flips depend on (seed, epoch) only, so a resumed epoch sees the same batches.
        order = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        flips = torch.Generator().manual_seed(cfg.seed * 1000 + epoch + 500)
        loader = torch.utils.data.DataLoader(train_set, batch_size=cfg.schedule.batch_size, shuffle=True, generator=order,
                                             collate_fn=collate_detection, num_workers=cfg.num_workers, drop_last=False)
        sums, count = {}, 0
        progress = tqdm(loader, total=iterations_per_epoch, desc=f"epoch {epoch + 1}/{cfg.schedule.epochs}", disable=not cfg.progress)
        start = time.perf_counter()
        for step, (images, targets) in enumerate(progress):
            if step >= iterations_per_epoch:
                break
            images, targets = random_flips(images, targets, flips)
            images = [image.to(device) for image in images]
            targets = [{"boxes": t["boxes"].to(device), "labels": t["labels"].to(device)} for t in targets]
            losses = model(images, targets)
            loss = sum(losses.values())
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss at epoch {epoch + 1}, step {step}: { {k: float(v) for k, v in losses.items()} }")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            train_images += len(images)
            count += 1
            for key, value in losses.items():
                sums[key] = sums.get(key, 0.0) + value.item()
            progress.set_postfix(loss=f"{loss.item():.3f}", lr=f"{scheduler.get_last_lr()[0]:.4f}")
            if run is not None:
                run.log({f"train/{k}": v.item() for k, v in losses.items()} | {"train/lr": scheduler.get_last_lr()[0]})
        train_seconds += time.perf_counter() - start
        means = {k: v / max(count, 1) for k, v in sums.items()}
        history.append({"epoch": epoch + 1, "loss": sum(means.values()), **means})
        save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                         "torch_rng": torch.get_rng_state(), "epoch": epoch + 1, "train_seconds": train_seconds,
                         "train_images": train_images, "history": history, "config": identity}, checkpoint_path)
        write_json_atomic(history, cfg.curve_path)

    write_json_atomic(history, cfg.curve_path)  # also when a resumed run had no epoch left to train
    start = time.perf_counter()
    predictions, ground_truths = collect_detections(model, test_set, device, cfg.schedule.batch_size, cfg.progress)
    eval_seconds = time.perf_counter() - start
    results = {method: evaluate_voc(predictions, ground_truths, len(classes), method) for method in ("area", "11point")}
    primary = results[cfg.eval.method]
    metrics = {
        "experiment": cfg.experiment,
        "seed": cfg.seed,
        "loss": cfg.loss.name,
        "backbone": cfg.model.backbone,
        "AP50": primary["map"],  # the paper's metric (fraction), what the pipeline's tables read
        "map50": primary["map"],
        "ap_method": cfg.eval.method,
        "map50_area": results["area"]["map"],
        "map50_11point": results["11point"]["map"],
        "ap50_per_class": {name: (None if np.isnan(ap) else ap) for name, ap in zip(classes, primary["ap"])},
        "train_images_per_second": train_images / train_seconds if train_seconds > 0 else None,
        "eval_images_per_second": len(test_set) / eval_seconds if eval_seconds > 0 else None,
        "epochs": cfg.schedule.epochs,
        "history": history,
    }
    write_json_atomic(metrics, cfg.metrics_path)
    if run is not None:
        run.summary.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        run.finish()
    return metrics


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    metrics = train(cfg)
    print(json.dumps({k: metrics[k] for k in ("experiment", "seed", "map50", "map50_area", "map50_11point", "train_images_per_second")}))


if __name__ == "__main__":
    main()
