"""``make memory-plan``: the GPU memory each paper experiment needs, measured on this CPU.

    python benchmarks/memory_plan.py                        # every paper row: benchmarks/memory_plan.{json,md}
    python benchmarks/memory_plan.py --rows sop_log table5_r50_voc07_rambo --out-dir /tmp/plan
    python benchmarks/memory_plan.py --toy --out-dir /tmp/plan   # toy sizes (what tests/test_memory_plan.py runs)

For every paper experiment its real config is composed (retrieval ``experiment=<row> profile=paper``,
detection ``experiment=<row>``), its real model, optimiser and loss are built (random weights: the
ImageNet weights are not on this machine, and weights do not change memory), and the peak tensor
memory is measured at two small sizes (``SMALL``: 2 and 4 images) of

* one training step (``train_one_epoch`` of the app's engine on one batch: forward, loss, backward,
  optimiser step), after one warm-up step so the optimiser state exists, as in every later step;
* one evaluation batch (the app's no-grad forward in eval mode);

and extrapolated linearly in the images: ``peak(n) = fixed + per_image * n`` (the model: weights,
gradients and optimiser state are the fixed part, activations the per-image part). What does not
grow linearly is measured at the row's own size instead of extrapolated: the retrieval loss on the
row's whole batch of embeddings (its score matrix grows as the batch squared; score memory filled),
and the nearest-neighbour search of the evaluation at the test split's size (one query chunk: the
search's peak). The input batch is counted exactly (``n x 3 x H x W`` float32). With the two-pass
backward (the Recall@k rows) the chunk is what grows: ``max(fixed + per_image * chunk, fixed + the
loss on the whole batch) + the whole input batch``.

The peak is, on the CPU, the running sum of the allocation events of ``torch.profiler``
(``profile_memory=True``, as ``benchmarks/loss_memory.py``) on top of the tensors already live
(weights, buffers, optimiser state, inputs); on a GPU (:func:`measure_peak` with a CUDA device, what
``make gpu-check``'s ``memory_plan`` section runs) ``torch.cuda.max_memory_allocated``. CUDA adds
what neither counts on the CPU: the CUDA context and cuDNN's workspaces, an assumed
``CUDA_ALLOWANCE_GIB`` per card, added before comparing with a card; kernel choice and the caching
allocator's rounding can differ from the CPU's allocations (``make gpu-check`` prints both).

Beside the memory, the disk of each row's checkpoint (:func:`checkpoint_sizes`), counted from the
same real model: a finished run's (what ``rambo.harness.run.TrainingRun`` keeps once the last
epoch is done) holds the model's ``state_dict`` (its parameters and buffers; the parameter count is
listed too), the score memory filled at the row's batch (retrieval: the row's loss filled as in the
loss measurement; detection: ``tau`` batches of ``batch x RoIs per image`` rows of 20 float32 class
scores and 20 bools, the most it holds) and the random states; a checkpoint written while the run
trains adds the optimiser state (measured after a step: Adam's two moments, SGD's momentum). The
curve, config and identity add kilobytes, not counted.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from rambo.core.peak_memory import cpu_peak_bytes

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30
CARDS_GIB = (16, 24, 40, 80)
CUDA_ALLOWANCE_GIB = 1.0  # assumed: CUDA context (~0.3-0.5 GB) + cuDNN workspaces, not seen on the CPU
SMALL = (2, 4)  # the images per step (or per two-pass chunk) measured; the line through them is extrapolated
RETRIEVAL_ROWS = (
    "sop_log",
    "sop_loglog",
    "sop_recallk_simix",
    "cub_log",
    "cub_loglog",
    "cub_recallk_simix",
    "inshop_log",
    "inshop_loglog",
    "inshop_recallk_simix",
    "sop_loglog_no_memory",
    "sop_loglog_no_margin",
    "sop_loglog_row_memory",
    "cub_loglog_no_memory",
    "cub_loglog_no_margin",
    "inshop_log_no_memory",
    "inshop_log_no_margin",
)
DETECTION_ROWS = (
    "table5_r50_voc07_ce",
    "table5_r50_voc07_rambo",
    "table5_r50_voc0712_ce",
    "table5_r50_voc0712_rambo",
    "table5_r101_voc0712_ce",
    "table5_r101_voc0712_rambo",
    "table5_x101_voc0712_ce",
    "table5_x101_voc0712_rambo",
    "table8_lam0p5_nomargin",
    "table8_lam0p1_margin",
    "table8_lam2p5_margin",
)
# Test-split sizes (paper Sec. 5.1): what the evaluation's nearest-neighbour search holds.
TEST_IMAGES = {"sop": {"test": 60_502}, "cub": {"test": 5_924}, "inshop": {"query": 14_218, "gallery": 12_612}}
# VOC's common image shapes, 375x500 and 500x375 (H x W), one of each per pair: a plain random batch
# (no aspect-ratio grouping, README's deviations) pads both to 800x800 after the 600-1000 px resize.
VOC_SHAPES = ((375, 500), (500, 375))
SEARCH_QUERY_CHUNK = 4096  # rambo.retrieval.evaluate._QUERY_CHUNK


# ----------------------------------------------------------------------------------------------- arithmetic


def fit_line(n1: int, peak1: float, n2: int, peak2: float) -> tuple[float, float]:
    """``(fixed, per_item)`` of the line through ``(n1, peak1)`` and ``(n2, peak2)``."""
    if n1 == n2:
        raise ValueError(f"two different sizes are needed to fit a line, got {n1} twice")
    per_item = (peak2 - peak1) / (n2 - n1)
    return peak1 - per_item * n1, per_item


def extrapolate(line: tuple[float, float], n: int) -> float:
    """``fixed + per_item * n``."""
    fixed, per_item = line
    return fixed + per_item * n


def largest_fitting(line: tuple[float, float], budget: float) -> int:
    """The largest ``n`` with ``fixed + per_item * n <= budget`` (0 when not even one item fits)."""
    fixed, per_item = line
    if per_item <= 0:
        raise ValueError(f"a per-item cost must be positive, got {per_item}")
    return max(0, math.floor((budget - fixed) / per_item))


def fits(peak_gib: float, cards=CARDS_GIB, allowance_gib: float = CUDA_ALLOWANCE_GIB) -> dict[int, bool]:
    """``{card GiB: peak + allowance <= card}``."""
    return {card: peak_gib + allowance_gib <= card for card in cards}


# ----------------------------------------------------------------------------------------------- measuring


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a view counts once)."""
    seen, total = set(), 0
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def resident_bytes(*modules, optimizer=None, tensors=()) -> int:
    """Tensor bytes live before a measured call: parameters, buffers, optimiser state, ``tensors``."""
    live = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    if optimizer is not None:
        live += [value for state in optimizer.state.values() for value in state.values()]
    return _storage_bytes([*live, *tensors])


