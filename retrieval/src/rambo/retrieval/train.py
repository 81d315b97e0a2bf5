"""Training of retrieval embeddings with rank losses (paper Sec. 5.1, App. A): a Hydra app.

    python -m rambo.retrieval.train                                   # mini profile, synthetic set
    python -m rambo.retrieval.train experiment=sop_log profile=paper  # a paper row
    python -m rambo.retrieval.train experiment=synthetic_contrastive seed=1
    python -m rambo.retrieval.train ... resume=true                   # continue a killed run

Every ``eval_every`` epochs the model is evaluated on the test split and on a class-disjoint
validation split of the training classes; two protocols are reported, labelled:

* ``paper_protocol``: the evaluation with the best test R@1 (Kim et al. 2018, as the paper does);
* ``fair_protocol``: the test metrics of the evaluation with the best *validation* R@1.

Outputs (paths from the config): ``metrics_path`` (JSON, read by the DVC pipeline),
``curve_path`` (a JSON list, one record per epoch), ``checkpoint_path`` (every epoch, atomic; ``resume``
continues from it to the same final metrics) and ``best_validation.pt`` beside it.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from .checkpoint import load_checkpoint, rng_states, save_checkpoint, set_rng_states
from .datasets import generate_synthetic, load_dataset
from .distributed import ShardedBatchSampler, detect_setup, global_batch_loss, init_process_group
from .evaluate import compute_embeddings, evaluate_model, retrieval_metrics, write_json_atomic
from .model import build_model
from .samplers import MPerClassBatchSampler, SuperLabelBatchSampler
from .transforms import eval_transform, train_transform
from .two_pass import two_pass_backward
from .validation_split import split_validation_classes
from .wandb_run import start_run

CONFIG_DIR = Path(__file__).parent / "configs"
PAPER_PROTOCOL = "best test R@1 over the periodic evaluations (Kim et al. 2018; the paper's reporting)"
FAIR_PROTOCOL = "test metrics of the evaluation with the best R@1 on a class-disjoint validation split"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_splits(cfg: DictConfig) -> dict:
    """``{"train", "validation", "test" | ("query", "gallery")}`` datasets with their transforms."""
    data = cfg.dataset
    if data.get("generate") is not None:
        generate_synthetic(data.root, **data.generate, show_progress=False)
    test_transform = eval_transform(cfg.image_size)
    full_train = load_dataset(data.format, data.root, "train", transform=train_transform(cfg.image_size))
    train, validation = split_validation_classes(full_train, cfg.validation_fraction, cfg.seed, test_transform)
    splits = {"train": train, "validation": validation}
    test_names = ("query", "gallery") if data.format == "inshop" else ("test",)
    for name in test_names:
        splits[name] = load_dataset(data.format, data.root, name, transform=test_transform)
    return splits


def build_batch_sampler(cfg: DictConfig, train_set) -> torch.utils.data.Sampler:
    """The global batch sampler of App. A (super-label pairs, or m per class without super-labels)."""
    sampler = cfg.dataset.sampler
    if sampler.name == "super_label" and train_set.super_labels is not None:
        return SuperLabelBatchSampler(
            train_set.labels, train_set.super_labels, cfg.batch_size, sampler.samples_per_class,
            sampler.batches_per_super_pair, seed=cfg.seed, batches_per_epoch=cfg.steps_per_epoch,
        )  # fmt: skip
    if sampler.name not in ("super_label", "m_per_class"):
        raise ValueError(f"dataset.sampler.name must be 'super_label' or 'm_per_class', got {sampler.name!r}")
    return MPerClassBatchSampler(
        train_set.labels, cfg.batch_size, sampler.samples_per_class, seed=cfg.seed, batches_per_epoch=cfg.steps_per_epoch
    )


def build_optimizer(cfg: DictConfig, model) -> torch.optim.Optimizer:
    """Adam, weight decay 4e-4, higher lr for the embedding layer (App. A)."""
    groups = model.parameter_groups(cfg.optimizer.lr, cfg.optimizer.embedding_lr_multiplier)
    return torch.optim.Adam(groups, weight_decay=cfg.optimizer.weight_decay)


def select_protocols(history: list[dict]) -> dict:
    """Both reporting protocols from the list of evaluations ``{"epoch", "validation", "test"}``
    (earliest evaluation wins ties)."""
    if not history:
        return {}
    paper = max(history, key=lambda h: (h["test"]["R@1"], -h["epoch"]))
    result = {"paper_protocol": {"description": PAPER_PROTOCOL, "epoch": paper["epoch"], **paper["test"]}}
    with_validation = [h for h in history if h.get("validation")]
    if with_validation:
        fair = max(with_validation, key=lambda h: (h["validation"]["R@1"], -h["epoch"]))
        result["fair_protocol"] = {
            "description": FAIR_PROTOCOL, "epoch": fair["epoch"],
            "validation_R@1": fair["validation"]["R@1"], **fair["test"],
        }  # fmt: skip
    return result


# Keys that may change between a killed run and its resumption without changing the result.
_RUN_ONLY_KEYS = ("resume", "max_epochs_this_run", "output_dir", "metrics_path", "curve_path",
                  "checkpoint_path", "device", "num_workers", "wandb")  # fmt: skip


def check_resumable(saved: dict, current: dict) -> None:
    """``ValueError`` naming the differing keys unless the checkpoint's run configuration equals
    this run's (apart from ``_RUN_ONLY_KEYS``): resuming another configuration would silently mix
    two experiments."""
    differing = sorted(
        key for key in set(saved) | set(current)
        if key not in _RUN_ONLY_KEYS and saved.get(key) != current.get(key)
    )  # fmt: skip
    if differing:
        raise ValueError(
            f"checkpoint configuration differs from this run's in {differing}; "
            "use another checkpoint_path or resume=false to start over"
        )


def _evaluate(cfg, model, splits, device) -> dict:
    ks = list(cfg.dataset.ks)
    record = {}
    if splits["validation"] is not None:
        embeddings, labels = compute_embeddings(model, splits["validation"], cfg.batch_size, cfg.num_workers, device)
        record["validation"] = retrieval_metrics(embeddings, labels, ks)
    test = {k: v for k, v in splits.items() if k in ("test", "query", "gallery")}
    record["test"] = evaluate_model(model, test, ks, cfg.batch_size, cfg.num_workers, device)
    return record


def train(cfg: DictConfig) -> dict:
    """Run (or resume) one training run; returns the metrics written to ``cfg.metrics_path``."""
    setup = detect_setup()
    init_process_group(setup)
    device = resolve_device(cfg.device)
    if setup.is_distributed and device.type == "cuda":
        device = torch.device("cuda", setup.local_rank)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    splits = build_splits(cfg) if setup.is_main else None
    if setup.is_distributed:
        torch.distributed.barrier()  # rank 0 generated the synthetic set, if any
        splits = splits or build_splits(cfg)
    global_sampler = build_batch_sampler(cfg, splits["train"])
    batch_sampler = ShardedBatchSampler(global_sampler, setup.rank, setup.world_size) if setup.is_distributed else global_sampler
    loader = torch.utils.data.DataLoader(splits["train"], batch_sampler=batch_sampler, num_workers=cfg.num_workers)

    model = build_model(cfg.model).to(device)
    optimizer = build_optimizer(cfg, model)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, list(cfg.scheduler.milestones), cfg.scheduler.gamma)
    loss_fn = instantiate(cfg.loss.module).to(device)
    trained = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) if setup.is_distributed else model

    checkpoint_path = Path(cfg.checkpoint_path)
    start_epoch, history, curve, wandb_id = 1, [], [], None
    resolved = OmegaConf.to_container(cfg, resolve=True)
    state = load_checkpoint(checkpoint_path) if cfg.resume and checkpoint_path.is_file() else None
    if state is not None:
        try:
            check_resumable(state["config"], resolved)
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
        loss_fn.load_state_dict(state["loss"])
        start_epoch, history, curve = state["epoch"] + 1, state["history"], state["curve"]
        set_rng_states(state["rng"])
        wandb_id = state.get("wandb_id")
    run = None
    if setup.is_main:
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
        run = start_run(
            cfg.wandb.mode, cfg.wandb.project, group=cfg.experiment_name, job_type=cfg.wandb.job_type,
            name=f"{cfg.experiment_name}-seed{cfg.seed}", config=resolved, directory=str(Path(cfg.output_dir)),
            run_id=wandb_id,
        )  # fmt: skip

    epochs_this_run = 0
    for epoch in range(start_epoch, cfg.epochs + 1):
        if cfg.max_epochs_this_run is not None and epochs_this_run >= cfg.max_epochs_this_run:
            break
        started = time.perf_counter()
        batch_sampler.set_epoch(epoch)
        trained.train()
        loss_fn.train()
        losses = []
        for images, labels, _ in tqdm(loader, desc=f"epoch {epoch}/{cfg.epochs}", disable=not setup.is_main, leave=False):
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            if cfg.two_pass_chunk_size:
                value = two_pass_backward(trained, images, labels, loss_fn, cfg.two_pass_chunk_size)
            else:
                value = global_batch_loss(loss_fn, trained(images), labels)
                value.backward()
            optimizer.step()
            losses.append(float(value.detach()))
        scheduler.step()
        epochs_this_run += 1

        row = {"epoch": epoch, "loss": float(np.mean(losses)), "lr": scheduler.get_last_lr()[0],
               "seconds": round(time.perf_counter() - started, 3)}  # fmt: skip
        if setup.is_main and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
            record = {"epoch": epoch, **_evaluate(cfg, model, splits, device)}
            history.append(record)
            row.update({f"test/{k}": v for k, v in record["test"].items()})
            row.update({f"validation/{k}": v for k, v in record.get("validation", {}).items()})
            if record.get("validation") and select_protocols(history)["fair_protocol"]["epoch"] == epoch:
                save_checkpoint({"model": model.state_dict(), "config": resolved, "epoch": epoch},
                                checkpoint_path.with_name("best_validation.pt"))  # fmt: skip
        curve.append(row)
        if setup.is_main:
            save_checkpoint(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "loss": loss_fn.state_dict(), "epoch": epoch, "history": history, "curve": curve,
                 "rng": rng_states(), "config": resolved, "wandb_id": run.id if run is not None else None},
                checkpoint_path,
            )  # fmt: skip
            write_json_atomic(curve, cfg.curve_path)
            if run is not None:
                run.log(row, step=epoch)
        if setup.is_distributed:
            torch.distributed.barrier()

    last_epoch = curve[-1]["epoch"] if curve else 0
    metrics = {
        "experiment": cfg.experiment_name, "seed": cfg.seed, "epochs_trained": last_epoch,
        "complete": last_epoch == cfg.epochs, **select_protocols(history),
    }  # fmt: skip
    if setup.is_main:
        write_json_atomic(curve, cfg.curve_path)  # also when a resumed run had no epoch left to train
        write_json_atomic(metrics, cfg.metrics_path)
        if run is not None:
            run.summary.update({k: v for k, v in metrics.items() if not isinstance(v, dict)})
            for protocol in ("paper_protocol", "fair_protocol"):
                run.summary.update({f"{protocol}/{k}": v for k, v in metrics.get(protocol, {}).items()})
            run.finish()
    return metrics


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:  # noqa: D103 (the Hydra entry point; see the module docstring)
    train(cfg)


if __name__ == "__main__":
    main()
