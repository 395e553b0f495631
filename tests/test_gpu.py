"""The CUDA path: timing, baselines, CUDA errors and OOM. Skipped without a GPU."""

import shutil

import pytest

import drk_lab as drk
from drk_lab.quickstart import load_variants

pytestmark = pytest.mark.gpu
GPU_VARIANTS = [v for v in load_variants() if v.device == "cuda"]


@pytest.fixture(scope="module")
def relu(tasks):
    return tasks["level1/01_relu"]


def test_timing_and_baselines(relu, relu_solution):
    r = drk.evaluate(relu, relu_solution, timing_trials=50)
    assert r.ok and r.timings_valid, r.error or r.timing_note
    assert r.runtime_ms > 0 and r.runtime_iqr_ms >= 0 and r.ref_runtime_ms > 0 and r.ref_compile_runtime_ms > 0
    assert r.speedup == pytest.approx(r.ref_runtime_ms / r.runtime_ms)
    sm_clock = r.gpu_clock["candidate"]["sm_clock_mhz"]  # read through NVML around the trials
    assert len(sm_clock) == 2 and all(300 < mhz < 3000 for mhz in sm_clock), r.gpu_clock
    assert "H200" in r.device or "NVIDIA" in r.device or r.device.startswith("cuda")
    bytes_moved = 2 * 8192 * 8192 * 4
    assert bytes_moved / (r.runtime_ms * 1e-3) < 6e12  # below any HBM3e bandwidth: the kernel really ran
    again = drk.evaluate(relu, relu_solution, timing_trials=50)
    assert again.ref_runtime_ms == r.ref_runtime_ms  # the cached baseline


@pytest.mark.parametrize("variant", GPU_VARIANTS, ids=[v.name for v in GPU_VARIANTS])
def test_gpu_failures_are_classified_and_the_next_evaluation_is_right(variant, tasks, relu, relu_solution):
    result = drk.evaluate(tasks[variant.task], variant.code, timeout_s=60, timing_trials=10,
                          hack_checks=variant.hack_checks)
    assert result.error_kind == variant.expect, result.error
    follow_up = drk.evaluate(relu, relu_solution, timing_trials=10)
    assert follow_up.ok and follow_up.timings_valid, follow_up.error


def test_hang_inside_a_kernel_times_out(relu, relu_solution):
    spin = relu_solution.replace("    x = tl.load(x_ptr + offsets, mask=mask)\n",
                                 "    x = tl.load(x_ptr + offsets, mask=mask)\n"
                                 "    while tl.sum(x) == tl.sum(x):\n        x = x + 0.0\n")
    assert "while" in spin
    result = drk.evaluate(relu, spin, timeout_s=20)
    assert result.error_kind == "timeout"
    assert drk.evaluate(relu, relu_solution, timing_trials=10).ok


def test_ncu_metrics_join_the_kernel_table(relu, relu_solution):
    r = drk.evaluate(relu, relu_solution, timing_trials=10, profile="ncu")
    assert r.ok, r.error
    own = [row for row in r.kernels if row["candidate"]]
    assert own, r.kernels
    if shutil.which("ncu") is None:
        assert any("ncu" in note for note in r.notes)
        pytest.skip("ncu is not on PATH")
    assert not [note for note in r.notes if "Nsight" in note], r.notes
    assert 0 < own[0]["dram_throughput_pct"] <= 100 and 0 < own[0]["achieved_occupancy_pct"] <= 100
