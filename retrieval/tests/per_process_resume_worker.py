"""Run by test_retrieval_per_process_resume.py under torchrun (2 CPU processes, gloo); not a test module.

Each process trains a DDP-wrapped toy embedding with ``EmbeddingLoss(APLoss(), tau=2, global_batch=False)``
(each process ranks and remembers its own batches) under :class:`rambo.harness.run.TrainingRun`,
on batches of its own size drawn from the global generator (so the processes' generators differ
too): three epochs straight in ``<out>/straight``, then in ``<out>/split`` one epoch and, with
every object built again (as a new process would), the two others resumed from its checkpoint.
Each process writes what it computed to ``<out>/rank<r>.pt``."""

import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from rambo.core import APLoss, EmbeddingLoss
from rambo.harness.distributed import detect_setup, init_process_group, wrap_model
from rambo.harness.run import TrainingRun

EPOCHS = 3


def config(out: Path, **extra):
    return OmegaConf.create(
        {
            "seed": 0,
            "experiment_name": "per_process",
            "output_dir": str(out),
            "metrics_path": f"{out}/metrics.json",
            "curve_path": f"{out}/curve.json",
            "checkpoint_path": f"{out}/checkpoint.pt",
            "resume": False,
            "resume_may_change": ["resume", "max_epochs_this_run", "wandb"],
            "max_epochs_this_run": None,
            "wandb": {"mode": "disabled", "project": "p"},
            **extra,
        }
    )


def train(cfg, setup) -> dict:
    torch.manual_seed(0)  # what a new process does: the same seed on every process
    model = torch.nn.Linear(4, 3)
    loss_fn = EmbeddingLoss(APLoss(), tau=2, global_batch=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    run = TrainingRun(cfg, {"model": model, "optimizer": optimizer, "loss": loss_fn}, is_main=setup.is_main)
    trained, losses = wrap_model(model, torch.device("cpu")), {}
    for epoch in run.epochs(EPOCHS):
        size = 4 + 2 * setup.rank  # each process its own batch size: its generator draws its own amount
        x = torch.randn(size, 4)
        labels = torch.arange(size) % 2
        loss = loss_fn(trained(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[epoch] = float(loss.detach())
        run.end_epoch({"epoch": epoch, "loss": losses[epoch]}, EPOCHS)
    run.finish({"epochs": run.epoch})
    memory = [(a.clone(), b.clone()) for a, b in loss_fn.remembered()]
    return {"losses": losses, "memory": memory, "weight": model.weight.detach().clone(), "next": torch.rand(3)}


def main(out: Path) -> None:
    setup = detect_setup()
    init_process_group(setup, backend="gloo")
    straight = train(config(out / "straight"), setup)
    first = train(config(out / "split", max_epochs_this_run=1), setup)
    resumed = train(config(out / "split", resume=True), setup)
    torch.save({"straight": straight, "first": first, "resumed": resumed}, out / f"rank{setup.rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
