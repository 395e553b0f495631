"""The harness's settings: environment variables for scripts, `drk.configure(...)` for notebooks.

    drk.configure(worker_uses=1, lock_log="runs/locks.jsonl")   # stops the running pools; the next
    drk.evaluate(task, code)                                     # evaluation starts them anew

The caller holds the current HarnessSettings; the zygote and every process forked from it get them as
DRK_* environment variables when the pool starts (as_environment), and read them back there
(current() in a harness process is what its environment says).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path


@dataclass(frozen=True)
class HarnessSettings:
    # evaluations one warm worker may serve, each after checking itself clean (reuse.py); 1: always fresh.
    # None: 32 on a GPU (a fresh worker costs a CUDA context and a warm-up), 1 on the CPU (a fork of the
    # zygote costs less there than the check)
    worker_uses: int | None = None
    # workers kept ready; None: 2 on the CPU, min(8, max(2, cores / 2)) on a GPU. At most 2 x warm_workers
    # evaluate at once (GPU memory) and spare_workers more are alive, checking themselves (zygote.py)
    warm_workers: int | None = None
    # None: warm_workers on the CPU, 0 on a GPU (where spares slowed every evaluation: LOG.md, 2026-12-02);
    # 0: no more alive than may evaluate at once
    spare_workers: int | None = None
    lifecycle_lock: bool = True  # a worker's CUDA context starts and ends under the shared GPU lock
    lock_log: str | None = None  # a JSONL file: every GPU-lock hold (bench/lock_report.py reads it)
    reuse_log: str | None = None  # a JSONL file: why each warm worker retired
    cache_dir: str | None = None  # baselines, copy bandwidth, Triton's cache; None: ~/.cache/drk_lab
    # more files or folders that evaluated code may read but not write, besides cache_dir (os.pathsep
    # between them): the service adds its result store
    read_only: str | None = None
    scratch_bytes: int = 1 << 30  # a worker's largest file (RLIMIT_FSIZE), and the most a job's folder may hold

    @classmethod
    def from_environment(cls, env=None) -> HarnessSettings:
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            text = env.get("DRK_" + f.name.upper())
            if text:
                values[f.name] = (text == "1") if f.type == "bool" else int(text) if "int" in f.type else text
        return cls(**values)

    def __post_init__(self):
        for name in ("lock_log", "reuse_log", "cache_dir", "read_only"):  # workers run in their job's folder
            if getattr(self, name):
                object.__setattr__(self, name, os.pathsep.join(os.path.abspath(os.path.expanduser(p))
                                                               for p in getattr(self, name).split(os.pathsep)))

    def as_environment(self) -> dict[str, str]:
        env = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                env["DRK_" + f.name.upper()] = str(int(value)) if isinstance(value, bool) else str(value)
        return env

    def spare_workers_for(self, warm: int, device: str) -> int:
        if self.spare_workers is not None:
            return self.spare_workers
        return warm if device == "cpu" else 0

    def worker_uses_for(self, device: str) -> int:
        if self.worker_uses is not None:
            return self.worker_uses
        return 1 if device == "cpu" else 32

    def warm_workers_for(self, device: str) -> int:
        if self.warm_workers is not None:
            return self.warm_workers
        return 2 if device == "cpu" else min(8, max(2, (os.cpu_count() or 4) // 2))


_current = HarnessSettings.from_environment()


def current() -> HarnessSettings:
    return _current


def change(**changes) -> HarnessSettings:
    """Replace settings by name; the running pools keep theirs (caller.configure also restarts them)."""
    global _current
    _current = replace(_current, **changes)
    return _current


def cache_dir() -> Path:
    root = Path(_current.cache_dir or Path.home() / ".cache" / "drk_lab")
    root.mkdir(parents=True, exist_ok=True)
    return root


def triton_store() -> str:
    """Triton's cache that jobs read but never write (triton_cache.py)."""
    return str(cache_dir() / "triton")


def read_only_paths() -> tuple[str, ...]:
    """What a worker may read but never write once it has warmed up: the cache, and settings.read_only."""
    extra = _current.read_only.split(os.pathsep) if _current.read_only else []
    return (str(cache_dir()), *extra)
