"""Another valid shape of a task, for the extra-shapes hack check (`shape_specialized`).

Only sizes the task itself lets vary are changed:
- a task that declares SMALL_SIZES says which constants are free: all of them are scaled together
  from their small values (x2, or x4 when x2 is the shape being evaluated). Scaling every free
  size by the same whole factor keeps their divisibility ties (channels by groups, dim by heads,
  and by any fixed constant) and powers of two, and keeps the shape small.
- a task without SMALL_SIZES (KernelBench) only has its batch constant changed, by one (or doubled
  if the reference rejects that): about the cost of the shape being evaluated, and never smaller,
  so a kernel with baked-in sizes computes too little rather than writing out of bounds. Sizes
  such as in_features, kernel_size or a reduction axis can be tied to one another in ways only the
  task's author knows.
A size that the reference's own class or helper functions read as a global stays as it is: the
model would bake it in at construction, and an honest candidate that copies the reference could too.
The new shape is accepted when the reference builds and runs on the meta device (no memory, no
compute); the worker still skips the check if the real reference then fails at it.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from drk_lab.harness.sizes import BATCH_NAMES, meta_run
from drk_lab.harness.syntax import parse
from drk_lab.harness.task import Task

__all__ = ["BATCH_NAMES", "OtherShape", "meta_run", "other_shape", "sizes_read_by_the_model"]
SCALES = (2, 4)
INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")


@dataclass
class OtherShape:
    sizes: dict[str, int]  # the constants changed, with their new values
    source: str  # the task's source at that shape
    seed: int = 0  # of its inputs, drawn per evaluation

    def describe(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.sizes.items())


def other_shape(task: Task) -> OtherShape | str:
    """Another valid shape of the task, or why there is none (a note for the result)."""
    return _other_shape(task.source, tuple(task.small_sizes.items()), task.name)


@functools.lru_cache(maxsize=512)
def _other_shape(source: str, small_sizes: tuple, name: str) -> OtherShape | str:
    task = Task(name, source, small_sizes=dict(small_sizes))
    current = task.constants
    baked = sizes_read_by_the_model(source)
    if task.small_sizes:
        free = {k: v for k, v in task.small_sizes.items() if k not in baked and _is_size(current.get(k))}
        proposals = [{k: v * scale for k, v in free.items()} for scale in SCALES]
        what = "none of its SMALL_SIZES can change"
    else:
        batch = next((k for k in BATCH_NAMES if k not in baked and _is_size(current.get(k))), None)
        proposals = [{batch: value} for value in (current[batch] + 1, 2 * current[batch])] if batch else []
        what = "no SMALL_SIZES and no batch-size constant that may change"
    proposals = [p for p in proposals if p and any(current[k] != v for k, v in p.items())]
    if not proposals:
        return f"extra-shape check skipped: {what}"
    failures = []
    for sizes in proposals:
        resized = task.resized(**sizes)
        problem = meta_run(resized.source)
        if problem is None or (problem.startswith("forward") and meta_run(source) is not None):
            return OtherShape(sizes, resized.source)  # (meta cannot run this model at all: the worker will tell)
        failures.append(f"{', '.join(f'{k}={v}' for k, v in sizes.items())}: {problem}")
    return "extra-shape check skipped: no other shape is valid (" + "; ".join(failures) + ")"


def _is_size(value) -> bool:
    return type(value) is int and value > 0


def sizes_read_by_the_model(source: str) -> set[str]:
    """Module-level names read as globals anywhere but get_inputs/get_init_inputs and module level."""
    tree = parse(source)
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in INPUT_FUNCTIONS:
            found |= _globals_read(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found |= _globals_read(item)
                else:
                    found |= {n.id for n in ast.walk(item) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return found


def _globals_read(fn) -> set[str]:
    args = fn.args
    local = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    local |= {a.arg for a in (args.vararg, args.kwarg) if a}
    local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    declared = {name for n in ast.walk(fn) if isinstance(n, ast.Global) for name in n.names}
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and (n.id not in local or n.id in declared)}
