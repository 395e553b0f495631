"""A readers-writer lock per GPU across processes: correctness work shares the GPU, timing owns it.

Built on flock, so a process that dies releases its locks. A waiting writer holds the turnstile,
so new readers queue behind it and timing is never starved by a stream of correctness trials.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager

from drk_lab.harness.devices import physical_gpu
from drk_lab.harness.settings import current

# settings.lifecycle_lock: also hold the (shared) lock while a worker's CUDA context starts and ends. On by
# default: on the H200 (LOG.md, 2026-11-29) it cost no throughput, and the one run with it off had timing
# outliers. The profiler's slow start-up never holds the lock. settings.lock_log: a JSONL file, one line
# per hold (who, shared or exclusive, when asked, got, let go), for studying contention.


class GpuLock:
    def __init__(self, lock_dir: str, gpu: int):
        os.makedirs(lock_dir, exist_ok=True)
        gpu = physical_gpu(gpu)  # processes that see different CUDA_VISIBLE_DEVICES share one lock per real GPU
        self.main_path = os.path.join(lock_dir, f"gpu{gpu}.lock")
        self.turnstile_path = os.path.join(lock_dir, f"gpu{gpu}.turnstile")
        self.held: int | None = None  # fd of the main lock while this process holds it
        self.label = "?"  # what the holder is doing, for LOCK_LOG
        self._hold: tuple | None = None

    def _open(self, path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def acquire(self, exclusive: bool, queue: bool = True) -> None:
        """queue=False takes a shared lock at once while other shared holders remain (no waiting
        behind a queued writer): for joining a reader that is about to leave."""
        asked = time.time()
        turnstile, main = self._open(self.turnstile_path), self._open(self.main_path)
        try:
            if queue:
                fcntl.flock(turnstile, fcntl.LOCK_EX)
            if exclusive:
                fcntl.flock(main, fcntl.LOCK_EX)
            if queue:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            if not exclusive:
                fcntl.flock(main, fcntl.LOCK_SH)
        except BaseException:
            os.close(main)
            raise
        finally:
            os.close(turnstile)
        self.held = main
        self._hold = (self.label, "exclusive" if exclusive else "shared", asked, time.time())

    def release(self) -> None:
        if self.held is not None:
            os.close(self.held)
            self.held = None
            log = current().lock_log
            if log:
                label, mode, asked, got = self._hold
                line = json.dumps({"pid": os.getpid(), "label": label, "mode": mode, "asked": asked, "got": got,
                                   "released": time.time()})
                with open(log, "a") as f:
                    f.write(line + "\n")

    @contextmanager
    def shared(self):
        self.acquire(exclusive=False)
        try:
            yield
        finally:
            self.release()

    @contextmanager
    def exclusive(self):
        self.acquire(exclusive=True)
        try:
            yield
        finally:
            self.release()

    def release_while_compiling(self) -> None:
        """Triton compiles on the CPU: let timing proceed meanwhile, take the GPU back afterwards."""
        try:
            from triton import knobs
        except ImportError:
            return
        paused = []

        def before_compile(**_):
            if self.held is not None:
                self.release()
                paused.append(True)
            return None  # a true value would tell Triton to skip the compilation

        def after_compile(**_):
            if paused:
                paused.clear()
                self.acquire(exclusive=False)

        knobs.runtime.jit_cache_hook = before_compile
        knobs.runtime.jit_post_compile_hook = after_compile
