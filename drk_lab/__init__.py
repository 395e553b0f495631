"""drk_lab: a workbench for training language models to write fast, correct Triton kernels.

    import drk_lab as drk
    res = drk.evaluate(drk.builtin_tasks(level=1)[0], code)   # an EvalResult
    drk.configure(worker_uses=1)                               # harness settings; restarts the worker pool
    drk.shutdown()                                             # stop the worker pool (it restarts on demand)
"""

from drk_lab.agent.env import KernelEnv
from drk_lab.harness.caller import configure, shutdown
from drk_lab.harness.evaluate import evaluate, evaluate_many
from drk_lab.harness.result import ERROR_KINDS, EvalResult
from drk_lab.harness.task import Task, TaskError, builtin_solution, builtin_tasks, load_task, load_tasks

__all__ = ["ERROR_KINDS", "EvalResult", "KernelEnv", "Task", "TaskError", "builtin_solution", "builtin_tasks",
           "configure", "evaluate", "evaluate_many", "load_task", "load_tasks", "shutdown"]
