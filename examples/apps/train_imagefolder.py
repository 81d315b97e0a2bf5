"""Train an image-embedding network on your own ImageFolder dataset with the RaMBO recall loss.

What it shows: ``rambo.core.EmbeddingMemory(RecallLoss(...))`` in a plain PyTorch loop. A
torchvision ResNet-18 with a linear embedding head, m-per-class batches
(``rambo.retrieval.samplers.MPerClassBatchSampler``: the loss needs several images of a class in
each batch), Adam, and Recall@1 / MAP@R at the end (``rambo.retrieval.evaluate``, exact k-NN with faiss).

Data layout (torchvision ``ImageFolder``): ``ROOT/<class name>/<image>.png|jpg``; every class
needs at least 2 images. Retrieval is usually evaluated on classes unseen in training: give those
as ``--test-root``; without it the training images themselves are scored.

Run (from the repository root, after ``pip install ./core ./harness "./retrieval[cpu]"``)::

    python examples/apps/train_imagefolder.py --root /data/my_classes --epochs 10 --image-size 224 --pretrained
    python examples/apps/train_imagefolder.py --root /data/train --test-root /data/test --device cuda

``--pretrained`` downloads ImageNet weights (default off: works offline, from scratch).
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from torchvision import transforms

from rambo.core import EmbeddingMemory, RecallLoss
from rambo.retrieval.evaluate import retrieval_metrics
from rambo.retrieval.samplers import MPerClassBatchSampler


def embedding_network(embedding_dim: int, pretrained: bool) -> torch.nn.Module:
    """ResNet-18 whose classifier layer is replaced by a linear embedding head."""
    weights = torchvision.models.ResNet18_Weights.DEFAULT if pretrained else None
    network = torchvision.models.resnet18(weights=weights)
    network.fc = torch.nn.Linear(network.fc.in_features, embedding_dim)
    return network


def image_transform(image_size: int, train: bool):
    steps = [transforms.Resize((image_size, image_size))]
    if train:
        steps.append(transforms.RandomHorizontalFlip())
    steps += [transforms.ToTensor(), transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    return transforms.Compose(steps)


@torch.no_grad()
def embed(network, dataset, batch_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    network.eval()
    embeddings, labels = [], []
    for images, targets in torch.utils.data.DataLoader(dataset, batch_size=batch_size):
        embeddings.append(network(images.to(device)).cpu())
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
    parser.add_argument("--samples-per-class", type=int, default=4, help="images of each class in a batch")
    parser.add_argument("--embedding-dim", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--margin", type=float, default=0.02, help="alpha (paper Table 9, SOP)")
    parser.add_argument("--lam", type=float, default=4.0, help="lambda of the blackbox ranking (Table 9, SOP)")
    parser.add_argument("--tau", type=int, default=3, help="batches kept in the embedding memory (App. A)")
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
    device = torch.device(args.device)
    train_set = torchvision.datasets.ImageFolder(args.root, transform=image_transform(args.image_size, train=True))
    if args.batch_size is None:  # a batch holds batch / m distinct classes: at most the folder's
        args.batch_size = min(64 // args.samples_per_class, len(train_set.classes)) * args.samples_per_class
        print(
            f"batch size {args.batch_size} ({args.batch_size // args.samples_per_class} classes x {args.samples_per_class})"
        )
    sampler = MPerClassBatchSampler(
        train_set.targets,
        batch_size=args.batch_size,
        samples_per_class=args.samples_per_class,
        seed=args.seed,
        batches_per_epoch=max(1, len(train_set) // args.batch_size),
    )
    loader = torch.utils.data.DataLoader(train_set, batch_sampler=sampler, num_workers=0)

    network = embedding_network(args.embedding_dim, args.pretrained).to(device)
    # Each image in the batch is a query ranked against the rest of the batch and the embeddings of
    # the last `tau` batches (paper Sec. 4.3); RecallLoss is Eq. 20 on those rankings.
    criterion = EmbeddingMemory(RecallLoss(margin=args.margin, lam=args.lam, weighting="log"), tau=args.tau)
    optimizer = torch.optim.Adam(network.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        network.train()
        criterion.train()
        total = 0.0
        for images, labels in loader:
            loss = criterion(network(images.to(device)), labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch + 1}/{args.epochs}  loss {total / len(loader):.4f}", flush=True)

    test_set = torchvision.datasets.ImageFolder(
        args.test_root or args.root, transform=image_transform(args.image_size, train=False)
    )
    embeddings, labels = embed(network, test_set, args.batch_size, device)
    metrics = retrieval_metrics(embeddings, labels, ks=(1,))
    print(
        f"Recall@1 {metrics['R@1']:.4f}  MAP@R {metrics['MAP@R']:.4f}  ({len(test_set)} images of {args.test_root or args.root})"
    )
    return metrics


if __name__ == "__main__":
    main()
