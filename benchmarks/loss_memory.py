"""Peak memory of one AP-loss forward+backward, in bytes per ranked element.

    python benchmarks/loss_memory.py                 # 1e7 elements on the CPU, dense and sparse path
    python benchmarks/loss_memory.py --n 100000000   # 1e8 (about 4 GB per run on the CPU)
    python benchmarks/loss_memory.py --device cuda   # on a GPU: torch.cuda.max_memory_allocated
    python benchmarks/loss_memory.py --baseline-src /tmp/old   # beside a checkout of an older commit

Each run is a fresh process. The peak counts tensor memory above what the process held before
the loss call (the input scores and relevance): on the CPU from the allocation events of
``torch.profiler`` (``profile_memory=True``, their running sum), on a GPU from the caching
allocator's ``max_memory_allocated``. ``--baseline-src DIR`` also runs the same measurement on the
packages of another checkout (``DIR/core/src`` first on the path, e.g. ``git worktree add /tmp/old
<commit>``), side by side: bytes, not times, so the machine's noise does not enter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch


def measure(n: int, path: str, device: str) -> dict:
    """One forward+backward of ``APLoss`` on one row of ``n`` scores (1 relevant in 100)."""
    import rambo.core
    from rambo.core import APLoss
    from rambo.core.loss_path import set_loss_path
    from rambo.core.peak_memory import cpu_peak_bytes

    set_loss_path(path)
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(1, n, generator=generator).to(device).requires_grad_(True)
    relevant = (torch.rand(1, n, generator=generator) < 0.01).to(device)
    loss = APLoss(margin=0.02, lam=0.5)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        loss(scores, relevant).backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = cpu_peak_bytes(lambda: loss(scores, relevant).backward())
    return {
        "n": n,
        "path": path,
        "device": device,
        "source": os.path.dirname(rambo.core.__file__),
        "peak_bytes": peak,
        "bytes_per_element": peak / n,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--paths", nargs="+", default=["dense", "sparse"], choices=["dense", "sparse"])
    parser.add_argument("--baseline-src", help="a checkout of another commit, measured beside this one")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one path
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.n, args.one, args.device)))
        return []
    sources = [("this checkout", None)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])
    rows = []
    for path in args.paths:
        for label, source in sources:
            env = dict(os.environ)
            if source:
                env["PYTHONPATH"] = os.pathsep.join([os.path.join(source, "core", "src"), env.get("PYTHONPATH", "")])
            command = [sys.executable, __file__, "--n", str(args.n), "--device", args.device, "--one", path]
            done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
            rows.append({"code": label, **json.loads(done.stdout.splitlines()[-1])})
    print(
        f"AP loss forward+backward, one row of {args.n:.0e} scores on {args.device}: peak tensor memory above the inputs"
    )
    print(f"{'path':<8}{'code':<15}{'peak MiB':>10}{'bytes/element':>15}")
    for row in rows:
        print(f"{row['path']:<8}{row['code']:<15}{row['peak_bytes'] / 2**20:>10.0f}{row['bytes_per_element']:>15.1f}")
    return rows


if __name__ == "__main__":
    main()
