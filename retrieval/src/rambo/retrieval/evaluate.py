"""Retrieval evaluation by exact k-NN with faiss (paper Sec. 5.1: Recall@K; plus MAP@R, R-precision).

Embeddings are L2-normalised, so inner product (`faiss.IndexFlatIP`) is cosine similarity and
the neighbour order is the order of the scores `rambo.core.metrics` ranks. When the gallery is
the query set itself (SOP, CUB), each query's own index is masked out of its neighbours: dropping
the first column blindly would drop a duplicate image instead whenever it is returned first.
In-shop passes separate query and gallery sets.

CLI: `python -m rambo.retrieval.evaluate --checkpoint CKPT --dataset sop --root DIR --out m.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math

import numpy as np
import torch

from rambo.harness import numerics
from rambo.harness.numerics import start_command
from rambo.harness.precision import to_channels_last
from rambo.harness.workers import worker_init

# Paper's K per dataset (Tables 2-4).
PAPER_KS = {
    "sop": (1, 10, 100, 1000),
    "synthetic": (1, 10, 100, 1000),
    "cub": (1, 2, 4, 8),
    "inshop": (1, 10, 20, 30, 50),
    "imagefolder": (1, 2, 4, 8, 16),
}  # imagefolder: a user's folder (configs/data/imagefolder.yaml's ks)
_QUERY_CHUNK = 4096  # bounds the [chunk, k] neighbour arrays at SOP scale


def _as_float32(x, name: str) -> np.ndarray:
    array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if array.ndim != 2:
        raise ValueError(f"{name} must be [n, dim], got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or inf")
    return np.ascontiguousarray(array, dtype=np.float32)


def _as_labels(x, n: int, name: str) -> np.ndarray:
    array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if array.ndim != 1 or array.shape[0] != n or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array with {n} entries, got {array.dtype} {array.shape}")
    return array.astype(np.int64)


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _loader_lines_to_debug(record: logging.LogRecord) -> bool:
    """Lower faiss.loader's INFO lines to DEBUG: kept only where the root logger shows DEBUG."""
    if record.levelno == logging.INFO:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)
    return True


def import_faiss():
    """The `faiss` module, imported on first use: it comes from one of two alternative extras.

    faiss's loader logs at INFO every CPU-specific library it cannot load ("Could not load library
    with AVX512 support ..."), which reads like an error in a run's log: those go to DEBUG.
    """
    loader = logging.getLogger("faiss.loader")
    if loader.getEffectiveLevel() <= logging.INFO and not loader.filters:
        loader.addFilter(_loader_lines_to_debug)
    try:
        import faiss
    except ImportError as error:
        raise ImportError(
            "rambo.retrieval evaluation needs faiss, which is not installed: install exactly one of "
            "the extras rambo-retrieval[cpu] (faiss-cpu) or rambo-retrieval[gpu] (faiss-gpu)"
        ) from error
    return faiss


def _flat_inner_product_index(dim: int):
    """Exact inner-product index; on every GPU when faiss-gpu (the `gpu` extra) sees one."""
    faiss = import_faiss()
    index = faiss.IndexFlatIP(dim)
    if faiss.get_num_gpus() > 0:
        index = faiss.index_cpu_to_all_gpus(index)
    return index


SEARCH_BACKENDS = ("auto", "faiss", "torch")


