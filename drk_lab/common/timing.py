"""Stage 5: CUDA-event timing with an L2 flush before every trial (harness/baselines.py caches the reference's)."""

from __future__ import annotations

import gc
import math
import statistics
import time

from drk_lab.common.gpu_clocks import clock_state

FLUSH_BYTES = 256 * 1024 * 1024  # KernelBench's flush; the H200's L2 holds 60 MB
MIN_WARMUP_S = 0.02  # warm up at least this long, so that the clocks have left idle
# Trials are queued CHUNK at a time and synchronized once per chunk (as triton.testing.do_bench does
# for all of them): the host runs ahead, so the GPU never waits for Python between trials and the
# exclusive lock is held for little more than the GPU work. After MIN_TRIALS, timing stops at the
# end of the first chunk where the median is known to PRECISION (half-width of its 95% confidence
# interval, relative); otherwise it runs all the trials asked for. stats["trials"] says how many ran.
CHUNK = 25
MIN_TRIALS = 50
PRECISION = 0.005
# Before each chunk the GPU spins while the host queues the chunk (twice the host time the warm-up calls
# took, plus a margin per trial for the flush and events): on a busy host a forward slower to queue than
# to run would otherwise leave the GPU idle inside timed regions, which a quiet host never shows.
HOST_MARGIN_S = 20e-6
MAX_LEAD_S = 0.05
SPIN_CYCLES_PER_S = 2.0e9  # the H200's SM clock is about 1.98 GHz; a lower clock only spins longer
TIMING_METHOD = 4  # part of the baseline cache key (harness/baselines.py): bump when the way of timing changes


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


def median_precision(times_ms: list[float]) -> float:
    """Half-width of a distribution-free 95% confidence interval of the median (between the order
    statistics n/2 -+ 0.98 sqrt(n)), relative to the median."""
    x, n = sorted(times_ms), len(times_ms)
    if n < 3:
        return float("inf")
    half = 0.98 * math.sqrt(n)
    lo, hi = max(0, math.floor(n / 2 - half) - 1), min(n - 1, math.ceil(n / 2 + half))
    median = statistics.median(x)
    return (x[hi] - x[lo]) / (2 * median) if median > 0 else float("inf")


def warm_up(fn, args: list, synchronize, min_seconds: float = MIN_WARMUP_S, max_calls: int = 100) -> int:
    """Call fn until min_seconds have passed (at most max_calls times): lazy compilation, autotuning and
    the clocks leaving idle happen here, before the exclusive lock is taken. Returns the calls made.
    (No gc.collect(): it takes about 0.1 s in a process that has imported torch; run_trials turns the
    collector off instead.)"""
    started = time.perf_counter()
    calls = 0
    while calls < max_calls and (calls == 0 or time.perf_counter() - started < min_seconds):
        fn(*args)
        synchronize()
        calls += 1
    return calls


def time_cuda(fn, args: list, warmup: int = 3, trials: int = 100, flush_bytes: int = FLUSH_BYTES,
              after_call=None, precision: float | None = PRECISION) -> dict:
    """Per trial: write a buffer larger than L2, record events around one call; synchronize once a chunk.
    after_call(trial, output, chunk_end) runs after each trial's end event, outside the timed region."""
    from functools import partial

    import torch

    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    return run_trials(fn, args, warmup, trials, flush=flush.zero_,
                      lead_spin=lambda seconds: torch.cuda._sleep(int(seconds * SPIN_CYCLES_PER_S)),
                      new_event=partial(torch.cuda.Event, enable_timing=True), synchronize=torch.cuda.synchronize,
                      read_clock=lambda: clock_state(torch.cuda.current_device()), after_call=after_call,
                      precision=precision)


def run_trials(fn, args: list, warmup: int, trials: int, flush, lead_spin, new_event, synchronize, read_clock,
               after_call=None, chunk: int = CHUNK, min_trials: int = MIN_TRIALS,
               precision: float | None = PRECISION) -> dict:
    """time_cuda's loop, given its device operations (CUDA's there; stand-ins in the CPU tests, which
    check what happens in the timed region): `warmup` calls, then per chunk a lead spin and per trial
    flush, start event, one call, end event (then after_call, if any, with the call's output), a
    synchronize after each chunk of trials; the summary of the events' intervals."""
    host_s = []
    for _ in range(max(warmup, 1)):
        started = time.perf_counter()
        fn(*args)
        host_s.append(time.perf_counter() - started)  # queueing one call, the GPU not waited for
    synchronize()
    per_trial_lead = 2 * statistics.median(host_s) + HOST_MARGIN_S
    clock_before = read_clock()
    starts = [new_event() for _ in range(trials)]
    ends = [new_event() for _ in range(trials)]
    times: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collection pause between the start event and the call
    try:
        while len(times) < trials:
            first, last = len(times), min(trials, len(times) + chunk)
            lead_spin(min(MAX_LEAD_S, (last - first) * per_trial_lead))
            for trial in range(first, last):
                flush()
                starts[trial].record()
                out = fn(*args)
                ends[trial].record()
                if after_call is not None:
                    after_call(trial, out, trial == last - 1)
                del out
            synchronize()
            times += [starts[t].elapsed_time(ends[t]) for t in range(first, last)]
            if precision and len(times) >= min_trials and median_precision(times) <= precision:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    stats = summarize(times)
    stats["max_trials"] = trials
    clock_after = read_clock()
    if clock_before and clock_after:
        stats["gpu_clock"] = {"sm_clock_mhz": [clock_before["sm_clock_mhz"], clock_after["sm_clock_mhz"]],
                              "slowdown": sorted(set(clock_before["slowdown"]) | set(clock_after["slowdown"]))}
    return stats
