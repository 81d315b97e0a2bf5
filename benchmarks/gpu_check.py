"""``make gpu-check``: the project on one GPU, in a few minutes, as one prepared script.

    python benchmarks/gpu_check.py                 # a GPU when torch sees one, else toy sizes on the CPU
    python benchmarks/gpu_check.py --toy           # toy sizes (what the test runs)
    python benchmarks/gpu_check.py --sections rank_losses detection_step --out-dir /tmp/check

Sections (each one runs even when an earlier one failed; a failure is reported, never hidden):

* ``core_tests``: the core test suite on the device (``RAMBO_TEST_DEVICE``, see core/tests/conftest.py);
* ``rank_losses``: AP loss and recall loss forward+backward at 1e5 ... 1e8 elements beside the
  paper's Table 6 V100 row, plus the 320k-element sequence of its detection runs ("< 5 ms");
* ``sync_free``: host syncs per loss call (AP, recall, MAP, AP-C, the detection RoI loss with its
  memory full) on the path the device runs, counted twice: operations that read device data
  (``rambo.core.host_syncs``) and, on a GPU, ``torch.cuda.set_sync_debug_mode`` warnings; and
  forward+backward eager vs ``torch.compile(fullgraph=True)`` (inductor; aot_eager at toy sizes);
* ``cuda_graphs``: the detection RoI loss with its memory full (4,096 RoIs x 21, memory 7) and
  one retrieval step of the paper profile (model forward, the batch-memory recall loss, backward;
  the optimizer stays outside the graph) captured as CUDA graphs (``torch.cuda.graph``) and
  replayed: replay vs eager time, and the replayed loss (and, for the loss alone, gradient) equal
  to an eager twin's; skipped without CUDA;
* ``ranks_identical``: ranks, AP-loss and recall-loss gradients on the device bit-identical to the
  CPU on the same input, ties (and -0.0 / +0.0) included, one row and several rows;
* ``retrieval_step``: training steps of the paper profile (ResNet-50, 224 px, batch 128, RaMBO
  recall log with the batch memory; ``experiment=sop_log profile=paper``), images/s, peak memory;
* ``recall_k_step``: the two-pass Recall@k surrogate with SiMix at batch 4,000
  (``experiment=sop_recallk_simix profile=paper``), images/s, peak memory;
* ``recall_at_k_eval``: Recall@K at Stanford Online Products scale (60,502 x 512) through the
  project's evaluation (faiss; on the GPU when faiss-gpu sees one) beside an exact k-NN written
  in torch on the device;
* ``detection_step``: Faster R-CNN R-50 FPN training steps of the paper config (batch 8, VOC
  sized images, ``experiment=table5_r50_voc07_{rambo,ce}``), images/s, peak memory, and the
  RoI classifier loss alone at that size with its memory full;
* ``memory_plan``: ``benchmarks/memory_plan.py``'s peaks (one training step, one evaluation batch at
  2 and 4 images) of a few paper rows measured on the device (``torch.cuda.max_memory_allocated``),
  with the predictions at each row's own settings, beside the committed CPU plan's
  (``benchmarks/memory_plan.json``; at toy sizes a toy plan made on the CPU).

The training steps go through the apps' own code: configs composed by Hydra from the packages'
``configs/``, ``build_model``/``build_detector``, and each engine's ``train_one_epoch`` fed with
prepared batches (random images: the weights are untrained, the data is not what is measured).
Writes ``gpu_check.json`` (after every section) and ``gpu_check.md`` to ``--out-dir``
(default: ``benchmarks/`` on a GPU, ``build/gpu-check/`` otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from rambo.core.benchmark import LAM, MARGIN, PAPER_TABLE_6, RELEVANT_FRACTION, median_ms, synchronize

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("core_tests", "rank_losses", "sync_free", "cuda_graphs", "ranks_identical", "retrieval_step", "recall_k_step",
            "recall_at_k_eval", "detection_step", "memory_plan")  # fmt: skip
# Paper Table 6, Tesla V100, AP loss forward+backward (ms); Sec. 5.2: "< 5 ms" at 320k elements.
# The losses' settings (margin, lambda, 1 relevant in 100) are make bench's.
PAPER_V100_MS = PAPER_TABLE_6["cuda"]
DETECTION_SEQUENCE = 320_000
PAPER_DETECTION_MS = 5.0


class Sizes:
    """Problem sizes of a full check (on a GPU) and of a toy one (the CPU, the test)."""

    def __init__(self, toy: bool):
        self.toy = toy
        self.loss_lengths = [10**3, 10**4] if toy else [10**5, 10**6, 10**7, 10**8]
        self.detection_sequence = 3_200 if toy else DETECTION_SEQUENCE
        self.repeats = 2 if toy else 10
        self.identical_lengths = (2_000, (4, 500)) if toy else (10**6, (64, 8_192))
        self.retrieval = dict(batch=8, image_size=32, steps=2) if toy else dict(batch=128, image_size=224, steps=6)
        self.recall_k = dict(batch=16, chunk=4, image_size=32, steps=1) if toy else dict(batch=4000, chunk=250, image_size=224, steps=2)
        self.eval = dict(n=2_000, dim=32) if toy else dict(n=60_502, dim=512)
        self.detection = dict(batch=2, height=48, width=64, min_size=64, max_size=96, steps=2) if toy else \
            dict(batch=8, height=375, width=500, min_size=600, max_size=1000, steps=6)  # fmt: skip
        self.core_tests = ["core/tests/test_core_ranking.py"] if toy else ["core/tests"]


# ----------------------------------------------------------------------------------------------- timing


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """Peak memory allocated by torch on the GPU since the last reset (None on the CPU)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


# ----------------------------------------------------------------------------------------------- sections


def core_tests(device: torch.device, sizes: Sizes) -> dict:
    """The core test suite with ``RAMBO_TEST_DEVICE`` set to the device; counts from pytest's summary."""
    env = {**os.environ, "RAMBO_TEST_DEVICE": str(device), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *sizes.core_tests]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"device": str(device), "exit_code": done.returncode, "summary": summary, "counts": counts,
            "failures": failures[:50], "output_tail": output[-6000:] if done.returncode else "",
            "ok": done.returncode == 0}  # fmt: skip