def state_bytes(state) -> int:
    """Bytes of the tensors in a (nested) state: dicts, lists and tuples of tensors and data; a
    storage shared by several tensors counts once."""
    tensors = []

    def walk(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(state)
    return _storage_bytes(tensors)


def rng_bytes() -> int:
    """Bytes of a checkpoint's random states (``rambo.harness.checkpoint.rng_states``), as saved."""
    from rambo.harness.checkpoint import rng_states

    buffer = io.BytesIO()
    torch.save(rng_states(), buffer)
    return buffer.tell()


def model_state(model: torch.nn.Module) -> dict:
    """What the model's ``state_dict`` holds besides the modules' extra states (the score memories,
    counted at the row's batch instead), and its parameter count."""
    weights = {key: value for key, value in model.state_dict().items() if not key.endswith("_extra_state")}
    return {"parameters": sum(p.numel() for p in model.parameters()), "model_state_bytes": state_bytes(weights)}


def checkpoint_sizes(m: dict, memory_bytes: int) -> dict:
    """A row's checkpoint sizes (bytes) from its shape's measurements ``m`` and its score memory:
    finished (model state + score memory + random states) and while training (plus the optimiser)."""
    finished = m["model_state_bytes"] + memory_bytes + m["rng_bytes"]
    return {
        "memory_bytes": memory_bytes,
        "finished_checkpoint_bytes": finished,
        "training_checkpoint_bytes": finished + m["optimizer_state_bytes"],
    }


def measure_peak(run, device: torch.device, resident: int) -> int:
    """Peak tensor bytes during ``run()``: ``resident`` (what the caller counts as live before it)
    plus the peak above what was allocated before the call: on the CPU from the allocation events,
    on a GPU ``torch.cuda.max_memory_allocated`` less ``torch.cuda.memory_allocated`` before."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        run()
        torch.cuda.synchronize(device)
        return resident + torch.cuda.max_memory_allocated(device) - before
    return resident + cpu_peak_bytes(run)


def compose(app: str, overrides: list[str]):
    """The app's training config (``rambo.<app>``'s ``configs/train.yaml``) with ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    package = __import__(f"rambo.{app}", fromlist=["train"])
    with initialize_config_dir(config_dir=str(Path(package.__file__).parent / "configs"), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def row_config(row: str, toy: dict | None = None):
    """``(app, config)`` of a paper row, random weights; ``toy``: :data:`TOY`'s sizes put in."""
    from omegaconf import OmegaConf, open_dict

    app = "retrieval" if row in RETRIEVAL_ROWS else "detection"
    cfg = compose(
        app, [f"experiment={row}", "model.pretrained=false"] + (["profile=paper"] if app == "retrieval" else [])
    )
    with open_dict(cfg):
        for key, value in (toy or {}).get(app, {}).items():
            if key != "two_pass_chunk_size" or OmegaConf.select(cfg, key):
                OmegaConf.update(cfg, key, value)
    return app, cfg


# ----------------------------------------------------------------------------------------------- retrieval


def _labels(n: int, per_class: int, device) -> torch.Tensor:
    return torch.arange(n, device=device) // per_class


def retrieval_loss_peak(
    cfg, batch: int, device: torch.device, per_class: int | None = None, memory: dict | None = None
) -> int:
    """Peak bytes of the row's loss forward+backward on ``[batch, D]`` embeddings, score memory full,
    above the model (the embeddings, their gradient and the memory's buffers included). ``memory``:
    a dict that receives ``"bytes"``, those of the filled memory in the loss's ``state_dict``."""
    from hydra.utils import instantiate

    loss_fn = instantiate(cfg.loss.module).to(device)
    generator = torch.Generator().manual_seed(0)
    per_class = per_class or int(cfg.data.sampler.samples_per_class)
    dim = int(cfg.model.embedding_dim)

    def step():
        embeddings = torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator), dim=1).to(device)
        embeddings.requires_grad_(True)
        loss_fn(embeddings, _labels(batch, per_class, device)).backward()

    for _ in range(int(cfg.loss.get("tau") or 0) + 1):  # fill the score memory
        step()
    if memory is not None:
        memory["bytes"] = state_bytes(loss_fn.state_dict())
    return measure_peak(step, device, resident_bytes(loss_fn))


