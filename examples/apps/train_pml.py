"""The RaMBO recall loss in a pytorch-metric-learning (PML) training loop, on your ImageFolder data.

What it shows: ``rambo.core.pml.RaMBORecallLoss`` used like any PML loss, inside
``rambo.core.pml.CrossBatchMemory`` (PML's ``CrossBatchMemory``, accepting the RaMBO adapters):
with ``memory_size = (tau + 1) * batch_size`` each query ranks the current batch and the last
``tau`` batches, the paper's memory (Sec. 4.3), as ``rambo.core.EmbeddingMemory`` does in
``train_imagefolder.py``. PML conventions throughout: a trunk (ResNet-18 without its classifier)
and an embedder (a linear layer), PML's ``MPerClassSampler``, ``loss_func(embeddings, labels)``.
Recall@1 / MAP@R at the end come from ``rambo.retrieval.evaluate`` (exact k-NN with faiss).

Data layout (torchvision ``ImageFolder``): ``ROOT/<class name>/<image>``, at least 2 images a
class; ``--test-root`` for held-out classes (default: the training images are scored).

Run (after ``pip install "./core[pml]" ./harness "./retrieval[cpu]"``)::

    python examples/apps/train_pml.py --root /data/my_classes --epochs 10 --image-size 224 --pretrained

``--pretrained`` downloads ImageNet weights (default off: works offline, from scratch).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torchvision
from pytorch_metric_learning.samplers import MPerClassSampler
from torchvision import transforms

from rambo.core.pml import CrossBatchMemory, RaMBORecallLoss
from rambo.retrieval.evaluate import retrieval_metrics


def image_transform(image_size: int, train: bool):
    steps = [transforms.Resize((image_size, image_size))]
    if train:
        steps.append(transforms.RandomHorizontalFlip())
    steps += [transforms.ToTensor(), transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    return transforms.Compose(steps)


@torch.no_grad()
def embed(trunk, embedder, dataset, batch_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    trunk.eval()
    embedder.eval()
    embeddings, labels = [], []
    for images, targets in torch.utils.data.DataLoader(dataset, batch_size=batch_size):
        embeddings.append(embedder(trunk(images.to(device))).cpu())
        labels.append(targets)
    return torch.cat(embeddings), torch.cat(labels)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="ImageFolder root: one sub-folder of images per class")
    parser.add_argument("--test-root", help="ImageFolder of held-out classes to score (default: --root)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="images per batch (default: 64, or classes x samples-per-class when the folder has fewer classes)",
    )
    parser.add_argument("--samples-per-class", type=int, default=4, help="m of PML's MPerClassSampler")
    parser.add_argument("--embedding-dim", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--margin", type=float, default=0.02, help="alpha (paper Table 9, SOP)")
    parser.add_argument("--lam", type=float, default=4.0, help="lambda of the blackbox ranking (Table 9, SOP)")
    parser.add_argument("--tau", type=int, default=3, help="previous batches in the cross-batch memory (App. A)")
    parser.add_argument(
        "--pretrained",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="start from ImageNet weights (downloads them)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # PML's samplers draw from numpy's global generator (its c_f.NUMPY_RANDOM)
    device = torch.device(args.device)
    train_set = torchvision.datasets.ImageFolder(args.root, transform=image_transform(args.image_size, train=True))
    if args.batch_size is None:  # a batch holds batch / m distinct classes: at most the folder's
        args.batch_size = min(64 // args.samples_per_class, len(train_set.classes)) * args.samples_per_class
        print(
            f"batch size {args.batch_size} ({args.batch_size // args.samples_per_class} classes x {args.samples_per_class})"
        )
    sampler = MPerClassSampler(
        train_set.targets,
        m=args.samples_per_class,
        batch_size=args.batch_size,
        length_before_new_iter=max(len(train_set) // args.batch_size, 1) * args.batch_size,
    )
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    trunk = torchvision.models.resnet18(
        weights=torchvision.models.ResNet18_Weights.DEFAULT if args.pretrained else None
    )
    trunk_dim = trunk.fc.in_features
    trunk.fc = torch.nn.Identity()
    embedder = torch.nn.Linear(trunk_dim, args.embedding_dim)
    trunk, embedder = trunk.to(device), embedder.to(device)

    loss_func = CrossBatchMemory(
        RaMBORecallLoss(margin=args.margin, lam=args.lam, weighting="log"),  # cosine similarity, mean over queries
        embedding_size=args.embedding_dim,
        memory_size=(args.tau + 1) * args.batch_size,  # the current batch + tau previous ones
    ).to(device)
    optimizer = torch.optim.Adam(list(trunk.parameters()) + list(embedder.parameters()), lr=args.lr)

    for epoch in range(args.epochs):
        trunk.train()
        embedder.train()
        total = 0.0
        for images, labels in loader:
            embeddings = embedder(trunk(images.to(device)))
            loss = loss_func(embeddings, labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch + 1}/{args.epochs}  loss {total / len(loader):.4f}", flush=True)

    test_set = torchvision.datasets.ImageFolder(
        args.test_root or args.root, transform=image_transform(args.image_size, train=False)
    )
    embeddings, labels = embed(trunk, embedder, test_set, args.batch_size, device)
    metrics = retrieval_metrics(embeddings, labels, ks=(1,))
    print(
        f"Recall@1 {metrics['R@1']:.4f}  MAP@R {metrics['MAP@R']:.4f}  ({len(test_set)} images of {args.test_root or args.root})"
    )
    return metrics


if __name__ == "__main__":
    main()
