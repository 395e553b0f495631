"""The service's core, without HTTP: requests become jobs, jobs become evaluations on a pool, results
go into the store.

A request's key (store.result_key) decides everything: a key with a stored result is answered at once
(the job is born done, `cached`); a key already being evaluated gets a job that waits for that same
evaluation; otherwise one evaluation starts. So a result is computed and stored once however many
requests ask for it at the same time. At start-up the jobs a stopped server left unfinished are started
again.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from drk_lab.common.models import harness_version
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import Task, task_from_source
from drk_lab.service.store import Store, result_key

log = logging.getLogger("drk_lab.service")


class LocalPool:
    """The local evaluator in this process's worker pool (one machine, one device): the pool without Ray."""

    def __init__(self, device: str = "auto", slots: int | None = None):
        import os

        from drk_lab.harness.caller import get_sandbox
        from drk_lab.harness.devices import resolve_device

        self.device = resolve_device(device)
        self.slots = slots or max(2, os.cpu_count() or 2)
        self.info = get_sandbox(self.device).start()
        self.busy = 0
        self.lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.slots

    @property
    def device_name(self) -> str:
        return self.info.get("device_name", self.device)

    def evaluate(self, task: Task, code: str, **options) -> EvalResult:
        from drk_lab.harness.evaluate import evaluate

        with self.lock:
            self.busy += 1
        try:
            return evaluate(task, code, device=self.device, **options)
        finally:
            with self.lock:
                self.busy -= 1

    def workers(self) -> list[dict]:
        import os

        return [{"pid": os.getpid(), "device": self.device, "device_name": self.device_name, "busy": self.busy,
                 "slots": self.slots, "kind": "local"}]

    def close(self) -> None:
        pass


@dataclass
class Submitted:
    job_id: str
    key: str
    cached: bool


class JobRunner:
    """Jobs on a pool (LocalPool or ray_pool.RayPool), with the store; thread-safe."""

    def __init__(self, pool, store: Store):
        self.pool, self.store = pool, store
        self.executor = ThreadPoolExecutor(pool.capacity, thread_name_prefix="drk-eval")
        self.in_flight: dict[str, Future] = {}
        self.lock = threading.Lock()
        self.evaluations = 0  # started by this server (not answered from the store)
        self.version = harness_version()  # of the code this server loaded (hashing the files for each request costs)
        for key, request in store.unfinished_jobs():
            with self.lock:
                self._start(key, request)

    def key_of(self, request: dict) -> str:
        return result_key(request["task_source"], request["code"], request["options"], self.pool.device_name,
                          self.version)

    def submit(self, request: dict) -> Submitted:
        """request: task_name, task_source, code, options (all settings, defaults filled in)."""
        key = self.key_of(request)
        with self.lock:  # a finishing evaluation stores its result and leaves in_flight under this lock
            cached = self.store.result(key) is not None
            job_id = self.store.new_job(key, request, cached)
            if not cached:
                self._start(key, request)
        return Submitted(job_id, key, cached)

    def _start(self, key: str, request: dict) -> None:
        if key not in self.in_flight:
            self.evaluations += 1
            self.in_flight[key] = self.executor.submit(self.run, key, request)

    def run(self, key: str, request: dict) -> None:
        """One evaluation, whatever happens: its result is stored and its jobs done, or its jobs failed with
        the reason (the pool's fault, never the candidate's); a key never stays in flight after this."""
        try:
            self.store.mark_running(key)
            # parsed like any task source (never run here), so that its SMALL_SIZES reach the other-shape check
            task = replace(task_from_source(request["task_source"], request["task_name"], check=False),
                           full_sizes=request.get("task_full_sizes") or {}, size_reason=request.get("task_size_reason"))
            result = self.pool.evaluate(task, request["code"], **request["options"])
        except Exception as e:
            log.exception("evaluation of %s failed", key[:12])
            with self.lock:
                self.store.finish_jobs(key, error=f"{type(e).__name__}: {str(e)[:300]}")
                self.in_flight.pop(key, None)
            return
        with self.lock:
            try:
                self.store.put_result(key, result, task.name, self.pool.device_name)
                self.store.finish_jobs(key)
            finally:
                self.in_flight.pop(key, None)

    def future(self, key: str) -> Future | None:
        with self.lock:
            return self.in_flight.get(key)

    def wait(self, key: str, timeout: float | None) -> None:
        future = self.future(key)
        if future is not None:
            try:
                future.result(timeout=timeout)
            except TimeoutError:
                pass

    def status(self, job_id: str) -> dict | None:
        """The job's row, with its result once done."""
        job = self.store.job(job_id)
        if job is None:
            return None
        if job["state"] == "done":
            result = self.store.result(job["key"])
            job["result"] = result.to_dict() if result else None
        return job

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.pool.close()