def retrieval_train_peak(cfg, model, optimizer, loss_fn, n: int, device: torch.device) -> dict:
    """Peak bytes of one training step of ``n`` images (``n`` per chunk with the two-pass backward:
    the batch is then two chunks), without the input batch (``input_bytes``)."""
    from rambo.harness.engine_options import EngineOptions
    from rambo.retrieval.engine import train_one_epoch

    chunk = cfg.two_pass_chunk_size and n
    batch = 2 * n if chunk else n
    size = int(cfg.image_size)
    images = torch.randn(batch, 3, size, size, device=device)
    batches = [(images, _labels(batch, 2, device), None)]  # pairs: every query has a positive and negatives
    options = EngineOptions(device=device)
    train_one_epoch(model, batches, loss_fn, optimizer, chunk, options=options)  # warm-up: the optimiser state exists
    resident = resident_bytes(model, loss_fn, optimizer=optimizer)
    peak = measure_peak(
        lambda: train_one_epoch(model, batches, loss_fn, optimizer, chunk, options=options), device, resident
    )
    return {"n": n, "batch": batch, "peak_bytes": peak}


def retrieval_eval_peak(cfg, model, n: int, device: torch.device) -> int:
    """Peak bytes of one no-grad evaluation forward of ``n`` images (eval mode), without the input batch."""
    size = int(cfg.image_size)
    images = torch.randn(n, 3, size, size, device=device)
    model.eval()

    def forward():
        with torch.no_grad():
            model(images).float().cpu()

    forward()  # warm-up
    peak = measure_peak(forward, device, resident_bytes(model))
    model.train()
    return peak


