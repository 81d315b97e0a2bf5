"""What the sections of ``make gpu-check`` share: the problem sizes of a full and a toy check, peak memory,
the losses' forward+backward on one row, the apps' configs, and the report's number formats and tables.

One copy here, so that every section measures and writes its numbers the same way."""

from __future__ import annotations

from pathlib import Path

import torch

from rambo.core.benchmark import PAPER_TABLE_6, RELEVANT_FRACTION

REPO = Path(__file__).resolve().parents[2]
# Paper Table 6, Tesla V100, AP loss forward+backward (ms); Sec. 5.2: "< 5 ms" at 320k elements.
# The losses' settings (margin, lambda, 1 relevant in 100) are make bench's.
PAPER_V100_MS = PAPER_TABLE_6["cuda"]
DETECTION_SEQUENCE = 320_000
PAPER_DETECTION_MS = 5.0


class Sizes:
    """Problem sizes of a full check (on a GPU) and of a toy one (the CPU, the test)."""

    def __init__(self, toy: bool):
        self.toy = toy
        self.loss_lengths = [10**3, 10**4] if toy else [10**5, 10**6, 10**7, 10**8]
        self.detection_sequence = 3_200 if toy else DETECTION_SEQUENCE
        self.repeats = 2 if toy else 10
        self.identical_lengths = (2_000, (4, 500)) if toy else (10**6, (64, 8_192))
        self.retrieval = dict(batch=8, image_size=32, steps=2) if toy else dict(batch=128, image_size=224, steps=6)
        self.recall_k = (
            dict(batch=16, chunk=4, image_size=32, steps=1)
            if toy
            else dict(batch=4000, chunk=250, image_size=224, steps=2)
        )
        self.eval = dict(n=2_000, dim=32) if toy else dict(n=60_502, dim=512)
        self.detection = (
            dict(batch=2, height=48, width=64, min_size=64, max_size=96, steps=2)
            if toy
            else dict(batch=8, height=375, width=500, min_size=600, max_size=1000, steps=6)
        )
        self.core_tests = ["core/tests/test_core_ranking.py"] if toy else ["core/tests"]


# ----------------------------------------------------------------------------------------------- memory


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """Peak memory allocated by torch on the GPU since the last reset (None on the CPU)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


# ----------------------------------------------------------------------------------------------- losses and configs


def loss_fwd_bwd(loss_fn, scores: torch.Tensor, relevant: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward+backward of ``loss_fn`` on a fresh leaf copy of ``scores``: ``(loss, its gradient)``."""
    leaf = scores.detach().clone().requires_grad_(True)
    value = loss_fn(leaf, relevant)
    value.backward()
    return value.detach(), leaf.grad


def random_row(n: int, device: torch.device, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One row of ``n`` normal scores, 1 relevant in 100 (the first item always), drawn on the CPU."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, n, generator=generator, device="cpu")
    relevant = torch.rand(1, n, generator=generator, device="cpu") < RELEVANT_FRACTION
    relevant[0, 0] = True
    return scores.to(device), relevant.to(device)


def compose(app: str, overrides: list[str]):
    """The app's training config (``rambo.<app>``'s ``configs/train.yaml``) with ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    package = __import__(f"rambo.{app}", fromlist=["train"])
    config_dir = Path(package.__file__).parent / "configs"
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


# ----------------------------------------------------------------------------------------------- report


def format_ms(value) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.2f} s" if value >= 1e3 else f"{value:.2f} ms"


def format_gib(value) -> str:
    return "-" if value is None else f"{value:.2f} GiB"


def section_table(title: str, header: list[str], align: str, rows: list[list]) -> list[str]:
    """A Markdown section: ``## title``, a table with ``header`` (``align``: one ``l``/``r`` per
    column) and ``rows``, and a blank line."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return [
        f"## {title}",
        "",
        "| " + " | ".join(header) + " |",
        rule,
        *["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows],
        "",
    ]
