"""What a candidate could change outside any module attribute, read as plain values compared with ==:
every kernel registered with torch's dispatcher (a `torch.library` override of an aten op, kept alive by a
reference cycle the collector cannot see, changes what the next reference computes), autocast, default
dtype and device, the CUDA allocator's settings, and how many audit hooks were added (counted by the
harness's own hook, since Python cannot list them). world.py covers what module attributes reach.
"""

from __future__ import annotations

from drk_lab.harness import guard


def registries(device_type: str) -> dict:
    """Process state kept outside module attributes, as plain values compared with ==."""
    import torch

    state = {
        "dispatcher": [torch._C._dispatch_dump(op) for op in torch._C._dispatch_get_all_op_names()],
        "default dtype": str(torch.get_default_dtype()),
        "autocast cache": torch.is_autocast_cache_enabled(),
        "audit hooks added": guard.audit_hooks_added[0],
    }
    for device in ("cpu", "cuda"):
        try:
            state[f"autocast {device}"] = (torch.is_autocast_enabled(device), str(torch.get_autocast_dtype(device)))
        except (RuntimeError, TypeError):
            pass
    if hasattr(torch, "get_default_device"):
        state["default device"] = str(torch.get_default_device())
    if device_type == "cuda":
        device = torch.cuda.current_device()
        state["current CUDA device"] = device
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        if fraction is not None:
            state["CUDA memory fraction"] = fraction(device)
        allocator = getattr(torch._C, "_accelerator_getAllocatorSettings", None) or \
            getattr(torch._C, "_cuda_getAllocatorSettings", None)
        if allocator is not None:
            state["CUDA allocator settings"] = allocator()
    return state


def registry_differences(before: dict, after: dict) -> list[str]:
    found = []
    for key in sorted(before.keys() | after.keys()):
        if before.get(key) == after.get(key):
            continue
        if key == "dispatcher":
            old = set(before[key])
            ops = [dump.split("\n", 1)[0].removeprefix("name: ") for dump in after[key] if dump not in old]
            found.append(f"kernels registered with torch's dispatcher changed ({', '.join(ops[:3])})")
        else:
            found.append(f"{key} changed")
    return found

