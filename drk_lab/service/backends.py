"""Which evaluator a `backend` names, for drk.evaluate and KernelEnv: the local harness (None or "local"),
this process's Ray pool ("ray", one actor per GPU) or a `drk serve` service ("http://host:port", token from
$DRK_SERVICE_TOKEN). All three have evaluate(task, code, **settings) and evaluate_many(pairs, ...) and give
the same EvalResult. Ray and the HTTP client are imported only when named."""

from __future__ import annotations

from contextlib import contextmanager

from drk_lab.harness import evaluate as local


@contextmanager
def evaluator(backend: str | None):
    """What evaluates for `backend`: the local harness, the process's Ray pool, or a service client."""
    if backend in (None, "local"):
        yield local
    elif backend == "ray":
        from drk_lab.service.ray_pool import default_pool

        yield default_pool()
    elif backend.startswith(("http://", "https://")):
        from drk_lab.service.client import ServiceClient

        client = ServiceClient(backend)
        try:
            yield client
        finally:
            client.close()
    else:
        raise ValueError(f"backend {backend!r}: expected 'local', 'ray' or a service URL (http://host:port)")
