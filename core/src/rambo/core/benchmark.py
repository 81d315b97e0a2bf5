"""Speed of the AP loss, forward + backward, against the reference algorithm and one float32 sort.

`python -m rambo.core.benchmark [--sizes 1e5 1e6 1e7] [--with-1e8] [--device cpu|cuda]`
(`make bench`) prints a table and writes JSON and Markdown. Paper Table 6 is shown beside it.

The reference algorithm is the one of the authors' code, kept here as the baseline: ranks by
argsort of argsort of the normalised scores (`rank / N`), the rank among relevant items by a
second argsort-of-argsort, and the backward pass ranking the perturbed scores the same way. It uses
the deterministic margin of Eq. 14 (the authors' code draws a random margin per item), so that
both implementations compute the same function: on tie-free input their losses and gradients
agree, which the benchmark checks and reports.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import time
from pathlib import Path

import torch

from .ap_loss import APLoss

# Paper Table 6: AP forward+backward, "1 Xeon Gold CPU core at 2.2GHz" and "a Tesla V100", ms.
PAPER_TABLE_6 = {
    "cpu": {10**5: 33.0, 10**6: 331.0, 10**7: 3860.0, 10**8: 36400.0},
    "cuda": {10**5: 1.3, 10**6: 7.0, 10**7: 61.0, 10**8: 620.0},
}
MARGIN, LAM, RELEVANT_FRACTION = 0.1, 0.5, 0.01


def reference_rank_normalised(sequence: torch.Tensor) -> torch.Tensor:
    """Ranks / N by argsort of argsort, as in the authors' code (`sequence: [Q, N]`)."""
    return (torch.argsort(torch.argsort(sequence).flip(1)) + 1).to(sequence.dtype) / sequence.shape[1]


class ReferenceRanker(torch.autograd.Function):
    """Alg. 1 on normalised ranks, as in the authors' code."""

    @staticmethod
    def forward(ctx, sequence, lam):  # noqa: D102
        ranks = reference_rank_normalised(sequence)
        ctx.lam = lam
        ctx.save_for_backward(sequence, ranks)
        return ranks

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        sequence, ranks = ctx.saved_tensors
        ranks_perturbed = reference_rank_normalised(sequence + ctx.lam * grad)
        return -(ranks - ranks_perturbed) / ctx.lam, None


def reference_ap_loss(scores: torch.Tensor, relevant: torch.Tensor, margin: float, lam: float) -> torch.Tensor:
    """The reference algorithm's `1 - AP` (Eq. 14, 21, 22), mean over rows with a relevant item."""
    targets = relevant.to(scores.dtype)
    ranks = ReferenceRanker.apply(scores - margin * (targets - 0.5), lam)
    ranks_within_relevant = reference_rank_normalised(-ranks.detach() + 2.0 * targets)
    precision = (ranks_within_relevant / ranks * targets).sum(1) / targets.sum(1)
    return 1.0 - precision[relevant.any(1)].mean()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that a timer measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(run, device: torch.device, repeats: int) -> float:
    """Median wall time of `run()` in ms over `repeats` runs after one warm-up, synchronised on a GPU."""
    run()  # warm-up
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _loss_and_grad(loss_fn, scores, relevant):
    leaf = scores.clone().requires_grad_(True)
    value = loss_fn(leaf, relevant)
    value.backward()
    return value.detach(), leaf.grad


