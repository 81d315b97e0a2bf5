"""The RaMBO losses beside the losses a user would pick instead, on the shape they train with.

    python -m rambo.core.benchmark_peers [--sizes 128 512 2048 4096] [--device cpu|cuda]
        [--out core/benchmarks/peers.json] [--markdown core/benchmarks/peers.md]      (make bench-peers)

A batch of `B` normalised 512-d embeddings, 4 images per class (`B / 4` classes drawn from the
11,318 training classes of Stanford Online Products), each image a query ranked against the rest of
the batch by cosine score, and with the memory (tau = 3) against the 3 batches before it as well
(`4 B - 1` items per row). Forward + backward from the embeddings, one thread on the CPU, every
loss at one size in one process, interleaved (run 1 of every loss, then run 2, ...): the median time
and, from one more run, the peak tensor memory above the inputs ([`rambo.core.peak_memory`][rambo.core.peak_memory]).

Peers: the project's recall and AP losses through [`rambo.core.pml`][rambo.core.pml] (in its `CrossBatchMemory`
with the memory); PML 2.9's FastAP, SmoothAP, MultiSimilarity and Contrastive (the last two in PML's
`CrossBatchMemory`; PML's FastAP and SmoothAP take no reference set, hence no memory); torchsort's
soft rank as an AP surrogate ([`rambo.core.soft_rank_ap.SoftRankAPLoss`][rambo.core.soft_rank_ap.SoftRankAPLoss] on
[`rambo.core.pairwise_scores`][rambo.core.pairwise_scores], in
[`rambo.core.EmbeddingMemory`][rambo.core.EmbeddingMemory] with the memory), when torchsort is installed. A loss whose
memory estimate (its peak at the previous size scaled as the batch squared, cubed for PML's SmoothAP and its `[B, B, B]`
tensors) exceeds the budget is not run.

A second table is the batch-shaped path's cost per element: the native recall loss on a `[Q, N]`
score matrix (fwd+bwd from the scores), the same `Q N` scores as one row, and one row-wise sort
(`torch.sort(dim=1)`) of the matrix, in ns per element. `peers_table(device, sizes)` and
[`markdown`][rambo.core.benchmark_peers.markdown] are what `make gpu-check` calls.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .benchmark import synchronize
from .pairwise import unit_rows
from .peak_memory import peak_bytes_above

DIM, PER_CLASS, TAU, SOP_TRAIN_CLASSES = 512, 4, 3, 11318
SIZES = (128, 512, 2048, 4096)
ELEMENT_SHAPES = (512, 2048)  # batches whose [B, 4 B - 1] memory-shaped score matrices are measured per element
MEMORY_BUDGET_GIB = 8.0
RANK_BASED = ("RaMBO recall", "RaMBO AP", "FastAP", "SmoothAP", "torchsort AP")


def repeats_for(batch: int) -> int:
    """Timed runs per loss at a batch size (fewer where one run takes seconds)."""
    return 7 if batch <= 128 else 5 if batch <= 512 else 3 if batch <= 2048 else 2


def make_batch(batch: int, generator: torch.Generator, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random embeddings `[batch, DIM]` and labels, `PER_CLASS` consecutive images per class
    (the layout PML's SmoothAP needs), classes drawn without replacement from SOP's training classes."""
    classes = torch.randperm(SOP_TRAIN_CLASSES, generator=generator)[: batch // PER_CLASS]
    labels = classes.repeat_interleave(PER_CLASS)
    embeddings = torch.randn(batch, DIM, generator=generator)
    return embeddings.to(device), labels.to(device)


class Peer:
    """One loss at one size: `step(embeddings)` runs forward and backward from a fresh leaf."""

    def __init__(
        self, name: str, loss, labels: torch.Tensor, prepare: Callable[[], None] = lambda: None, cube: bool = False
    ):
        self.name, self.loss, self.labels, self.prepare, self.cube = name, loss, labels, prepare, cube

    def step(self, embeddings: torch.Tensor) -> None:
        self.prepare()  # memory state reset (a copy or two of small tensors)
        leaf = embeddings.detach().clone().requires_grad_(True)
        self.loss(leaf, self.labels).backward()


def _pml_memory(loss, remembered: list[tuple[torch.Tensor, torch.Tensor]], batch: int, memory_class):
    """A CrossBatchMemory of `(TAU + 1) batch` holding `remembered`; `prepare` restores that state."""
    memory = memory_class(loss, embedding_size=DIM, memory_size=(TAU + 1) * batch)
    for embeddings, labels in remembered:
        memory.add_to_memory(embeddings, labels, batch)
    state = (memory.embedding_memory.clone(), memory.label_memory.clone(), memory.queue_idx, memory.has_been_filled)

    def prepare():
        memory.embedding_memory.copy_(state[0])
        memory.label_memory.copy_(state[1])
        memory.queue_idx, memory.has_been_filled = state[2], state[3]

    return memory, prepare


def _embedding_memory(loss, remembered, device):
    """A [`rambo.core.EmbeddingMemory`][rambo.core.EmbeddingMemory] holding `remembered`; `prepare` restores that
    state."""
    from .embedding_loss import EmbeddingMemory

    memory = EmbeddingMemory(loss, TAU).train()
    for embeddings, labels in remembered:
        memory.remember(unit_rows(embeddings), labels)
    state = memory.get_extra_state()
    return memory, lambda: memory.set_extra_state(state)


def torchsort_status() -> str:
    """`"ok"` when torchsort imports (with its compiled extension), else why not."""
    try:
        from .soft_rank_ap import import_torchsort

        torchsort = import_torchsort()
        torchsort.soft_rank(torch.zeros(1, 2))
        return "ok"
    except Exception as error:  # an ImportError, or an extension that does not load
        return f"unavailable: {type(error).__name__}: {str(error).splitlines()[0][:160]}"


def peers(
    batch: int, memory: bool, labels: torch.Tensor, remembered, device: torch.device, torchsort_ok: bool
) -> list[Peer]:
    """The losses measured at one size, in the table's order (names without the memory's suffix)."""
    from pytorch_metric_learning import losses as pml_losses

    from . import pml
    from .embedding_loss import EmbeddingMemory
    from .soft_rank_ap import SoftRankAPLoss

    made = []
    for name, loss, memory_class in (
        ("RaMBO recall", pml.RaMBORecallLoss(), pml.CrossBatchMemory),
        ("RaMBO AP", pml.RaMBOAPLoss(), pml.CrossBatchMemory),
    ):
        if memory:
            wrapped, prepare = _pml_memory(loss, remembered, batch, memory_class)
            made.append(Peer(name, wrapped, labels, prepare))
        else:
            made.append(Peer(name, loss, labels))
    if not memory:
        made.append(Peer("FastAP", pml_losses.FastAPLoss(), labels))
        made.append(Peer("SmoothAP", pml_losses.SmoothAPLoss(), labels, cube=True))
    if torchsort_ok:
        soft = SoftRankAPLoss()
        if memory:
            wrapped, prepare = _embedding_memory(soft, remembered, device)
            made.append(Peer("torchsort AP", wrapped, labels, prepare))
        else:
            made.append(Peer("torchsort AP", EmbeddingMemory(soft, 0), labels))
    for name, loss in (
        ("MultiSimilarity", pml_losses.MultiSimilarityLoss()),
        ("Contrastive", pml_losses.ContrastiveLoss()),
    ):
        if memory:
            wrapped, prepare = _pml_memory(loss, remembered, batch, pml_losses.CrossBatchMemory)
            made.append(Peer(name, wrapped, labels, prepare))
        else:
            made.append(Peer(name, loss, labels))
    return made


def _timed(run: Callable[[], None], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def measure_size(
    batch: int, memory: bool, device: torch.device, previous: dict, budget_gib: float, torchsort_ok: bool, seed: int = 0
) -> list[dict]:
    """Every peer at one batch size: median ms (interleaved runs), peak GiB, or why it did not run."""
    generator = torch.Generator().manual_seed(seed + batch)
    embeddings, labels = make_batch(batch, generator, device)
    remembered = [make_batch(batch, generator, device) for _ in range(TAU)] if memory else []
    runs = peers(batch, memory, labels, remembered, device, torchsort_ok)
    rows, active = {}, []
    for peer in runs:
        prior = previous.get(peer.name)
        estimate = None
        if prior and prior.get("peak_gib") is not None:
            estimate = prior["peak_gib"] * (batch / prior["batch"]) ** (3 if peer.cube else 2)
        rows[peer.name] = {"loss": peer.name, "batch": batch, "memory": memory, "estimate_gib": estimate}
        if estimate is not None and estimate > budget_gib:
            rows[peer.name]["skipped"] = f"out of memory (est. {estimate:.1f} GiB)"
        else:
            active.append(peer)
    repeats = repeats_for(batch)
    times = {peer.name: [] for peer in active}
    if repeats > 2:  # one warm-up each, unless a run takes seconds
        for peer in active:
            peer.step(embeddings)
    for _ in range(repeats):
        for peer in active:
            times[peer.name].append(_timed(lambda: peer.step(embeddings), device))
    for peer in active:
        rows[peer.name].update(
            ms=statistics.median(times[peer.name]),
            runs=repeats,
            peak_gib=peak_bytes_above(lambda: peer.step(embeddings), device) / 2**30,
        )
    return [rows[peer.name] for peer in runs]


def element_costs(device: torch.device, batches=ELEMENT_SHAPES, seed: int = 0) -> list[dict]:
    """ns per element of the native recall loss on a `[B, 4 B - 1]` score matrix (the memory's shape)
    beside the same scores as one row and one row-wise sort of the matrix, interleaved."""
    from .recall_loss import RecallLoss

    rows = []
    for batch in batches:
        generator = torch.Generator().manual_seed(seed + batch)
        embeddings, labels = make_batch(batch, generator, device)
        memory, _ = _embedding_memory(RecallLoss(), [make_batch(batch, generator, device) for _ in range(TAU)], device)
        with torch.no_grad():
            scores, relevant = memory.scores_and_relevance(embeddings, labels)
        loss = RecallLoss()

        def batched():
            leaf = scores.clone().requires_grad_(True)
            loss(leaf, relevant).backward()

        def one_row():
            leaf = scores.reshape(1, -1).clone().requires_grad_(True)
            loss(leaf, relevant.reshape(1, -1)).backward()

        runs = {"batched": batched, "one_row": one_row, "row_sort": lambda: torch.sort(scores, dim=1, stable=True)}
        times = {name: [] for name in runs}
        repeats = 5 if batch <= 512 else 3
        for run in runs.values():
            run()
        for _ in range(repeats):
            for name, run in runs.items():
                times[name].append(_timed(run, device))
        elements = scores.numel()
        row = {
            "shape": list(scores.shape),
            "elements": elements,
            "relevant_per_row": float(relevant.sum(1).float().mean()),
            "runs": repeats,
        }
        for name in runs:
            row[f"{name}_ms"] = statistics.median(times[name])
            row[f"{name}_ns_per_element"] = row[f"{name}_ms"] * 1e6 / elements
        row["batched_over_one_row"] = row["batched_ms"] / row["one_row_ms"]
        row["batched_over_row_sort"] = row["batched_ms"] / row["row_sort_ms"]
        rows.append(row)
        print(
            f"  [{scores.shape[0]}, {scores.shape[1]}]: batched {row['batched_ns_per_element']:.1f} ns/element, "
            f"one row {row['one_row_ns_per_element']:.1f}, row-wise sort {row['row_sort_ns_per_element']:.1f}",
            flush=True,
        )
    return rows


def peers_table(device, sizes=SIZES, budget_gib: float | None = None, element_batches=ELEMENT_SHAPES) -> dict:
    """The peers table at `sizes` on `device` (with and without the memory) and the per-element
    costs; `budget_gib`: the largest estimated peak to run (default 8 GiB on the CPU, 80 % of a
    GPU's free memory)."""
    device = torch.device(device)
    if budget_gib is None:
        budget_gib = MEMORY_BUDGET_GIB if device.type != "cuda" else 0.8 * torch.cuda.mem_get_info(device)[0] / 2**30
    status = torchsort_status()
    if device.type == "cuda" and status == "ok":
        try:
            from .soft_rank_ap import import_torchsort

            import_torchsort().soft_rank(torch.zeros(1, 2, device=device))
        except Exception as error:  # built without its CUDA extension
            status = f"unavailable on {device.type}: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
    rows = []
    for memory in (False, True):
        previous = {}
        for batch in sizes:
            started = time.perf_counter()
            measured = measure_size(batch, memory, device, previous, budget_gib, status == "ok")
            for row in measured:
                if row.get("peak_gib") is not None:
                    previous[row["loss"]] = row
            rows += measured
            print(
                f"batch {batch}{' + memory' if memory else ''} ({time.perf_counter() - started:.0f} s): "
                + ", ".join(f"{r['loss']} {_cell(r)}" for r in measured),
                flush=True,
            )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    meta = {
        "device": device.type,
        "device_name": name,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "sizes": list(sizes),
        "tau": TAU,
        "dim": DIM,
        "per_class": PER_CLASS,
        "budget_gib": budget_gib,
        "torchsort": status,
        "repeats": {b: repeats_for(b) for b in sizes},
    }
    try:
        import pytorch_metric_learning

        meta["pml"] = pytorch_metric_learning.__version__
    except ImportError:
        meta["pml"] = None
    return {"meta": meta, "rows": rows, "element_costs": element_costs(device, element_batches)}


def _cell(row: dict) -> str:
    if "skipped" in row:
        return row["skipped"]
    ms = row["ms"]
    return f"{ms / 1e3:.2f} s" if ms >= 1e4 else f"{ms:.1f} ms"


def goals(result: dict) -> list[list]:
    """The benchmark's goals per size: `[size, RaMBO / best rank-based peer, RaMBO / contrastive]` for
    each setting, the RaMBO loss being the faster of recall and AP."""
    table = []
    for memory in (False, True):
        for batch in result["meta"]["sizes"]:
            at = {r["loss"]: r for r in result["rows"] if r["batch"] == batch and r["memory"] == memory and "ms" in r}
            ours = [at[n]["ms"] for n in ("RaMBO recall", "RaMBO AP") if n in at]
            others = [at[n]["ms"] for n in RANK_BASED[2:] if n in at]
            if not ours:
                continue
            best = min(ours)
            vs_peer = f"{best / min(others):.2f}" if others else "-"
            vs_contrastive = f"{best / at['Contrastive']['ms']:.2f}" if "Contrastive" in at else "-"
            table.append([f"{batch}{' + memory' if memory else ''}", vs_peer, vs_contrastive])
    return table


def markdown(result: dict) -> str:
    """The peers table (time and peak memory, both settings), the goals and the per-element costs."""
    meta = result["meta"]
    repeats = ", ".join(f"{r} at {b}" for b, r in meta["repeats"].items())
    lines = [
        f"Forward + backward from {meta['dim']}-d embeddings, {meta['per_class']} images per class, "
        f"{meta['threads']} thread(s), {meta['device_name']} ({meta['device']}), torch {meta['torch']}, "
        f"PML {meta['pml']}; median of {repeats} runs (interleaved; one warm-up each where more than 2); "
        f"peak tensor memory above the inputs from one more run. torchsort: {meta['torchsort']}.",
        "",
    ]
    for memory in (False, True):
        names = list(dict.fromkeys(r["loss"] for r in result["rows"] if r["memory"] == memory))
        title = (
            f"with the memory (tau = {meta['tau']}: {4}B - 1 items per row)"
            if memory
            else "batch only (B - 1 items per row)"
        )
        lines += [
            f"**{title}**",
            "",
            "| loss | " + " | ".join(f"B = {b}" for b in meta["sizes"]) + " |",
            "|---|" + "---:|" * len(meta["sizes"]),
        ]
        for name in names:
            cells = []
            for batch in meta["sizes"]:
                row = next(
                    (r for r in result["rows"] if r["loss"] == name and r["batch"] == batch and r["memory"] == memory),
                    None,
                )
                if row is None:
                    cells.append("-")
                elif "skipped" in row:
                    cells.append(row["skipped"])
                else:
                    cells.append(f"{_cell(row)}, {row['peak_gib']:.2f} GiB")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Ratios (the faster RaMBO loss): to the fastest rank-based peer (goal <= 1) and to Contrastive (goal <= 2 "
        "from B = 512 on).",
        "",
        "| batch | RaMBO / best rank-based peer | RaMBO / Contrastive |",
        "|---|---:|---:|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in goals(result)]
    lines += [
        "",
        "Cost per element of the native recall loss on a score matrix (fwd+bwd from the scores) beside the same "
        "scores as one row and one row-wise `torch.sort(dim=1, stable=True)` of the matrix:",
        "",
        "| scores | relevant / row | batched path | one row | one row-wise sort | batched / one row | batched / row sort |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["element_costs"]:
        lines.append(
            f"| {row['shape'][0]} x {row['shape'][1]} | {row['relevant_per_row']:.1f} | "
            f"{row['batched_ns_per_element']:.1f} ns ({row['batched_ms']:.0f} ms) | "
            f"{row['one_row_ns_per_element']:.1f} ns ({row['one_row_ms']:.0f} ms) | "
            f"{row['row_sort_ns_per_element']:.1f} ns ({row['row_sort_ms']:.0f} ms) | "
            f"{row['batched_over_one_row']:.2f} | {row['batched_over_row_sort']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--element-batches", type=int, nargs="*", default=list(ELEMENT_SHAPES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget-gib", type=float, help="largest estimated peak to run (default 8 GiB on the CPU)")
    parser.add_argument("--out", type=Path, help="JSON output")
    parser.add_argument("--markdown", type=Path, help="Markdown output")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    result = peers_table(args.device, args.sizes, args.budget_gib, args.element_batches)
    result["meta"]["seconds"] = time.perf_counter() - started
    result["meta"]["command"] = "python -m rambo.core.benchmark_peers " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:]
    )
    table = markdown(result)
    print(table)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    return result


if __name__ == "__main__":
    main()
