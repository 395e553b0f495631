"""drk_lab: a workbench for training language models to write fast, correct Triton kernels.

    import drk_lab as drk
    res = drk.evaluate(drk.builtin_tasks(level=1)[0], code)   # an EvalResult
    drk.configure(worker_uses=1)                               # harness settings; restarts the worker pool
    drk.shutdown()                                             # stop the worker pool (it restarts on demand)
    drk.evaluate(task, code, backend="http://host:8471")       # the same, on a `drk serve` service
    drk.evaluate_many(pairs, backend="ray")                    # one Ray actor per GPU
"""

from __future__ import annotations

import importlib

# imported on first use (PEP 562), so that `import drk_lab` (and `drk --help`) does not import torch
_LAZY = {"KernelEnv": "drk_lab.agent.env", "configure": "drk_lab.harness.caller", "shutdown": "drk_lab.harness.caller",
         "ERROR_KINDS": "drk_lab.harness.result", "EvalResult": "drk_lab.harness.result",
         **{name: "drk_lab.harness.task" for name in ("Task", "TaskError", "builtin_solution", "builtin_tasks",
                                                       "load_task", "load_tasks")}}

__all__ = ["ERROR_KINDS", "EvalResult", "KernelEnv", "Task", "TaskError", "builtin_solution", "builtin_tasks",
           "configure", "evaluate", "evaluate_many", "load_task", "load_tasks", "shutdown"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'drk_lab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


def evaluate(task: Task | str, code: str, *, backend: str | None = None, **settings) -> EvalResult:
    """Evaluate one candidate (drk_lab.harness.evaluate.evaluate has every setting). backend: None or
    "local" (this machine's isolated workers), "ray" (one actor per GPU of a Ray cluster;
    drk_lab/service/ray_pool.py) or the URL of a `drk serve` service ("http://host:port"; the token from
    $DRK_SERVICE_TOKEN). Every backend gives the same EvalResult."""
    from drk_lab.service.backends import evaluator

    with evaluator(backend) as chosen:
        return chosen.evaluate(task, code, **settings)


def evaluate_many(pairs: list, max_in_flight: int | None = None, progress: bool = True, *,
                  backend: str | None = None, **settings) -> list[EvalResult]:
    """Evaluate many (task, code) pairs concurrently, results in the order given; backend as for evaluate."""
    from drk_lab.service.backends import evaluator

    with evaluator(backend) as chosen:
        return chosen.evaluate_many(pairs, max_in_flight=max_in_flight, progress=progress, **settings)
