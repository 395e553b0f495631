"""What a fresh worker does before its job arrives: start CUDA, cuBLAS, NVML, the profiler, the random
generator and Triton's launch path, so that none of it lands in the evaluation that follows."""

from __future__ import annotations

import sys
from contextlib import nullcontext

import torch
import triton
import triton.language as tl

from drk_lab.common import correctness, models
from drk_lab.common.gpu_clocks import clock_state
from drk_lab.harness.gpulock import GpuLock
from drk_lab.harness.profiler import new_profile
from drk_lab.harness.settings import current


@triton.jit
def fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, value, mask=offsets < n)


def warm_up(device: str, lock_dir: str, gpu: int, profiler: bool = True) -> None:
    """Start the CUDA context and cuBLAS (under the GPU lock only with settings.lifecycle_lock), then, for
    workers that will profile, the profiler (4-5 s of CPU, no lock), then run one of each kind of
    kernel (profiled) under a shared GPU lock."""
    lock = GpuLock(lock_dir, gpu)
    lock.label = "warm_up"
    with lock.shared() if current().lifecycle_lock else nullcontext():
        torch.empty(1, device=device)
        torch.cuda.current_blas_handle()
    clock_state(gpu)  # loads NVML now rather than inside the first timing
    models.seed_all(0)  # what every job's first seeding sets up lazily, set up before the world snapshot
    prof = new_profile() if profiler else None
    with lock.shared():
        if prof:
            prof.start_trace()
        x = torch.randn(64, 64, device=device)
        (x @ x).sum().item()
        out = torch.empty(1000, device=device)
        fill_kernel[(1,)](out, 1.0, out.numel(), BLOCK=1024)  # compiled once, then read from Triton's cache
        correctness.poison_memory(correctness.tensor_specs([out]), torch.device(device))
        correctness.compare(out, out.clone(), None, None)
        torch.cuda.synchronize(device)
        if prof:
            prof.stop_trace()


def precompute_in_zygote() -> None:
    """CPU-only work that every worker would repeat, done once before forking: Triton hashes its own
    install to key its cache (about half a second), and imports its code generator only at the first
    real compile (about 0.06 s, paid by a worker's first never-seen kernel otherwise; the warm-up's own
    kernel comes from the cache). Never touches CUDA."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()
        import triton.compiler.code_generator  # noqa: F401
    except (ImportError, OSError):
        pass


def warm_up_interpreter() -> None:
    """On the CPU, in the zygote before it forks any worker: run one whole job (the built-in ReLU task and
    its solution, every check on) in this process, then forget it. Everything a job imports on first use
    (Triton's interpreter, the hack checks' helpers) is then imported before the world snapshot is taken,
    so honest jobs do not look like changes to it. The code run is the project's own."""
    import os
    import shutil
    import tempfile
    from dataclasses import replace

    from drk_lab.harness.protocol import Job
    from drk_lab.harness.shapes import other_shape
    from drk_lab.harness.stages import JobRunner
    from drk_lab.harness.task import BUILTIN_DIR, builtin_solution, load_task

    task = load_task(BUILTIN_DIR / "level1" / "01_relu.py").small()
    shape = other_shape(task)
    job = Job(mode="candidate", task_name=task.name, task_source=task.source, code=builtin_solution(task),
              correctness_trials=1, seed=1, trial_seeds=[2], timing=False, profile=False,
              other_shape=None if isinstance(shape, str) else replace(shape, seed=3))
    cwd, path = os.getcwd(), list(sys.path)
    job.workdir = tempfile.mkdtemp(prefix="drk_warm_")
    try:
        job.write_files()
        os.chdir(job.workdir)
        sys.path.insert(0, job.workdir)
        JobRunner(job, lambda message: None, None).run()
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        for name, module in list(sys.modules.items()):
            if (getattr(module, "__file__", None) or "").startswith(job.workdir + os.sep) or name in (
                    "reference", "candidate"):
                del sys.modules[name]
        shutil.rmtree(job.workdir, ignore_errors=True)