def compare_with_reference(n: int, device: torch.device, seed: int = 0) -> dict:
    """Loss and gradient of ours vs the reference on tie-free scores (a permutation of 0..n-1)."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randperm(n, generator=generator, device="cpu").to(torch.float32).view(1, n).to(device)
    relevant = (torch.rand(1, n, generator=generator, device="cpu") < RELEVANT_FRACTION).to(device)
    ours = _loss_and_grad(APLoss(MARGIN, LAM), scores, relevant)
    ref = _loss_and_grad(lambda s, r: reference_ap_loss(s, r, MARGIN, LAM), scores, relevant)
    return {
        "loss_abs_diff": float((ours[0] - ref[0]).abs()),
        "grad_max_abs_diff": float((ours[1] - ref[1]).abs().max()),
        "grad_entries_differing": int((ours[1] - ref[1]).abs().gt(1e-6 * ours[1].abs().max()).sum()),
    }


def benchmark_size(n: int, device: torch.device, repeats: int, with_reference: bool, seed: int = 0) -> dict:
    """Median forward+backward time (ms) of ours, the reference and one float32 sort at length n."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, n, generator=generator, device="cpu").to(device)
    relevant = (torch.rand(1, n, generator=generator, device="cpu") < RELEVANT_FRACTION).to(device)
    ours_loss = APLoss(MARGIN, LAM)
    row = {"n": n, "device": device.type}
    row["ours_ms"] = median_ms(lambda: _loss_and_grad(ours_loss, scores, relevant), device, repeats)
    flat = scores.view(-1)
    row["sort_ms"] = median_ms(lambda: torch.sort(flat), device, repeats)
    if with_reference:
        row["reference_ms"] = median_ms(
            lambda: _loss_and_grad(lambda s, r: reference_ap_loss(s, r, MARGIN, LAM), scores, relevant), device, repeats
        )
        row["speedup_vs_reference"] = row["reference_ms"] / row["ours_ms"]
    row["ours_over_sort"] = row["ours_ms"] / row["sort_ms"]
    row["paper_ms"] = PAPER_TABLE_6.get(device.type, {}).get(n)
    return row


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _fmt_ms(value) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.2f} s" if value >= 1e3 else f"{value:.1f} ms"


def markdown_table(rows: list[dict], meta: dict) -> str:
    lines = [
        f"AP loss forward+backward, 1 relevant in 100, median of {meta['repeats']} runs, "
        f"{meta['threads']} thread(s), {meta['device_name']}.",
        "",
        "| length | this project | reference algorithm | speed-up | one float32 sort | project / sort | paper Table 6 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        speedup = f"{row['speedup_vs_reference']:.1f}x" if "speedup_vs_reference" in row else "-"
        lines.append(
            f"| {row['n']:.0e} | {_fmt_ms(row['ours_ms'])} | {_fmt_ms(row.get('reference_ms'))} | {speedup} | "
            f"{_fmt_ms(row['sort_ms'])} | {row['ours_over_sort']:.2f} | {_fmt_ms(row['paper_ms'])} |"
        )
    check = meta.get("reference_check")
    if check:
        lines += [
            "",
            f"Identity with the reference on tie-free input (length {check['n']:.0e}): "
            f"|loss difference| = {check['loss_abs_diff']:.1e}, max |gradient difference| = "
            f"{check['grad_max_abs_diff']:.1e}, entries differing = {check['grad_entries_differing']}.",
        ]
    if "peak_memory_gib" in meta:
        lines.append(f"Peak memory of the process: {meta['peak_memory_gib']:.2f} GiB.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6, 1e7])
    parser.add_argument("--with-1e8", action="store_true", help="also length 1e8 (this project only; ~10 GiB)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check-size", type=float, default=1e6, help="length of the identity check")
    parser.add_argument("--out", type=Path, help="JSON output")
    parser.add_argument("--markdown", type=Path, help="Markdown table output")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [int(n) for n in args.sizes] + ([10**8] if args.with_1e8 else [])
    rows = []
    for n in sizes:
        row = benchmark_size(n, device, args.repeats if n < 10**8 else 1, with_reference=n < 10**8)
        rows.append(row)
        print(
            f"n={n:.0e}: ours {_fmt_ms(row['ours_ms'])}, reference {_fmt_ms(row.get('reference_ms'))}, "
            f"sort {_fmt_ms(row['sort_ms'])}",
            flush=True,
        )
    device_name = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    )
    meta = {
        "repeats": args.repeats,
        "threads": args.threads,
        "device_name": device_name,
        "torch": torch.__version__,
        "margin": MARGIN,
        "lam": LAM,
        "reference_check": {"n": int(args.check_size), **compare_with_reference(int(args.check_size), device)},
        "peak_memory_gib": peak_memory_gib(device),
    }
    table = markdown_table(rows, meta)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return rows


if __name__ == "__main__":
    main()
