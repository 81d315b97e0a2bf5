"""Counting the operations that make the host wait for the device, on any device.

On a GPU, an operation whose result the host must read (`bool(t)`, `int(t)`, `t.item()`) or
whose output shape depends on the data (`nonzero`, boolean-mask indexing, `unique`,
`bincount`, `masked_select`, `repeat_interleave` without `output_size`) waits until the
device has finished everything queued before it. [`HostSyncCounter`][rambo.core.host_syncs.HostSyncCounter] is a
`TorchDispatchMode` that counts those operations as they are dispatched, so the count is the
same on the CPU (where nothing waits) as on a GPU: the tests assert 0 for the dense losses on the
CPU, and `make gpu-check` confirms it with `torch.cuda.set_sync_debug_mode`.

The operations inside the ranking operator (`rambo::blackbox_rank`: a sort and scatters) are not
seen through it; [`rambo.core.ranking.exact_rank`][rambo.core.exact_rank] and `alg1_gradient` are counted directly.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Reads of device data on the host, and outputs sized by the data.
SYNCING_OPS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::equal",
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::bincount",
        "aten::masked_scatter",
        "aten::histc",
    }
)


def _has_bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (indices or ()) if i is not None)


class HostSyncCounter(TorchDispatchMode):
    """`with HostSyncCounter() as counter: ...`; then `counter.total` and `counter.ops`
    (a `Counter` of operator names)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in SYNCING_OPS:
            self.ops[name] += 1
        elif name in (
            "aten::index",
            "aten::index_put",
            "aten::index_put_",
            "aten::_index_put_impl_",
        ) and _has_bool_index(args):
            self.ops[f"{name} (boolean mask)"] += 1
        elif name == "aten::repeat_interleave" and kwargs.get("output_size") is None:
            self.ops[name] += 1
        return func(*args, **kwargs)

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def count_host_syncs(function, *args, **kwargs) -> tuple[int, Counter]:
    """`(count, by operator)` of the syncing operations while `function(*args, **kwargs)` runs."""
    with HostSyncCounter() as counter:
        function(*args, **kwargs)
    return counter.total, counter.ops