def _loss_fwd_bwd(loss_fn, scores: torch.Tensor, relevant: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = scores.detach().clone().requires_grad_(True)
    value = loss_fn(leaf, relevant)
    value.backward()
    return value.detach(), leaf.grad


def _random_row(n: int, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, n, generator=generator, device="cpu")
    relevant = torch.rand(1, n, generator=generator, device="cpu") < RELEVANT_FRACTION
    relevant[0, 0] = True
    return scores.to(device), relevant.to(device)


def rank_losses(device: torch.device, sizes: Sizes) -> dict:
    """AP and recall loss forward+backward per length, one float32 sort beside them, paper V100 row."""
    from rambo.core import APLoss, RecallLoss

    losses = {"ap": APLoss(MARGIN, LAM), "recall": RecallLoss(MARGIN, LAM, weighting="log")}
    rows = []
    for n in [*sizes.loss_lengths, sizes.detection_sequence]:
        scores, relevant = _random_row(n, device)
        repeats = max(2, sizes.repeats // 3) if n >= 10**8 else sizes.repeats
        reset_peak(device)
        row = {"n": n, "detection_sequence": n == sizes.detection_sequence}
        for name, loss_fn in losses.items():
            row[f"{name}_ms"] = median_ms(lambda: _loss_fwd_bwd(loss_fn, scores, relevant), device, repeats)
        flat = scores.view(-1)
        row["sort_ms"] = median_ms(lambda: torch.sort(flat), device, repeats)
        row["peak_gib"] = peak_gib(device)
        row["paper_v100_ms"] = PAPER_DETECTION_MS if row["detection_sequence"] else PAPER_V100_MS.get(n)
        rows.append(row)
        print(f"  n={n:.1e}: AP {row['ap_ms']:.2f} ms, recall {row['recall_ms']:.2f} ms, sort {row['sort_ms']:.2f} ms",
              flush=True)  # fmt: skip
        del scores, relevant, flat
    return {"rows": rows, "repeats": sizes.repeats, "margin": MARGIN, "lam": LAM, "relevant_fraction": RELEVANT_FRACTION,
            "ok": True}  # fmt: skip


def _count_syncs(run, device: torch.device) -> dict:
    """Host syncs of one call of ``run``: dispatched operations that read device data, and on a GPU
    the synchronisations CUDA itself reports (``set_sync_debug_mode("warn")``)."""
    import warnings

    from rambo.core.host_syncs import count_host_syncs

    counted, ops = count_host_syncs(run)
    cuda_warnings = None
    if device.type == "cuda":
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        cuda_warnings = sum("synchroniz" in str(w.message) for w in caught)
    return {"dispatched": counted, "ops": dict(ops), "cuda_reported": cuda_warnings}


def sync_free(device: torch.device, sizes: Sizes) -> dict:
    """Issue 23: syncs per call and eager vs compiled times of each loss on the path ``device`` runs."""
    from rambo.core import APCLoss, APLoss, MAPLoss, RecallLoss
    from rambo.core.loss_path import loss_path
    from rambo.detection.rank_classifier_loss import RankClassifierLoss

    path = "dense" if device.type != "cpu" else "sparse"  # what "auto" runs in eager mode (compiled: dense)
    backend = "aot_eager" if sizes.toy else "inductor"
    n = sizes.loss_lengths[0]
    rois = 256 if sizes.toy else 4_096
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(rois, 21, generator=generator).to(device)
    labels = (torch.randint(0, 21, (rois,), generator=generator) * (torch.rand(rois, generator=generator) < 0.25)).to(device)
    items = torch.randn(rois, 20, generator=generator).to(device)
    item_labels = torch.rand(rois, 20, generator=generator).to(device) < 0.05
    row, relevant = _random_row(n, device)
    cases = {
        f"AP loss, 1 x {n:.0e}": (lambda: APLoss(MARGIN, LAM), row, relevant),
        f"recall loss, 1 x {n:.0e}": (lambda: RecallLoss(MARGIN, LAM), row, relevant),
        f"MAP loss, {rois} x 20": (lambda: MAPLoss(0.15, 0.5), items, item_labels),
        f"AP-C loss, {rois} x 20": (lambda: APCLoss(0.15, 0.5), items, item_labels),
        f"detection RoI loss, {rois} x 21, memory 7 full": (lambda: RankClassifierLoss(20, 0, tau=7), logits, labels),
    }
    rows = []
    with loss_path("auto"):
        for name, (make, scores, target) in cases.items():
            loss_fn = make().to(device)
            for _ in range(8):  # fill a memory (the detection loss's 7) before measuring
                _loss_fwd_bwd(loss_fn, scores, target)
            syncs = _count_syncs(lambda: _loss_fwd_bwd(loss_fn, scores, target), device)
            eager_ms = median_ms(lambda: _loss_fwd_bwd(loss_fn, scores, target), device, sizes.repeats)
            torch._dynamo.reset()
            compiled_fn = make().to(device)
            compiled = torch.compile(compiled_fn, backend=backend, fullgraph=True)
            started = time.perf_counter()
            for _ in range(8):
                _loss_fwd_bwd(compiled, scores, target)
            compile_s = time.perf_counter() - started
            compiled_ms = median_ms(lambda: _loss_fwd_bwd(compiled, scores, target), device, sizes.repeats)
            same = torch.equal(_loss_fwd_bwd(compiled, scores, target)[1], _loss_fwd_bwd(loss_fn, scores, target)[1])
            rows.append({"loss": name, "path": path, **syncs, "eager_ms": eager_ms, "compiled_ms": compiled_ms,
                         "backend": backend, "compile_seconds": compile_s, "compiled_gradient_equal": same})  # fmt: skip
            print(f"  {name}: {syncs['dispatched']} syncs dispatched, CUDA reported {syncs['cuda_reported']}; eager {eager_ms:.2f} ms, "
                  f"compiled {compiled_ms:.2f} ms ({backend}), same gradient {same}", flush=True)  # fmt: skip
    return {"rows": rows, "ok": all(r["compiled_gradient_equal"] for r in rows)}


def _graph_and_twin(step, modules, warm_up_batches, static_input):
    """Warm ``step`` up on a side stream (``torch.cuda.graphs``' rule) until the score memory is full,
    copy ``modules`` (the eager twin, memory included), capture one call as a CUDA graph."""
    import copy

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for batch in warm_up_batches:
            with torch.no_grad():
                static_input.copy_(batch)
            step(modules)
    torch.cuda.current_stream().wait_stream(stream)
    twin = copy.deepcopy(modules)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = step(modules)
    return graph, static_output, twin


def _graph_rows(name, step, modules, batches, static_input, tau, gradient_of, device, repeats, tolerance):
    """Capture after ``tau + 1`` warm-up calls, then replay the remaining batches beside the twin."""
    graph, static_output, twin = _graph_and_twin(step, modules, batches[: tau + 1], static_input)
    values_equal, gradients_equal = [], []
    for batch in batches[tau + 1:]:
        with torch.no_grad():
            static_input.copy_(batch)
        graph.replay()
        expected = step(twin, batch)
        values_equal.append(bool(torch.allclose(static_output, expected, rtol=tolerance, atol=0.0)))
        if gradient_of is not None:
            gradients_equal.append(torch.equal(gradient_of(modules), gradient_of(twin)))
    graph_ms = median_ms(graph.replay, device, repeats)
    eager_ms = median_ms(lambda: step(twin, batches[-1]), device, repeats)
    return {"case": name, "eager_ms": eager_ms, "graph_ms": graph_ms, "replays_compared": len(values_equal),
            "loss_equal": all(values_equal), "loss_tolerance": tolerance,
            "gradient_equal": all(gradients_equal) if gradient_of is not None else None}  # fmt: skip


def _ap_loss_modes(device: torch.device, n: int, repeats: int) -> dict:
    """AP loss forward+backward on one row of ``n``: eager, compiled (inductor, fullgraph) and as a
    CUDA graph, each gradient compared with eager's bit for bit."""
    from rambo.core import APLoss

    scores, relevant = _random_row(n, device)
    static = scores.clone().requires_grad_(True)

    def step(modules, batch=None):
        leaf = static if batch is None else batch.clone().requires_grad_(True)
        leaf.grad = None
        value = modules["loss"](leaf, relevant)
        value.backward()
        modules["grad"] = leaf.grad
        return value.detach()

    row = _graph_rows(f"AP loss, 1 x {n:.0e}", step, {"loss": APLoss(MARGIN, LAM)}, [scores] * 4, static, 2,
                      lambda modules: modules["grad"], device, repeats, 0.0)  # fmt: skip
    torch._dynamo.reset()
    compiled = torch.compile(APLoss(MARGIN, LAM), backend="inductor", fullgraph=True, dynamic=False)
    for _ in range(2):
        _loss_fwd_bwd(compiled, scores, relevant)
    row["compiled_ms"] = median_ms(lambda: _loss_fwd_bwd(compiled, scores, relevant), device, repeats)
    row["compiled_gradient_equal"] = torch.equal(_loss_fwd_bwd(compiled, scores, relevant)[1],
                                                 _loss_fwd_bwd(APLoss(MARGIN, LAM), scores, relevant)[1])  # fmt: skip
    row["n"] = n
    return row


def cuda_graphs(device: torch.device, sizes: Sizes) -> dict:
    """Issue 23 items 4 and 7: the AP loss at 1e5-1e8 eager, compiled and as a CUDA graph; the
    detection loss with its memory, and one retrieval step, as CUDA graphs."""
    if device.type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device", "rows": [], "lengths": [], "ok": True}
    from hydra.utils import instantiate

    from rambo.detection.rank_classifier_loss import RankClassifierLoss
    from rambo.retrieval.model import build_model

    rows = []
    # The detection RoI loss: [4096, 21] logits, memory 7; exact, so the replay must give the same bits.
    rois, tau = (256 if sizes.toy else 4_096), 7
    generator = torch.Generator().manual_seed(0)
    logits = [torch.randn(rois, 21, generator=generator).to(device) for _ in range(tau + 4)]
    labels = (torch.randint(0, 21, (rois,), generator=generator) * (torch.rand(rois, generator=generator) < 0.25)).to(device)
    static_logits = torch.zeros(rois, 21, device=device, requires_grad=True)

    def loss_step(modules, batch=None):
        leaf = static_logits if batch is None else batch.clone().requires_grad_(True)
        if batch is None:
            leaf.grad = None
        value = modules["loss"](leaf, labels)
        value.backward()
        modules["grad"] = leaf.grad
        return value.detach()

    rows.append(_graph_rows(f"detection RoI loss, {rois} x 21, memory {tau}", loss_step,
                            {"loss": RankClassifierLoss(20, 0, tau=tau).to(device)}, logits, static_logits, tau,
                            lambda modules: modules["grad"], device, sizes.repeats, 0.0))  # fmt: skip
    # One retrieval step of the paper profile (ResNet-50, the batch-memory recall loss).
    s = sizes.retrieval
    cfg = compose("retrieval", ["experiment=sop_log", "profile=paper", "model.pretrained=false",
                                f"image_size={s['image_size']}", f"batch_size={s['batch']}"])  # fmt: skip
    torch.manual_seed(0)
    memory_tau = int(cfg.loss.module.get("tau", 0))
    images = [torch.randn(s["batch"], 3, s["image_size"], s["image_size"], generator=generator).to(device)
              for _ in range(memory_tau + 4)]  # fmt: skip
    per_class = int(cfg.data.sampler.samples_per_class)
    targets = torch.arange(s["batch"], device=device) // per_class
    static_images = torch.zeros_like(images[0])

    def retrieval_step_once(modules, batch=None):
        modules["model"].zero_grad(set_to_none=batch is not None)
        value = modules["loss"](modules["model"](static_images if batch is None else batch), targets)
        value.backward()
        return value.detach()

    modules = {"model": build_model(cfg.model).to(device), "loss": instantiate(cfg.loss.module).to(device)}
    # cuDNN may pick different kernels for the twin: the loss agrees to a tolerance, not bit for bit
    rows.append(_graph_rows(f"retrieval step (`experiment=sop_log profile=paper`, batch {s['batch']}, {s['image_size']} px)",
                            retrieval_step_once, modules, images, static_images, memory_tau, None, device,
                            sizes.repeats, 1e-3))  # fmt: skip
    lengths = [_ap_loss_modes(device, n, sizes.repeats) for n in sizes.loss_lengths]
    for row in [*lengths, *rows]:
        print(f"  {row['case']}: eager {row['eager_ms']:.2f} ms, graph {row['graph_ms']:.2f} ms, "
              f"loss equal {row['loss_equal']}, gradient equal {row['gradient_equal']}", flush=True)  # fmt: skip
    ok = all(r["loss_equal"] and r["gradient_equal"] is not False for r in [*lengths, *rows])
    return {"rows": rows, "lengths": lengths, "ok": ok and all(r["compiled_gradient_equal"] for r in lengths)}


def _tied_scores(shape, seed: int) -> torch.Tensor:
    """Scores with many exact ties, and both zeros (which tie)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(-50, 50, shape, generator=generator, device="cpu").float() / 8
    scores.view(-1)[: shape[-1] // 10] = -0.0
    return scores


def _with_incoming_gradient(run, relevant: torch.Tensor):
    """``(run(), dL/drank at the relevant items as the ranking's backward received it, on the CPU)``.

    The CPU takes the item path (``BlackboxItemRank``: the gradient at the P relevant items), a GPU
    the dense operator (``alg1_gradient``: a dense ``[rows, N]`` gradient, read at the same items).
    """
    from rambo.core import item_ranking, ranking

    received = []
    dense, items = ranking.alg1_gradient, item_ranking.BlackboxItemRank.backward

    def dense_spy(scores, ranks, grad_ranks, lam_raw):
        received.append(grad_ranks.detach().cpu()[relevant.nonzero(as_tuple=True)])
        return dense(scores, ranks, grad_ranks, lam_raw)

    def items_spy(ctx, grad_ranks, *rest):
        received.append(grad_ranks.detach().cpu().clone())
        return items(ctx, grad_ranks, *rest)

    ranking.alg1_gradient = dense_spy
    item_ranking.BlackboxItemRank.backward = staticmethod(items_spy)
    try:
        result = run()
    finally:
        ranking.alg1_gradient = dense
        item_ranking.BlackboxItemRank.backward = staticmethod(items)
    return result, received[0]


def ranks_identical(device: torch.device, sizes: Sizes) -> dict:
    """Ranks and loss gradients on the device equal the CPU's, bit for bit, on tied input."""
    from rambo.core import APLoss, RecallLoss, exact_rank

    one_row, several = sizes.identical_lengths
    cases = []
    for label, shape in (("one row", (1, one_row)), ("several rows", several)):
        scores = _tied_scores(shape, seed=len(cases))
        relevant = torch.rand(shape, generator=torch.Generator().manual_seed(7), device="cpu") < 0.05
        relevant[:, 0] = True
        case = {"case": label, "shape": list(shape), "ties": int(scores.numel() - scores.unique().numel())}
        case["ranks_equal"] = torch.equal(exact_rank(scores), exact_rank(scores.to(device)).cpu())
        # The recall loss at the retrieval rows' margin and lambda (0.02, 4): at make bench's 0.1 and 0.5
        # its gradient on these rows is 0 everywhere, and comparing zeros would prove nothing.
        for name, loss_fn in (("ap", APLoss(MARGIN, LAM)), ("recall", RecallLoss(0.02, 4.0, weighting="log"))):
            (value_cpu, grad_cpu), incoming_cpu = _with_incoming_gradient(lambda: _loss_fwd_bwd(loss_fn, scores, relevant), relevant)
            (value_dev, grad_dev), incoming_dev = _with_incoming_gradient(
                lambda: _loss_fwd_bwd(loss_fn, scores.to(device), relevant.to(device)), relevant)
            case[f"{name}_gradient_equal"] = torch.equal(grad_cpu, grad_dev.cpu())
            case[f"{name}_gradient_entries_differing"] = int((grad_cpu != grad_dev.cpu()).sum())
            case[f"{name}_gradient_entries_nonzero"] = int((grad_cpu != 0).sum())  # 0: the comparison proves nothing
            # dL/drank reaching the blackbox: where a difference starts, if there is one
            case[f"{name}_incoming_gradient_equal"] = torch.equal(incoming_cpu, incoming_dev)
            case[f"{name}_loss_difference"] = float((value_cpu - value_dev.cpu()).abs())
        cases.append(case)
    ok = all(c["ranks_equal"] and c["ap_gradient_equal"] and c["recall_gradient_equal"] for c in cases)
    return {"compared": f"cpu vs {device}", "cases": cases, "ok": ok}


def compose(app: str, overrides: list[str]):
    """The app's training config (``rambo.<app>``'s ``configs/train.yaml``) with ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    package = __import__(f"rambo.{app}", fromlist=["train"])
    config_dir = Path(package.__file__).parent / "configs"
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def _retrieval_steps(device: torch.device, overrides: list[str], batch: int, image_size: int, steps: int,
                     chunk: int | None) -> dict:  # fmt: skip
    """``steps`` timed training steps (after one warm-up) of the retrieval engine on random images."""
    from hydra.utils import instantiate

    from rambo.harness.engine_options import EngineOptions
    from rambo.harness.precision import autocast, to_channels_last
    from rambo.retrieval.engine import train_one_epoch
    from rambo.retrieval.model import build_model
    from rambo.retrieval.train import build_optimizer

    cfg = compose("retrieval", [*overrides, "model.pretrained=false", f"image_size={image_size}", f"batch_size={batch}"])
    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    if cfg.channels_last:
        model = to_channels_last(model)
    options = EngineOptions(device=device, autocast=autocast(cfg.precision, device), channels_last=bool(cfg.channels_last))
    optimizer = build_optimizer(cfg, model)
    loss_fn = instantiate(cfg.loss.module).to(device)
    per_class = int(cfg.data.sampler.samples_per_class)
    images = torch.randn(batch, 3, image_size, image_size, device=device)
    labels = torch.arange(batch, device=device) // per_class
    batches = [(images, labels, None)]
    chunk = chunk if chunk is not None else cfg.get("two_pass_chunk_size")
    train_one_epoch(model, batches, loss_fn, optimizer, chunk, options=options)  # warm-up (cuDNN autotune, memory)
    reset_peak(device)
    synchronize(device)
    started = time.perf_counter()
    train_one_epoch(model, batches * steps, loss_fn, optimizer, chunk, options=options)
    synchronize(device)
    seconds = time.perf_counter() - started
    return {"overrides": overrides, "backbone": cfg.model.backbone, "loss": cfg.loss.name, "batch": batch,
            "image_size": image_size, "two_pass_chunk_size": chunk, "steps": steps, "seconds_per_step": seconds / steps,
            "images_per_second": batch * steps / seconds, "peak_gib": peak_gib(device), "ok": True}  # fmt: skip


def retrieval_step(device: torch.device, sizes: Sizes) -> dict:
    """The paper profile's step, and the same step with bfloat16 autocast and channels-last (issue 23
    item 5: options of the apps, off in the paper profile)."""
    s = sizes.retrieval
    paper = ["experiment=sop_log", "profile=paper"]
    runs = [_retrieval_steps(device, overrides, s["batch"], s["image_size"], s["steps"], None)
            for overrides in (paper, [*paper, "precision=bfloat16", "channels_last=true"])]  # fmt: skip
    return {**runs[0], "runs": runs, "bf16_speed_up": runs[0]["seconds_per_step"] / runs[1]["seconds_per_step"]}


def recall_k_step(device: torch.device, sizes: Sizes) -> dict:
    s = sizes.recall_k
    return _retrieval_steps(device, ["experiment=sop_recallk_simix", "profile=paper"], s["batch"], s["image_size"],
                            s["steps"], s["chunk"])  # fmt: skip


def _torch_recall_at_k(embeddings: torch.Tensor, labels: torch.Tensor, ks: list[int], rows: int = 4096) -> dict:
    """Exact same-set Recall@K in torch (query masked out), for the device's own k-NN time."""
    unit = torch.nn.functional.normalize(embeddings, dim=1)
    k_max = max(ks)
    hits = torch.zeros(len(ks), device=embeddings.device)
    for start in range(0, unit.shape[0], rows):
        block = unit[start : start + rows] @ unit.T
        block[torch.arange(block.shape[0], device=block.device), torch.arange(start, start + block.shape[0], device=block.device)] = -float("inf")
        neighbours = block.topk(k_max, dim=1).indices
        same = labels[neighbours] == labels[start : start + rows, None]
        for i, k in enumerate(ks):
            hits[i] += same[:, :k].any(1).sum()
    return {k: float(h) / unit.shape[0] for k, h in zip(ks, hits.tolist())}


def recall_at_k_eval(device: torch.device, sizes: Sizes) -> dict:
    """The project's Recall@K (faiss) at SOP scale, beside an exact top-k in torch on the device."""
    from rambo.retrieval.evaluate import import_faiss, recall_at_k, retrieval_metrics, search_backend

    faiss = import_faiss()
    n, dim, ks = sizes.eval["n"], sizes.eval["dim"], [1, 10, 100, 1000]
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(n, dim, generator=generator, device="cpu"), dim=1)
    labels = torch.randperm(n, generator=generator, device="cpu") % max(1, n // 5)  # ~5 images per class, as SOP's test split
    started = time.perf_counter()
    ours = recall_at_k(embeddings, labels, ks)
    faiss_seconds = time.perf_counter() - started
    on_device = embeddings.to(device), labels.to(device)
    _torch_recall_at_k(*on_device, ks)  # warm-up
    synchronize(device)
    started = time.perf_counter()
    torch_recall = _torch_recall_at_k(*on_device, ks)
    synchronize(device)
    torch_seconds = time.perf_counter() - started
    # the project's own torch search (what evaluation picks on a GPU that faiss does not see)
    started = time.perf_counter()
    project_torch = retrieval_metrics(embeddings, labels, ks, device=device, backend="torch")
    project_torch_seconds = time.perf_counter() - started
    agree = all(abs(ours[k] - torch_recall[k]) <= 1.0 / n + 1e-9 and abs(ours[k] - project_torch[f"R@{k}"]) <= 1.0 / n + 1e-9
                for k in ks)  # fmt: skip
    return {"n": n, "dim": dim, "ks": ks, "faiss_gpus": int(faiss.get_num_gpus()), "faiss_threads": int(faiss.omp_get_max_threads()),
            "faiss_seconds": faiss_seconds, "torch_device_seconds": torch_seconds, "recall": {str(k): ours[k] for k in ks},
            "torch_recall": {str(k): torch_recall[k] for k in ks}, "project_torch_seconds": project_torch_seconds,
            "search_chosen_on_this_device": search_backend(device), "agree": agree, "ok": agree}  # fmt: skip


def _detection_batches(batch: int, height: int, width: int, seed: int = 0) -> list:
    """One batch of random images with 1-4 random boxes each (labels 1..20, torchvision's convention)."""
    generator = torch.Generator().manual_seed(seed)
    images, targets = [], []
    for _ in range(batch):
        images.append(torch.rand(3, height, width, generator=generator, device="cpu"))
        count = int(torch.randint(1, 5, (1,), generator=generator, device="cpu"))
        corner = torch.rand(count, 2, generator=generator, device="cpu") * torch.tensor([width * 0.6, height * 0.6])
        size = (0.2 + 0.2 * torch.rand(count, 2, generator=generator, device="cpu")) * torch.tensor([width, height])
        targets.append({"boxes": torch.cat([corner, corner + size], 1),
                        "labels": torch.randint(1, 21, (count,), generator=generator, device="cpu")})  # fmt: skip
    return [(images, targets)]


def _detection_steps(device: torch.device, experiment: str, s: dict) -> dict:
    from rambo.detection.engine import train_one_epoch
    from rambo.detection.model import build_detector
    from rambo.harness.engine_options import EngineOptions

    cfg = compose("detection", [f"experiment={experiment}", "model.pretrained=false", f"model.min_size={s['min_size']}",
                                f"model.max_size={s['max_size']}"])  # fmt: skip
    torch.manual_seed(0)
    model = build_detector(cfg.model, cfg.loss, 20).to(device)
    schedule = cfg.schedule
    # The first iteration's learning rate of the paper schedule (warm-up from lr * warmup_ratio).
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=schedule.lr * schedule.warmup_ratio,
                                momentum=schedule.momentum, weight_decay=schedule.weight_decay)  # fmt: skip
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda iteration: 1.0)
    batches = _detection_batches(s["batch"], s["height"], s["width"])
    flips, options = torch.Generator().manual_seed(0), EngineOptions(device=device)
    train_one_epoch(model, batches * 2, optimizer, scheduler, flips, options=options)  # warm-up
    reset_peak(device)
    synchronize(device)
    started = time.perf_counter()
    _, images_seen = train_one_epoch(model, batches * s["steps"], optimizer, scheduler, flips, options=options)
    synchronize(device)
    seconds = time.perf_counter() - started
    return {"experiment": experiment, "backbone": cfg.model.backbone, "batch": s["batch"],
            "image": [s["height"], s["width"]], "resized_to": [s["min_size"], s["max_size"]], "steps": s["steps"],
            "seconds_per_step": seconds / s["steps"], "images_per_second": images_seen / seconds, "peak_gib": peak_gib(device),
            "rois_per_image": int(cfg.model.box_batch_size_per_image), "loss": dict(cfg.loss)}  # fmt: skip


