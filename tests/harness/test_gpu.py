"""The CUDA path: timing, baselines, CUDA errors and OOM. Skipped without a GPU."""

import importlib.util
import re
import shutil

import pytest
import torch

import drk_lab as drk
from drk_lab.quickstart import HACKS_DIR, load_variants

pytestmark = pytest.mark.gpu
GPU_VARIANTS = [v for v in load_variants() if v.device == "cuda"]
GPU_PLANTS = [p for p in load_variants(HACKS_DIR) if p.device == "cuda"]
# memory-bound solutions, long enough (0.1 ms and more) for a 3% agreement to mean something
AGREEMENT_TASKS = ["level1/01_relu", "level1/08_softmax", "level1/10_layernorm", "level2/07_residual_add_layernorm"]


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


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_at_once_a_crash_on_one_leaves_the_other_right(tasks, relu, relu_solution):
    """Each GPU has its own worker pool and lock: GPU 1 evaluates while GPU 0 times, and a kernel that
    corrupts GPU 1's context changes nothing on GPU 0."""
    from concurrent.futures import ThreadPoolExecutor

    wild = next(v for v in GPU_VARIANTS if v.name == "illegal_address")
    jobs = [("cuda:0", relu_solution), ("cuda:1", wild.code), ("cuda:1", relu_solution), ("cuda:0", relu_solution)]
    with ThreadPoolExecutor(4) as threads:
        results = list(threads.map(lambda job: drk.evaluate(relu, job[1], device=job[0], timing_trials=50), jobs))
    assert [r.error_kind for r in results] == [None, "cuda_illegal_access", None, None], [r.error for r in results]
    good = [r for r in results if r.ok]
    assert all(r.timings_valid for r in good)
    times = [r.runtime_ms for r in good]
    assert max(times) < 1.2 * min(times), times  # the same kernel on two H200s
    assert results[2].worker_pid not in {results[0].worker_pid, results[3].worker_pid}  # GPU 1's own pool


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


@pytest.mark.parametrize("plant", GPU_PLANTS, ids=[p.name for p in GPU_PLANTS])
def test_gpu_plant_is_caught_by_its_own_code(plant, tasks):
    reason = re.search(r"^# reason: (\S+)", plant.code, re.M).group(1)
    r = drk.evaluate(tasks[plant.task], plant.code, timeout_s=120, timing_trials=30)
    assert r.hacked and r.error_kind == "hacked", (r.error_kind, r.error)
    assert reason in r.hack_reasons, (r.hack_reasons, r.error)


def test_an_eager_baseline_job_leaves_its_worker_in_service(tasks):
    """Each never-seen task gets a baseline job (RL draws thousands): eager-only ones keep their worker
    (a fresh one costs a CUDA context and a warm-up); one that ran torch.compile retires it."""
    from drk_lab.common.timing import FLUSH_BYTES
    from drk_lab.harness import settings
    from drk_lab.harness.caller import get_sandbox
    from drk_lab.harness.protocol import Job

    before = settings.current()
    drk.configure(warm_workers=1, worker_uses=8)  # one warm pair, so that jobs meet the same workers
    try:
        sandbox = get_sandbox("cuda")

        def baseline(name: str, compiled: bool):
            task = tasks[name]
            raw = sandbox.run(Job(mode="baseline", task_name=task.name, task_source=task.source, warmup=3,
                                  timing_trials=10, flush_bytes=FLUSH_BYTES, timeout_s=900.0,
                                  compile_baseline=compiled))
            assert raw.baseline and raw.baseline["eager"], raw.error
            return raw

        names = ["level1/01_relu", "level1/08_softmax", "level1/10_layernorm", "level2/07_residual_add_layernorm"]
        eager = [baseline(name, False) for name in names]
        assert max(r.worker_job for r in eager) >= 2  # a worker served a second baseline
        compiled = baseline("level1/01_relu", True)
        assert compiled.baseline["compile"]
        later = [baseline(name, False) for name in names]
        assert compiled.worker_pid not in {r.worker_pid for r in later}
    finally:
        drk.configure(**vars(before))


def load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", AGREEMENT_TASKS)
def test_speedup_agrees_with_an_independent_do_bench(name, tasks, tmp_path):
    """The harness's speedup against triton.testing.do_bench (its own L2 flush, median of its timings) on
    the same models, built here in the test's own process."""
    import torch
    from triton.testing import do_bench

    task, code = tasks[name], drk.builtin_solution(tasks[name])
    r = drk.evaluate(task, code)
    assert r.ok and r.timings_valid, r.error or r.timing_note
    (tmp_path / "ref.py").write_text(task.source)
    (tmp_path / "sol.py").write_text(code)
    ref_module = load(f"ref_{task.name}", str(tmp_path / "ref.py"))
    sol_module = load(f"sol_{task.name}", str(tmp_path / "sol.py"))
    torch.manual_seed(0)
    with torch.device("cuda"), torch.no_grad():
        init = ref_module.get_init_inputs()
        reference, candidate = ref_module.Model(*init), sol_module.ModelNew(*init)
        inputs = ref_module.get_inputs()
        ref_ms = do_bench(lambda: reference(*inputs), warmup=50, rep=300, return_mode="median")
        cand_ms = do_bench(lambda: candidate(*inputs), warmup=50, rep=300, return_mode="median")
    independent = ref_ms / cand_ms
    assert abs(r.speedup / independent - 1) < 0.03, (r.speedup, independent, r.runtime_ms, cand_ms, r.ref_runtime_ms, ref_ms)


def test_pretraining_stopped_after_each_step_resumes_on_the_gpu(tmp_path):
    """The checkpoint is read to the CPU first (the batch sampler's generator state must stay a CPU tensor)
    and the resumed calls end as one call does, within what bf16 autocast on a GPU repeats."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from drk_lab.rl.pretrain import checkpoint_path, packed_rows, pretrain
    from drk_lab.rl.tiny_model import make_tiny_model

    init = make_tiny_model(tmp_path / "init")
    texts = [f"task {i}: " + "relu(x) " * (i * 7 % 20) for i in range(40)]
    rows = packed_rows(texts, AutoTokenizer.from_pretrained(init), length=63)
    kw = dict(steps=3, batch=2, lr=1e-3, progress=False)
    whole = pretrain(init, rows, tmp_path / "whole", **kw)
    calls = [pretrain(init, rows, tmp_path / "cut", time_limit_s=1e-9, **kw) for _ in range(3)]
    assert [c["finished"] for c in calls] == [False, False, True] and calls[-1]["resumed"]
    assert (tmp_path / "cut" / "config.json").exists() and not checkpoint_path(tmp_path / "cut").exists()
    assert calls[-1]["loss"] == pytest.approx(whole["loss"], rel=1e-3)
