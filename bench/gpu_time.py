"""How long the GPU is busy with one evaluation, stage by stage. Results go to $OUT/bench_gpu_time.json.

    python bench/gpu_time.py                 # every level-1 and level-2 built-in task, on a CUDA GPU

With many evaluations in flight the GPU, shared by all of them, sets the rate once it is nearly always
busy (86% at 7.6 evaluations/s on the H200): what matters then is the device time each evaluation
costs, not its wall time. Each task's built-in solution, as a never-seen kernel, runs through the
worker's own JobRunner in this process under torch.profiler; every kernel, memset and copy is charged to
the stage whose runtime call launched it. The candidate's Triton launches go through the driver, not
the runtime, so they show as "candidate". The profile stage's own torch.profiler cannot run inside this
one: its forwards run plainly instead (the same GPU work without the profiler's bookkeeping).
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch import profiler as torch_profiler

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import drk_lab as drk  # noqa: E402
from drk_lab.harness import profiler, shapes  # noqa: E402
from drk_lab.harness.gpulock import GpuLock  # noqa: E402
from drk_lab.harness.protocol import Job  # noqa: E402
from drk_lab.harness.stages import JobRunner  # noqa: E402
from eval_speed import fresh_kernel  # noqa: E402

OUT = Path(os.environ.get("OUT", "bench_out"))
DEVICE_WORK = ("kernel", "gpu_memset", "gpu_memcpy")


def plain_forwards(model, inputs, candidate_kernel_names, trials=3, warmup=2, hold_gpu=None) -> dict:
    """The profile stage's forwards without its profiler (see the module's docstring)."""
    with hold_gpu(), torch.no_grad():
        for _ in range(trials + warmup):
            model(*inputs)
        torch.cuda.synchronize()
    return {}


def device_time_by_stage(trace_events: list[dict]) -> tuple[collections.Counter, collections.Counter]:
    """Microseconds of device work per stage, and per (stage, kernel name), from a Chrome trace."""
    stages = [(e["ts"], e["ts"] + e["dur"], e["name"][len("stage:"):]) for e in trace_events
              if e.get("cat") == "user_annotation" and e["name"].startswith("stage:")]
    launched_at = {e["args"]["correlation"]: e["ts"] for e in trace_events
                   if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}

    def stage_at(ts: float | None) -> str:
        return next((name for start, end, name in stages if ts is not None and start <= ts <= end), "candidate")

    per_stage, per_kernel = collections.Counter(), collections.Counter()
    for e in trace_events:
        if e.get("cat") in DEVICE_WORK:
            stage = stage_at(launched_at.get(e.get("args", {}).get("correlation")))
            per_stage[stage] += e["dur"]
            per_kernel[f"{stage} | {e['name'][:60]}"] += e["dur"]
    return per_stage, per_kernel


def one_evaluation(task, lock_dir: str, copy_bandwidth: float) -> dict:
    workdir = tempfile.mkdtemp()
    job = Job(mode="candidate", task_name=task.name, task_source=task.source,
              code=fresh_kernel(drk.builtin_solution(task)), seed=1, trial_seeds=[11, 12, 13, 14, 15],
              timing_seed=21, device="cuda:0", lock_dir=lock_dir, workdir=workdir, copy_bandwidth=copy_bandwidth)
    other = shapes.other_shape(task)
    if not isinstance(other, str):  # a string says why the task has no other shape
        other.seed = 5
        job.other_shape = other
    here = os.getcwd()
    os.chdir(workdir)  # the worker imports reference.py and candidate.py from its folder
    sys.path.insert(0, workdir)
    job.write_files()
    current = []

    def report(message: dict) -> None:
        if "stage" in message:
            if current:
                current.pop().__exit__(None, None, None)
            current.append(torch_profiler.record_function("stage:" + message["stage"]))
            current[-1].__enter__()

    try:
        with torch_profiler.profile(activities=[torch_profiler.ProfilerActivity.CPU,
                                                torch_profiler.ProfilerActivity.CUDA]) as prof:
            result = JobRunner(job, report, GpuLock(lock_dir, 0)).run()
            if current:
                current.pop().__exit__(None, None, None)
        trace = Path(workdir) / "trace.json"
        prof.export_chrome_trace(str(trace))
        per_stage, per_kernel = device_time_by_stage(json.loads(trace.read_text())["traceEvents"])
    finally:
        os.chdir(here)
        sys.path.remove(workdir)
        for name in ("candidate", "reference", "reference_other_shape"):
            sys.modules.pop(name, None)
    timing = result.timing or {}
    return {"task": f"level{task.level}/{task.name}", "error": result.error_kind, "timing_trials": timing.get("trials"),
            "device_ms": sum(per_stage.values()) / 1e3, "by_stage_ms": {k: v / 1e3 for k, v in per_stage.most_common()},
            "top_kernels_ms": [(k, v / 1e3) for k, v in per_kernel.most_common(15)]}


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_time: no CUDA GPU here (device time needs one)", file=sys.stderr)
        return 2
    os.environ.setdefault("DRK_CACHE_DIR", tempfile.mkdtemp())
    copy = profiler.measure_copy_bandwidth(torch.device("cuda"))  # measured once, outside every evaluation
    profiler.profile_forward = plain_forwards
    lock_dir = tempfile.mkdtemp()
    rows = []
    for task in drk.builtin_tasks():
        if task.level <= 2:
            rows.append(one_evaluation(task, lock_dir, copy))
            print(f"{rows[-1]['task']:38s} {rows[-1]['device_ms']:7.1f} ms  error={rows[-1]['error']}", flush=True)
    stages = collections.Counter()
    for row in rows:
        stages.update({k: v / len(rows) for k, v in row["by_stage_ms"].items()})
    summary = {"tasks": len(rows), "mean_device_ms": statistics.fmean(r["device_ms"] for r in rows),
               "median_device_ms": statistics.median(r["device_ms"] for r in rows),
               "mean_by_stage_ms": dict(stages.most_common())}
    print(json.dumps(summary, indent=1))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_gpu_time.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
