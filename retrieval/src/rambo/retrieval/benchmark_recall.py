"""Speed of Recall@K at Stanford Online Products scale beside one float32 matrix product.

    python -m rambo.retrieval.benchmark_recall [--n 60502 --dim 512 --threads 2 --out FILE]

Times `rambo.retrieval.evaluate.recall_at_k` (faiss exact k-NN, K = 1, 10, 100, 1000, query
masked out of its own neighbours) on `n x dim` random unit embeddings with ~5 images per class
(SOP's test split: 60,502 images, 11,316 classes), beside one `[n, dim] @ [dim, n]` float32
product (the score matrix every exact method has to compute). Target: within 1.5x.
Not run by the tests.
"""

from __future__ import annotations

import argparse
import time

import torch

from rambo.harness.atomic import write_json

from .evaluate import import_faiss, recall_at_k


def _chunked_matmul_seconds(x: torch.Tensor, rows: int = 4096) -> float:
    # The full [n, n] float32 matrix is 14.6 GB at SOP scale: multiply in row blocks, as faiss does.
    started = time.perf_counter()
    for start in range(0, x.shape[0], rows):
        x[start : start + rows] @ x.T
    return time.perf_counter() - started


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=60502)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import_faiss().omp_set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(args.n, args.dim, generator=g), dim=1)
    labels = torch.randperm(args.n, generator=g) % max(1, args.n // 5)

    matmul = _chunked_matmul_seconds(embeddings)
    started = time.perf_counter()
    recall = recall_at_k(embeddings, labels, args.ks)
    recall_seconds = time.perf_counter() - started
    result = {
        "n": args.n,
        "dim": args.dim,
        "ks": args.ks,
        "threads": args.threads,
        "matmul_seconds": matmul,
        "recall_at_k_seconds": recall_seconds,
        "ratio": recall_seconds / matmul,
        "recall": recall,
    }
    print(
        f"{args.n} x {args.dim}: one float32 matmul {matmul:.2f} s, Recall@{args.ks} {recall_seconds:.2f} s "
        f"(ratio {result['ratio']:.2f})"
    )
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
