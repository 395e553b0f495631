"""A readers-writer lock per GPU across processes: correctness work shares the GPU, timing owns it.

Built on flock, so a process that dies releases its locks. A waiting writer holds the turnstile,
so new readers queue behind it and timing is never starved by a stream of correctness trials.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager


class GpuLock:
    def __init__(self, lock_dir: str, gpu: int):
        os.makedirs(lock_dir, exist_ok=True)
        self.main_path = os.path.join(lock_dir, f"gpu{gpu}.lock")
        self.turnstile_path = os.path.join(lock_dir, f"gpu{gpu}.turnstile")

    def _open(self, path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

    @contextmanager
    def shared(self):
        turnstile, main = self._open(self.turnstile_path), self._open(self.main_path)
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(main, fcntl.LOCK_SH)
            yield
        finally:
            os.close(main)
            os.close(turnstile)

    @contextmanager
    def exclusive(self):
        turnstile, main = self._open(self.turnstile_path), self._open(self.main_path)
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield
        finally:
            os.close(main)
            os.close(turnstile)
