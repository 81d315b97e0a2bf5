"""When and why RaMBO's recall loss collapses the embedding (every pair at cosine
~1), measured on the synthetic set with labels a network can and cannot separate.

    python benchmarks/embedding_collapse.py labels --synthetic data/retrieval/synthetic --out build/collapse
        # writes build/collapse/{halves,random}: the synthetic images (linked) with other training labels:
        #   halves: each class split at random into two pseudo-classes of 10 (half of what a label says is visible)
        #   random: the training images dealt at random into pseudo-classes of 10 (nothing is visible)
        # the test split keeps its real labels, so R@1 and the spread are measured as before
    python -m rambo.retrieval.train experiment=synthetic_log data.format=sop data.root=build/collapse/random \
        data.generate=null experiment_name=collapse_log hydra.run.dir=build/collapse/runs/log   # (and _no_margin, contrastive, ...)
    python benchmarks/embedding_collapse.py drive --root build/collapse/random build/collapse/runs/*/checkpoint.pt

``drive`` answers "what moves the scores together": on 20 training batches of ``--root`` (48 images,
12 classes x 4, as the mini profile draws them) it embeds each batch with a trained checkpoint and
prints, for the recall loss at margins 0, 0.02 and 0.1, the loss, the gradient's norm w.r.t. the
embeddings, and the first-order change of the batch's mean pairwise cosine along the negative
gradient per unit step (> 0: a step of gradient descent pulls the embeddings together).
Every training run logs the spread itself (``validation/mean_cosine`` in its curve, and a warning
at 0.99: ``rambo.retrieval.engine.collapse_warning``).
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

import torch

from rambo.core import RecallLoss
from rambo.core.pairwise import pairwise_scores

MARGINS = (0.0, 0.02, 0.1)


def write_labels(synthetic: Path, out: Path, seed: int = 0) -> list[Path]:
    """The ``halves`` and ``random`` label variants of the synthetic set at ``synthetic`` (module docstring)."""
    rng = random.Random(seed)
    header, *rows = (synthetic / "Ebay_train.txt").read_text().splitlines()
    rows = [row.split() for row in rows]
    by_class: dict[str, list[list[str]]] = {}
    for row in rows:
        by_class.setdefault(row[1], []).append(row)
    halves = []
    for class_id, members in by_class.items():
        members = rng.sample(members, len(members))
        halves += [f"{r[0]} {int(class_id) * 2 + k % 2} {r[2]} {r[3]}" for k, r in enumerate(members)]
    dealt = rng.sample(rows, len(rows))
    random_rows = [f"{r[0]} {k // 10 + 1} {(k // 10) % 12 + 1} {r[3]}" for k, r in enumerate(dealt)]
    written = []
    for name, train_rows in (("halves", halves), ("random", random_rows)):
        root = out / name
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        for entry in synthetic.iterdir():
            if entry.is_dir():
                (root / entry.name).symlink_to(entry.resolve())
        shutil.copy(synthetic / "Ebay_test.txt", root / "Ebay_test.txt")
        (root / "Ebay_train.txt").write_text("\n".join([header, *train_rows]) + "\n")
        written.append(root)
    return written


def mean_cosine(embeddings: torch.Tensor) -> torch.Tensor:
    scores, _ = pairwise_scores(embeddings, torch.zeros(embeddings.shape[0], dtype=torch.long))
    return scores.mean()


def drive(root: Path, checkpoints: list[Path], batches: int = 20) -> None:
    from rambo.retrieval.checkpoint import load_trained_model
    from rambo.retrieval.datasets import load_dataset
    from rambo.retrieval.samplers import SuperLabelBatchSampler
    from rambo.retrieval.transforms import eval_transform_of

    for path in checkpoints:
        model, config = load_trained_model(path)
        data = load_dataset("sop", root, "train", transform=eval_transform_of(config))
        sampler = SuperLabelBatchSampler(data.labels, data.super_labels, 48, 4, 10, seed=0)
        results: dict[float, list[tuple[float, float, float]]] = {m: [] for m in MARGINS}
        spread = []
        for _, batch in zip(range(batches), sampler):
            with torch.no_grad():
                embeddings = model(torch.stack([data[i][0] for i in batch]))
            labels = data.labels[batch]
            spread.append(float(mean_cosine(embeddings)))
            leaf = embeddings.clone().requires_grad_(True)
            (toward_spread,) = torch.autograd.grad(mean_cosine(leaf), leaf)
            for margin in MARGINS:
                leaf = embeddings.clone().requires_grad_(True)
                value = RecallLoss(margin, 4.0)(*pairwise_scores(leaf, labels))
                (gradient,) = torch.autograd.grad(value, leaf)
                change = float(-(toward_spread * gradient).sum() / gradient.norm().clamp(min=1e-12))
                results[margin].append((float(value.detach()), float(gradient.norm()), change))
        print(f"{path} (mean pairwise cosine of its batches {sum(spread) / len(spread):.4f}):")
        for margin, rows in results.items():
            t = torch.tensor(rows)
            print(
                f"  margin {margin:<4}: loss {t[:, 0].mean():.3f}  |grad| {t[:, 1].mean():.3g}  "
                f"d(mean cosine) per unit step {t[:, 2].mean():+.4f} (> 0 in {int((t[:, 2] > 0).sum())}/{len(t)} batches)"
            )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    labels = commands.add_parser("labels", help="write the halves and random label variants")
    labels.add_argument("--synthetic", type=Path, default=Path("data/retrieval/synthetic"))
    labels.add_argument("--out", type=Path, default=Path("build/collapse"))
    direction = commands.add_parser("drive", help="what a gradient step does to the spread")
    direction.add_argument("--root", type=Path, required=True)
    direction.add_argument("checkpoints", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "labels":
        for root in write_labels(args.synthetic, args.out):
            print(root)
    else:
        drive(args.root, args.checkpoints)


if __name__ == "__main__":
    main()
