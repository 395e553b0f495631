"""drk_lab: a workbench for training language models to write fast, correct Triton kernels."""

from drk_lab.agent.env import KernelEnv
from drk_lab.harness.evaluate import evaluate, evaluate_many
from drk_lab.harness.result import ERROR_KINDS, EvalResult
from drk_lab.harness.task import Task, TaskError, builtin_solution, builtin_tasks, load_task, load_tasks

__all__ = ["ERROR_KINDS", "EvalResult", "KernelEnv", "Task", "TaskError", "builtin_solution", "builtin_tasks",
           "evaluate", "evaluate_many", "load_task", "load_tasks"]
