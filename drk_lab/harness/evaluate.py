"""evaluate(task, code) -> EvalResult: static checks here, everything else in an isolated worker."""

from __future__ import annotations

import contextlib
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from drk_lab.common.timing import FLUSH_BYTES
from drk_lab.hacks.static.rules import static_hack_check
from drk_lab.harness.baselines import baseline_key, load_baseline, load_copy_bandwidth, save_baseline, save_copy_bandwidth
from drk_lab.harness.caller import get_sandbox, shutdown
from drk_lab.harness.devices import resolve_device
from drk_lab.harness.protocol import COMPILE_NOT_ASKED, STAGE_TIMEOUTS, Job, RawResult
from drk_lab.harness.result import EvalResult
from drk_lab.harness.shapes import other_shape
from drk_lab.harness.syntax import PARSE_LOCK
from drk_lab.harness.task import Task
from drk_lab.harness.validity import check_candidate

CPU_TIMING_NOTE = ("no timings: ran on the CPU with the Triton interpreter (TRITON_INTERPRET=1), "
                   "where times mean nothing; speedups need a CUDA GPU")

DEFAULT_TIMEOUT_S = 120.0
USER_TIMED_STAGES = ("load", "trial", "timing")  # the stages whose own limit a timeout_s given lifts
_baseline_locks: dict[str, threading.Lock] = {}
_baseline_locks_guard = threading.Lock()


def evaluate(task: Task, code: str, *, timing: bool = True, profile: bool = True, correctness_trials: int = 5,
             timing_trials: int = 100, warmup: int = 3, timeout_s: float | None = None, device: str | None = None,
             seed: int | None = None, atol: float | None = None, rtol: float | None = None,
             flush_bytes: int = FLUSH_BYTES, isolation: str = "fork", stage_timeouts: dict | None = None,
             host_memory_bytes: int | None = None, hack_checks: bool = True,
             compile_baseline: bool = True) -> EvalResult:
    """Check, run and time one candidate `ModelNew` source against a task's reference `Model`.

    The candidate only ever runs in a separate worker process. On CPU (or device="cpu") the
    Triton interpreter runs the correctness stages and timings are None with the reason.
    With `hack_checks` (the default) the static and runtime reward-hacking checks run, and on
    CUDA the candidate is profiled (kernel table, coverage, bandwidth); turning them off is for
    studying the harness itself, never for rewards. `profile="ncu"` adds Nsight Compute's DRAM
    throughput and achieved occupancy to the candidate's rows of the kernel table (when `ncu` is
    on PATH; otherwise a note says why), in a separate run that holds the GPU alone.
    `compile_baseline=False` times the reference in eager mode only (no speedup over torch.compile):
    for sets of thousands of new tasks, where compiling each reference costs more than its evaluations.
    `timeout_s`: None gives an evaluation DEFAULT_TIMEOUT_S in all, with protocol.STAGE_TIMEOUTS for each
    stage (60 s to load, 60 s per correctness trial); a number given is the limit of the whole and of every
    one of those stages (`stage_timeouts` can still set a stage's own).
    """
    device = resolve_device(device)  # ValueError in one line for a device that is not there
    with PARSE_LOCK:  # the checks parse (syntax.py); they take milliseconds and run one at a time
        static_failure = check_candidate(code)
        found = static_hack_check(code) if hack_checks and not static_failure else None
        if not (static_failure or found):
            size_note = task.size_note()
            shape = other_shape(task) if hack_checks else None
    if static_failure:
        kind, message = static_failure
        return EvalResult(error_kind=kind, error=message)
    if found:
        return EvalResult(error_kind="hacked", error=found[1], hacked=True, hack_reasons=found[0])
    if timeout_s is None:
        timeout_s = DEFAULT_TIMEOUT_S
    else:
        stage_timeouts = {**{stage: timeout_s for stage in USER_TIMED_STAGES}, **(stage_timeouts or {})}
    sandbox = get_sandbox(device, isolation, profiler=bool(profile))
    info = sandbox.start()
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    job = Job(mode="candidate", task_name=task.name, task_source=task.source, code=code,
              correctness_trials=correctness_trials, seed=rng.randrange(2**31),
              trial_seeds=[rng.randrange(2**31) for _ in range(correctness_trials)], timing_seed=rng.randrange(2**31),
              timing=timing, timing_trials=timing_trials, warmup=warmup, flush_bytes=flush_bytes, atol=atol, rtol=rtol,
              timeout_s=timeout_s + (STAGE_TIMEOUTS["ncu"] if profile == "ncu" else 0.0),
              stage_timeouts=stage_timeouts or {}, hack_checks=hack_checks, profile=profile,
              host_memory_bytes=host_memory_bytes or 0)
    notes = [size_note] if size_note else []
    if hack_checks:
        if isinstance(shape, str):
            notes.append(shape)
        else:
            job.other_shape = replace(shape, seed=rng.randrange(2**31))
    baseline = None
    if timing and device != "cpu":
        baseline = ensure_baseline(task, sandbox, info, warmup, timing_trials, flush_bytes, compile_baseline)
        job.copy_bandwidth = load_copy_bandwidth(info.get("device_name", ""), info.get("versions", {}))
    raw = sandbox.run(job)
    raw.notes = notes + raw.notes
    return to_result(raw, baseline, device, info)


