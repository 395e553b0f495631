"""Isolated worker processes: a preloaded fork server, supervision with deadlines, crash classes.

Process tree for one evaluation in the default "fork" isolation:

    caller (your notebook) --unix socket--> zygote (torch + triton imported, CUDA untouched)
        zygote --fork--> supervisor (a child subreaper, serving one worker)
            supervisor --fork--> worker (own session; runs the candidate; killed as a group)

Workers are forked from a preloaded zygote and warmed up (CUDA, cuBLAS, the profiler, Triton's
launch path) before a job arrives; the zygote keeps a few ready. A worker may serve up to
DRK_WORKER_USES evaluations (default 32), but only while nothing distinguishes it from a fresh
one: after a clean result (correct, or an ordinary failure such as a mismatch; never a hack, a
crash, a timeout or a CUDA error) it forgets the job and compares its whole state with how it
was before its first job (reuse.py); any difference and it retires. So no evaluation can see a
monkeypatch, flag, thread, CUDA error or allocation left by another. DRK_WORKER_USES=1 gives
every evaluation a fresh worker. The "spawn" isolation starts a fresh Python for every worker
instead: the simple design that the benchmark compares against.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from drk_lab.harness.gpulock import LIFECYCLE_LOCK
from drk_lab.harness.timing import cache_dir

STAGE_TIMEOUTS = {"start": 120.0, "load": 60.0, "trial": 60.0, "timing": 120.0, "ncu": 300.0,
                  "compile_reference": 900.0}
MAX_LOCK_WAIT_S = 1800.0  # waiting for the GPU's timing lock does not count against timeout_s
OUTPUT_KEEP = 8192  # bytes kept from the start and from the end of what the candidate prints
FATAL_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}


def default_warm_workers(device: str) -> int:
    """Supervisor + worker pairs kept ready (each worker holds a CUDA context on a GPU)."""
    if os.environ.get("DRK_WARM_WORKERS"):
        return int(os.environ["DRK_WARM_WORKERS"])
    return 2 if device == "cpu" else min(8, max(2, (os.cpu_count() or 4) // 2))


def default_worker_uses() -> int:
    """Evaluations one warm worker may serve, each after checking itself clean (reuse.py); 1
    gives every evaluation a fresh worker."""
    return int(os.environ.get("DRK_WORKER_USES", "32"))


def default_host_memory_bytes() -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(32 << 30, total // 2)


class OutputTail:
    """Keeps the first and last OUTPUT_KEEP bytes of a stream of any length."""

    def __init__(self):
        self.head, self.tail, self.total = b"", b"", 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if len(self.head) < OUTPUT_KEEP:
            take = OUTPUT_KEEP - len(self.head)
            self.head, data = self.head + data[:take], data[take:]
        self.tail = (self.tail + data)[-OUTPUT_KEEP:]

    def text(self) -> str:
        skipped = self.total - len(self.head) - len(self.tail)
        middle = f"\n... [{skipped} bytes cut] ...\n".encode() if skipped > 0 else b""
        return (self.head + middle + self.tail).decode(errors="replace")


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def parents() -> dict[int, int]:
    """pid -> parent pid for every process we can see."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    found[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return found


