"""Weighting a rank-based loss without changing its lambda: scale the gradient *after* the rank.

In blackbox differentiation (paper Alg. 1) the backward pass of `rank` perturbs the scores by
`lam * dL/drank`. A weight `w` on the loss value multiplies that incoming gradient, so
`w * loss` returns `w` times the gradient of the loss at `lam' = w * lam`: a weight placed
before the rank is also a change of lambda. [`scale_gradient`][rambo.core.scale_gradient] placed on the *scores* (the
rank's input, on the network side) leaves the loss value and the rank's backward untouched and
multiplies only the gradient that reaches the network: the same items move, by `w` times as much.
"""

from __future__ import annotations

import torch


class _ScaleGradient(torch.autograd.Function):
    """Identity in the forward pass; multiplies the incoming gradient by `factor` in backward."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.factor, None


def scale_gradient(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """`tensor` unchanged, whose gradient is multiplied by `factor` on its way back.

    Raises `ValueError` for a factor that is not finite or not positive (a zero or negative
    factor would silently stop or reverse learning).
    """
    factor = float(factor)
    if not (factor > 0.0 and factor != float("inf")):
        raise ValueError(f"gradient scale must be a finite number > 0, got {factor}")
    if factor == 1.0:
        return tensor
    return _ScaleGradient.apply(tensor, factor)
