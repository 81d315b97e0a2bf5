"""``recall_at_k_eval``: Recall@K at Stanford Online Products scale (60,502 x 512) through the project's
evaluation (faiss; on the GPU when faiss-gpu sees one) beside an exact k-NN written in torch on the device, and
the project's own torch search (what evaluation picks on a GPU that faiss does not see)."""

from __future__ import annotations

import time

import torch

from rambo.core.benchmark import synchronize

from .common import Sizes


def _torch_recall_at_k(embeddings: torch.Tensor, labels: torch.Tensor, ks: list[int], rows: int = 4096) -> dict:
    """Exact same-set Recall@K in torch (query masked out), for the device's own k-NN time."""
    unit = torch.nn.functional.normalize(embeddings, dim=1)
    k_max = max(ks)
    hits = torch.zeros(len(ks), device=embeddings.device)
    for start in range(0, unit.shape[0], rows):
        block = unit[start : start + rows] @ unit.T
        block[
            torch.arange(block.shape[0], device=block.device),
            torch.arange(start, start + block.shape[0], device=block.device),
        ] = -float("inf")
        neighbours = block.topk(k_max, dim=1).indices
        same = labels[neighbours] == labels[start : start + rows, None]
        for i, k in enumerate(ks):
            hits[i] += same[:, :k].any(1).sum()
    return {k: float(h) / unit.shape[0] for k, h in zip(ks, hits.tolist())}


def run(device: torch.device, sizes: Sizes) -> dict:
    """The project's Recall@K (faiss) at SOP scale, beside an exact top-k in torch on the device."""
    from rambo.retrieval.evaluate import import_faiss, recall_at_k, retrieval_metrics, search_backend

    faiss = import_faiss()
    n, dim, ks = sizes.eval["n"], sizes.eval["dim"], [1, 10, 100, 1000]
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(n, dim, generator=generator, device="cpu"), dim=1)
    labels = torch.randperm(n, generator=generator, device="cpu") % max(
        1, n // 5
    )  # ~5 images per class, as SOP's test split
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
    agree = all(
        abs(ours[k] - torch_recall[k]) <= 1.0 / n + 1e-9 and abs(ours[k] - project_torch[f"R@{k}"]) <= 1.0 / n + 1e-9
        for k in ks
    )
    return {
        "n": n,
        "dim": dim,
        "ks": ks,
        "faiss_gpus": int(faiss.get_num_gpus()),
        "faiss_threads": int(faiss.omp_get_max_threads()),
        "faiss_seconds": faiss_seconds,
        "torch_device_seconds": torch_seconds,
        "recall": {str(k): ours[k] for k in ks},
        "torch_recall": {str(k): torch_recall[k] for k in ks},
        "project_torch_seconds": project_torch_seconds,
        "search_chosen_on_this_device": search_backend(device),
        "agree": agree,
        "ok": agree,
    }


def markdown(result: dict, report: dict) -> list[str]:
    """The three searches' times, the Recall@K, and whether they agree."""
    if "faiss_seconds" not in result:
        return []
    device = report["meta"]["device"]
    return [
        f"## Recall@K at {result['n']:,} x {result['dim']}",
        "",
        f"- the project's evaluation (faiss, {result['faiss_gpus']} GPU(s) seen by faiss, "
        f"{result['faiss_threads']} threads): {result['faiss_seconds']:.2f} s",
        f"- exact top-k in torch on `{device}`: {result['torch_device_seconds']:.2f} s",
        f"- the project's torch search (`rambo.retrieval.evaluate`, backend torch, with the copies to the device): "
        f"{result.get('project_torch_seconds', float('nan')):.2f} s; evaluation on this device picks "
        f"{result.get('search_chosen_on_this_device', '-')}",
        f"- Recall@K {result['recall']}; both agree: {result['agree']}",
        "",
    ]