def kill_tree(pgid: int, reaper: bool) -> None:
    """Kill the worker's process group, every process descended from it and, when we are a
    subreaper, every orphan it left us. The worker itself (pid == pgid) is left for the caller
    to wait for."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    me = os.getpid()
    for _ in range(50):
        parent_of = parents()
        doomed, frontier = set(), {pgid} | ({p for p, pp in parent_of.items() if pp == me} if reaper else set())
        while frontier:
            doomed |= frontier
            frontier = {p for p, pp in parent_of.items() if pp in frontier} - doomed
        doomed.discard(pgid)
        if not doomed:
            break
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
                if parent_of.get(pid) == me:
                    os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError, PermissionError):
                pass


def leftover_processes(pid: int, reaper: bool) -> bool:
    """Whether the worker left processes: descendants of its own, or orphans adopted by us."""
    parent_of, me = parents(), os.getpid()
    return any(parent == pid or (reaper and parent == me and child != pid) for child, parent in parent_of.items())


def stage_limit(stage: str, timeouts: dict) -> float | None:
    if stage == "wait_lock":
        return None
    kind = "trial" if stage.startswith("trial") else stage
    return timeouts.get(kind, STAGE_TIMEOUTS.get(kind, 120.0))


def supervise(job: dict, pid: int, status_r: int, out_r: int, reaper: bool,
              ack_w: int | None = None, keep: bool = False) -> tuple[dict, Callable[[], bool]]:
    """Watch one worker until it reports or fails: (its result or a classified failure, finish).

    The worker is killed before this returns; finish() waits until it is gone, holding a shared
    GPU lock when the worker was stopped mid-work (its kernels may still be running) or with
    LIFECYCLE_LOCK; with it the worker reports its result holding a shared GPU lock and waits for
    an acknowledgement on ack_w; the supervisor joins the lock first and keeps it until the
    worker has gone, while the caller already has the result. With keep, a worker that reported
    a result is not killed: finish() waits for its verdict on reuse (reuse.py) and kills it only
    if it refuses."""
    timeouts = {**STAGE_TIMEOUTS, **job.get("stage_timeouts", {})}
    total_limit, memory_limit = job["timeout_s"], job["host_memory_bytes"]
    output, status_buf = OutputTail(), b""
    result, stage, failure, exit_guard = None, "start", None, None
    started = stage_started = time.monotonic()
    waited = 0.0  # seconds spent waiting for the timing lock
    open_fds = {status_r, out_r}
    exit_status = None
    while True:
        now = time.monotonic()
        limit = stage_limit(stage, timeouts)
        active = now - started - waited - (now - stage_started if stage == "wait_lock" else 0.0)
        if limit is not None and now - stage_started > limit:
            failure = ("timeout", f"stage '{stage}' ran past its {limit:g} s limit")
        elif active > total_limit:
            failure = ("timeout", f"the evaluation ran past its {total_limit:g} s limit (in stage '{stage}')")
        elif now - started > total_limit + MAX_LOCK_WAIT_S:
            failure = ("timeout", f"gave up after {now - started:.0f} s waiting for the GPU")
        elif rss_bytes(pid) > memory_limit:
            failure = ("oom", f"host memory use passed the {memory_limit / 2**30:.1f} GiB limit (in stage '{stage}')")
        if failure:
            break
        if not open_fds:
            done, exit_status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
            continue
        ready, _, _ = select.select(list(open_fds), [], [], 0.1)
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                open_fds.discard(fd)
            elif fd == out_r:
                output.add(data)
            else:
                status_buf += data
                while True:
                    message, status_buf = pop_message(status_buf)
                    if message is None:
                        break
                    if "result" in message:
                        result = message["result"]
                        if LIFECYCLE_LOCK and job["device"] != "cpu":  # the worker waits for this ack
                            exit_guard = join_gpu_lock(job)
                            send_ack(ack_w)
                        break
                    elif "stage" in message:
                        if stage == "wait_lock":
                            waited += time.monotonic() - stage_started
                        stage, stage_started = str(message["stage"]), time.monotonic()
        if result is not None:
            break
    while out_r in open_fds and select.select([out_r], [], [], 0)[0]:  # what it printed before reporting
        data = os.read(out_r, 65536)
        output.add(data) if data else open_fds.discard(out_r)
    reusable = keep and failure is None and result is not None and not leftover_processes(pid, reaper)

    def stop_worker() -> None:
        kill_tree(pid, reaper)
        for fd in (status_r, out_r):
            os.close(fd)

    def wait_for_worker() -> int:
        try:
            return os.waitpid(pid, 0)[1] if exit_status is None else exit_status
        except ChildProcessError:
            return 0

    def finish() -> bool:
        """True when the worker stays, checked clean, for another job."""
        guard = exit_guard
        if failure and guard is None:  # a killed worker's kernels may run until its context is gone
            guard = join_gpu_lock(job)
        kept = False
        if reusable:
            kept, gpu_released = reuse_verdict(status_r, out_r, status_buf, guard)
            if not kept:
                if gpu_released:
                    guard = join_gpu_lock(job)
                stop_worker()
            elif gpu_released:
                guard = None
        if not kept:
            wait_for_worker()
        if guard is not None:
            guard.release()
        return kept

    if not reusable:
        stop_worker()
    if failure:
        kind, message = failure
        result = {"error_kind": kind, "error": message}
    elif result is None:
        result = death_result(wait_for_worker(), stage)
    result["stdout"] = output.text()
    result.setdefault("eval_seconds", time.monotonic() - started)
    return result, finish


def pop_message(buffer: bytes) -> tuple[dict | None, bytes]:
    """The first whole JSON line of what the worker wrote on its status pipe (lines that do not
    parse are skipped), and the rest of the buffer; None when no whole line is there yet."""
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        try:
            return json.loads(line), buffer
        except ValueError:
            continue
    return None, buffer


def join_gpu_lock(job: dict):
    if job["device"] == "cpu":
        return None
    from drk_lab.harness.gpulock import GpuLock

    lock = GpuLock(job["lock_dir"], gpu_index(job["device"]))
    lock.label = "supervisor"
    lock.acquire(exclusive=False, queue=False)
    return lock


def reuse_verdict(status_r: int, out_r: int, pending: bytes, guard=None, limit_s: float = 60.0) -> tuple[bool, bool]:
    """Wait for the worker's {"reuse": ...} line (it checks itself after reporting); what it
    prints meanwhile is dropped. (False, ...) if it dies, says no, or takes longer than limit_s.
    The second value: whether `guard`, the GPU lock held for the worker, was released because the
    worker said the GPU part of its check had passed."""
    deadline, released = time.monotonic() + limit_s, False
    while time.monotonic() < deadline:
        while True:
            message, pending = pop_message(pending)
            if message is None:
                break
            if "gpu_released" in message and guard is not None and not released:
                guard.release()
                released = True
            if "reuse" in message:
                return message["reuse"] is True, released
        ready, _, _ = select.select([status_r, out_r], [], [], 0.5)
        for fd in ready:
            data = os.read(fd, 65536)
            if fd == status_r:
                if not data:
                    return False, released
                pending += data
    return False, released


def send_ack(ack_w: int | None) -> None:
    if ack_w is not None:
        try:
            os.write(ack_w, b"\n")
        except OSError:
            pass  # the worker is already gone


def death_result(exit_status: int, stage: str) -> dict:
    if os.WIFSIGNALED(exit_status):
        sig = os.WTERMSIG(exit_status)
        name = signal.Signals(sig).name
        if sig in FATAL_SIGNALS:
            return {"error_kind": "segfault", "error": f"the worker died from {name} in stage '{stage}'"}
        note = " (the kernel's out-of-memory killer sends this too)" if sig == signal.SIGKILL else ""
        return {"error_kind": "worker_crash", "error": f"the worker was killed by {name}{note} in stage '{stage}'"}
    code = os.WEXITSTATUS(exit_status)
    return {"error_kind": "exit", "error": f"the process exited with code {code} in stage '{stage}' before reporting a result"}


def prepare_workdir(job: dict) -> str:
    workdir = tempfile.mkdtemp(prefix="drk_eval_")
    with open(os.path.join(workdir, "reference.py"), "w") as f:
        f.write(job["task_source"])
    if job.get("code") is not None:
        with open(os.path.join(workdir, "candidate.py"), "w") as f:
            f.write(job["code"])
    return workdir


def gpu_index(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def enter_worker(out_w: int | None) -> None:
    """In a new worker process: own session, output to the pipe, first in line for the OOM killer.
    With out_w=None the spawner has already made the session and redirected the output."""
    if out_w is not None:
        os.setsid()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # if the host runs out of memory, the kernel kills this process first
    except OSError:
        pass
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_job(job: dict, status_w: int, ack_r: int | None, world=None) -> bool:
    """Run one job in this worker; True when it may take another (see worker.main)."""
    os.chdir(job["workdir"])
    sys.path.insert(0, job["workdir"])
    os.environ.update(job.get("env", {}))
    from drk_lab.harness import worker

    return worker.main(job, status_w, ack_r, world)


def read_line(fd: int) -> bytes:
    """The job line from a pipe; b"" at EOF. Nothing follows it until the worker has reported
    (the acknowledgement), so reading in chunks consumes nothing else."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b""
        data += chunk
    return data