def search_peak(dataset: str, dim: int, device: torch.device, scale: float = 1.0) -> int:
    """Peak bytes of the evaluation's exact search on the device (``rambo.retrieval.evaluate``'s
    torch backend, what a GPU runs without faiss-gpu): the gallery and one query chunk's scores and
    top-k, at the test split's size (times ``scale``: toy sizes)."""
    from rambo.retrieval.evaluate import PAPER_KS, _torch_neighbours

    splits = TEST_IMAGES[dataset]
    gallery_n = int(splits.get("gallery", splits.get("test")) * scale)
    queries_n = min(SEARCH_QUERY_CHUNK, int(splits.get("query", gallery_n) * scale))
    k = min(max(PAPER_KS[dataset]) + 1, gallery_n)
    generator = torch.Generator().manual_seed(0)
    gallery = torch.randn(gallery_n, dim, generator=generator).to(device)
    queries = torch.randn(queries_n, dim, generator=generator).numpy()
    return measure_peak(lambda: _torch_neighbours(gallery, queries, k), device, gallery.nbytes)


def measure_retrieval(cfg, device: torch.device, sizes=SMALL) -> dict:
    """The measurements of one retrieval shape (see the module docstring)."""
    from hydra.utils import instantiate

    from rambo.retrieval.model import build_model
    from rambo.retrieval.train import build_optimizer

    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    optimizer = build_optimizer(cfg, model)
    loss_fn = instantiate(cfg.loss.module).to(device)
    train = [retrieval_train_peak(cfg, model, optimizer, loss_fn, n, device) for n in sizes]
    # the loss's own peak inside those steps, taken out of the line and measured at the row's batch instead
    loss_small = [retrieval_loss_peak(cfg, t["batch"], device, 2) for t in train]
    evaluation = [retrieval_eval_peak(cfg, model, n, device) for n in sizes]
    params = resident_bytes(model)
    disk = {
        **model_state(model),
        "optimizer_state_bytes": state_bytes(optimizer.state_dict()),
        "rng_bytes": rng_bytes(),
    }
    del model, optimizer, loss_fn
    return {
        "sizes": list(sizes),
        "train_peak_bytes": [t["peak_bytes"] for t in train],
        "loss_peak_small_bytes": loss_small,
        "eval_peak_bytes": evaluation,
        "model_bytes": params,
        **disk,
    }


def plan_retrieval(cfg, m: dict, loss: int, search: int) -> dict:
    """The row's predicted peaks (bytes) at its own settings from the measurements ``m``."""
    batch, eval_batch, chunk = int(cfg.batch_size), int(cfg.eval_batch_size), cfg.two_pass_chunk_size
    image_bytes = 3 * int(cfg.image_size) ** 2 * 4
    train_small = [peak - loss for peak, loss in zip(m["train_peak_bytes"], m["loss_peak_small_bytes"])]
    train_line = fit_line(m["sizes"][0], train_small[0], m["sizes"][1], train_small[1])
    eval_line = fit_line(m["sizes"][0], m["eval_peak_bytes"][0], m["sizes"][1], m["eval_peak_bytes"][1])
    eval_line = (eval_line[0], eval_line[1] + image_bytes)  # the input batch, per image
    if chunk:
        train = batch * image_bytes + max(extrapolate(train_line, int(chunk)), train_line[0] + loss)
        model = f"input {batch} images + max(fixed + per_image x chunk {chunk}, fixed + loss on {batch} embeddings)"
    else:
        train_line = (train_line[0], train_line[1] + image_bytes)
        train = extrapolate(train_line, batch) + loss
        model = f"fixed + per_image x {batch} (input included) + loss on {batch} embeddings"
    search = m["model_bytes"] + search
    evaluation = max(extrapolate(eval_line, eval_batch), search)
    return {
        "train_bytes": train,
        "eval_bytes": evaluation,
        "train_line": train_line,
        "eval_line": eval_line,
        "loss_bytes": loss,
        "search_bytes": search,
        "train_model": model,
        "batch": batch,
        "eval_batch": eval_batch,
        "two_pass_chunk_size": chunk,
        "image_bytes": image_bytes,
    }


