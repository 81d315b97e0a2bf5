"""Peak memory of one two-pass training step, batch 1024 vs batch 128 at the same chunk size.

    python -m rambo.retrieval.benchmark_two_pass [--backbone resnet18 --image-size 64 --chunk 128]
    python -m rambo.retrieval.benchmark_two_pass --device cuda --backbone resnet50 --image-size 224

Each batch size runs in a fresh subprocess so the peaks do not mix. On CUDA the peak is
`torch.cuda.max_memory_allocated`; on CPU it is the process's peak resident set size
(`ru_maxrss`), printed beside its increase over the RSS before the batch was created (the
imported libraries and the model). Target: batch 1024 within 1.3x of batch 128. Prints
numbers only; the JSON goes to `--out` when given.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def measure(batch: int, chunk: int, backbone: str, image_size: int, device: str) -> dict:
    """One two-pass step (RaMBO recall loss, memory 3) on random images; returns peak memory."""
    from rambo.core import EmbeddingMemory, RecallLoss

    from .model import EmbeddingNet
    from .two_pass import two_pass_backward

    torch.manual_seed(0)
    model = EmbeddingNet(backbone, pretrained=False, freeze_batchnorm=True).to(device)
    loss = EmbeddingMemory(RecallLoss(margin=0.02, lam=4.0), tau=3)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    baseline = _rss_mib()
    images = torch.randn(batch, 3, image_size, image_size, device=device)  # the stored augmented batch
    labels = torch.arange(batch, device=device) // 4  # 4 samples per class
    started = time.perf_counter()
    two_pass_backward(model, images, labels, loss, chunk)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = {"peak_mib": torch.cuda.max_memory_allocated() / 2**20}
    else:
        peak = {"peak_rss_mib": _rss_mib(), "baseline_rss_mib": baseline, "increase_mib": _rss_mib() - baseline}
    return {"batch": batch, "chunk": chunk, "seconds": time.perf_counter() - started, **peak}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)  # child process
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.single:
        result = measure(args.batches[0], args.chunk, args.backbone, args.image_size, args.device)
        print(json.dumps(result))
        return result
    results = []
    for batch in args.batches:
        command = [
            sys.executable,
            "-m",
            "rambo.retrieval.benchmark_two_pass",
            "--single",
            "--batches",
            str(batch),
            "--chunk",
            str(args.chunk),
            "--backbone",
            args.backbone,
            "--image-size",
            str(args.image_size),
            "--device",
            args.device,
            "--threads",
            str(args.threads),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    key = "peak_mib" if args.device == "cuda" else "peak_rss_mib"
    summary = {
        "backbone": args.backbone,
        "image_size": args.image_size,
        "device": args.device,
        "runs": results,
        "ratio_peak": results[-1][key] / results[0][key],
    }
    if args.device != "cuda":
        summary["ratio_increase"] = results[-1]["increase_mib"] / results[0]["increase_mib"]
    for r in results:
        print(f"batch {r['batch']:5d}  chunk {r['chunk']}  {key} {r[key]:9.1f}  ({r['seconds']:.1f} s)")
    print(
        f"ratio batch {results[-1]['batch']} / batch {results[0]['batch']}: peak {summary['ratio_peak']:.3f}"
        + (f", increase over baseline {summary['ratio_increase']:.3f}" if "ratio_increase" in summary else "")
    )
    if args.out:
        from rambo.harness.atomic import write_json

        write_json(args.out, summary)
    return summary


if __name__ == "__main__":
    main()
