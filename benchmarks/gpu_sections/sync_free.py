"""``sync_free``: host syncs per loss call (AP, recall, MAP, AP-C, the detection RoI loss with its
memory full) on the path the device runs, counted twice: operations that read device data
(``rambo.core.host_syncs``) and, on a GPU, ``torch.cuda.set_sync_debug_mode`` warnings; and
forward+backward eager vs ``torch.compile(fullgraph=True)`` (inductor; aot_eager at toy sizes)."""

from __future__ import annotations

import time

import torch

from rambo.core.benchmark import LAM, MARGIN, median_ms

from .common import Sizes, format_ms, loss_fwd_bwd, random_row, section_table


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


def run(device: torch.device, sizes: Sizes) -> dict:
    """Syncs per call and eager vs compiled times of each loss on the path ``device`` runs."""
    from rambo.core import APCLoss, APLoss, MAPLoss, RecallLoss
    from rambo.core.loss_path import loss_path
    from rambo.detection.rank_classifier_loss import RankClassifierLoss

    path = "dense" if device.type != "cpu" else "sparse"  # what "auto" runs in eager mode (compiled: dense)
    backend = "aot_eager" if sizes.toy else "inductor"
    n = sizes.loss_lengths[0]
    rois = 256 if sizes.toy else 4_096
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(rois, 21, generator=generator).to(device)
    labels = (torch.randint(0, 21, (rois,), generator=generator) * (torch.rand(rois, generator=generator) < 0.25)).to(
        device
    )
    items = torch.randn(rois, 20, generator=generator).to(device)
    item_labels = torch.rand(rois, 20, generator=generator).to(device) < 0.05
    row, relevant = random_row(n, device)
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
                loss_fwd_bwd(loss_fn, scores, target)
            syncs = _count_syncs(lambda: loss_fwd_bwd(loss_fn, scores, target), device)
            eager_ms = median_ms(lambda: loss_fwd_bwd(loss_fn, scores, target), device, sizes.repeats)
            torch._dynamo.reset()
            compiled_fn = make().to(device)
            compiled = torch.compile(compiled_fn, backend=backend, fullgraph=True)
            started = time.perf_counter()
            for _ in range(8):
                loss_fwd_bwd(compiled, scores, target)
            compile_s = time.perf_counter() - started
            compiled_ms = median_ms(lambda: loss_fwd_bwd(compiled, scores, target), device, sizes.repeats)
            same = torch.equal(loss_fwd_bwd(compiled, scores, target)[1], loss_fwd_bwd(loss_fn, scores, target)[1])
            rows.append(
                {
                    "loss": name,
                    "path": path,
                    **syncs,
                    "eager_ms": eager_ms,
                    "compiled_ms": compiled_ms,
                    "backend": backend,
                    "compile_seconds": compile_s,
                    "compiled_gradient_equal": same,
                }
            )
            print(
                f"  {name}: {syncs['dispatched']} syncs dispatched, CUDA reported {syncs['cuda_reported']}; eager {eager_ms:.2f} ms, "
                f"compiled {compiled_ms:.2f} ms ({backend}), same gradient {same}",
                flush=True,
            )
    return {"rows": rows, "ok": all(r["compiled_gradient_equal"] for r in rows)}


def markdown(result: dict, report: dict) -> list[str]:
    """One row per loss: both sync counts, eager and compiled time, the compiled gradient's equality."""
    if not result.get("rows"):
        return []
    rows = [
        [
            r["loss"],
            r["path"],
            r["dispatched"],
            "-" if r["cuda_reported"] is None else r["cuda_reported"],
            format_ms(r["eager_ms"]),
            format_ms(r["compiled_ms"]),
            r["backend"],
            r["compiled_gradient_equal"],
        ]
        for r in result["rows"]
    ]
    return section_table(
        "Host syncs per loss call and torch.compile (forward + backward)",
        [
            "loss",
            "path",
            "syncs (dispatched)",
            "syncs (CUDA reported)",
            "eager",
            "compiled",
            "backend",
            "compiled gradient equal",
        ],
        "llrrrrll",
        rows,
    )