def _classifier_loss_ms(device: torch.device, experiment: str, rois: int, repeats: int) -> dict:
    """The RoI classifier loss alone on ``[rois, 21]`` logits, its score memory full (tau batches)."""
    from rambo.detection.model import build_classifier_loss

    cfg = compose("detection", [f"experiment={experiment}"])
    loss_fn = build_classifier_loss(cfg.loss, 20).to(device)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(rois, 21, generator=generator, device="cpu").to(device)
    labels = (torch.randint(0, 21, (rois,), generator=generator, device="cpu") * (torch.rand(rois, generator=generator, device="cpu") < 0.25)).to(device)
    for _ in range(int(cfg.loss.get("tau", 0)) + 1):  # fill the memory
        _loss_fwd_bwd(loss_fn, logits, labels)
    ms = median_ms(lambda: _loss_fwd_bwd(loss_fn, logits, labels), device, repeats)
    ranked = rois * 20 * (int(cfg.loss.get("tau", 0)) + 1)
    return {"rois": rois, "elements_ranked_per_class_column_total": ranked, "ms": ms}


def detection_step(device: torch.device, sizes: Sizes) -> dict:
    s = sizes.detection
    runs = [_detection_steps(device, experiment, s) for experiment in ("table5_r50_voc07_rambo", "table5_r50_voc07_ce")]
    loss = _classifier_loss_ms(device, "table5_r50_voc07_rambo", s["batch"] * runs[0]["rois_per_image"], sizes.repeats)
    return {"runs": runs, "classifier_loss": loss, "paper_ms": PAPER_DETECTION_MS, "ok": True}


