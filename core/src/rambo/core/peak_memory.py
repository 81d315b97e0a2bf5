"""Peak tensor memory of one call, the benchmarks' one way of measuring it (CPU and GPU).

On the CPU the peak is the highest running sum of the allocation (and free) events that
`torch.profiler` records with `profile_memory=True` during the call: tensor bytes above what was
allocated before it, not the process's resident set. On a GPU it is the caching allocator's
`max_memory_allocated` less `memory_allocated` before the call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def cpu_peak_bytes(run: Callable[[], object]) -> int:
    """The peak of the running sum of the CPU allocations (and frees) made by `run()`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in profiler.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, change in events:
        live += change
        peak = max(peak, live)
    return peak


def peak_bytes_above(run: Callable[[], object], device: torch.device) -> int:
    """Peak tensor bytes allocated by `run()` above what was allocated before it, on `device`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    return cpu_peak_bytes(run)
