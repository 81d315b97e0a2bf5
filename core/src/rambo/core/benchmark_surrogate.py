"""Peak memory of a sigmoid-rank surrogate on one long row, against the memory cap inside one row.

    python -m rambo.core.benchmark_surrogate [--n 1e6] [--relevant 0.01] [--loss recall_at_k|smooth_ap]

One row of `n` scores with a fraction `relevant` of relevant items: forward and backward of the
loss, then the process's peak resident memory beside what the row's `[P, N]` differences would
take as one float32 tensor, and the wall time. Run it in a fresh process (the peak is the process's).
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

from .recall_at_k_surrogate import RecallAtKSurrogate
from .smooth_ap import SmoothAPLoss


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--relevant", type=float, default=0.01)
    parser.add_argument("--loss", choices=("recall_at_k", "smooth_ap"), default="recall_at_k")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n = int(args.n)
    generator = torch.Generator().manual_seed(0)
    scores = torch.rand(1, n, generator=generator).requires_grad_(True)
    relevant = torch.rand(1, n, generator=generator) < args.relevant
    loss = RecallAtKSurrogate() if args.loss == "recall_at_k" else SmoothAPLoss()
    before = _peak_rss_mib()
    started = time.perf_counter()
    loss(scores, relevant).backward()
    result = {
        "n": n,
        "relevant_items": int(relevant.sum()),
        "loss": args.loss,
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": _peak_rss_mib(),
        "peak_rss_before_mib": before,
        "dense_differences_gib": int(relevant.sum()) * n * 4 / 2**30,
    }
    print(
        f"{args.loss}, one row of {n:.0e} items, {result['relevant_items']} relevant: peak RSS {result['peak_rss_mib']:.0f} MiB "
        f"(before the loss {before:.0f} MiB; the [P, N] differences as one tensor: {result['dense_differences_gib']:.1f} GiB), "
        f"{result['seconds']:.1f} s"
    )
    return result


if __name__ == "__main__":
    main()
