"""What a run tells the person watching it: one summary line per epoch and one at the end (metrics,
and where the outputs are), through `logging` so that Hydra writes them to the console and to
the run's `train.log`. Progress bars only on a terminal: under DVC or a batch scheduler they
would fill the log with thousands of bar updates.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping

from tqdm import tqdm

log = logging.getLogger("rambo")


def progress(iterable: Iterable, enabled: bool = True, **options) -> Iterable:
    """`tqdm(iterable)` when `enabled` and stderr is a terminal; else `iterable` itself."""
    if not (enabled and sys.stderr.isatty()):
        return iterable
    return tqdm(iterable, leave=False, dynamic_ncols=True, **options)


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summary_line(prefix: str, values: Mapping) -> str:
    """`"prefix key value key value ..."` with floats to 4 significant digits."""
    return " ".join([prefix, *(f"{key} {_format(value)}" for key, value in values.items())])


def log_epoch(epoch: int, epochs: int, values: Mapping) -> None:
    """One line per epoch: `epoch 3/8 loss 0.1234 lr 0.001 test/R@1 0.54`."""
    log.info(summary_line(f"epoch {epoch}/{epochs}", values))


def log_done(values: Mapping, outputs: Mapping) -> None:
    """The closing lines: headline metrics, then where each output was written."""
    log.info(summary_line("done:", values))
    for name, path in outputs.items():
        log.info("  %s: %s", name, path)
