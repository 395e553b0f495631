"""Building what a job runs: the reference and candidate modules from their files, the models (same
seed, same weights), and each trial's inputs, created on the device; the versions of what runs them."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import random
import sys
import types
from pathlib import Path

import torch


def load_module(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def module_from_source(name: str, source: str):
    """A module run from source text; tracebacks name it reference.py like the task's own file."""
    module = types.ModuleType(name)
    module.__file__ = os.path.abspath("reference.py")
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def seed_all(seed: int) -> None:
    """torch (every CUDA device too), Python's and NumPy's global generators: what a task's constructor or
    get_inputs() draws is the same for every candidate, whatever an earlier job left in them."""
    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(module, class_name: str, init_inputs: list, seed: int, device: torch.device):
    seed_all(seed)
    with torch.device(device):
        return getattr(module, class_name)(*init_inputs)


def make_inputs(ref_module, seed: int, device: torch.device) -> list:
    seed_all(seed)
    with torch.device(device):  # factory calls in get_inputs() land on the device directly
        inputs = list(ref_module.get_inputs())
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def copy_weights(ref: torch.nn.Module, new: torch.nn.Module) -> None:
    """Same seed before both constructions gives identical weights when the parameters are created
    in the same order; copying the reference's state dict covers any other order of creation."""
    ref_state, new_state = ref.state_dict(), new.state_dict()
    if ref_state.keys() == new_state.keys() and all(ref_state[k].shape == new_state[k].shape for k in ref_state):
        new.load_state_dict(ref_state)


def versions() -> dict:
    import platform

    import triton

    v = {"python": platform.python_version(), "torch": str(torch.__version__), "triton": str(triton.__version__)}
    if torch.version.cuda:
        v["cuda"] = torch.version.cuda
    return v


@functools.lru_cache(maxsize=1)
def harness_version() -> str:
    """drk_lab's release and a hash of the sources that decide a verdict (harness/ and hacks/): two
    results with the same harness version were judged by the same code."""
    from importlib.metadata import PackageNotFoundError, version

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted([*root.glob("harness/*.py"), *root.glob("hacks/*.py")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    try:
        release = version("drk_lab")
    except PackageNotFoundError:
        release = "0"
    return f"{release}+{digest.hexdigest()[:12]}"
