"""Stage 5: CUDA-event timing with an L2 flush before every trial, and the baseline cache."""

from __future__ import annotations

import hashlib
import json
import os
import statistics

from drk_lab.harness.gpu_clocks import clock_state
from drk_lab.harness.settings import cache_dir

FLUSH_BYTES = 256 * 1024 * 1024  # KernelBench's flush; the H200's L2 holds 60 MB
# A spin on the GPU after each flush (about 0.1 ms at 2 GHz): the GPU reaches the start event only
# after the CPU has had that long to queue the call, so a busy host does not show up as GPU time.
LEAD_CYCLES = 200_000
MIN_WARMUP_S = 0.02  # warm up at least this long, so that the clocks have left idle
TIMING_METHOD = 2  # part of the baseline cache key: bump when the way of timing changes


def summarize(times_ms: list[float]) -> dict:
    """Median and interquartile range; every trial is kept, none dropped."""
    q = statistics.quantiles(times_ms, n=4, method="inclusive") if len(times_ms) > 1 else [times_ms[0]] * 3
    return {
        "median_ms": statistics.median(times_ms),
        "iqr_ms": q[2] - q[0],
        "mean_ms": statistics.fmean(times_ms),
        "min_ms": min(times_ms),
        "max_ms": max(times_ms),
        "trials": len(times_ms),
        "times_ms": [round(t, 6) for t in times_ms],
    }


def time_cuda(fn, args: list, warmup: int = 3, trials: int = 100, flush_bytes: int = FLUSH_BYTES,
              after_call=None) -> dict:
    """Per trial: write a buffer larger than L2, record events around one call, synchronize the device.
    after_call(trial, output) runs after each trial's synchronize, outside the timed region."""
    from functools import partial

    import torch

    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    return run_trials(fn, args, warmup, trials, flush=flush.zero_, lead_spin=partial(torch.cuda._sleep, LEAD_CYCLES),
                      new_event=partial(torch.cuda.Event, enable_timing=True), synchronize=torch.cuda.synchronize,
                      read_clock=lambda: clock_state(torch.cuda.current_device()), after_call=after_call)


def run_trials(fn, args: list, warmup: int, trials: int, flush, lead_spin, new_event, synchronize, read_clock,
               after_call=None) -> dict:
    """time_cuda's loop, given its device operations (CUDA's there; stand-ins in the CPU tests, which
    check what happens in the timed region): warm up, then per trial flush, spin, start event, one
    call, end event, synchronize (then after_call, if any, with the call's output); the summary of
    the events' intervals."""
    import gc
    import time

    started = time.perf_counter()
    for i in range(max(warmup, 100)):
        if i >= warmup and time.perf_counter() - started > MIN_WARMUP_S:
            break
        fn(*args)
        synchronize()
    clock_before = read_clock()
    starts = [new_event() for _ in range(trials)]
    ends = [new_event() for _ in range(trials)]
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collection pause between the start event and the call
    try:
        for trial, (start, end) in enumerate(zip(starts, ends)):
            flush()
            lead_spin()
            start.record()
            out = fn(*args)
            end.record()
            synchronize()
            if after_call is not None:
                after_call(trial, out)
            del out
    finally:
        if gc_was_enabled:
            gc.enable()
    stats = summarize([s.elapsed_time(e) for s, e in zip(starts, ends)])
    clock_after = read_clock()
    if clock_before and clock_after:
        stats["gpu_clock"] = {"sm_clock_mhz": [clock_before["sm_clock_mhz"], clock_after["sm_clock_mhz"]],
                              "slowdown": sorted(set(clock_before["slowdown"]) | set(clock_after["slowdown"]))}
    return stats


def baseline_key(task_source: str, device_name: str, versions: dict, warmup: int, trials: int,
                 flush_bytes: int) -> str:
    """Same task source (hence sizes and dtypes), device, library versions and timing settings."""
    blob = json.dumps([task_source, device_name, versions, warmup, trials, flush_bytes, TIMING_METHOD], sort_keys=True)
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
