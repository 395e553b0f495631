"""The caller's side of the isolation: one worker pool (Sandbox) per device, started on first use.

The default "fork" isolation starts a zygote (zygote.py) and sends each job to it over a unix socket;
the "spawn" isolation starts a fresh Python for every worker and supervises it from the caller's
process: the simple design that bench/eval_speed.py compares against. `configure()` changes the
harness's settings and `shutdown()` stops every pool; the next evaluation starts them anew.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from drk_lab.common.models import versions
from drk_lab.harness import settings
from drk_lab.harness.devices import device_env, gpu_name
from drk_lab.harness.entry import COMMAND
from drk_lab.harness.protocol import MAX_LOCK_WAIT_S, Job, RawResult, new_key
from drk_lab.harness.supervisor import WorkerWatch, new_workdir


SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)


def default_host_memory_bytes() -> int:
    """A job's host-memory limit when none is given: half of the memory available as it starts, at most 32 GiB.
    Half of the machine's total could be more than is free (other evaluations, other programs): the kernel's
    out-of-memory killer would then end the worker first, or something else."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return min(32 << 30, available // 2)


class Sandbox:
    """Runs jobs in isolated workers; thread-safe; restarts its zygote if it dies."""

    def __init__(self, device: str = "cpu", isolation: str = "fork", profiler: bool = True):
        if isolation not in ("fork", "spawn"):
            raise ValueError("isolation must be 'fork' or 'spawn'")
        self.device, self.isolation, self.profiler = device, isolation, profiler  # profiler: warm-ups start it
        self.zygote: subprocess.Popen | None = None
        self.info: dict = {}
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="drk_sandbox_")
        if len(self._dir) > 70:  # a unix socket's path must fit in 108 bytes: a long $TMPDIR would not
            os.rmdir(self._dir)
            self._dir = tempfile.mkdtemp(prefix="drk_sandbox_", dir="/tmp")
        self.lock_dir = os.path.join(tempfile.gettempdir(), "drk_gpu_locks")
        atexit.register(self.close)

    def environment(self) -> dict[str, str]:
        """The caller's environment without its secrets (candidates can read and print their environment,
        and what they print reaches the model), plus the settings as DRK_* variables (settings.py)."""
        kept = {name: value for name, value in os.environ.items() if not SECRET_NAME.search(name)}
        return {**kept, **device_env(self.device), **settings.current().as_environment(),
                "TRITON_CACHE_DIR": str(settings.cache_dir() / "triton")}

    def start(self) -> dict:
        with self._lock:
            if self.zygote is not None and self.zygote.poll() is None:
                return self.info
            if self.isolation == "spawn":
                if not self.info:  # versions for the baseline key, from this interpreter
                    self.info = {"versions": versions(), "device_name": gpu_name() if self.device != "cpu" else "cpu"}
                return self.info
            now = settings.current()
            self.socket_path = os.path.join(self._dir, f"zygote{time.monotonic_ns()}.sock")
            self.zygote = subprocess.Popen(
                [*COMMAND, "serve", self.device, self.socket_path, self.lock_dir,
                 str(now.warm_workers_for(self.device)), str(int(self.profiler)), str(now.worker_uses_for(self.device))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.environment(), start_new_session=True)
            line = self.zygote.stdout.readline()
            if not line:
                raise RuntimeError("the evaluation server failed to start (see stderr above)")
            self.info = json.loads(line)
            return self.info

    def run(self, job: Job) -> RawResult:
        try:
            return self._run(job)
        except KeyboardInterrupt:  # Ctrl-C or a Jupyter interrupt: end this pool's workers, then go on
            self.close()
            raise

    def _run(self, job: Job) -> RawResult:
        info = self.start()
        job.device, job.lock_dir = self.device, self.lock_dir
        job.host_memory_bytes = job.host_memory_bytes or default_host_memory_bytes()
        if self.isolation == "spawn":
            new_workdir(job)
            try:
                return self.run_spawned(job)
            finally:
                shutil.rmtree(job.workdir, ignore_errors=True)
        wall = job.timeout_s + MAX_LOCK_WAIT_S + 60
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(wall)
                conn.connect(self.socket_path)
                stream = conn.makefile("rwb")
                stream.write(job.to_json().encode() + b"\n")
                stream.flush()
                line = stream.readline()
        except (OSError, socket.timeout) as e:
            line, reason = b"", f"{type(e).__name__}: {e}"
        else:
            reason = "the supervisor process died"
        if not line:
            return RawResult(error_kind="worker_crash", error=f"no result from the sandbox ({reason})",
                             versions=info.get("versions", {}))
        return RawResult.from_dict(json.loads(line))

    def run_spawned(self, job: Job) -> RawResult:
        """A fresh Python for this job's worker, supervised from this process."""
        status_r, status_w = os.pipe()
        out_r, out_w = os.pipe()
        proc = subprocess.Popen(
            [*COMMAND, "worker", str(status_w)], stdin=subprocess.PIPE, stdout=out_w, stderr=out_w,
            pass_fds=(status_w,), start_new_session=True, env={**self.environment(), **job.env}, cwd=job.workdir)
        os.close(status_w)
        os.close(out_w)
        job.key = new_key()
        proc.stdin.write(job.to_json().encode() + b"\n")
        proc.stdin.flush()
        try:
            watch = WorkerWatch(job, proc.pid, status_r, out_r, reaper=False, ack_w=proc.stdin.fileno())
            result = watch.watch()
            watch.finish()
            return result
        finally:
            proc.stdin.close()
            proc.returncode = 0  # already reaped by the watch

    def close(self) -> None:
        if self.zygote is not None and self.zygote.poll() is None:
            self.zygote.stdin.close()
            try:
                self.zygote.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


_sandboxes: dict[tuple[str, str, bool], Sandbox] = {}
_sandboxes_lock = threading.Lock()


def get_sandbox(device: str, isolation: str = "fork", profiler: bool = True) -> Sandbox:
    """One sandbox per (device, isolation, profiler): on CUDA, workers that will never profile skip
    the profiler's slow start-up while they warm up (on the CPU nothing is profiled or warmed up)."""
    with _sandboxes_lock:
        key = (device, isolation, profiler or device == "cpu")
        if key not in _sandboxes:
            _sandboxes[key] = Sandbox(device, isolation, profiler=key[2])
        return _sandboxes[key]


def shutdown() -> None:
    """Stop every worker pool (evaluations in flight in other threads fail); the next one starts anew."""
    with _sandboxes_lock:
        for sandbox in _sandboxes.values():
            sandbox.close()
        _sandboxes.clear()


def configure(**changes) -> settings.HarnessSettings:
    """Change the harness's settings by name (settings.HarnessSettings: worker_uses, warm_workers,
    spare_workers, lifecycle_lock, lock_log, reuse_log, cache_dir, scratch_bytes, poison_in_cache,
    blocking_sync) and stop the running pools, so that the next evaluation starts them with the new
    settings. Call it between evaluations, not during them."""
    changed = settings.change(**changes)
    shutdown()
    return changed
