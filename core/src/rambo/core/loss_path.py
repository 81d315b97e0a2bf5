"""Which formulation the RaMBO losses run, and how they treat bad input.

Two formulations compute the same losses with bit-identical gradients (tested):

* `sparse`: the CPU eager path. It gathers the P relevant items (`relevant.nonzero()`) and
  re-ranks only the items that move in the backward pass, O(N + P log N) after one sort
  ([`item_ranking`][rambo.core.item_ranking]). Gathering reads the data's size on the host, so it waits for the device.
* `dense`: fixed shapes, no host synchronisation. The ranks, each item's rank among the relevant
  items of its row (a cumulative sum of the relevance in rank order, gathered back), the margin as
  `(s + m/2) + where(relevant, -m, 0)`, the per-row terms as masked sums and the mean over rows
  with a relevant item as `where(has, rows, 0).sum() / has.sum().clamp(min=1)`. One operator
  (`rambo::blackbox_rank`) does the sorting; everything else is elementwise or a reduction, so
  `torch.compile(fullgraph=True)` makes one graph of it and a GPU never waits for the host.

`auto` (the default) runs `dense` on any device but the CPU and while `torch.compile` traces,
`sparse` in CPU eager mode. `RAMBO_LOSS_PATH=dense|sparse|auto` or [`set_loss_path`][rambo.core.loss_path.set_loss_path]
chooses (e.g. `dense` on the CPU to test the GPU path there).

Bad input (NaN or inf scores). `raise` checks the values and raises `ValueError` naming the
problem: one read of a flag on the host, free on the CPU. `propagate` never reads device data:
a non-finite score makes the loss value NaN (a training loop that watches its loss stops there),
the gradients stay finite. `auto` (the default) raises on the sparse path and propagates on the
dense one. `RAMBO_INPUT_CHECKS=raise|propagate|auto` or `set_loss_path(checks=...)`.
Shapes, dtypes and devices are always checked: that needs no data.
"""

from __future__ import annotations

import contextlib
import os

import torch

PATHS = ("auto", "dense", "sparse")
CHECKS = ("auto", "raise", "propagate")


def _checked(value: str, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


_settings = {
    "path": _checked(os.environ.get("RAMBO_LOSS_PATH", "auto"), PATHS, "RAMBO_LOSS_PATH"),
    "checks": _checked(os.environ.get("RAMBO_INPUT_CHECKS", "auto"), CHECKS, "RAMBO_INPUT_CHECKS"),
}


def set_loss_path(path: str = "auto", checks: str = "auto") -> None:
    """Choose the formulation (`auto`, `dense`, `sparse`) and the input checks (`auto`,
    `raise`, `propagate`) of every RaMBO loss from now on (module docstring)."""
    _settings["path"] = _checked(path, PATHS, "path")
    _settings["checks"] = _checked(checks, CHECKS, "checks")


def loss_path_settings() -> dict[str, str]:
    """The current `{"path": ..., "checks": ...}`."""
    return dict(_settings)


@contextlib.contextmanager
def loss_path(path: str = "auto", checks: str = "auto"):
    """[`set_loss_path`][rambo.core.loss_path.set_loss_path] within a `with` block, the previous settings restored after
    it."""
    previous = loss_path_settings()
    set_loss_path(path, checks)
    try:
        yield
    finally:
        set_loss_path(**previous)


def is_compiling() -> bool:
    """True while `torch.compile` traces (`torch.compiler.is_compiling`; torch < 2.3: dynamo's)."""
    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if check is None:  # the mmdetection environment's torch 2.1
        from torch import _dynamo

        check = _dynamo.is_compiling
    return bool(check())


def use_dense(scores: torch.Tensor) -> bool:
    """True when a loss on `scores` runs the dense, sync-free formulation."""
    path = _settings["path"]
    if path == "auto":
        return scores.device.type != "cpu" or is_compiling()
    return path == "dense"


def assert_on_device(condition: torch.Tensor, message: str) -> None:
    """Fail with `message` where `condition` (a bool tensor) is False, without a host sync on a
    GPU (a device-side assert); skipped while `torch.compile` traces."""
    if is_compiling():
        return
    try:
        torch._assert_async(condition, message)
    except TypeError:  # torch without the message overload
        torch._assert_async(condition)


def raises_on_bad_values(dense: bool) -> bool:
    """True when the values are checked on the host (`raise`), False when a bad one propagates."""
    checks = _settings["checks"]
    return checks == "raise" if checks != "auto" else not dense


def host_checks(tensor: torch.Tensor) -> bool:
    """True when the values of `tensor` are checked on the host (the path it runs and the checks)."""
    return raises_on_bad_values(use_dense(tensor))


def propagate_non_finite(value: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """`value`, or NaN when any of `inputs` holds NaN or inf; no host synchronisation, no
    gradient through the test (the gradients of `value` are unchanged)."""
    bad = torch.zeros((), dtype=torch.bool, device=value.device)
    for tensor in inputs:
        bad = bad | ~torch.isfinite(tensor.detach()).all()
    return value + torch.where(bad, float("nan"), 0.0).to(value.dtype)