def search_backend(device=None, backend: str = "auto") -> str:
    """`faiss` or `torch`: the exact k-NN search to run. `auto`: on the CPU, a torch top-k in
    the portable numerics mode (faiss picks AVX2, AVX-512 or AVX-512 SPR code at run time, so its
    scores follow the CPU: [`rambo.harness.numerics`][rambo.harness.numerics]) and faiss in the native mode; a torch
    top-k on the device when evaluation runs on a GPU that faiss does not see (faiss-cpu; 23.2 s against
    0.12 s at SOP scale on an H200), faiss otherwise (every GPU with faiss-gpu)."""
    if backend not in SEARCH_BACKENDS:
        raise ValueError(f"search backend must be one of {SEARCH_BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    if device is None or torch.device(device).type == "cpu":
        return "torch" if numerics.mode() == "portable" else "faiss"
    return "faiss" if import_faiss().get_num_gpus() > 0 else "torch"


def _torch_neighbours(gallery: torch.Tensor, queries: np.ndarray, k: int) -> np.ndarray:
    """`[Q, k]` indices of each query's `k` highest inner products with `gallery` (a tensor on
    the search's device), best first: an exact search by a matrix product and `torch.topk`."""
    chunk = torch.from_numpy(queries).to(gallery.device)
    return torch.topk(chunk @ gallery.T, k, dim=1, sorted=True).indices.cpu().numpy()


def neighbour_relevance(
    embeddings, labels, k: int, query_embeddings=None, query_labels=None, device=None, backend: str = "auto"
):
    """Relevance of each query's `k` nearest gallery items and its number of relevant items.

    `embeddings: [N, D]` gallery, `labels: [N]`; queries default to the gallery itself, in
    which case query `i` is removed from its own neighbours and from its relevant count.
    `device`/`backend`: where and how the exact search runs
    ([`search_backend`][rambo.retrieval.evaluate.search_backend]). Returns
    `(hits: [Q, k] bool, in best-first order; relevant_count: [Q] int)`.
    """
    gallery = _normalise(_as_float32(embeddings, "embeddings"))
    gallery_labels = _as_labels(labels, gallery.shape[0], "labels")
    same_set = query_embeddings is None
    if same_set != (query_labels is None):
        raise ValueError("give both query_embeddings and query_labels, or neither")
    if same_set:
        queries, q_labels = gallery, gallery_labels
    else:
        queries = _normalise(_as_float32(query_embeddings, "query_embeddings"))
        q_labels = _as_labels(query_labels, queries.shape[0], "query_labels")
        if queries.shape[1] != gallery.shape[1]:
            raise ValueError(f"query dim {queries.shape[1]} != gallery dim {gallery.shape[1]}")
    available = gallery.shape[0] - int(same_set)
    if k < 1 or available < 1:
        raise ValueError(f"need k >= 1 and a non-empty gallery, got k={k}, gallery size {available}")
    k = min(int(k), available)

    on_device = None
    if search_backend(device, backend) == "torch":  # the gallery copied to the device once
        on_device = torch.from_numpy(gallery).to(torch.device(device if device is not None else "cpu"))
    else:
        index = _flat_inner_product_index(gallery.shape[1])
        index.add(gallery)
    # One extra neighbour when the query is in the gallery, so that masking it leaves k.
    search_k = min(k + int(same_set), gallery.shape[0])
    hits = np.zeros((queries.shape[0], k), dtype=bool)
    for start in range(0, queries.shape[0], _QUERY_CHUNK):
        stop = min(start + _QUERY_CHUNK, queries.shape[0])
        if on_device is not None:
            neighbours = _torch_neighbours(on_device, queries[start:stop], search_k)
        else:
            _, neighbours = index.search(queries[start:stop], search_k)
        if same_set:
            own = neighbours == np.arange(start, stop)[:, None]
            # Queries whose own index fell outside the search (exact ties) lose their last column.
            own[~own.any(axis=1), -1] = True
            neighbours = neighbours[~own].reshape(stop - start, search_k - 1)
        hits[start:stop] = gallery_labels[neighbours[:, :k]] == q_labels[start:stop, None]

    counts = np.bincount(gallery_labels, minlength=int(max(gallery_labels.max(), q_labels.max())) + 1)
    relevant_count = counts[q_labels] - int(same_set)
    return hits, relevant_count


def _mean_over_queries_with_relevant(values: np.ndarray, relevant_count: np.ndarray) -> float:
    has = relevant_count > 0
    return float(values[has].mean()) if has.any() else float("nan")


def _check_ks(ks) -> tuple[int, ...]:
    if len(ks) == 0:
        raise ValueError("ks must name at least one K")
    for k in ks:
        if int(k) != k or k < 1:
            raise ValueError(f"K must be a positive integer, got {k}")
    return tuple(int(k) for k in ks)


def _ranked_metrics(hits: np.ndarray, relevant_count: np.ndarray, ks) -> dict[str, float]:
    result = {}
    for k in _check_ks(ks):
        found = hits[:, : int(k)].any(axis=1)
        result[f"R@{int(k)}"] = _mean_over_queries_with_relevant(found, relevant_count)
    positions = np.arange(1, hits.shape[1] + 1)
    within_r = positions[None, :] <= relevant_count[:, None]
    r = np.maximum(relevant_count, 1)
    precision_at_hits = np.cumsum(hits, axis=1) / positions * hits
    result["MAP@R"] = _mean_over_queries_with_relevant((precision_at_hits * within_r).sum(1) / r, relevant_count)
    result["R-precision"] = _mean_over_queries_with_relevant((hits * within_r).sum(1) / r, relevant_count)
    return result


def retrieval_metrics(
    embeddings, labels, ks=(1,), query_embeddings=None, query_labels=None, device=None, backend: str = "auto"
) -> dict[str, float]:
    """`{"R@K": ..., "MAP@R": ..., "R-precision": ...}` from one exact k-NN search.

    Recall@K (paper Eq. 7-8): the fraction of queries with a relevant item among their K nearest.
    MAP@R and R-precision use R = the query's number of relevant gallery items. Queries with no
    relevant item are left out of every mean, as in `rambo.core.metrics`. `device`: where the
    model ran (a GPU that faiss does not see searches there with torch:
    [`search_backend`][rambo.retrieval.evaluate.search_backend]).
    """
    ks = _check_ks(ks)
    labels_np = _as_labels(labels, len(labels), "labels")
    q_np = labels_np if query_labels is None else _as_labels(query_labels, len(query_labels), "query_labels")
    counts = np.bincount(labels_np)
    max_r = int(counts[q_np[q_np < counts.shape[0]]].max(initial=0))
    k = max(max(int(k) for k in ks), max_r)
    hits, relevant_count = neighbour_relevance(embeddings, labels, k, query_embeddings, query_labels, device, backend)
    return _ranked_metrics(hits, relevant_count, ks)


def recall_at_k(embeddings, labels, ks, query_embeddings=None, query_labels=None) -> dict[int, float]:
    """Recall@K for each K in `ks` (paper Eq. 7-8); see
    [`retrieval_metrics`][rambo.retrieval.evaluate.retrieval_metrics]."""
    ks = _check_ks(ks)
    hits, relevant_count = neighbour_relevance(
        embeddings, labels, max(int(k) for k in ks), query_embeddings, query_labels
    )
    metrics = _ranked_metrics(hits, relevant_count, ks)
    return {int(k): metrics[f"R@{int(k)}"] for k in ks}


def map_at_r(embeddings, labels, query_embeddings=None, query_labels=None) -> float:
    """MAP@R (Musgrave et al. 2020); see [`retrieval_metrics`][rambo.retrieval.evaluate.retrieval_metrics]."""
    return retrieval_metrics(embeddings, labels, (1,), query_embeddings, query_labels)["MAP@R"]


def r_precision(embeddings, labels, query_embeddings=None, query_labels=None) -> float:
    """R-precision: the fraction of relevant items among the R nearest; see
    [`retrieval_metrics`][rambo.retrieval.evaluate.retrieval_metrics]."""
    return retrieval_metrics(embeddings, labels, (1,), query_embeddings, query_labels)["R-precision"]


@torch.no_grad()
def compute_embeddings(
    model: torch.nn.Module,
    dataset,
    batch_size: int = 256,
    num_workers: int = 0,
    device="cpu",
    autocast=contextlib.nullcontext,
    channels_last: bool = False,
):
    """`(embeddings [n, D] float32, labels [n] int64)` of a dataset yielding `(image, label, index)`.

    `autocast`: the factory of the forward pass's context
    ([`rambo.harness.precision.autocast`][rambo.harness.precision.autocast]; the embeddings are cast to float32 after
    it); `channels_last`: the image batches in channels-last memory format."""
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, worker_init_fn=worker_init
    )
    was_training = model.training
    model.eval()
    embeddings, labels = [], []
    for images, batch_labels, _ in loader:
        images = images.to(device)
        if channels_last:
            images = to_channels_last(images)
        with autocast():
            output = model(images)
        embeddings.append(output.float().cpu())
        labels.append(torch.as_tensor(batch_labels))
    model.train(was_training)
    return torch.cat(embeddings), torch.cat(labels)


