"""Which device a job runs on: the default choice, a clear error for a device that is not there, and
what a worker process needs for it (environment, GPU index, the GPU's name)."""

from __future__ import annotations

import os
import subprocess


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """"auto" (or None) -> "cuda" when a GPU is there, else "cpu"; "cuda..." on a machine without CUDA
    raises ValueError with one line saying so."""
    if device in (None, "auto"):
        return default_device()
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine; use 'cpu' or 'auto'")
    elif device != "cpu":
        raise ValueError(f"device {device!r}: expected 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return device


def gpu_index(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def physical_gpu(index: int) -> int:
    """The machine's number for the GPU this process calls `index`: under CUDA_VISIBLE_DEVICES=3 (one Ray
    actor per GPU) cuda:0 is GPU 3, and the GPU lock must be GPU 3's. Non-numeric entries (UUIDs) keep
    the index."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


def device_env(device: str) -> dict[str, str]:
    """Environment variables a worker for `device` starts with."""
    if device == "cpu":  # the interpreter must be on before triton is imported
        return {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "cuda"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "cuda"
