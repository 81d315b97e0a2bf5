"""What the figures need from a trained run: pair scores (Fig. 3) and example retrievals (Fig. 4).

`python -m rambo.retrieval.export --checkpoint CKPT --out-dir DIR [--max-queries 1000] [--top-k 5]`
writes `DIR/scores.npz` (`scores`, `relevant`: 1-D, one entry per (query, gallery item) pair,
a query never paired with itself) and `DIR/retrievals.npz` (`query [Q]`, `results [Q, K]`:
image paths relative to the dataset folder, best first; `correct [Q, K]` bool). The model and
dataset come from the configuration stored in the checkpoint; queries are a seeded random subset
of the test split (In-shop: of the query split, against the gallery).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from rambo.core.pairwise import unit_rows
from rambo.harness.atomic import atomic_path
from rambo.harness.numerics import start_command

from .checkpoint import load_trained_model
from .datasets import load_dataset
from .evaluate import compute_embeddings
from .transforms import eval_transform_of


def _relative(paths, root: Path) -> np.ndarray:
    root = root.resolve()
    return np.array([str(Path(p).resolve().relative_to(root)) for p in paths])


def _npz_atomically(path: Path, **arrays) -> None:
    with atomic_path(path, suffix=".npz") as temporary:
        np.savez_compressed(temporary, **arrays)


def export(checkpoint: Path, out_dir: Path, max_queries: int = 1000, top_k: int = 5, seed: int = 0) -> dict:
    model, config = load_trained_model(checkpoint)
    data = config["data"]
    root = Path(data["root"])
    transform = eval_transform_of(config)
    if data["format"] == "inshop":
        query_set = load_dataset("inshop", root, "query", transform=transform)
        gallery_set = load_dataset("inshop", root, "gallery", transform=transform)
    else:
        query_set = gallery_set = load_dataset(data["format"], root, "test", transform=transform)
    gallery, gallery_labels = compute_embeddings(model, gallery_set)
    if query_set is gallery_set:
        query_all, query_labels_all = gallery, gallery_labels
    else:
        query_all, query_labels_all = compute_embeddings(model, query_set)
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(query_all.shape[0], generator=generator)[:max_queries].sort().values
    query, query_labels = query_all[chosen], query_labels_all[chosen]

    scores = unit_rows(query) @ unit_rows(gallery).T
    relevant = query_labels.unsqueeze(1) == gallery_labels.unsqueeze(0)
    keep = torch.ones_like(relevant)
    if query_set is gallery_set:
        keep[torch.arange(len(chosen)), chosen] = False  # a query is never paired with itself
    masked = scores.masked_fill(~keep, float("-inf"))
    top = masked.topk(min(top_k, gallery.shape[0] - 1), dim=1).indices
    correct = relevant.gather(1, top)

    _npz_atomically(out_dir / "scores.npz", scores=scores[keep].numpy(), relevant=relevant[keep].numpy())
    gallery_paths = _relative(gallery_set.image_paths, root)
    query_paths = _relative([query_set.image_paths[i] for i in chosen.tolist()], root)
    _npz_atomically(
        out_dir / "retrievals.npz", query=query_paths, results=gallery_paths[top.numpy()], correct=correct.numpy()
    )
    return {"queries": len(chosen), "pairs": int(keep.sum()), "top_k": top.shape[1]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--max-queries", type=int, default=1000)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.checkpoint.is_file():
        raise SystemExit(f"no checkpoint at {args.checkpoint}: train the run first")
    summary = export(args.checkpoint, args.out_dir, args.max_queries, args.top_k, args.seed)
    print(f"wrote {args.out_dir}/scores.npz and retrievals.npz: {summary}")
    return summary


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    main()
