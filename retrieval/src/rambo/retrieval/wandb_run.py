"""Weights & Biases run set-up: the mode is decided *before* ``wandb.init`` so a run never waits
on the network (online only with an API key; offline otherwise; disabled in tests)."""

from __future__ import annotations

import netrc
import os
from pathlib import Path

MODES = ("auto", "online", "offline", "disabled")


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(Path.home() / ".netrc").authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def decide_mode(requested: str) -> str:
    """``"auto"`` -> ``WANDB_MODE`` if set, else online with an API key, else offline."""
    if requested not in MODES:
        raise ValueError(f"wandb.mode must be one of {MODES}, got {requested!r}")
    if requested != "auto":
        return requested
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled"):
        return env
    return "online" if _has_api_key() else "offline"


def start_run(mode: str, project: str, group: str, job_type: str, name: str, config: dict, directory: str, run_id=None):
    """``wandb.init`` with group = experiment, one run per seed; ``None`` when disabled.
    ``run_id`` (from the checkpoint) continues the same W&B run after ``resume=true``."""
    mode = decide_mode(mode)
    if mode == "disabled":
        return None
    import wandb

    return wandb.init(
        mode=mode, project=project, group=group, job_type=job_type, name=name, config=config, dir=directory,
        id=run_id, resume="allow" if run_id else None, settings=wandb.Settings(init_timeout=60, silent=True),
    )  # fmt: skip
