"""The zygote: a process that has imported torch and Triton once (CUDA untouched) and forks ready
supervisor + worker pairs from itself, so that no evaluation pays Python's and torch's start-up.

    caller (your notebook) --unix socket--> zygote
        zygote --fork--> supervisor (a child subreaper, serving one worker; supervisor.py)
            supervisor --fork--> worker (own session; warms up, then runs jobs; worker.py)

It keeps `warm` pairs waiting for a job (at most 2 x warm alive). Each worker warms up (CUDA, cuBLAS,
the profiler, Triton's launch path; warm.py) while its supervisor waits on the zygote's socket. A pair
serves up to `uses` jobs, each after the worker checked itself clean (reuse.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

from drk_lab.harness.devices import gpu_index, gpu_name
from drk_lab.harness.models import versions
from drk_lab.harness.processes import enter_worker, set_parent_death_signal, set_subreaper
from drk_lab.harness.settings import current
from drk_lab.harness.supervisor import serve_one


def serve(device: str, socket_path: str, lock_dir: str, warm: int, profiler: bool = True, uses: int = 1) -> None:
    import torch  # noqa: F401  preloaded for every worker forked from here
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    if device != "cpu":
        from drk_lab.harness.warm import precompute_in_zygote

        precompute_in_zygote()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(256)
    news_r, news_w = os.pipe()  # pairs write "taken PID" when they accept a job, "free PID" when done
    idle: set[int] = set()
    alive: set[int] = set()
    hello = {"ready": True, "pid": os.getpid(), "versions": versions(),
             "device_name": gpu_name() if device != "cpu" else "cpu"}
    sys.stdout.write(json.dumps(hello) + "\n")
    sys.stdout.flush()
    pending = b""
    while True:
        while len(idle) < warm and len(alive) < 2 * warm:
            pid = fork_pair(listener, news_r, news_w, device, lock_dir, profiler, uses)
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
                (idle.discard if what == b"taken" else idle.add)(int(pid))
        while True:  # reap pairs that finished, and idle ones that died
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            idle.discard(pid)
            alive.discard(pid)


def fork_pair(listener: socket.socket, news_r: int, news_w: int, device: str, lock_dir: str,
              profiler: bool = True, uses: int = 1) -> int:
    """Fork a supervisor with its worker; the worker warms up while the supervisor waits for a job.
    Returns the supervisor's pid."""
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
                enter_worker(out_w, current().scratch_bytes)
                run_worker(job_r, status_w, device, lock_dir, profiler, uses)
            finally:
                os._exit(70)
        for fd in (status_w, out_w, job_r):
            os.close(fd)
        for use in range(uses):
            conn, _ = listener.accept()
            os.write(news_w, f"taken {os.getpid()}\n".encode())
            if not serve_one(conn, worker_pid, status_r, out_r, job_w, use + 1, keep=use + 1 < uses):
                break
            os.write(news_w, f"free {os.getpid()}\n".encode())
    finally:
        os._exit(0)


def run_worker(job_r: int, status_w: int, device: str, lock_dir: str, profiler: bool, uses: int) -> None:
    """In the new worker: warm up, take the snapshot that later jobs are compared with, serve jobs."""
    import torch

    from drk_lab.harness.reuse import WorldState
    from drk_lab.harness.worker import serve_jobs

    if device != "cpu":
        from drk_lab.harness.warm import warm_up

        warm_up(device, lock_dir, gpu_index(device), profiler)
    serve_jobs(job_r, status_w, WorldState(torch.device(device)) if uses > 1 else None)