def mean_pairwise_cosine(embeddings) -> float:
    """Mean cosine similarity over all pairs `i != j` of the rows of `embeddings` `[n, D]`:
    1.0 when every embedding points the same way (collapsed), about 0 for spread-out ones.

    `sum_{i != j} u_i . u_j = |sum_i u_i|^2 - n` for unit vectors `u_i`: O(n D), no n x n matrix.
    Every sum is correctly rounded (`math.fsum`), so the value is a function of the embeddings
    alone: not of the order of the rows, numpy's SIMD width or the BLAS kernel a CPU gets (with a
    vectorised norm, sum and BLAS dot, the machines of two sessions, both AMD EPYC with AVX-512, gave
    values one ulp apart from runs whose other numbers agreed bit for bit; a run's `metrics.json`
    must be byte-identical when its run is made again).
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"the mean pairwise cosine needs embeddings [n, D], got shape {x.shape}")
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"the mean pairwise cosine needs at least 2 embeddings, got {n}")
    norms = np.array([math.sqrt(math.fsum(row)) for row in (x * x).tolist()])
    unit = x / np.maximum(norms, 1e-12)[:, None]
    total = np.array([math.fsum(column) for column in unit.T.tolist()])
    return float((math.fsum((total * total).tolist()) - n) / (n * (n - 1)))


def evaluate_model(
    model,
    splits: dict,
    ks,
    batch_size: int = 256,
    num_workers: int = 0,
    device="cpu",
    spread: bool = False,
    autocast=contextlib.nullcontext,
    channels_last: bool = False,
) -> dict:
    """Metrics of `model` on a test split: `splits` maps "test" (or "query" and "gallery") to datasets.
    `spread`: add `mean_cosine`, the [`mean_pairwise_cosine`][rambo.retrieval.evaluate.mean_pairwise_cosine] of the test
    (gallery) embeddings; `autocast`, `channels_last`: as
    [`compute_embeddings`][rambo.retrieval.evaluate.compute_embeddings]."""
    embed = dict(autocast=autocast, channels_last=channels_last)
    if "query" in splits:
        gallery, gallery_labels = compute_embeddings(model, splits["gallery"], batch_size, num_workers, device, **embed)
        query, query_labels = compute_embeddings(model, splits["query"], batch_size, num_workers, device, **embed)
        metrics = retrieval_metrics(gallery, gallery_labels, ks, query, query_labels, device=device)
    else:
        gallery, labels = compute_embeddings(model, splits["test"], batch_size, num_workers, device, **embed)
        metrics = retrieval_metrics(gallery, labels, ks, device=device)
    return {**metrics, "mean_cosine": mean_pairwise_cosine(gallery)} if spread else metrics


def main(argv=None) -> dict:
    from rambo.harness.atomic import write_json

    from .checkpoint import load_trained_model
    from .datasets import load_dataset
    from .transforms import eval_transform_of

    parser = argparse.ArgumentParser(description="Evaluate a retrieval checkpoint (faiss exact k-NN).")
    parser.add_argument("--checkpoint", required=True, help="checkpoint written by rambo.retrieval.train")
    parser.add_argument("--dataset", required=True, choices=sorted(PAPER_KS))
    parser.add_argument("--root", required=True, help="dataset folder")
    parser.add_argument("--ks", type=int, nargs="+", help="Recall@K values (default: the paper's)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", help="metrics JSON path (printed as well)")
    args = parser.parse_args(argv)

    model, config = load_trained_model(args.checkpoint)
    transform = eval_transform_of(config)
    if args.dataset == "inshop":
        splits = {s: load_dataset(args.dataset, args.root, s, transform=transform) for s in ("query", "gallery")}
    else:
        splits = {"test": load_dataset(args.dataset, args.root, "test", transform=transform)}
    metrics = evaluate_model(model, splits, args.ks or PAPER_KS[args.dataset], args.batch_size)
    print(json.dumps(metrics, indent=2, sort_keys=True))
    if args.out:
        write_json(args.out, metrics)
    return metrics


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    main()
