"""The baseline cache on disk: the reference's eager and torch.compile timings per task, sizes, device,
library versions and timing settings, and the device's measured copy bandwidth."""

from __future__ import annotations

import hashlib
import json
import os

from drk_lab.common.timing import TIMING_METHOD
from drk_lab.harness.settings import cache_dir


def baseline_key(task_source: str, device_name: str, versions: dict, warmup: int, trials: int,
                 flush_bytes: int, compile_baseline: bool = True) -> str:
    """Same task source (hence sizes and dtypes), device, library versions, timing settings, and whether
    the torch.compile baseline is part of it."""
    blob = json.dumps([task_source, device_name, versions, warmup, trials, flush_bytes, TIMING_METHOD,
                       compile_baseline], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def load_baseline(key: str) -> dict | None:
    path = cache_dir() / "baselines" / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def save_baseline(key: str, baseline: dict) -> None:
    folder = cache_dir() / "baselines"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(baseline))
    tmp.replace(folder / f"{key}.json")  # atomic: concurrent writers never leave half a file


def load_copy_bandwidth(device_name: str, versions: dict) -> float | None:
    """The device copy bandwidth a baseline job measured on this kind of device, or None."""
    try:
        value = json.loads((cache_dir() / "copy_bandwidth.json").read_text()).get(_copy_key(device_name, versions))
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def save_copy_bandwidth(device_name: str, versions: dict, bytes_per_s: float) -> None:
    """Written by the caller only: workers see the cache read-only (worker.protect)."""
    path = cache_dir() / "copy_bandwidth.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known[_copy_key(device_name, versions)] = bytes_per_s
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, indent=1))
    tmp.replace(path)


def _copy_key(device_name: str, versions: dict) -> str:
    return f"{device_name}|torch {versions.get('torch')}"
