"""The zygote: a process that has imported torch and Triton once (CUDA untouched) and forks ready
supervisor + worker pairs from itself, so that no evaluation pays Python's and torch's start-up.

    caller (your notebook) --unix socket--> zygote
        zygote --fork--> supervisor (a child subreaper, serving one worker; supervisor.py)
            supervisor --fork--> worker (own session; warms up, then runs jobs; worker.py)

It keeps `warm` pairs waiting for a job, at most 2 x warm + spare alive (spare_workers), of which at
most 2 x warm evaluate at once (a "slot" each: a flock on a file beside the socket, freed by the kernel
if its holder dies). A pair gives its slot back as soon as the caller has its answer. On the CPU the
spare pairs (as many as warm) keep evaluations from waiting while others check themselves between
jobs (reuse.py; 0.3-0.5 s of CPU each). On a GPU there are none by default: on an H200, 24 workers for 16 slots
evaluated about a fifth more slowly than 16, every stage slower (BENCHMARKS.md, 2026-12-02).
Each worker warms up (CUDA, cuBLAS, the profiler, Triton's launch path; warm.py) and says "ready"
before its supervisor asks for a slot and a job, so no job waits for a warm-up while a warm pair is
about to be free. A pair serves up to `uses` jobs, each after the worker checked itself clean.
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import select
import signal
import socket
import sys
import time

from drk_lab.common.models import versions
from drk_lab.common.processes import enter_worker, set_parent_death_signal, set_subreaper
from drk_lab.harness.devices import gpu_index, gpu_name
from drk_lab.harness.protocol import STAGE_TIMEOUTS
from drk_lab.harness.settings import current, read_only_paths
from drk_lab.harness.supervisor import serve_one

READY = b"ready\n"  # a new worker's first line on its status pipe: warmed up, waiting for a job
_contents = None  # world.Contents taken here before forking (CPU workers), else None


def serve(device: str, socket_path: str, lock_dir: str, warm: int, profiler: bool = True, uses: int = 1) -> None:
    import torch  # noqa: F401  preloaded for every worker forked from here
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    if device != "cpu":
        from drk_lab.harness.warm import precompute_in_zygote

        precompute_in_zygote()
    elif uses > 1:  # CPU workers warm nothing up: they start from this snapshot instead of taking one each
        global _contents
        import drk_lab.harness.worker  # noqa: F401  everything a worker imports, so that the snapshot holds it
        from drk_lab.harness.warm import warm_up_interpreter
        from drk_lab.harness.world import Contents

        warm_up_interpreter()
        _contents = Contents()
    gc.collect()
    gc.freeze()  # what the imports made is never garbage: no collection in a worker walks it again
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(256)
    news_r, news_w = os.pipe()  # pairs write "taken PID" on accepting a job, "free PID" when done, "gone PID"
    slots = Slots(socket_path, 2 * warm)
    most_alive = 2 * warm + current().spare_workers_for(warm, device)
    idle: set[int] = set()
    alive: set[int] = set()
    hello = {"ready": True, "pid": os.getpid(), "versions": versions(),
             "device_name": gpu_name() if device != "cpu" else "cpu"}
    sys.stdout.write(json.dumps(hello) + "\n")
    sys.stdout.flush()
    pending = b""
    while True:
        while len(idle) < warm and len(alive) < most_alive:
            pid = fork_pair(listener, slots, news_r, news_w, device, lock_dir, profiler, uses)
            idle.add(pid)
            alive.add(pid)
        ready, _, _ = select.select([news_r, sys.stdin], [], [], 1.0)
        if sys.stdin in ready and not sys.stdin.buffer.read1(1):
            for pid in alive:  # the caller went away
                os.kill(pid, signal.SIGKILL)
            os._exit(0)
        if news_r in ready:
            pending += os.read(news_r, 65536)
            *lines, pending = pending.split(b"\n")
            for line in lines:
                what, pid = line.split()
                if what == b"free":
                    idle.add(int(pid))
                else:
                    idle.discard(int(pid))
                if what == b"gone":  # about to exit (reaped below or at the next wake-up): replace it now
                    alive.discard(int(pid))
        while True:  # reap pairs that finished, and idle ones that died
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            idle.discard(pid)
            alive.discard(pid)


class Slots:
    """At most `count` pairs evaluate at once: each holds an exclusive flock on one of `count` files while
    it waits for a job and until the caller has its answer. One waiter at a time (the turnstile) looks
    for a free slot; the kernel frees the slot of a process that dies."""

    def __init__(self, prefix: str, count: int):
        self.paths = [f"{prefix}.slot{i}" for i in range(count)]
        self.turnstile = prefix + ".slots"

    def take(self) -> int:
        """Blocks until a slot is free; returns the held slot's descriptor (closing it frees the slot)."""
        turnstile = os.open(self.turnstile, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600) for path in self.paths]
        held = None
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            while held is None:
                for fd in fds:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        held = fd
                        break
                    except BlockingIOError:
                        pass
                else:
                    time.sleep(0.005)  # only the one waiter in the turnstile polls
        finally:
            for fd in fds:
                if fd != held:
                    os.close(fd)
            os.close(turnstile)
        return held