def needs_retrieval(plan: dict, card_gib: float = 16, allowance_gib: float = CUDA_ALLOWANCE_GIB) -> str:
    """What the row needs to fit a ``card_gib`` card, in its own config keys."""
    budget = (card_gib - allowance_gib) * GIB
    needs = []
    fixed, per_image = plan["train_line"]
    if plan["train_bytes"] > budget:
        if plan["two_pass_chunk_size"]:
            room = budget - plan["batch"] * plan["image_bytes"]
            chunk = largest_fitting((fixed, per_image), room)
            loss_fits = fixed + plan["loss_bytes"] <= room
            needs.append(
                f"two_pass_chunk_size <= {chunk}"
                + ("" if loss_fits else " and the loss on the whole batch does not fit: DDP")
            )
        else:
            per_gpu = largest_fitting((fixed + plan["loss_bytes"], per_image), budget)
            gpus = math.ceil(plan["batch"] / per_gpu) if per_gpu else None
            needs.append(f"DDP over {gpus} GPUs ({per_gpu} images each)" if gpus else "does not fit at one image")
            if per_gpu:
                needs.append(
                    f"or two_pass_chunk_size <= {largest_fitting((fixed, per_image), budget - plan['batch'] * plan['image_bytes'])}"
                )
    if plan["eval_bytes"] > budget:
        needs.append(f"eval_batch_size <= {largest_fitting(plan['eval_line'], budget)}")
    return "; ".join(needs) or "fits as configured"


# ----------------------------------------------------------------------------------------------- detection


def _detection_batch(n: int, shapes, generator) -> list:
    images, targets = [], []
    for i in range(n):
        height, width = shapes[i % len(shapes)]
        images.append(torch.rand(3, height, width, generator=generator))
        count = int(torch.randint(1, 5, (1,), generator=generator))
        corner = torch.rand(count, 2, generator=generator) * torch.tensor([width * 0.6, height * 0.6])
        size = (0.2 + 0.2 * torch.rand(count, 2, generator=generator)) * torch.tensor([width, height])
        targets.append(
            {
                "boxes": torch.cat([corner, corner + size], 1),
                "labels": torch.randint(1, 21, (count,), generator=generator),
            }
        )
    return images, targets


def measure_detection(cfg, device: torch.device, sizes=SMALL, shapes=VOC_SHAPES) -> dict:
    """Peaks of one training step (SGD, gradient clipping as configured) and one eval forward of
    Faster R-CNN at ``sizes`` images of ``shapes`` (each model input counted: the raw images)."""
    from rambo.detection.engine import train_one_epoch
    from rambo.detection.model import build_detector
    from rambo.harness.engine_options import EngineOptions

    torch.manual_seed(0)
    model = build_detector(cfg.model, cfg.loss, 20).to(device)
    schedule = cfg.schedule
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=1e-4,
        momentum=schedule.momentum,
        weight_decay=schedule.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda iteration: 1.0)
    generator, flips = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    clip, options = schedule.get("grad_clip_max_norm"), EngineOptions(device=device)
    train, evaluation = [], []
    for n in sizes:
        images, targets = _detection_batch(n, shapes, generator)
        images = [image.to(device) for image in images]
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        batches = [(images, targets)]

        def step(batches=batches):
            return train_one_epoch(
                model, batches, optimizer, scheduler, flips, grad_clip_max_norm=clip, options=options
            )

        step()  # warm-up: the momentum buffers exist (and the score memory starts filling)
        resident = resident_bytes(model, optimizer=optimizer, tensors=images)
        train.append(measure_peak(step, device, resident))
        model.eval()

        def forward():
            with torch.no_grad():
                model(images)

        evaluation.append(measure_peak(forward, device, resident_bytes(model, tensors=images)))
        model.train()
    return {
        "sizes": list(sizes),
        "shapes": [list(s) for s in shapes],
        "train_peak_bytes": train,
        "eval_peak_bytes": evaluation,
        "resized": [int(cfg.model.min_size), int(cfg.model.max_size)],
        **model_state(model),
        "optimizer_state_bytes": state_bytes(optimizer.state_dict()),
        "rng_bytes": rng_bytes(),
    }


