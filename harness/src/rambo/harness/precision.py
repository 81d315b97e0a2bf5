"""How a run's network computes: its precision (`float32`, or `bfloat16` autocast) and its memory
format (channels-last), the two config keys `precision` and `channels_last` of both apps.

`bfloat16` runs the network's forward pass under `torch.autocast` (CPU and GPU alike); the
apps cast the network's output (retrieval's embeddings, detection's logits and box regression) to
float32 and compute their losses outside the autocast region, so the rank losses never rank bf16
scores (8 significant bits: cosine scores would tie massively; the paper does not mention mixed
precision, and float32 is PyTorch's default). bfloat16 has float32's exponent range, so no
`GradScaler` is needed (float16 would need one).

Channels-last (NHWC) is a memory layout, not a precision: the same numbers up to float rounding,
and often faster convolutions on a GPU (tensor cores). It applies to 4-D tensors (image batches)
and to a module's 4-D parameters (conv weights).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch

PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16}


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of `precision` (`None`: no autocast, float32); `ValueError` naming
    the allowed values for any other name."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    return PRECISIONS[precision]


def autocast(precision: str, device) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context a forward pass runs under: `torch.autocast` on `device`'s type
    with `precision`'s dtype, or a null context for `float32`. Call it once per forward
    (`with forward_context(): ...`): each call gives a fresh context."""
    dtype = autocast_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext
    return functools.partial(torch.autocast, device_type=torch.device(device).type, dtype=dtype)


def to_channels_last(value):
    """`value` in channels-last memory format: a module's parameters and buffers
    (`module.to(memory_format=torch.channels_last)`, which moves the 4-D ones), a 4-D tensor
    (an image batch); anything else (a 3-D image, a label vector) is returned as it is."""
    if isinstance(value, torch.nn.Module):
        return value.to(memory_format=torch.channels_last)
    if isinstance(value, torch.Tensor) and value.dim() == 4:
        return value.contiguous(memory_format=torch.channels_last)
    return value