MEMORY_PLAN_ROWS = ("sop_log", "sop_recallk_simix", "table5_r50_voc07_rambo")


def memory_plan(device: torch.device, sizes: Sizes) -> dict:
    """The memory plan's small-size peaks on the device beside the CPU plan's (benchmarks/memory_plan.py)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import memory_plan as plan_tool

    toy = plan_tool.TOY if sizes.toy else None
    committed = REPO / "benchmarks" / "memory_plan.json"
    here = plan_tool.plan(MEMORY_PLAN_ROWS, device, toy)["rows"]
    if toy is None and committed.is_file():
        cpu = {r["row"]: r for r in json.loads(committed.read_text())["rows"]}
    else:  # a toy plan on the CPU (on a CPU device: the one just made)
        cpu = {r["row"]: r for r in (here if device.type == "cpu" else plan_tool.plan(MEMORY_PLAN_ROWS, torch.device("cpu"), toy)["rows"])}
    rows = []
    for r in here:
        c, m = cpu[r["row"]], r["measured"]
        rows.append({"row": r["row"], "sizes": m["sizes"], "train_peak_gib": [b / 2**30 for b in m["train_peak_bytes"]],
                     "cpu_train_peak_gib": [b / 2**30 for b in c["measured"]["train_peak_bytes"]],
                     "eval_peak_gib": [b / 2**30 for b in m["eval_peak_bytes"]],
                     "cpu_eval_peak_gib": [b / 2**30 for b in c["measured"]["eval_peak_bytes"]],
                     "train_gib": r["train_gib"], "cpu_train_gib": c["train_gib"], "eval_gib": r["eval_gib"], "cpu_eval_gib": c["eval_gib"],
                     "batch": r["batch"], "eval_batch": r["eval_batch"]})  # fmt: skip
    return {"rows": rows, "device": str(device), "ok": True}


# ----------------------------------------------------------------------------------------------- report


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.2f} s" if value >= 1e3 else f"{value:.2f} ms"


def _gib(value) -> str:
    return "-" if value is None else f"{value:.2f} GiB"


def _table(title: str, header: list[str], align: str, rows: list[list]) -> list[str]:
    """A Markdown section: ``## title``, a table with ``header`` (``align``: one ``l``/``r`` per
    column) and ``rows``, and a blank line."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return [f"## {title}", "", "| " + " | ".join(header) + " |", rule,
            *["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows], ""]  # fmt: skip


def targets(report: dict) -> list[list]:
    """Issue 23's targets beside what this report measured: ``[target, measured, met]`` rows (a
    target whose section did not run, or failed, is measured as ``-``)."""
    status = report["sections"]
    rows = []
    free = status.get("sync_free", {}).get("rows", [])
    if free:
        syncs = max(r["cuda_reported"] if r["cuda_reported"] is not None else r["dispatched"] for r in free)
        rows.append(["0 host syncs per loss call", f"at most {syncs}", syncs == 0])
    by_n = {r["n"]: r for r in status.get("rank_losses", {}).get("rows", []) if not r["detection_sequence"]}
    modes = {r["n"]: r for r in status.get("cuda_graphs", {}).get("lengths", [])}
    for n, limit in ((10**5, 0.3), (10**6, 1.0)):
        if n in by_n:
            rows.append([f"AP loss fwd+bwd <= {limit} ms at {n:.0e}", _ms(by_n[n]["ap_ms"]) + " eager", by_n[n]["ap_ms"] <= limit])
        if n in modes:
            best = min(modes[n]["compiled_ms"], modes[n]["graph_ms"])
            rows.append([f"AP loss fwd+bwd <= {limit} ms at {n:.0e}, compiled or CUDA graph", _ms(best), best <= limit])
    if 10**8 in by_n and by_n[10**8]["peak_gib"] is not None:
        rows.append(["peak memory <= 4.6 GiB at 1e8", _gib(by_n[10**8]["peak_gib"]), by_n[10**8]["peak_gib"] <= 4.6])
    detection = status.get("detection_step", {})
    if detection.get("runs"):
        rows.append(["detection RoI loss <= 1 ms", _ms(detection["classifier_loss"]["ms"]), detection["classifier_loss"]["ms"] <= 1.0])
        rambo, ce = (r["seconds_per_step"] for r in detection["runs"])
        rows.append(["RaMBO detection step within 5% of CE", f"{rambo / ce:.3f} x CE", rambo <= 1.05 * ce])
    return rows


def markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [f"# GPU check ({'toy sizes' if meta['toy'] else 'full sizes'}) on {meta['device_name']}", ""]
    if not meta["gpu_found"]:
        lines += ["**No GPU was found**: the same code paths ran at toy sizes on the CPU. These numbers say "
                  "nothing about GPU speed.", ""]  # fmt: skip
    lines += [f"torch {meta['torch']}, Python {meta['python']}, {meta['date']}. Command: `{meta['command']}`.", ""]
    status = report["sections"]
    lines += ["| section | status |", "|---|---|"]
    lines += [f"| {name} | {'ok' if value.get('ok') else 'FAILED: ' + value.get('error', 'see JSON').splitlines()[-1][:120]} |"
              for name, value in status.items()]  # fmt: skip
    lines.append("")
    met = targets(report)
    if met:
        lines += _table("Issue 23's targets", ["target", "measured", "met"], "lrl", met)
    if "core_tests" in status and "summary" in status["core_tests"]:
        tests = status["core_tests"]
        lines += [f"Core test suite on `{tests['device']}`: {tests['summary']}", ""]
        lines += [f"- {failure}" for failure in tests["failures"]] + ([""] if tests["failures"] else [])
    losses = status.get("rank_losses", {})
    if losses.get("rows"):
        rows = []
        for row in losses["rows"]:
            label = f"{row['n']:.1e}" + (" (detection)" if row["detection_sequence"] else "")
            paper = ("< " if row["detection_sequence"] else "") + _ms(row["paper_v100_ms"]) if row["paper_v100_ms"] else "-"
            rows.append([label, _ms(row["ap_ms"]), _ms(row["recall_ms"]), _ms(row["sort_ms"]),
                         f"{row['ap_ms'] / row['sort_ms']:.2f}", paper, _gib(row["peak_gib"])])  # fmt: skip
        lines += _table("Rank losses, forward + backward (one row, 1 relevant in 100)",
                        ["length", "AP loss", "recall loss (log)", "one float32 sort", "AP / sort", "paper V100 (AP)", "peak memory"],
                        "rrrrrrr", rows)  # fmt: skip
    free = status.get("sync_free", {})
    if free.get("rows"):
        rows = [[r["loss"], r["path"], r["dispatched"], "-" if r["cuda_reported"] is None else r["cuda_reported"],
                 _ms(r["eager_ms"]), _ms(r["compiled_ms"]), r["backend"], r["compiled_gradient_equal"]] for r in free["rows"]]  # fmt: skip
        lines += _table("Host syncs per loss call and torch.compile (forward + backward)",
                        ["loss", "path", "syncs (dispatched)", "syncs (CUDA reported)", "eager", "compiled", "backend",
                         "compiled gradient equal"], "llrrrrll", rows)  # fmt: skip
    graphs = status.get("cuda_graphs", {})
    if graphs.get("lengths"):
        rows = [[f"{r['n']:.0e}", _ms(r["eager_ms"]), _ms(r["compiled_ms"]), _ms(r["graph_ms"]), r["compiled_gradient_equal"],
                 r["gradient_equal"]] for r in graphs["lengths"]]  # fmt: skip
        lines += _table("AP loss forward + backward: eager, compiled (inductor), CUDA graph (one row, 1 relevant in 100)",
                        ["length", "eager", "compiled", "CUDA graph", "compiled gradient equal", "graph gradient equal"],
                        "rrrrll", rows)  # fmt: skip
    if graphs.get("rows"):
        rows = [[r["case"], _ms(r["eager_ms"]), _ms(r["graph_ms"]), f"{r['eager_ms'] / r['graph_ms']:.2f}", r["replays_compared"],
                 r["loss_equal"], "-" if r["gradient_equal"] is None else r["gradient_equal"]] for r in graphs["rows"]]  # fmt: skip
        lines += _table("CUDA graphs (captured once the score memory is full, then replayed)",
                        ["case", "eager", "graph replay", "speed-up", "replays compared", "loss equal", "gradient equal"],
                        "lrrrrll", rows)  # fmt: skip
    same = status.get("ranks_identical", {})
    if same.get("cases"):
        rows = [[c["case"], c["shape"], c["ties"], c["ranks_equal"], c["ap_gradient_equal"], c.get("ap_gradient_entries_nonzero", "-"),
                 c["recall_gradient_equal"], c.get("recall_gradient_entries_nonzero", "-")] for c in same["cases"]]  # fmt: skip
        lines += _table(f"Ranks and gradients, {same['compared']}, tied input",
                        ["case", "shape", "tied items", "ranks equal", "AP gradient equal", "AP entries != 0",
                         "recall gradient equal", "recall entries != 0"], "llrllrlr", rows)  # fmt: skip
    steps = [run for name in ("retrieval_step", "recall_k_step") if status.get(name, {}).get("ok")
             for run in status[name].get("runs", [status[name]])]  # fmt: skip
    if steps:
        rows = [[f"`{' '.join(s['overrides'])}`", s["backbone"], s["batch"], f"{s['image_size']} px", s["two_pass_chunk_size"] or "-",
                 f"{s['seconds_per_step']:.3f}", f"{s['images_per_second']:.0f}", _gib(s["peak_gib"])] for s in steps]  # fmt: skip
        lines += _table("Retrieval training steps (paper profile, random init)",
                        ["config", "backbone", "batch", "image", "two-pass chunk", "s / step", "images / s", "peak memory"],
                        "llrrrrrr", rows)  # fmt: skip
    evaluation = status.get("recall_at_k_eval", {})
    if "faiss_seconds" in evaluation:
        lines += [f"## Recall@K at {evaluation['n']:,} x {evaluation['dim']}", "",
                  f"- the project's evaluation (faiss, {evaluation['faiss_gpus']} GPU(s) seen by faiss, "
                  f"{evaluation['faiss_threads']} threads): {evaluation['faiss_seconds']:.2f} s",
                  f"- exact top-k in torch on `{meta['device']}`: {evaluation['torch_device_seconds']:.2f} s",
                  f"- the project's torch search (`rambo.retrieval.evaluate`, backend torch, with the copies to the device): "
                  f"{evaluation.get('project_torch_seconds', float('nan')):.2f} s; evaluation on this device picks "
                  f"{evaluation.get('search_chosen_on_this_device', '-')}",
                  f"- Recall@K {evaluation['recall']}; both agree: {evaluation['agree']}", ""]  # fmt: skip
    detection = status.get("detection_step", {})
    if detection.get("runs"):
        rows = [[r["experiment"], r["backbone"], r["batch"], f"{r['image'][0]}x{r['image'][1]} -> {r['resized_to'][0]}-{r['resized_to'][1]}",
                 f"{r['seconds_per_step']:.3f}", f"{r['images_per_second']:.1f}", _gib(r["peak_gib"])] for r in detection["runs"]]  # fmt: skip
        lines += _table("Detection training steps (Faster R-CNN FPN, random init)",
                        ["experiment", "backbone", "batch", "image -> resized", "s / step", "images / s", "peak memory"],
                        "llrlrrr", rows)[:-1]  # fmt: skip
        loss = detection["classifier_loss"]
        lines += ["", f"RoI classifier loss alone (RaMBO, memory full), {loss['rois']} RoIs x 20 classes: "
                      f"{_ms(loss['ms'])} forward+backward (paper: < {_ms(detection['paper_ms'])}).", ""]  # fmt: skip
    plan = status.get("memory_plan", {})
    if plan.get("rows"):
        pair = lambda values: " / ".join(f"{v:.2f}" for v in values)  # noqa: E731
        rows = [[r["row"], pair(r["sizes"]), pair(r["cpu_train_peak_gib"]), pair(r["train_peak_gib"]), pair(r["cpu_eval_peak_gib"]),
                 pair(r["eval_peak_gib"]), f"{r['batch']}: {r['cpu_train_gib']:.2f} / {r['train_gib']:.2f}",
                 f"{r['eval_batch']}: {r['cpu_eval_gib']:.2f} / {r['eval_gib']:.2f}"] for r in plan["rows"]]  # fmt: skip
        lines += _table(f"Memory plan (benchmarks/memory_plan.py): CPU plan beside `{plan['device']}`, GiB",
                        ["row", "images", "train peak CPU", f"train peak {plan['device']}", "eval peak CPU",
                         f"eval peak {plan['device']}", "train at its batch CPU / here", "eval at its batch CPU / here"],
                        "lrrrrrrr", rows)  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toy", action="store_true", help="toy sizes (default on a machine without a GPU)")
    parser.add_argument("--device", default="auto", help="auto (cuda when torch sees one), cuda or cpu")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--out-dir", type=Path)
    args = parser.parse_args(argv)

    gpu_found = torch.cuda.is_available()
    device = torch.device(("cuda" if gpu_found else "cpu") if args.device == "auto" else args.device)
    toy = args.toy or device.type != "cuda"
    out_dir = args.out_dir or REPO / ("benchmarks" if device.type == "cuda" and not toy else "build/gpu-check")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not gpu_found:
        print("no GPU found (torch.cuda.is_available() is False): running the same code paths at toy sizes on the CPU", flush=True)
    sizes = Sizes(toy)
    meta = {"toy": toy, "gpu_found": gpu_found, "device": str(device), "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})",
            "command": "python benchmarks/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:])}  # fmt: skip
    report = {"meta": meta, "sections": {}}
    for name in args.sections:
        print(f"[gpu-check] {name} ...", flush=True)
        started = time.perf_counter()
        try:
            report["sections"][name] = globals()[name](device, sizes)
        except Exception:  # a failing section is reported and the others still run
            report["sections"][name] = {"ok": False, "error": traceback.format_exc()}
            print(report["sections"][name]["error"], flush=True)
        report["sections"][name]["seconds"] = time.perf_counter() - started
        print(f"[gpu-check] {name}: {'ok' if report['sections'][name].get('ok') else 'FAILED'} "
              f"({report['sections'][name]['seconds']:.1f} s)", flush=True)  # fmt: skip
        (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    table = markdown(report)
    (out_dir / "gpu_check.md").write_text(table)
    print(table)
    print(f"written: {out_dir / 'gpu_check.json'}, {out_dir / 'gpu_check.md'}")
    return report


if __name__ == "__main__":
    report = main()
    sys.exit(0 if all(section.get("ok") for section in report["sections"].values()) else 1)
