"""Device names, the GPU a process means under CUDA_VISIBLE_DEVICES, and how a worker waits for the GPU."""

from __future__ import annotations

import pytest

from drk_lab.harness.devices import gpu_index, physical_gpu, resolve_device
from drk_lab.harness.settings import HarnessSettings


def test_device_names_and_mistakes():
    assert resolve_device("cpu") == "cpu" and gpu_index("cuda:3") == 3 and gpu_index("cuda") == 0
    with pytest.raises(ValueError, match="expected 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device("tpu")


def test_a_visible_gpu_is_named_by_the_machines_number(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert physical_gpu(0) == 3 and physical_gpu(1) == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1a2b")
    assert physical_gpu(0) == 0  # a UUID keeps the index


def test_spare_workers_default_to_warm_on_the_cpu_and_none_on_a_gpu():
    """The H200 A/B (BENCHMARKS.md) found spares slower on a GPU; a CPU pool still keeps them."""
    assert HarnessSettings().spare_workers_for(8, "cpu") == 8
    assert HarnessSettings().spare_workers_for(8, "cuda:0") == 0
    chosen = HarnessSettings.from_environment({"DRK_SPARE_WORKERS": "3"})
    assert chosen.spare_workers_for(8, "cuda") == 3 and chosen.spare_workers_for(1, "cpu") == 3
