"""Evaluation beyond one process: the HTTP service, the Ray pool, the result store, the client.

Owns: `drk serve` (server: start-up and the token rule; api: the FastAPI routes, request limits and error
bodies), the jobs (jobs: requests to evaluations, one per key, and the local pool), the SQLite result store
(store: keys from hashes of task, code, settings, device and harness version), one Ray actor per GPU
(ray_pool), the HTTP client with retries and timeouts (client), and which of these a `backend` names
(backends).

May import: drk_lab.harness (the local evaluator it runs, Task and EvalResult) and drk_lab.hacks; nothing
above them. It sits beside the harness: the harness never imports it; `drk.evaluate(..., backend=...)` and
KernelEnv reach it through backends, which imports Ray and the HTTP client only when a backend names them,
so that `import drk_lab` needs neither FastAPI nor Ray.
"""