def run_spawned(job: dict) -> dict:
    """The simple design: a fresh Python interpreter for every worker."""
    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    env = {**os.environ, **job.get("env", {}), **device_env(job["device"])}
    proc = subprocess.Popen(
        [*ENTRY, "worker", str(status_w)],
        stdin=subprocess.PIPE, stdout=out_w, stderr=out_w, pass_fds=(status_w,),
        start_new_session=True, env=env, cwd=job["workdir"])
    os.close(status_w)
    os.close(out_w)
    proc.stdin.write((json.dumps(job) + "\n").encode())
    proc.stdin.flush()
    try:
        result, finish = supervise(job, proc.pid, status_r, out_r, reaper=False, ack_w=proc.stdin.fileno())
        finish()
        return result
    finally:
        proc.stdin.close()
        proc.returncode = 0  # already reaped by supervise


def device_env(device: str) -> dict:
    if device == "cpu":  # the interpreter must be on before triton is imported
        return {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def set_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "cuda"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "cuda"


# ---- the zygote ------------------------------------------------------------------------------

def serve(device: str, socket_path: str, lock_dir: str, warm: int, profiler: bool = True, uses: int = 1) -> None:
    """The zygote: keeps `warm` supervisor + worker pairs waiting for a job (at most 2 x warm
    pairs alive); a pair serves up to `uses` jobs, while its worker checks itself clean."""
    import torch  # noqa: F401  preloaded for every worker forked from here
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from drk_lab.harness import worker

    if device != "cpu":
        from drk_lab.harness.warm import precompute_in_zygote

        precompute_in_zygote()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(256)
    news_r, news_w = os.pipe()  # pairs write "taken PID" when they accept a job, "free PID" when done
    idle: set[int] = set()
    alive: set[int] = set()
    hello = {"ready": True, "pid": os.getpid(), "versions": worker.versions(),
             "device_name": gpu_name() if device != "cpu" else "cpu"}
    sys.stdout.write(json.dumps(hello) + "\n")
    sys.stdout.flush()
    pending = b""
    while True:
        while len(idle) < warm and len(alive) < 2 * warm:
            pid = fork_supervisor(listener, news_r, news_w, device, lock_dir, profiler, uses)
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


def fork_supervisor(listener: socket.socket, news_r: int, news_w: int, device: str, lock_dir: str,
                    profiler: bool = True, uses: int = 1) -> int:
    """Fork a supervisor with its worker; the worker warms up while the supervisor waits for a job."""
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
                enter_worker(out_w)
                if device != "cpu":
                    from drk_lab.harness.warm import warm_up

                    warm_up(device, lock_dir, gpu_index(device), profiler)
                world = None
                if uses > 1:
                    import torch

                    from drk_lab.harness.reuse import WorldState

                    world = WorldState(torch.device(device))
                while line := read_line(job_r):
                    if line.strip() and not run_job(json.loads(line), status_w, job_r, world):
                        break  # (a blank line is a late acknowledgement)
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


def serve_one(conn: socket.socket, worker_pid: int, status_r: int, out_r: int, job_w: int, use: int = 1,
              keep: bool = False) -> bool:
    """The supervisor's part of one evaluation: hand the job to its worker, watch it, answer.
    True when the worker stays for another job."""
    with conn:
        stream = conn.makefile("rwb")
        job = json.loads(stream.readline())
        job["workdir"] = prepare_workdir(job)
        finish = None
        try:
            try:
                os.write(job_w, (json.dumps(job) + "\n").encode())
            except OSError:
                pass  # the worker died warming up: supervise() classifies its death
            result, finish = supervise(job, worker_pid, status_r, out_r, reaper=True, ack_w=job_w, keep=keep)
            result.update(worker_pid=worker_pid, worker_job=use)
        except BaseException as e:
            result = {"error_kind": "harness", "error": f"supervisor: {type(e).__name__}: {e}"}
        finally:
            shutil.rmtree(job["workdir"], ignore_errors=True)
        stream.write((json.dumps(result) + "\n").encode())
        stream.flush()
        stream.close()
    return finish is not None and finish()  # the caller has its answer; the worker's exit or check is off its clock


def set_parent_death_signal() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# ---- the caller's side -----------------------------------------------------------------------

class Sandbox:
    """Runs jobs in isolated workers; thread-safe; restarts its zygote if it dies."""

    def __init__(self, device: str = "cpu", isolation: str = "fork", warm_workers: int | None = None,
                 profiler: bool = True, worker_uses: int | None = None):
        if isolation not in ("fork", "spawn"):
            raise ValueError("isolation must be 'fork' or 'spawn'")
        self.device, self.isolation, self.profiler = device, isolation, profiler  # profiler: warm-ups start it
        self.warm_workers = warm_workers if warm_workers is not None else default_warm_workers(device)
        self.worker_uses = worker_uses if worker_uses is not None else default_worker_uses()
        self.zygote: subprocess.Popen | None = None
        self.info: dict = {}
        self._lock = threading.Lock()
        self._dir = tempfile.mkdtemp(prefix="drk_sandbox_")
        if len(self._dir) > 70:  # a unix socket's path must fit in 108 bytes: a long $TMPDIR would not
            os.rmdir(self._dir)
            self._dir = tempfile.mkdtemp(prefix="drk_sandbox_", dir="/tmp")
        self.lock_dir = os.path.join(tempfile.gettempdir(), "drk_gpu_locks")
        atexit.register(self.close)

    def start(self) -> dict:
        with self._lock:
            if self.zygote is not None and self.zygote.poll() is None:
                return self.info
            if self.isolation == "spawn":
                if self.info:
                    return self.info
                from drk_lab.harness import worker  # versions for the baseline key, from this interpreter

                self.info = {"versions": worker.versions(),
                             "device_name": gpu_name() if self.device != "cpu" else "cpu"}
                return self.info
            self.socket_path = os.path.join(self._dir, f"zygote{time.monotonic_ns()}.sock")
            env = {**os.environ, **device_env(self.device), "TRITON_CACHE_DIR": str(cache_dir() / "triton")}
            self.zygote = subprocess.Popen(
                [*ENTRY, "serve", self.device, self.socket_path, self.lock_dir, str(self.warm_workers),
                 str(int(self.profiler)), str(self.worker_uses)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
            line = self.zygote.stdout.readline()
            if not line:
                raise RuntimeError("the evaluation server failed to start (see stderr above)")
            self.info = json.loads(line)
            return self.info

    def run(self, job: dict) -> dict:
        info = self.start()
        job = {**job, "device": self.device, "lock_dir": self.lock_dir}
        job.setdefault("host_memory_bytes", default_host_memory_bytes())
        if self.isolation == "spawn":
            job["workdir"] = prepare_workdir(job)
            try:
                return run_spawned(job)
            finally:
                shutil.rmtree(job["workdir"], ignore_errors=True)
        wall = job["timeout_s"] + MAX_LOCK_WAIT_S + 60
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(wall)
                conn.connect(self.socket_path)
                stream = conn.makefile("rwb")
                stream.write((json.dumps(job) + "\n").encode())
                stream.flush()
                line = stream.readline()
        except (OSError, socket.timeout) as e:
            line, reason = b"", f"{type(e).__name__}: {e}"
        else:
            reason = "the supervisor process died"
        if not line:
            return {"error_kind": "worker_crash", "error": f"no result from the sandbox ({reason})",
                    "versions": info.get("versions", {})}
        return json.loads(line)

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


def main(argv: list[str]) -> None:
    if argv[0] == "serve":
        serve(argv[1], argv[2], argv[3], int(argv[4]), argv[5] == "1", int(argv[6]))
    elif argv[0] == "worker":  # spawn isolation: the job and then the acknowledgement on stdin
        enter_worker(None)
        run_job(json.loads(read_line(0)), int(argv[1]), 0)


ENTRY = [sys.executable, "-c", "import sys; from drk_lab.harness.sandbox import main; main(sys.argv[1:])"]
