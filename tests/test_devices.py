"""Device names, the GPU a process means under CUDA_VISIBLE_DEVICES, and how a worker waits for the GPU."""

from __future__ import annotations

import pytest
import torch

from drk_lab.harness.devices import gpu_index, physical_gpu, resolve_device, wait_by_blocking
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


def test_blocking_sync_is_off_unless_asked_for_and_says_why_it_cannot_be_set():
    assert not HarnessSettings().blocking_sync
    assert HarnessSettings.from_environment({"DRK_BLOCKING_SYNC": "1"}).blocking_sync
    assert HarnessSettings(blocking_sync=True).as_environment()["DRK_BLOCKING_SYNC"] == "1"
    if torch.cuda.is_available():
        pytest.skip("on a GPU, tests/test_gpu.py checks the flag in a fresh process")
    why = wait_by_blocking(0)  # no driver here: a reason, never an exception
    assert isinstance(why, str) and ("CUDA" in why or "driver" in why)


def test_spare_workers_default_to_warm_on_the_cpu_and_none_on_a_gpu():
    """The H200 A/B (BENCHMARKS.md) found spares slower on a GPU; a CPU pool still keeps them."""
    assert HarnessSettings().spare_workers_for(8, "cpu") == 8
    assert HarnessSettings().spare_workers_for(8, "cuda:0") == 0
    chosen = HarnessSettings.from_environment({"DRK_SPARE_WORKERS": "3"})
    assert chosen.spare_workers_for(8, "cuda") == 3 and chosen.spare_workers_for(1, "cpu") == 3
