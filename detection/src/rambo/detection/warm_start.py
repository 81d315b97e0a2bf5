"""Start a detector from the weights of another run (the ``mini`` profile's warm start).

The paper fine-tunes detectors whose backbones start from ImageNet weights; the ``mini`` profile
has no such weights for its small backbone, so every row starts from a detector trained with
cross-entropy for a few epochs on the synthetic set (experiment ``mini_warm_start``, one per seed),
the analogue of a pretrained model. ``init_checkpoint`` names that run's checkpoint; its MD5 joins
the run identity, so a changed warm start restarts the runs built on it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rambo.harness.checkpoint import load_checkpoint
from rambo.harness.download import md5_of

LOSS_PREFIX = "roi_heads.classifier_loss."  # the loss module's own state (a score memory), not weights
BN_COUNTER = "num_batches_tracked"  # a BatchNorm2d buffer that FrozenBatchNorm2d lacks
#: What to do about a damaged ``init_checkpoint``.
WARM_START_NEXT_STEP = (
    "train the warm-start run again (the pipeline's detection_warm_start stage), or set init_checkpoint to another "
    "checkpoint of rambo.detection.train"
)


def load_initial_weights(model: torch.nn.Module, path: str | Path) -> str:
    """Copy the model weights of checkpoint ``path`` into ``model``; return the file's MD5.

    Every weight must match by name and shape, except the classifier loss's state (a RaMBO run may
    start from a cross-entropy run) and BatchNorm's ``num_batches_tracked`` counters (present in
    BatchNorm2d, absent in FrozenBatchNorm2d: ``model.backbone_norm`` may differ between the runs). ``FileNotFoundError`` / ``ValueError`` name the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"init_checkpoint {path} does not exist. It is the checkpoint of the warm-start run: train it first, "
            f"e.g. `python -m rambo.detection.train experiment=mini_warm_start seed=<seed> checkpoint_path={path}` "
            f"(the pipeline's detection_warm_start stage does this)"
        )
    try:
        weights = load_checkpoint(path, WARM_START_NEXT_STEP)["state"]["model"]
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a checkpoint written by rambo.detection.train (missing {error})") from error
    weights = {key: value for key, value in weights.items() if not key.startswith(LOSS_PREFIX)}
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # shapes that differ (another backbone or number of classes)
        raise ValueError(f"{path} does not fit this model: {str(error).splitlines()[0]}") from error
    # BatchNorm2d holds num_batches_tracked, FrozenBatchNorm2d does not (model.backbone_norm): a
    # counter that neither normalises nor trains, so a warm start may cross between the two
    missing = [key for key in missing if not key.startswith(LOSS_PREFIX) and not key.endswith(BN_COUNTER)]
    unexpected = [key for key in unexpected if not key.endswith(BN_COUNTER)]
    if missing or unexpected:
        raise ValueError(f"{path} does not fit this model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return md5_of(path)
