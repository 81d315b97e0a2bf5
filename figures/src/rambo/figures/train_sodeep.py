"""Train the SoDeep LSTM sorter on synthetic score vectors (the sorter drawn in Fig. 6(d)).

`python -m rambo.figures.train_sodeep --out figures/out [--length 20] [--steps 1500] [--batch 256] [--loss l1]`

Writes the checkpoint `sodeep_sorter.pt` (atomically: a temporary file, then `os.replace`) and
`sodeep_sorter.json` (the loss on a fixed validation batch before and after training, and the
mean absolute rank error after training, in ranks).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from rambo.core import exact_rank
from rambo.harness.atomic import save_torch
from rambo.harness.numerics import start_command

from .figure_style import save_numbers
from .sodeep_sorter import SoDeepSorter, sorting_loss, synthetic_sequences

CHECKPOINT = "sodeep_sorter.pt"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder of the checkpoint")
    parser.add_argument("--length", type=int, default=20, help="length N of the score vectors")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--loss", choices=("l1", "l2"), default="l1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.length < 2 or args.batch < 1:
        parser.error("--steps and --batch must be >= 1 and --length >= 2")
    return args


def save_checkpoint(checkpoint: dict, path: Path) -> None:
    save_torch(checkpoint, path)


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    validation = synthetic_sequences(1024, args.length, torch.Generator().manual_seed(args.seed + 1))
    sorter = SoDeepSorter(args.hidden, args.layers)
    optimizer = torch.optim.Adam(sorter.parameters(), lr=args.lr)
    # Cosine decay: the last steps refine the ranks of near-ties, where the landscape's kinks are.
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)

    with torch.no_grad():
        loss_before = float(sorting_loss(sorter, validation, args.loss))
    for step in range(1, args.steps + 1):
        loss = sorting_loss(sorter, synthetic_sequences(args.batch, args.length, generator), args.loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % max(1, args.steps // 10) == 0:
            print(f"step {step}/{args.steps}: training loss {float(loss.detach()):.4f}", flush=True)
    with torch.no_grad():
        loss_after = float(sorting_loss(sorter, validation, args.loss))
        rank_error = float((sorter(validation) - exact_rank(validation)).abs().mean())

    numbers = {
        "steps": args.steps,
        "loss": args.loss,
        "validation_loss_before": loss_before,
        "validation_loss_after": loss_after,
        "mean_abs_rank_error_after": rank_error,
    }
    config = {"hidden": args.hidden, "layers": args.layers, "length": args.length}
    save_checkpoint({"state_dict": sorter.state_dict(), "config": config, "training": numbers}, args.out / CHECKPOINT)
    save_numbers(numbers, args.out, "sodeep_sorter")
    return numbers


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    print(main())
