"""Weights & Biases: the mode is decided *before* `wandb.init`, so a run never waits on the network.

`auto` resolves to `WANDB_MODE` when that is set, to `online` when an API key is available
(`WANDB_API_KEY` or `api.wandb.ai` in `~/.netrc`), and to `offline` otherwise; tests pass
`disabled`. The JSON files a run writes stay its record; W&B mirrors them.

[`wandb_keys`][rambo.harness.wandb_run.wandb_keys] gives the flat keys a dashboard filters runs by, the same for both
apps.
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path

MODES = ("auto", "online", "offline", "disabled")


def api_key_available() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(Path.home() / ".netrc").authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def decide_mode(requested: str) -> str:
    """The mode a run will use; `ValueError` for an unknown one."""
    if requested not in MODES:
        raise ValueError(f"wandb.mode must be one of {MODES}, got {requested!r}")
    if requested != "auto":
        return requested
    from_environment = os.environ.get("WANDB_MODE")
    if from_environment in ("online", "offline", "disabled"):
        return from_environment
    return "online" if api_key_available() else "offline"


def wandb_keys(cfg, task: str) -> dict:
    """The flat keys a W&B dashboard filters runs by ([`rambo.harness.run.TrainingRun`][rambo.harness.run.TrainingRun]):
    `task` (retrieval, detection), dataset, loss_name, lambda, margin, tau and seed of the run config `cfg`.

    Lambda and the margin are the loss group's (`loss.lam`, `loss.margin`: the rank losses of
    both apps); a loss without them reports its module's own (retrieval's contrastive loss has a
    margin of its own, `loss.module.margin`), looked up inside a memory that wraps the loss
    (`loss.module.loss`), else `None`."""
    loss = cfg.loss
    inner = loss.module.get("loss", loss.module)  # a memory wraps the rank loss
    return {
        "task": task,
        "dataset": cfg.data.name,
        "loss_name": loss.name,
        "lambda": loss.get("lam", inner.get("lam")),
        "margin": loss.get("margin", inner.get("margin")),
        "tau": loss.get("tau"),
        "seed": cfg.seed,
    }


def start_run(
    mode: str,
    project: str,
    group: str,
    name: str,
    config: dict,
    directory: str | Path,
    job_type: str = "train",
    run_id: str | None = None,
):
    """`wandb.init` (group = experiment, one run per seed); `None` when the mode is `disabled`.

    `run_id` (kept in the checkpoint) continues the same W&B run after a resume.
    """
    mode = decide_mode(mode)
    if mode == "disabled":
        return None
    import wandb

    Path(directory).mkdir(parents=True, exist_ok=True)
    return wandb.init(
        mode=mode,
        project=project,
        group=group,
        job_type=job_type,
        name=name,
        config=config,
        dir=str(directory),
        id=run_id,
        resume="allow" if run_id else None,
        settings=wandb.Settings(init_timeout=60, silent=True),
    )
