"""How much of the answer PyTorch computes: every ATen operator a forward runs, weighed by its work.

    with TorchWork() as work:
        out = model(*inputs)
    work.compute, work.moved, work.top()

Work is FLOPs for the operators torch's flop counter knows (matrix products, convolutions, attention) and
elements read plus written for the rest. Views, allocations and fills are no work; copies (clone, copy_,
casts that reorder memory, cat) count apart, as `moved`, since a candidate's own casts and `.contiguous()`
are honest while a task that only moves data (a transpose) is computed by exactly such copies; a copy
between devices counts as work (what the host does with it is work no kernel did). An
operator that is not ATen's (a candidate's torch.library op) is followed into: what it runs is counted.
extra_calls compares a candidate's total with the reference's on the same inputs.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

FREE = set("empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like full "
           "full_like new_zeros new_ones new_full scalar_tensor arange lift_fresh lift_fresh_copy detach alias set_ "
           "resize_ fill_ zero_ _local_scalar_dense item is_nonzero equal _has_compatible_shallow_copy_type "
           "_to_dense sym_size sym_stride sym_numel sym_storage_offset".split())
COPIES = set("clone copy_ _to_copy contiguous _copy_from _copy_from_and_resize cat stack".split())
AFTER_PYTHON = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


def _tensors(values) -> list[torch.Tensor]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += _tensors(v)
    return out


def _elements(values) -> int:
    return sum(t.numel() for t in _tensors(values))


class TorchWork(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps __torch_dispatch__ in a guard whose first call imports torch._dynamo (seconds)

    def __init__(self):
        super().__init__()
        self.compute = 0.0  # FLOPs, or elements read and written
        self.moved = 0.0  # elements copied into a new layout
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace not in ("aten", "prims"):
            keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
            for t in _tensors(list(args) + list(kwargs.values())):
                keys = keys | torch._C._dispatch_keys(t)
            with self:  # below the Python key, with this mode on again for the operators it runs
                return func.redispatch(AFTER_PYTHON & keys, *args, **kwargs)
        out = func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        if func.is_view or name in FREE or name.endswith("_copy") and name != "_to_copy":
            return out
        if name in COPIES:
            source = _tensors(args)[-1:] if name == "copy_" else _tensors(args)[:1]
            if source and isinstance(out, torch.Tensor) and source[0].device != out.device:
                # to the host and back: what happens there (NumPy, Python) is computing no kernel did
                self.compute += out.numel()
                self.ops["host_copy"] += out.numel()
            # a cast of a contiguous tensor to the same shape reorders nothing; a copy of a transposed view does
            elif name == "cat" or not (source and source[0].is_contiguous() and isinstance(out, torch.Tensor)
                                       and source[0].shape == out.shape):
                self.moved += _elements([out])
            return out
        counter = flop_registry.get(func.overloadpacket)
        work = counter(*args, **kwargs, out_val=out) if counter else _elements(list(args) + list(kwargs.values())) \
            + _elements([out])
        self.compute += work
        self.ops[name] += work
        return out

    def top(self, n: int = 3) -> str:
        return ", ".join(f"aten.{name}" for name, _ in self.ops.most_common(n))


def torch_share(candidate: TorchWork, reference: TorchWork) -> float:
    """The candidate's PyTorch work as a share of the reference's (with copies, for a reference that only
    moves data)."""
    if reference.compute > 0:
        return candidate.compute / reference.compute
    return (candidate.compute + candidate.moved) / reference.moved if reference.moved > 0 else 0.0
