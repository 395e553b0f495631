"""The supervisor: watches one worker through its jobs, enforces deadlines and the memory limit,
keeps what the candidate prints, classifies every death, and answers the caller.

A supervisor is forked from the zygote together with its worker (zygote.py) and serves up to
`worker_uses` jobs over the zygote's socket; the "spawn" isolation runs WorkerWatch in the caller's own
process instead (caller.py).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import tempfile
import time

from drk_lab.common.processes import folder_bytes, kill_tree, leftover_processes, rss_bytes
from drk_lab.harness.devices import gpu_index
from drk_lab.harness.gpulock import GpuLock
from drk_lab.harness.protocol import MAX_LOCK_WAIT_S, Job, RawResult, encode, new_key, pop_message
from drk_lab.harness.settings import current, triton_store

OUTPUT_KEEP = 8192  # bytes kept from the start and from the end of what the candidate prints
FATAL_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
REUSE_CHECK_S = 60.0  # a worker that takes longer than this to check itself retires


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


class WorkerWatch:
    """One job's worker as its supervisor sees it. States: "running" until it reports ("reported") or
    does not: "failed" (a deadline or the memory limit; killed mid-work) or "died". Then finish() leaves
    it "kept" (it checked itself clean and waits for the next job) or "retired" (killed and reaped).

    GPU lock hand-offs (CUDA): the supervisor holds a shared GPU lock on the worker's behalf whenever the
    worker's kernels may still run or its CUDA context is ending, so neither overlaps anyone's timing:
    - with the lifecycle lock on, from the worker's report (it reports holding a shared lock and waits
      for our acknowledgement, so the lock is never free in between) until it is gone, or until it says
      the GPU part of its self-check passed ("gpu_released");
    - after a failure (killed mid-work), from the kill until it is reaped.
    The caller gets its answer before finish() runs, so none of this is on its clock."""

    def __init__(self, job: Job, pid: int, status_r: int, out_r: int, reaper: bool, ack_w: int | None = None,
                 keep: bool = False):
        self.job, self.pid, self.status_r, self.out_r, self.reaper = job, pid, status_r, out_r, reaper
        self.ack_w, self.keep = ack_w, keep
        self.state = "running"
        self.gpu_guard: GpuLock | None = None  # the shared GPU lock held for the worker
        self.pending = b""  # status bytes read but not yet parsed
        self.exit_status: int | None = None
        self.killed = False
        self.late_line = b""  # a line the worker may still write first (zygote.READY after a slow warm-up)

    def watch(self) -> RawResult:
        """Until the worker reports or fails; the result, with what it printed. A worker that may not
        stay is killed before this returns."""
        job, output = self.job, OutputTail()
        stage, failure, result = "start", None, None
        started = stage_started = time.monotonic()
        waited = 0.0  # seconds spent waiting for the timing lock
        open_fds = {self.status_r, self.out_r}
        scratch, next_scratch_check = current().scratch_bytes, started + 1.0
        while result is None and failure is None:
            now = time.monotonic()
            limit = job.stage_limit(stage)
            active = now - started - waited - (now - stage_started if stage == "wait_lock" else 0.0)
            if limit is not None and now - stage_started > limit:
                failure = ("timeout", f"stage '{stage}' ran past its {limit:g} s limit")
            elif active > job.timeout_s:
                failure = ("timeout", f"the evaluation ran past its {job.timeout_s:g} s limit (in stage '{stage}')")
            elif now - started > job.timeout_s + MAX_LOCK_WAIT_S:
                failure = ("timeout", f"gave up after {now - started:.0f} s waiting for the GPU")
            elif (rss := rss_bytes(self.pid)) > job.host_memory_bytes:
                failure = ("oom", f"host memory use reached {rss / 2**30:.2f} GiB, past the "
                                  f"{job.host_memory_bytes / 2**30:.2f} GiB limit (in stage '{stage}')")
            elif scratch and now > next_scratch_check and job.workdir:  # once a second: a walk costs
                next_scratch_check = now + 1.0
                if folder_bytes(job.workdir) > scratch:
                    failure = ("oom", f"the job's folder passed its {scratch / 2**20:.0f} MiB limit on files "
                                      f"(in stage '{stage}')")
            if failure:
                break
            if not open_fds:
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self.exit_status = status
                    break
                time.sleep(0.01)
                continue
            for fd in select.select(list(open_fds), [], [], 0.1)[0]:
                data = os.read(fd, 65536)
                if not data:
                    open_fds.discard(fd)
                elif fd == self.out_r:
                    output.add(data)
                else:
                    self.pending += data
                    while result is None and failure is None and (message := self.take_message()) is not None:
                        if "forged" in message:
                            failure = ("hacked", "patches_harness: wrote to the harness's status pipe (a line without "
                                       f"the job's signature: {message['forged'][:80]!r})")
                        elif "result" in message:
                            result = RawResult.from_dict(message["result"])
                            self.on_report()
                        elif "build_launcher" in message:  # the worker waits for the answer
                            self.answer({"launcher": build_launcher(message["build_launcher"])})
                        elif "stage" in message:
                            if stage == "wait_lock":
                                waited += time.monotonic() - stage_started
                            stage, stage_started = str(message["stage"]), time.monotonic()
        while self.out_r in open_fds and select.select([self.out_r], [], [], 0)[0]:  # printed before reporting
            data = os.read(self.out_r, 65536)
            output.add(data) if data else open_fds.discard(self.out_r)
        if failure:
            self.state = "failed"
            result = RawResult(error_kind=failure[0], error=failure[1])
            if failure[0] == "hacked":
                result.hacked, result.hack_reasons = True, ["patches_harness"]
        elif result is None:
            self.state = "died"
        if not self.may_stay():
            self.kill()
        if self.state == "died":
            result = death_result(self.wait(), stage)
        result.stdout = output.text()
        if result.eval_seconds is None:
            result.eval_seconds = time.monotonic() - started
        return result

    def take_message(self) -> dict | None:
        """The next status line, or {"forged": ...} for one the worker's own code did not sign (the
        candidate wrote it: the evaluation ends as patches_harness)."""
        if self.late_line and b"\n" in self.pending:
            if self.pending.startswith(self.late_line):
                self.pending = self.pending[len(self.late_line):]
            self.late_line = b""
        message, self.pending = pop_message(self.pending, self.job.key)
        return message

    def answer(self, message: dict) -> None:
        if self.ack_w is not None:
            try:
                os.write(self.ack_w, (json.dumps(message) + "\n").encode())
            except OSError:
                pass  # the worker is already gone

    def on_report(self) -> None:
        self.state = "reported"
        if current().lifecycle_lock and self.job.device != "cpu":  # the worker waits for this ack
            self.gpu_guard = join_gpu_lock(self.job)
            if self.ack_w is not None:
                try:
                    os.write(self.ack_w, b"\n")
                except OSError:
                    pass  # the worker is already gone

    def may_stay(self) -> bool:
        return self.keep and self.state == "reported" and not leftover_processes(self.pid, self.reaper)

    def finish(self) -> bool:
        """After the caller has its answer: wait for the worker's self-check, or for its end. True when
        the worker stays ("kept"); otherwise it is gone ("retired")."""
        if self.state == "failed" and self.gpu_guard is None:  # its kernels may run until its context is gone
            self.gpu_guard = join_gpu_lock(self.job)
        if not self.killed and self.reuse_verdict():
            self.state = "kept"
        else:
            if not self.killed:
                if self.gpu_guard is None:  # it let go of the GPU, then failed its check: it ends under the lock
                    self.gpu_guard = join_gpu_lock(self.job)
                self.kill()
            self.wait()
            self.state = "retired"
        if self.gpu_guard is not None:
            self.gpu_guard.release()
            self.gpu_guard = None
        return self.state == "kept"

    def reuse_verdict(self) -> bool:
        """Wait for the worker's {"reuse": ...} line (what it prints meanwhile is dropped); False if it dies,
        says no, or takes longer than REUSE_CHECK_S. Lets go of the GPU lock on "gpu_released"."""
        deadline = time.monotonic() + REUSE_CHECK_S
        while time.monotonic() < deadline:
            while (message := self.take_message()) is not None:
                if "gpu_released" in message and self.gpu_guard is not None:
                    self.gpu_guard.release()
                    self.gpu_guard = None
                if "reuse" in message or "forged" in message:  # a forged line: something of the job still runs
                    return message.get("reuse") is True
            for fd in select.select([self.status_r, self.out_r], [], [], 0.5)[0]:
                data = os.read(fd, 65536)
                if fd == self.status_r:
                    if not data:
                        return False
                    self.pending += data
        return False

    def kill(self) -> None:
        """Kill the worker's whole process tree (wait() reaps it)."""
        kill_tree(self.pid, self.reaper)
        for fd in (self.status_r, self.out_r):
            os.close(fd)
        self.killed = True

    def wait(self) -> int:
        if self.exit_status is None:
            try:
                self.exit_status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                self.exit_status = 0
        return self.exit_status


