"""Weights & Biases for detection runs: the mode is settled before ``wandb.init`` is called.

``auto`` resolves to ``WANDB_MODE`` when that is set, to ``online`` when an API key is available
(``WANDB_API_KEY`` or ``~/.netrc``), and to ``offline`` otherwise, so a run without a key never
waits on the network; tests pass ``disabled``. The metrics JSON stays the record of a run; W&B
mirrors it.
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path

WANDB_MODES = ("auto", "online", "offline", "disabled")


def api_key_available() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(Path.home() / ".netrc").authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    """The mode a run will use; raises ``ValueError`` for an unknown one."""
    if mode not in WANDB_MODES:
        raise ValueError(f"wandb.mode must be one of {WANDB_MODES}, got {mode!r}")
    if mode != "auto":
        return mode
    from_environment = os.environ.get("WANDB_MODE")
    if from_environment in ("online", "offline", "disabled"):
        return from_environment
    return "online" if api_key_available() else "offline"


def init_wandb(mode: str, project: str, group: str, name: str, config: dict, directory: str | Path):
    """Start a run (group = experiment, one run per seed); ``None`` when the mode is ``disabled``."""
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    import wandb

    Path(directory).mkdir(parents=True, exist_ok=True)
    return wandb.init(
        mode=mode, project=project, group=group, name=name, job_type="train", config=config, dir=str(directory),
        settings=wandb.Settings(init_timeout=60, silent=True),
    )