def detection_memory_bytes(cfg, classes: int = 20) -> int:
    """The most bytes the RaMBO classifier loss's score memory holds at the row's settings: ``tau``
    batches of ``batch x RoIs per image`` rows (the sampled RoIs, or every RPN proposal with
    ``loss.classifier_rois=all_proposals``; the ground-truth boxes added to them are left out) of
    ``classes`` float32 scores and as many bools. 0 without one (cross-entropy)."""
    tau = int(cfg.loss.get("tau") or 0) if cfg.loss.name == "rambo" else 0
    all_proposals = cfg.loss.get("classifier_rois", "sampled") == "all_proposals"
    rois = int(cfg.model.rpn_post_nms_top_n_train if all_proposals else cfg.model.box_batch_size_per_image)
    return tau * int(cfg.schedule.batch_size) * rois * classes * (4 + 1)


def plan_detection(cfg, m: dict) -> dict:
    batch = int(cfg.schedule.batch_size)
    eval_batch = int(cfg.eval.get("batch_size", batch))  # the training batch before eval.batch_size existed
    train_line = fit_line(m["sizes"][0], m["train_peak_bytes"][0], m["sizes"][1], m["train_peak_bytes"][1])
    eval_line = fit_line(m["sizes"][0], m["eval_peak_bytes"][0], m["sizes"][1], m["eval_peak_bytes"][1])
    return {
        "train_bytes": extrapolate(train_line, batch),
        "eval_bytes": extrapolate(eval_line, eval_batch),
        "train_line": train_line,
        "eval_line": eval_line,
        "batch": batch,
        "eval_batch": eval_batch,
        "train_model": f"fixed + per_image x {batch} (inputs included)",
    }


def needs_detection(plan: dict, card_gib: float = 16, allowance_gib: float = CUDA_ALLOWANCE_GIB) -> str:
    budget = (card_gib - allowance_gib) * GIB
    needs = []
    if plan["train_bytes"] > budget:
        per_gpu = largest_fitting(plan["train_line"], budget)
        needs.append(
            f"DDP over {math.ceil(plan['batch'] / per_gpu)} GPUs ({per_gpu} images each)"
            if per_gpu
            else "does not fit at one image"
        )
    if plan["eval_bytes"] > budget:
        needs.append(f"eval.batch_size <= {largest_fitting(plan['eval_line'], budget)}")
    return "; ".join(needs) or "fits as configured"


# ----------------------------------------------------------------------------------------------- the plan


def shape_key(app: str, cfg) -> str:
    """What decides the model's lines: rows with the same key share one measurement (that of the first
    row listed). Retrieval: the backbone, image, embedding, BatchNorm mode and whether the step is
    two-pass (the loss is measured per row at its own batch). Detection: the backbone, the sizes and
    which RoIs the box head classifies in training (``loss.classifier_rois``: the 512 sampled per
    image, or every proposal, the paper RaMBO rows'); the RoI classifier loss itself (CE, or RaMBO
    on the logits, x 8 with its memory: megabytes) is left out."""
    if app == "retrieval":
        parts = [
            cfg.model.backbone,
            cfg.image_size,
            cfg.model.embedding_dim,
            cfg.model.freeze_batchnorm,
            "two-pass" if cfg.two_pass_chunk_size else "one-pass",
        ]
    else:
        parts = [
            cfg.model.backbone,
            cfg.model.min_size,
            cfg.model.max_size,
            cfg.model.trainable_layers,
            cfg.model.box_batch_size_per_image,
            cfg.model.rpn_post_nms_top_n_train,
            cfg.loss.get("classifier_rois", "sampled"),
        ]
    return "|".join(str(p) for p in parts)