def ensure_baseline(task: Task, sandbox, info: dict, warmup: int, trials: int, flush_bytes: int,
                    compile_baseline: bool = True) -> dict:
    """Eager and torch.compile timings of the reference, measured once by a job that loads no
    candidate code, then cached on disk (key: task source, device, versions, timing settings)."""
    key = baseline_key(task.source, info.get("device_name", ""), info.get("versions", {}), warmup, trials,
                       flush_bytes, compile_baseline)
    with _baseline_locks_guard:
        lock = _baseline_locks.setdefault(key, threading.Lock())
    with lock:
        cached = load_baseline(key)
        if cached is not None:
            return cached
        device_name, versions = info.get("device_name", ""), info.get("versions", {})
        raw = sandbox.run(Job(mode="baseline", task_name=task.name, task_source=task.source, warmup=warmup,
                              timing_trials=trials, flush_bytes=flush_bytes, timeout_s=1800.0,
                              compile_baseline=compile_baseline,
                              copy_bandwidth=load_copy_bandwidth(device_name, versions)))
        baseline = raw.baseline or {"eager": None, "compile": None, "error": f"{raw.error_kind}: {raw.error}"}
        copy = baseline.pop("copy_bandwidth", None)
        if copy:
            save_copy_bandwidth(device_name, versions, copy)
        if raw.baseline:
            save_baseline(key, baseline)
        return baseline


def to_result(raw: RawResult, baseline: dict | None, device: str, info: dict) -> EvalResult:
    """The caller's result: the worker's, with speedups against the baseline and notes on the timings."""
    timing = raw.timing
    result = raw.to_eval_result()
    result.versions = result.versions or info.get("versions", {})
    result.device = result.device or device
    if device == "cpu":
        result.timing_note = CPU_TIMING_NOTE
    elif timing:
        result.runtime_ms, result.runtime_iqr_ms = timing["median_ms"], timing["iqr_ms"]
        result.timing_trials = timing["trials"]
        eager, compiled = (baseline or {}).get("eager"), (baseline or {}).get("compile")
        if eager:
            result.ref_runtime_ms = eager["median_ms"]
            result.speedup = eager["median_ms"] / timing["median_ms"]
        if compiled:
            result.ref_compile_runtime_ms = compiled["median_ms"]
            result.speedup_compile = compiled["median_ms"] / timing["median_ms"]
        result.gpu_clock = {name: stats["gpu_clock"] for name, stats in
                            (("candidate", timing), ("eager", eager), ("compile", compiled)) if stats and "gpu_clock" in stats}
        slowed = result.gpu_clock.get("candidate", {}).get("slowdown")
        if slowed:
            result.notes.append(f"the GPU slowed its clock during the candidate's timing ({', '.join(slowed)}): "
                                "compute-bound timings may read low")
        result.timings_valid = bool(eager)
        if not eager:
            result.timing_note = f"the reference could not be timed: {(baseline or {}).get('error')}"
        elif not compiled and baseline.get("compile_error") == COMPILE_NOT_ASKED:
            result.timing_note = "the reference was timed in eager mode only (compile_baseline=False)"
        elif not compiled:
            result.timing_note = f"torch.compile failed on the reference: {(baseline or {}).get('compile_error')}"
    return result


def evaluate_many(pairs: list[tuple[Task, str]], max_in_flight: int | None = None, progress: bool = True,
                  **kwargs) -> list[EvalResult]:
    """Evaluate many (task, code) pairs concurrently; results in the order given.

    Loading and correctness overlap across candidates; timing holds each GPU's lock alone.
    """
    kwargs["device"] = resolve_device(kwargs.get("device"))  # once, before any thread starts
    return map_in_threads(lambda pair: evaluate(pair[0], pair[1], **kwargs), pairs, max_in_flight,
                          "evaluate" if progress else None, "eval")


def map_in_threads(fn, items: list, max_in_flight: int | None, desc: str | None, unit: str) -> list:
    """fn over items, up to max_in_flight at once (default: one per core), results in the order given;
    with a progress bar named `desc` (None: no bar)."""
    bar = None
    if desc is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(items), desc=desc, unit=unit)

    def one(item):
        result = fn(item)
        if bar is not None:
            bar.update(1)
        return result

    with thread_pool(max_in_flight or max(1, min(len(items), os.cpu_count() or 2))) as pool:
        results = list(pool.map(one, items))
    if bar is not None:
        bar.close()
    return results


@contextlib.contextmanager
def thread_pool(workers: int):
    """A thread pool for evaluations that a KeyboardInterrupt (Ctrl-C, a Jupyter interrupt) stops at once:
    the queued ones are dropped, every worker pool is shut down (which ends what runs: the threads get
    their answers, failed, within a second), and the interrupt goes on, saying so."""
    pool = ThreadPoolExecutor(workers)
    try:
        yield pool
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        shutdown()
        pool.shutdown(wait=True)
        shutdown()  # a thread that was between its static checks and its worker pool may have started one
        raise KeyboardInterrupt("interrupted: the evaluations in flight were stopped and their workers ended") \
            from None
    pool.shutdown(wait=True)


def ensure_baselines(tasks: list[Task], *, device: str | None = None, max_in_flight: int | None = None,
                     progress: bool = True, warmup: int = 3, timing_trials: int = 100,
                     flush_bytes: int = FLUSH_BYTES, isolation: str = "fork",
                     compile_baseline: bool = True) -> list[dict]:
    """Measure and cache the eager and torch.compile baselines of many tasks, several at once (a worker
    per task; each timing holds the GPU alone, the compiles overlap): what evaluate() would do on first
    meeting each task, done ahead for a whole task set. Cached tasks cost nothing."""
    device = resolve_device(device)
    if device == "cpu":
        raise ValueError("baselines need a CUDA GPU: nothing is timed on the CPU")
    sandbox = get_sandbox(device, isolation, profiler=False)
    info = sandbox.start()
    return map_in_threads(
        lambda task: ensure_baseline(task, sandbox, info, warmup, timing_trials, flush_bytes, compile_baseline),
        tasks, max_in_flight, "baselines" if progress else None, "task")
