"""The RaMBO recall loss in a pytorch-metric-learning (PML) training loop, on real handwritten digits.

What it shows: ``rambo.core.pml.RaMBORecallLoss`` used as any PML loss, ``loss_func(embeddings,
labels)``, inside ``rambo.core.pml.CrossBatchMemory`` (PML's ``CrossBatchMemory``, which accepts the
RaMBO adapters; PML's own class refuses losses not on its list). With ``memory_size = (tau + 1) *
batch_size`` each query ranks the current batch and the last ``tau`` batches: the paper's score
memory (Sec. 4.3), as ``rambo.core.EmbeddingLoss(loss, tau=tau)`` does in ``train_digits.py``.
Batches come from PML's ``MPerClassSampler``, set to one pass over the training images an epoch as
in ``train_digits.py`` (``length_before_new_iter``; its default, 100,000 images an epoch, made an
epoch about 80 of ``train_digits.py``'s and a run minutes long).

Data, classes, network and settings are those of ``train_digits.py`` (its docstring says how the
settings were chosen, on validation splits of the training digits only): scikit-learn's bundled
digits, training on 0-6, Recall@1 measured on the unseen 7-9 before and after training.

Run (from a clone, after ``pip install "./core[pml]"``; PML brings scikit-learn)::

    python examples/train_digits_pml.py                          # full size, seconds on a CPU
    python examples/train_digits_pml.py --epochs 1 --limit 20    # shrunk

Measured on a 2-core CPU (``python examples/train_digits_pml.py --seed S``, about 7 s each, beside
about 6 s for ``train_digits.py``: the timing is in docs/losses.md), Recall@1 on the unseen digits 7-9
before -> after training: seed 0 0.7711 -> 0.9118, seed 1 0.8086 -> 0.8274, seed 2 0.8405 -> 0.8893
(mean 0.807 -> 0.876).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from pytorch_metric_learning.samplers import MPerClassSampler
from pytorch_metric_learning.utils import common_functions
from train_digits import DEFAULTS, SPLITS, digits, embedding_network, recall_at_1, span

from rambo.core.pml import CrossBatchMemory, RaMBORecallLoss


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=sorted(SPLITS), default="test")
    parser.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    parser.add_argument("--limit", type=int, default=None, help="use the first LIMIT images of each digit")
    parser.add_argument("--samples-per-class", type=int, default=8, help="m of PML's MPerClassSampler")
    parser.add_argument("--dim", type=int, default=DEFAULTS["dim"], help="embedding size")
    parser.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    parser.add_argument("--margin", type=float, default=DEFAULTS["margin"])
    parser.add_argument("--lam", type=float, default=DEFAULTS["lam"], help="lambda of the blackbox ranking")
    parser.add_argument("--tau", type=int, default=DEFAULTS["tau"], help="previous batches in the memory")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    common_functions.NUMPY_RANDOM = np.random.RandomState(args.seed)  # PML's samplers draw from it
    train_classes, eval_classes = SPLITS[args.split]
    train_images, train_labels = digits(train_classes, args.limit)
    eval_images, eval_labels = digits(eval_classes, args.limit)
    print(
        f"train on digits {span(train_classes)} ({len(train_labels)} images), "
        f"Recall@1 on digits {span(eval_classes)} ({len(eval_labels)} images, {args.split} split)"
    )

    batch_size = args.samples_per_class * len(train_classes)  # every training digit in every batch
    # An epoch is one pass over the training images, as in train_digits.py (whole batches only);
    # without length_before_new_iter PML's sampler draws 100,000 images an epoch.
    sampler = MPerClassSampler(
        train_labels,
        m=args.samples_per_class,
        batch_size=batch_size,
        length_before_new_iter=max(len(train_labels), batch_size),
    )
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train_images, train_labels), batch_size=batch_size, sampler=sampler
    )
    model = embedding_network(args.dim)
    loss_func = CrossBatchMemory(
        RaMBORecallLoss(margin=args.margin, lam=args.lam),
        embedding_size=args.dim,
        memory_size=(args.tau + 1) * batch_size,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    before = recall_at_1(model, eval_images, eval_labels)
    print(f"Recall@1 before training: {before:.4f}")
    for epoch in range(args.epochs):
        model.train()
        values = []
        for images, labels in loader:
            loss = loss_func(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            values.append(loss.item())
        print(f"epoch {epoch + 1}/{args.epochs}  loss {sum(values) / len(values):.4f}")
    after = recall_at_1(model, eval_images, eval_labels)
    print(f"Recall@1 after training:  {after:.4f}")
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
