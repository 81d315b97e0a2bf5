"""The sections of ``make gpu-check`` (``benchmarks/gpu_check.py``), one module each, as
pytorch-metric-learning keeps one loss per file. Each section module holds what it measures and how it is
shown: ``run(device, sizes) -> dict`` (the section's JSON; ``"ok"`` says whether it passed) and
``markdown(result, report) -> list[str]`` (its part of ``gpu_check.md``; nothing when it did not measure).

``SECTIONS`` is the registry the command reads: every section once, in the order they run by default and in
which the report shows their tables. ``common`` (sizes, memory, formats), ``training_steps`` (shared by the two
retrieval step sections) and ``targets`` (the performance targets' table, read across sections) are not sections."""

from . import (
    core_tests,
    cuda_graphs,
    detection_step,
    memory_plan,
    peers,
    rank_losses,
    ranks_identical,
    recall_at_k_eval,
    recall_k_step,
    retrieval_step,
    sync_free,
)

SECTIONS = {
    module.__name__.rsplit(".", 1)[-1]: module
    for module in (
        core_tests,
        rank_losses,
        peers,
        sync_free,
        cuda_graphs,
        ranks_identical,
        retrieval_step,
        recall_k_step,
        recall_at_k_eval,
        detection_step,
        memory_plan,
    )
}