def wait_until_ready(status_r: int, timeout_s: float) -> bool:
    """Until the worker says it is warm (READY), dies (EOF: its first job then reports the death), or
    timeout_s passes (a stuck warm-up: the first job's "start" stage limit then ends it; False, and
    READY may still come first on the status pipe)."""
    data, deadline = b"", time.monotonic() + timeout_s
    while not data.endswith(b"\n"):  # one write of 6 bytes, read whole; nothing follows before a job
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([status_r], [], [], left)[0]:
            return False
        chunk = os.read(status_r, 64)
        if not chunk:
            return True
        data += chunk
    return True


def fork_pair(listener: socket.socket, slots: Slots, news_r: int, news_w: int, device: str, lock_dir: str,
              profiler: bool = True, uses: int = 1) -> int:
    """Fork a supervisor with its worker; the worker warms up, then the supervisor waits for a slot and a
    job. Returns the supervisor's pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.close(news_r)
        set_parent_death_signal()
        os.setpgid(0, 0)
        set_subreaper()
        status_r, status_w = os.pipe()
        out_r, out_w = os.pipe()
        job_r, job_w = os.pipe()
        worker_pid = os.fork()
        if worker_pid == 0:
            try:
                listener.close()
                for fd in (status_r, out_r, job_w, news_w):
                    os.close(fd)
                set_parent_death_signal()
                enter_worker(out_w, current().scratch_bytes, read_only_paths())
                run_worker(job_r, status_w, device, lock_dir, profiler, uses)
            finally:
                os._exit(70)
        for fd in (status_w, out_w, job_r):
            os.close(fd)
        late = b"" if wait_until_ready(status_r, STAGE_TIMEOUTS["start"]) else READY
        for use in range(uses):
            slot = [slots.take()]  # emptied by give_back: the descriptor is closed exactly once

            def give_back(held=slot):  # once the caller has its answer (or on any way out)
                while held:
                    os.close(held.pop())
            try:
                conn, _ = listener.accept()
                os.write(news_w, f"taken {os.getpid()}\n".encode())
                kept = serve_one(conn, worker_pid, status_r, out_r, job_w, use + 1, keep=use + 1 < uses,
                                 answered=give_back, late_line=late)
                late = b""
            finally:
                give_back()
            if not kept:
                break
            os.write(news_w, f"free {os.getpid()}\n".encode())
        os.write(news_w, f"gone {os.getpid()}\n".encode())
    finally:
        os._exit(0)


def run_worker(job_r: int, status_w: int, device: str, lock_dir: str, profiler: bool, uses: int) -> None:
    """In the new worker: warm up, take the snapshot that later jobs are compared with, serve jobs."""
    import torch

    from drk_lab.harness.reuse import WorldState
    from drk_lab.harness.worker import protect, serve_jobs

    if device != "cpu":
        from drk_lab.harness.warm import warm_up

        warm_up(device, lock_dir, gpu_index(device), profiler)
    protect(read_only_paths(), device)  # before the snapshot: the world includes the guard's audit hooks
    world = WorldState(torch.device(device), _contents) if uses > 1 else None
    gc.collect()
    gc.freeze()  # the self-check's collection (reuse.forget_job) then walks only what jobs made: 0.1 s less
    os.write(status_w, READY)
    serve_jobs(job_r, status_w, world)