def join_gpu_lock(job: Job) -> GpuLock | None:
    """A shared GPU lock taken at once beside the worker's (never queued behind a waiting writer)."""
    if job.device == "cpu":
        return None
    lock = GpuLock(job.lock_dir, gpu_index(job.device))
    lock.label = "supervisor"
    lock.acquire(exclusive=False, queue=False)
    return lock


def death_result(exit_status: int, stage: str) -> RawResult:
    if os.WIFSIGNALED(exit_status):
        sig = os.WTERMSIG(exit_status)
        name = signal.Signals(sig).name
        if sig in FATAL_SIGNALS:
            return RawResult(error_kind="segfault", error=f"the worker died from {name} in stage '{stage}'")
        note = " (the kernel's out-of-memory killer sends this too)" if sig == signal.SIGKILL else ""
        return RawResult(error_kind="worker_crash", error=f"the worker was killed by {name}{note} in stage '{stage}'")
    code = os.WEXITSTATUS(exit_status)
    return RawResult(error_kind="exit",
                     error=f"the process exited with code {code} in stage '{stage}' before reporting a result")


JOB_TRITON_CACHE = "triton_cache"  # Triton's cache of one job, in its folder (triton_cache.py)
TRITON_MANAGER = "drk_lab.harness.triton_cache:JobCache"


