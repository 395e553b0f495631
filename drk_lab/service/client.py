"""A client of `drk serve`, with retries and timeouts; `drk.evaluate(..., backend="http://host:port")` uses it.

    client = ServiceClient("http://gpu-box:8471", token=...)   # token: else $DRK_SERVICE_TOKEN
    res = client.evaluate(task, code, correctness_trials=5)     # the same EvalResult as drk.evaluate
    results = client.evaluate_many([(task, code), ...])

Requests are safe to repeat (a result is keyed by its content), so the client retries what may be
passing trouble: connection errors, timeouts, 502/503/504, with exponential back-off. A 4xx is the
request's own fault and raises ServiceError at once, with the server's message.
"""

from __future__ import annotations

import os
import time

from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import Task

RETRY_STATUS = {502, 503, 504}
POLL_S = 30.0  # each long poll of an unfinished job waits this long on the server


class ServiceError(RuntimeError):
    """The service answered with an error (status and its message), or could not be reached."""

    def __init__(self, status: int | None, message: str):
        super().__init__(f"{status or 'no answer'}: {message}")
        self.status, self.message = status, message


class ServiceClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 60.0, retries: int = 4,
                 backoff_s: float = 0.5):
        import httpx

        self.url = url.rstrip("/")
        token = token or os.environ.get("DRK_SERVICE_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # as many idle connections kept as may be open: httpcore 1.0 closes "surplus" idle ones counting busy ones
        # too, and can close one it has just handed to another thread's request (httpcore #1110)
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout_s + POLL_S),
                                 limits=httpx.Limits(max_connections=100, max_keepalive_connections=100))
        self.retries, self.backoff_s = retries, backoff_s

    def request(self, method: str, path: str, **kwargs) -> dict:
        """One call, retried on passing trouble; the JSON body, or ServiceError."""
        import httpx

        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.http.request(method, path, **kwargs)
            except (httpx.TransportError, httpx.TimeoutException) as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}"
                continue
            try:
                body = response.json()
            except ValueError:
                body = {"error": response.text[:300]}
            if response.status_code >= 400:
                raise ServiceError(response.status_code, body.get("error", str(body)) if isinstance(body, dict)
                                   else str(body))
            return body
        raise ServiceError(None, f"{self.url}{path}: gave up after {self.retries + 1} attempts ({last})")

    @staticmethod
    def body(task: Task | str, code: str, options: dict) -> dict:
        if "device" in options:
            raise ValueError("device is the service's choice: leave it out of a remote evaluation")
        options = {name: value for name, value in options.items() if value is not None}
        where = {"task": task} if isinstance(task, str) else {
            "task_source": task.source, "task_name": task.name, "task_full_sizes": task.full_sizes or None,
            "task_size_reason": task.size_reason}
        return {**where, "code": code, "options": options}

    def submit(self, task: Task | str, code: str, **options) -> str:
        """Start one evaluation; its job id. `task`: a Task (its source is sent) or a task's name on the server."""
        answer = self.request("POST", "/v1/evaluate", json={**self.body(task, code, options), "wait_s": 0})
        return answer["job_id"]

    def wait(self, job_id: str, timeout_s: float | None = None) -> EvalResult:
        """The job's result, polling until it is done (or ServiceError after timeout_s, or for a failed job)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            job = self.request("GET", f"/v1/jobs/{job_id}", params={"wait_s": left})
            if job["state"] == "done":
                return EvalResult.from_dict(job["result"])
            if job["state"] == "failed":
                raise ServiceError(500, f"job {job_id} failed: {job['error']}")
            if deadline is not None and time.monotonic() >= deadline:
                raise ServiceError(None, f"job {job_id} still {job['state']} after {timeout_s:g} s")

    def evaluate(self, task: Task | str, code: str, **options) -> EvalResult:
        """One evaluation, as drk.evaluate(task, code, **options) would give it."""
        answer = self.request("POST", "/v1/evaluate", json={**self.body(task, code, options), "wait_s": POLL_S})
        if answer["state"] == "done":
            return EvalResult.from_dict(answer["result"])
        if answer["state"] == "failed":
            raise ServiceError(500, f"job {answer['job_id']} failed: {answer['error']}")
        return self.wait(answer["job_id"])

    def evaluate_many(self, pairs: list[tuple[Task | str, str]], progress: bool = True, **options) -> list[EvalResult]:
        """Many evaluations in batches of up to 1,000; results in the order given."""
        options.pop("max_in_flight", None)
        job_ids: list[str] = []
        for start in range(0, len(pairs), 1000):
            chunk = [self.body(task, code, options) for task, code in pairs[start:start + 1000]]
            job_ids += [job["job_id"] for job in self.request("POST", "/v1/batch", json={"requests": chunk})["jobs"]]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(job_ids), desc="evaluate (service)", unit="eval")
        results = []
        for job_id in job_ids:
            results.append(self.wait(job_id))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return results

    def health(self) -> dict:
        return self.request("GET", "/health")

    def workers(self) -> list[dict]:
        return self.request("GET", "/v1/workers")["workers"]

    def close(self) -> None:
        self.http.close()