def plan(rows, device: torch.device = torch.device("cpu"), toy: dict | None = None, log=print) -> dict:
    """Measure every row's shape once and plan every row."""
    measured, out = {}, []
    for row in rows:
        app, cfg = row_config(row, toy)
        key = shape_key(app, cfg)
        if key not in measured:
            started = time.perf_counter()
            sizes = (toy or {}).get("sizes", SMALL)
            measured[key] = (
                measure_retrieval(cfg, device, sizes)
                if app == "retrieval"
                else measure_detection(cfg, device, sizes, (toy or {}).get("shapes", VOC_SHAPES))
            )
            measured[key]["seconds"] = round(time.perf_counter() - started, 1)
            log(f"[memory-plan] measured {row} ({key}) in {measured[key]['seconds']} s")
        m = measured[key]
        if app == "retrieval":
            loss_key = (
                "loss",
                cfg.loss.name,
                str(OmegaConf.to_container(cfg.loss.module, resolve=True)),  # resolved: the rows' own tau, margin
                int(cfg.batch_size),
                int(cfg.data.sampler.samples_per_class),
            )
            if loss_key not in measured:
                memory = {}
                measured[loss_key] = retrieval_loss_peak(cfg, int(cfg.batch_size), device, memory=memory)
                measured[("memory", *loss_key)] = memory["bytes"]
            search_key = ("search", cfg.data.name, int(cfg.model.embedding_dim))
            if search_key not in measured:
                measured[search_key] = search_peak(
                    cfg.data.name, int(cfg.model.embedding_dim), device, (toy or {}).get("search_scale", 1.0)
                )
            p = plan_retrieval(cfg, m, measured[loss_key], measured[search_key])
            disk = checkpoint_sizes(m, measured[("memory", *loss_key)])
        else:
            p = plan_detection(cfg, m)
            disk = checkpoint_sizes(m, detection_memory_bytes(cfg))
        needs = needs_retrieval(p) if app == "retrieval" else needs_detection(p)
        peak = max(p["train_bytes"], p["eval_bytes"]) / GIB
        out.append(
            {
                "row": row,
                "app": app,
                "shape": key,
                "backbone": cfg.model.backbone,
                **p,
                "train_gib": p["train_bytes"] / GIB,
                "eval_gib": p["eval_bytes"] / GIB,
                "fits": {str(c): f for c, f in fits(peak).items()},
                "needs_for_16": needs,
                "parameters": m["parameters"],
                **disk,
                "measured": m,
            }
        )
    return {
        "meta": {
            "device": str(device),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%d"),
            "small_sizes": list((toy or {}).get("sizes", SMALL)),
            "cards_gib": list(CARDS_GIB),
            "cuda_allowance_gib": CUDA_ALLOWANCE_GIB,
            "toy": bool(toy),
            "command": "python benchmarks/memory_plan.py " + " ".join(sys.argv[1:]),
        },
        "rows": out,
    }


def markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [
        f"# GPU memory plan of the paper experiments{' (toy sizes)' if meta['toy'] else ''}",
        "",
        f"Measured on `{meta['device']}` ({meta['machine']}), torch {meta['torch']}, {meta['date']}: `{meta['command']}`. "
        f"Peak tensor memory of one training step and of one evaluation batch at {meta['small_sizes']} images "
        "(per two-pass chunk for the Recall@k rows), extrapolated linearly to the row's own batch "
        "(benchmarks/memory_plan.py's docstring); GiB. A card fits when the larger peak plus "
        f"{meta['cuda_allowance_gib']} GiB (an assumed allowance for the CUDA context and cuDNN workspaces) is at most "
        "its size.",
        "",
        "| experiment | train batch | train step GiB | eval batch | eval GiB | "
        + " | ".join(f"{c} GB" for c in meta["cards_gib"])
        + " | to fit 16 GB |",
        "|---|---:|---:|---:|---:|" + "---|" * len(meta["cards_gib"]) + "---|",
    ]
    for r in report["rows"]:
        batch = f"{r['batch']}" + (f" (chunk {r['two_pass_chunk_size']})" if r.get("two_pass_chunk_size") else "")
        cells = ["yes" if r["fits"][str(c)] else "no" for c in meta["cards_gib"]]
        lines.append(
            f"| {r['row']} | {batch} | {r['train_gib']:.1f} | {r['eval_batch']} | {r['eval_gib']:.1f} | "
            + " | ".join(cells)
            + f" | {r['needs_for_16']} |"
        )
    lines += [
        "",
        "Per shape (measured once, shared by the rows listed): the fitted lines, GiB = fixed + per image x n.",
        "",
        "| rows | train fixed | train per image | eval fixed | eval per image | loss at the row's batch | search (with the model) | train model | measured in |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    shapes = {}
    for r in report["rows"]:
        shapes.setdefault(r["shape"], []).append(r)
    for group in shapes.values():
        r = group[0]
        loss = f"{r['loss_bytes'] / GIB:.2f}" if "loss_bytes" in r else "-"
        search = f"{r['search_bytes'] / GIB:.2f}" if "search_bytes" in r else "-"
        lines.append(
            f"| {', '.join(g['row'] for g in group)} | {r['train_line'][0] / GIB:.2f} | {r['train_line'][1] / GIB:.3f} | "
            f"{r['eval_line'][0] / GIB:.2f} | {r['eval_line'][1] / GIB:.4f} | {loss} | {search} | {r['train_model']} | "
            f"{r['measured']['seconds']} s |"
        )
    lines += [
        "",
        "Checkpoints on disk, MB (1e6 bytes; benchmarks/memory_plan.py's docstring): a finished run keeps the model's "
        "state, the score memory and the random states; while it trains the checkpoint adds the optimiser state "
        "(and the checkpoint of the epoch before is kept beside it, as large).",
        "",
        "| experiment | parameters (M) | model state | score memory | finished checkpoint | while training |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        finished = r["finished_checkpoint_bytes"]
        lines.append(
            f"| {r['row']} | {r['parameters'] / 1e6:.1f} | {r['measured']['model_state_bytes'] / 1e6:.1f} | "
            f"{r['memory_bytes'] / 1e6:.2f} | {finished / 1e6:.1f} | {r['training_checkpoint_bytes'] / 1e6:.1f} |"
        )
    lines += [
        "",
        "Assumptions: the peaks are linear in the images per step between what was measured and the row's batch "
        "(activations per image; the loss and the search are measured at the row's size instead); detection "
        "images are VOC's 375x500 and 500x375 in one batch (padded to 800x800 after the 600-1000 px resize; an "
        "extreme aspect ratio pads up to 1000x1000, 1.56x the pixels); the evaluation's search is on the GPU "
        "(the torch backend, faiss-cpu installed); CPU allocations stand in for CUDA's (other kernels, the caching "
        "allocator's rounding): `make gpu-check`'s `memory_plan` section measures both on a GPU.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=[*RETRIEVAL_ROWS, *DETECTION_ROWS])
    parser.add_argument("--toy", action="store_true", help="toy sizes: 32 px retrieval, 64-96 px detection (the test)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks")
    args = parser.parse_args(argv)
    unknown = [r for r in args.rows if r not in RETRIEVAL_ROWS + DETECTION_ROWS]
    if unknown:
        parser.error(f"not a paper experiment: {unknown}; choose from {', '.join(RETRIEVAL_ROWS + DETECTION_ROWS)}")
    report = plan(args.rows, toy=TOY if args.toy else None)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "memory_plan.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    table = markdown(report)
    (args.out_dir / "memory_plan.md").write_text(table)
    print(table)
    print(f"written: {args.out_dir / 'memory_plan.json'}, {args.out_dir / 'memory_plan.md'}")
    return report


# Toy sizes: the same code on small images and batches (tests/test_memory_plan.py, gpu_check --toy).
TOY = {
    "retrieval": {
        "model.backbone": "resnet18",
        "image_size": 32,
        "model.embedding_dim": 32,
        "batch_size": 16,
        "eval_batch_size": 8,
        "two_pass_chunk_size": 4,
    },
    "detection": {"model.backbone": "resnet18", "model.min_size": 64, "model.max_size": 96, "schedule.batch_size": 4},
    "sizes": (2, 4),
    "search_scale": 0.02,
    "shapes": ((24, 32), (32, 24)),
}

if __name__ == "__main__":
    main()
