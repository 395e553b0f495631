"""What torch.profiler costs inside a worker: start-up, each step, and the launch overhead it leaves
behind. One fresh process per setting; results go to $OUT/profiler_cost.json.

python bench/profiler_cost.py            # runs each setting in a child process
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "bench_out"))


def launch_us(fn, n: int = 2000) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return host


def one_setting() -> dict:
    import torch
    import triton
    import triton.language as tl
    from torch.profiler import ProfilerActivity, profile

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    t = time.perf_counter()
    x = torch.zeros(4096, device="cuda")
    torch.cuda.synchronize()
    out = {"cuda_init_s": time.perf_counter() - t}
    triton_launch = lambda: add_one[(4,)](x, x.numel(), BLOCK=1024)  # noqa: E731
    torch_launch = lambda: x.add_(1)  # noqa: E731
    out["launch_us_before"] = [launch_us(triton_launch), launch_us(torch_launch)]
    for round_ in (1, 2, 3):
        steps = {}
        t = time.perf_counter()
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.prepare_trace()
        steps["prepare"] = time.perf_counter() - t
        t = time.perf_counter()
        prof.start_trace()
        steps["start"] = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(3):
            triton_launch()
            torch_launch()
        torch.cuda.synchronize()
        steps["run"] = time.perf_counter() - t
        t = time.perf_counter()
        prof.stop_trace()
        steps["stop"] = time.perf_counter() - t
        t = time.perf_counter()
        n_events = len([e for e in prof.events() if e.device_type.name == "CUDA"])
        steps["parse"] = time.perf_counter() - t
        steps["gpu_events"] = n_events
        out[f"profile_{round_}"] = steps
        out[f"launch_us_after_{round_}"] = [launch_us(triton_launch), launch_us(torch_launch)]
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        print(json.dumps(one_setting()))
        sys.exit(0)
    OUT.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, env in {"default": {}, "TEARDOWN_CUPTI=0": {"TEARDOWN_CUPTI": "0"}}.items():
        proc = subprocess.run([sys.executable, __file__, "child"], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=300)
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else proc.stderr[-2000:]
        print(name, json.dumps(results[name], indent=1), flush=True)
    (OUT / "profiler_cost.json").write_text(json.dumps(results, indent=1))
