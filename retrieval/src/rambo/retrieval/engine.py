"""One epoch of training and one evaluation of a retrieval model (as in the torchvision references):
no configuration, only objects, so a user's own loop can call them.

Evaluation reports two protocols, labelled:

* `paper_protocol`: the evaluation with the best test R@1 (Kim et al. 2018, as the paper does);
* `fair_protocol`: the test metrics of the evaluation with the best *validation* R@1.
"""

from __future__ import annotations

import math

import numpy as np

from rambo.harness.engine_options import EngineOptions
from rambo.harness.loss_sums import DeviceLossSums, reads_every_step
from rambo.harness.precision import to_channels_last
from rambo.harness.run_log import progress

from .evaluate import compute_embeddings, evaluate_model, mean_pairwise_cosine, retrieval_metrics
from .two_pass import two_pass_backward

PAPER_PROTOCOL = "best test R@1 over the periodic evaluations (Kim et al. 2018; the paper's reporting)"
FAIR_PROTOCOL = "test metrics of the evaluation with the best R@1 on a class-disjoint validation split"
# Mean pairwise cosine at which an evaluation warns of a collapsed embedding. Measured (README, "When
# the embedding collapses"): 0.998 for every RaMBO run without its margin; 0.56-0.92 for the others.
COLLAPSE_COSINE = 0.99


def train_one_epoch(
    model, loader, loss_fn, optimizer, two_pass_chunk_size: int | None = None, *, options: EngineOptions
) -> float:
    """One pass over `loader` (`(images, labels, index)` batches); returns the mean loss.
    A non-finite loss is a `FloatingPointError`: before its step on the CPU, at the end of the
    epoch on a GPU (losses summed on the device, [`rambo.harness.loss_sums`][rambo.harness.loss_sums]).

    The loss is over the global batch: under several processes the loss gathers the embeddings
    itself ([`rambo.core.distributed`][rambo.core.distributed]; `global_batch=True`, the default of every
    embedding-level loss); `two_pass_chunk_size` switches to the two-pass chunked backward.
    `options`: device, forward context, memory format, progress bar and its label
    ([`rambo.harness.engine_options.EngineOptions`][rambo.harness.engine_options.EngineOptions]); the embeddings reach
    the loss in float32 and outside the autocast context, so the rank losses never rank bf16 scores; with
    `channels_last` the image batches are channels-last (the model's format is the caller's).
    """
    device, autocast, description = options.device, options.autocast, options.description
    model.train()
    loss_fn.train()
    losses, on_device = [], None if reads_every_step(device) else DeviceLossSums()
    for images, labels, _ in progress(loader, options.show_progress, desc=description):
        images, labels = images.to(device), labels.to(device)
        if options.channels_last:
            images = to_channels_last(images)
        optimizer.zero_grad(set_to_none=True)
        if two_pass_chunk_size:
            value = two_pass_backward(model, images, labels, loss_fn, two_pass_chunk_size, autocast)
        else:
            with autocast():
                embeddings = model(images)
            value = loss_fn(embeddings.float(), labels)
            value.backward()
        if on_device is not None:  # a GPU: no host read per step (rambo.harness.loss_sums)
            on_device.add({"loss": value})
        else:
            losses.append(float(value.detach()))
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(f"non-finite loss at {description}, step {len(losses)}: {losses[-1]}")
        optimizer.step()
    return on_device.means(description)["loss"] if on_device is not None else float(np.mean(losses))


def evaluate(model, splits: dict, ks, batch_size: int, num_workers: int, *, options: EngineOptions) -> dict:
    """`{"validation": metrics, "test": metrics}` of `model` (`"validation"` when `splits`
    has one; the test split is `"test"` or `"query"` + `"gallery"`). Each holds
    `mean_cosine` as well, the spread of its embeddings ([`collapse_warning`][rambo.retrieval.engine.collapse_warning]).
    `options`: the device, `autocast` and `channels_last` as in training
    ([`evaluate.compute_embeddings`][rambo.retrieval.evaluate.compute_embeddings]: float32 embeddings); no progress
    bar."""
    ks, device, autocast, channels_last = list(ks), options.device, options.autocast, options.channels_last
    record = {}
    if splits.get("validation") is not None:
        embeddings, labels = compute_embeddings(
            model, splits["validation"], batch_size, num_workers, device, autocast, channels_last
        )
        record["validation"] = {
            **retrieval_metrics(embeddings, labels, ks, device=device),
            "mean_cosine": mean_pairwise_cosine(embeddings),
        }
    test = {k: v for k, v in splits.items() if k in ("test", "query", "gallery")}
    record["test"] = evaluate_model(
        model, test, ks, batch_size, num_workers, device, spread=True, autocast=autocast, channels_last=channels_last
    )
    return record


def collapse_warning(record: dict, threshold: float = COLLAPSE_COSINE) -> str | None:
    """The warning to log when an evaluation's embeddings have collapsed: their mean pairwise cosine
    (validation split, else test) is at least `threshold`; `None` otherwise.

    A rank loss without a margin is invariant to the scale of the score differences, and its
    gradient pulls the embeddings together (measured in docs/own-data.md, "When the embedding
    collapses"): the ranking may still be right, but every score lies within a hair of the others.
    """
    split = "validation" if record.get("validation") else "test"
    spread = record.get(split, {}).get("mean_cosine")
    if spread is None or spread < threshold:
        return None
    return (
        f"the embedding has collapsed: mean pairwise cosine {spread:.4f} on the {split} split (>= {threshold}). "
        "The order of the scores may still be right, but they lie within a hair of each other, and near a point "
        "the gradient vanishes. A rank loss sees only the order: give it a margin (loss.margin; RaMBO's 0.02, "
        "or larger), and check that the labels are something a network can see, e.g. with loss=contrastive "
        "(docs/own-data.md, 'When the embedding collapses')"
    )


def select_protocols(history: list[dict]) -> dict:
    """Both reporting protocols from the list of evaluations `{"epoch", "validation", "test"}`
    (earliest evaluation wins ties)."""
    if not history:
        return {}
    paper = max(history, key=lambda h: (h["test"]["R@1"], -h["epoch"]))
    result = {"paper_protocol": {"description": PAPER_PROTOCOL, "epoch": paper["epoch"], **paper["test"]}}
    with_validation = [h for h in history if h.get("validation")]
    if with_validation:
        fair = max(with_validation, key=lambda h: (h["validation"]["R@1"], -h["epoch"]))
        result["fair_protocol"] = {
            "description": FAIR_PROTOCOL,
            "epoch": fair["epoch"],
            "validation_R@1": fair["validation"]["R@1"],
            **fair["test"],
        }
    return result