def build_launcher(signature: str) -> str | None:
    from drk_lab.harness.triton_cache import build_launcher as build

    return build(signature)


def new_workdir(job: Job) -> None:
    """The job's folder, with its files, and its own compile caches in it (Triton's, and inductor's for a
    baseline job that runs torch.compile): no job's compiles are read by another job."""
    job.workdir = tempfile.mkdtemp(prefix="drk_eval_")
    job.write_files()
    job.env.update({"TRITON_CACHE_DIR": os.path.join(job.workdir, JOB_TRITON_CACHE),
                    "TRITON_CACHE_MANAGER": TRITON_MANAGER, "DRK_TRITON_SHARED": triton_store(),
                    "TORCHINDUCTOR_CACHE_DIR": os.path.join(job.workdir, "inductor_cache")})


def serve_one(conn: socket.socket, worker_pid: int, status_r: int, out_r: int, job_w: int, use: int,
              keep: bool, answered=None, late_line: bytes = b"") -> bool:
    """The supervisor's part of one evaluation: hand the job to its worker, watch it, answer the caller,
    call `answered()` (the zygote's pair gives back its slot), then wait for the worker's self-check.
    True when the worker stays for another job."""
    watch = None
    with conn:
        stream = conn.makefile("rwb")
        job = Job.from_json(stream.readline())
        try:
            new_workdir(job)
            job.key = new_key()
            try:
                os.write(job_w, job.to_json().encode() + b"\n")
            except OSError:
                pass  # the worker died warming up: watch() classifies its death
            watch = WorkerWatch(job, worker_pid, status_r, out_r, reaper=True, ack_w=job_w, keep=keep)
            watch.late_line = late_line
            result = watch.watch()
            result.worker_pid, result.worker_job = worker_pid, use
        except BaseException as e:
            result = RawResult(error_kind="harness", error=f"supervisor: {type(e).__name__}: {e}")
        finally:
            if job.workdir:
                shutil.rmtree(job.workdir, ignore_errors=True)
        stream.write(encode(result.to_dict()))
        stream.flush()
        stream.close()
    if answered is not None:
        answered()
    return watch is not None and watch.finish()  # the caller has its answer; the worker's end is off its clock
