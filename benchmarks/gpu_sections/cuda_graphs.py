"""``cuda_graphs``: the AP loss at 1e5-1e8 eager, compiled (inductor, fullgraph) and as
a CUDA graph; the detection RoI loss with its memory full (4,096 RoIs x 21, memory 7) and one retrieval step of
the paper profile (model forward, the batch-memory recall loss, backward; the optimizer stays outside the graph)
captured as CUDA graphs (``torch.cuda.graph``) and replayed: replay vs eager time, and the replayed loss (and,
for the loss alone, gradient) equal to an eager twin's. Skipped without CUDA."""

from __future__ import annotations

import torch

from rambo.core.benchmark import LAM, MARGIN, median_ms

from .common import Sizes, compose, format_ms, loss_fwd_bwd, random_row, section_table


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
    for batch in batches[tau + 1 :]:
        with torch.no_grad():
            static_input.copy_(batch)
        graph.replay()
        expected = step(twin, batch)
        values_equal.append(bool(torch.allclose(static_output, expected, rtol=tolerance, atol=0.0)))
        if gradient_of is not None:
            gradients_equal.append(torch.equal(gradient_of(modules), gradient_of(twin)))
    graph_ms = median_ms(graph.replay, device, repeats)
    eager_ms = median_ms(lambda: step(twin, batches[-1]), device, repeats)
    return {
        "case": name,
        "eager_ms": eager_ms,
        "graph_ms": graph_ms,
        "replays_compared": len(values_equal),
        "loss_equal": all(values_equal),
        "loss_tolerance": tolerance,
        "gradient_equal": all(gradients_equal) if gradient_of is not None else None,
    }


def _ap_loss_modes(device: torch.device, n: int, repeats: int) -> dict:
    """AP loss forward+backward on one row of ``n``: eager, compiled (inductor, fullgraph) and as a
    CUDA graph, each gradient compared with eager's bit for bit."""
    from rambo.core import APLoss

    scores, relevant = random_row(n, device)
    static = scores.clone().requires_grad_(True)

    def step(modules, batch=None):
        leaf = static if batch is None else batch.clone().requires_grad_(True)
        leaf.grad = None
        value = modules["loss"](leaf, relevant)
        value.backward()
        modules["grad"] = leaf.grad
        return value.detach()

    row = _graph_rows(
        f"AP loss, 1 x {n:.0e}",
        step,
        {"loss": APLoss(MARGIN, LAM)},
        [scores] * 4,
        static,
        2,
        lambda modules: modules["grad"],
        device,
        repeats,
        0.0,
    )
    torch._dynamo.reset()
    compiled = torch.compile(APLoss(MARGIN, LAM), backend="inductor", fullgraph=True, dynamic=False)
    for _ in range(2):
        loss_fwd_bwd(compiled, scores, relevant)
    row["compiled_ms"] = median_ms(lambda: loss_fwd_bwd(compiled, scores, relevant), device, repeats)
    row["compiled_gradient_equal"] = torch.equal(
        loss_fwd_bwd(compiled, scores, relevant)[1], loss_fwd_bwd(APLoss(MARGIN, LAM), scores, relevant)[1]
    )
    row["n"] = n
    return row


def run(device: torch.device, sizes: Sizes) -> dict:
    """The AP loss at 1e5-1e8 eager, compiled and as a CUDA graph; the
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
    labels = (torch.randint(0, 21, (rois,), generator=generator) * (torch.rand(rois, generator=generator) < 0.25)).to(
        device
    )
    static_logits = torch.zeros(rois, 21, device=device, requires_grad=True)

    def loss_step(modules, batch=None):
        leaf = static_logits if batch is None else batch.clone().requires_grad_(True)
        if batch is None:
            leaf.grad = None
        value = modules["loss"](leaf, labels)
        value.backward()
        modules["grad"] = leaf.grad
        return value.detach()

    rows.append(
        _graph_rows(
            f"detection RoI loss, {rois} x 21, memory {tau}",
            loss_step,
            {"loss": RankClassifierLoss(20, 0, tau=tau).to(device)},
            logits,
            static_logits,
            tau,
            lambda modules: modules["grad"],
            device,
            sizes.repeats,
            0.0,
        )
    )
    # One retrieval step of the paper profile (ResNet-50, the batch-memory recall loss).
    s = sizes.retrieval
    cfg = compose(
        "retrieval",
        [
            "experiment=sop_log",
            "profile=paper",
            "model.pretrained=false",
            f"image_size={s['image_size']}",
            f"batch_size={s['batch']}",
        ],
    )
    torch.manual_seed(0)
    memory_tau = int(cfg.loss.module.get("tau", 0))
    images = [
        torch.randn(s["batch"], 3, s["image_size"], s["image_size"], generator=generator).to(device)
        for _ in range(memory_tau + 4)
    ]
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
    rows.append(
        _graph_rows(
            f"retrieval step (`experiment=sop_log profile=paper`, batch {s['batch']}, {s['image_size']} px)",
            retrieval_step_once,
            modules,
            images,
            static_images,
            memory_tau,
            None,
            device,
            sizes.repeats,
            1e-3,
        )
    )
    lengths = [_ap_loss_modes(device, n, sizes.repeats) for n in sizes.loss_lengths]
    for row in [*lengths, *rows]:
        print(
            f"  {row['case']}: eager {row['eager_ms']:.2f} ms, graph {row['graph_ms']:.2f} ms, "
            f"loss equal {row['loss_equal']}, gradient equal {row['gradient_equal']}",
            flush=True,
        )
    ok = all(r["loss_equal"] and r["gradient_equal"] is not False for r in [*lengths, *rows])
    return {"rows": rows, "lengths": lengths, "ok": ok and all(r["compiled_gradient_equal"] for r in lengths)}


def markdown(result: dict, report: dict) -> list[str]:
    """Two tables: the AP loss per length in its three modes, and each captured case's replay vs eager."""
    lines = []
    if result.get("lengths"):
        rows = [
            [
                f"{r['n']:.0e}",
                format_ms(r["eager_ms"]),
                format_ms(r["compiled_ms"]),
                format_ms(r["graph_ms"]),
                r["compiled_gradient_equal"],
                r["gradient_equal"],
            ]
            for r in result["lengths"]
        ]
        lines += section_table(
            "AP loss forward + backward: eager, compiled (inductor), CUDA graph (one row, 1 relevant in 100)",
            ["length", "eager", "compiled", "CUDA graph", "compiled gradient equal", "graph gradient equal"],
            "rrrrll",
            rows,
        )
    if result.get("rows"):
        rows = [
            [
                r["case"],
                format_ms(r["eager_ms"]),
                format_ms(r["graph_ms"]),
                f"{r['eager_ms'] / r['graph_ms']:.2f}",
                r["replays_compared"],
                r["loss_equal"],
                "-" if r["gradient_equal"] is None else r["gradient_equal"],
            ]
            for r in result["rows"]
        ]
        lines += section_table(
            "CUDA graphs (captured once the score memory is full, then replayed)",
            ["case", "eager", "graph replay", "speed-up", "replays compared", "loss equal", "gradient equal"],
            "lrrrrll",
            rows,
        )
    return lines
