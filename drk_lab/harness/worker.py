"""The worker process: runs jobs, reports each result, and checks itself before it takes another.

A worker is forked from the zygote with its supervisor (or spawned as a fresh Python), warms up, then
reads Job lines from its job pipe. For each job it enters the job's folder, runs the job's stages
(stages.py) and reports the result on its status pipe. Then it exits, unless it may serve again: a
clean outcome (protocol.REUSABLE_OUTCOMES) and nothing of the job left running. Then it forgets the
job and compares itself with how it was before its first job (reuse.py); any difference and it exits.

Its side of the GPU lock hand-offs (CUDA, with the lifecycle lock on; supervisor.WorkerWatch has the
other side): it reports the result while holding a shared GPU lock and keeps it until the supervisor
has joined the lock (a one-byte acknowledgement on the job pipe), so that its CUDA context ends, or is
checked, outside anyone's timing. A worker that checks itself lets go ("gpu_released") once nothing of
the job can still touch the GPU, takes the lock again only for the CUDA part of the check, and holds it
again before exiting if the check fails.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from contextlib import nullcontext

from drk_lab.common import processes
from drk_lab.harness import guard
from drk_lab.harness.devices import gpu_index
from drk_lab.harness.gpulock import GpuLock
from drk_lab.harness.protocol import REUSABLE_OUTCOMES, Job, RawResult, read_line, signed
from drk_lab.harness.reuse import WorldState
from drk_lab.harness.settings import current
from drk_lab.harness.stages import JobRunner


def serve_jobs(job_r: int, status_w: int, world: WorldState | None) -> None:
    """The worker's loop: one job per line of the job pipe, until EOF or a job after which it may not stay."""
    while line := read_line(job_r):
        if not line.strip():
            continue  # a late acknowledgement
        job = Job.from_json(line)
        del line  # it holds the job's key
        if not run_job(job, status_w, job_r, world):
            break


def run_job(job: Job, status_w: int, ack_r: int | None, world: WorldState | None = None) -> bool:
    """Run one job and report it. Without `world` (a WorldState) it never returns; with one it returns
    True when the worker checked itself clean and may take another job; otherwise it exits."""
    os.chdir(job.workdir)
    sys.path.insert(0, job.workdir)
    os.environ.update(job.env)
    status = os.fdopen(status_w, "wb", closefd=False)
    key, job.key = job.key, ""  # from here on only report() holds the key

    def report(message: dict) -> None:
        status.write(signed(message, key))
        status.flush()

    lock = GpuLock(job.lock_dir, gpu_index(job.device)) if job.device != "cpu" else None
    if lock:
        lock.release_while_compiling()
    hold = lock is not None and ack_r is not None and current().lifecycle_lock
    kept = False
    if ack_r is not None and job.device != "cpu":
        from drk_lab.harness import triton_cache

        triton_cache.channel[0] = (status_w, ack_r)
    try:
        result = JobRunner(job, report, lock).run()  # the runner, and with it the candidate, is gone after this
        result.notes += [note for note in (processes.network_note, processes.cache_note) if note]
        if "drk_lab.harness.triton_cache" in sys.modules:
            sys.modules["drk_lab.harness.triton_cache"].channel[0] = None
        if hold:
            lock.label = "after_result"
            lock.acquire(exclusive=False)
        sys.stdout.flush()
        sys.stderr.flush()
        report({"result": result.to_dict()})
        if hold and select.select([ack_r], [], [], 10.0)[0]:
            os.read(ack_r, 1)  # the ack is one byte: take it, or the next job's line would start with it
        if world is not None:
            kept = check_self(job, result, world, lock, hold, report)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if not kept:
            os._exit(0)  # skip interpreter teardown: the candidate may have left threads or atexit hooks
    if lock:
        lock.release()
    return True


def protect(paths: tuple[str, ...], device: str) -> None:
    """Once warmed up, before any job: the harness's cache (and settings.read_only) become read-only to this
    process, by the mount namespace where the OS gave one and by an audit hook in any case; a second audit
    hook counts those added after it (reuse.py); on a GPU, Triton's launchers come from the supervisor
    (triton_cache.py)."""
    if processes.cache_note is None:
        processes.cache_note = processes.make_read_only(paths)
    guard.protect_folders(list(paths))
    guard.count_audit_hooks()
    if device != "cpu":
        from drk_lab.harness.triton_cache import share_launchers

        share_launchers()


def check_self(job: Job, result: RawResult, world: WorldState, lock: GpuLock | None, hold: bool, report) -> bool:
    """May this worker take another job? Reports {"reuse": ..., "why": [...]} and says so."""
    released, started = False, time.perf_counter()
    world.jobs += 1
    try:
        why = refusal(job, result) or world.leftover_work()
        if not why:  # nothing of the job runs any more: the GPU is free while the CPU forgets it
            if hold:
                lock.release()
                report({"gpu_released": True})
                released = True
            clock = time.perf_counter()
            world.forget_job(job.workdir)
            world.seconds["forget"], clock = time.perf_counter() - clock, time.perf_counter()
            if lock:
                lock.label = "cuda_check"
            with lock.shared() if lock else nullcontext():
                why = world.gpu_differences()
            world.seconds["gpu"] = time.perf_counter() - clock
            why = why or world.process_differences()
    except Exception as e:  # a check that fails is a doubt: retire
        why = [f"the self-check failed: {type(e).__name__}: {e}"]
    if why and released:  # this context goes away under the lock too
        lock.acquire(exclusive=False, queue=False)
    log = current().reuse_log
    if log:  # a JSONL file: why workers retire, for studying the harness (written first: a "no" ends us)
        with open(log, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "job": world.jobs, "task": job.task_name, "why": why[:20],
                                "seconds": round(time.perf_counter() - started, 4),
                                "parts": {k: round(v, 4) for k, v in world.seconds.items()}}) + "\n")
    report({"reuse": not why, "why": why[:5]})
    return not why


def refusal(job: Job, result: RawResult) -> list[str]:
    """Why this worker may not serve again whatever the world check says ([] if nothing)."""
    if job.mode == "baseline" and job.compile_baseline:
        return ["a baseline job compiled with torch.compile, which changes too much"]
    # an eager-only baseline ran the task's own reference, as every candidate job does: the world check
    # decides, as after a candidate (retiring it cost a fresh worker, CUDA context and all, per new task)
    if result.hacked or result.error_kind not in REUSABLE_OUTCOMES:
        return [f"the evaluation ended {result.error_kind or 'hacked'}"]
    return []
