"""A trained embedding model back from a checkpoint of [`train`][rambo.retrieval.train] (the per-epoch
`checkpoint.pt` or `best_validation.pt`), for evaluation and export. Loading goes through
[`rambo.harness.checkpoint.load_checkpoint`][rambo.harness.checkpoint.load_checkpoint] (`weights_only=True`), so any
path is safe."""

from __future__ import annotations

from pathlib import Path

from rambo.harness.checkpoint import load_checkpoint

from .model import EmbeddingNet, build_model


def load_trained_model(path: str | Path) -> tuple[EmbeddingNet, dict]:
    """`(model in eval mode, the run's resolved configuration)`; `ValueError` naming the file
    when it is not a retrieval training checkpoint."""
    state = load_checkpoint(path)
    try:
        config, weights = state["config"], state["state"]["model"]
        model = build_model(dict(config["model"], pretrained=False))
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a checkpoint written by rambo.retrieval.train (missing {error})") from error
    model.load_state_dict(weights)
    return model.eval(), config
