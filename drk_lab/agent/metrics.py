"""Benchmark metrics over evaluation results: Fast@p, speedup averages, per-turn and per-level tables.

Every function takes results as EvalResult objects or their dicts (`to_dict()`); None stands for a task
with no result (never evaluated) and counts as a failure.

- Fast@p is the share of ALL tasks whose kernel is correct, not hacked and at least p times faster than
  the baseline ("at least": speedup >= p, as Dr. Kernel counts it; KernelBench's script uses a strict >). Failed,
  hacked, untimed (speedup None) and missing results count 0 but stay in the denominator.
- geomean_speedup follows KernelBench's analysis script: the geometric mean over the correct, non-hacked,
  timed results only ("geometric mean of speedup for correct samples"); report it next to the share of
  correct kernels, which `level_summary` does. `failures="as_one"` instead lets every failed task count
  as 1.0 (it falls back to the reference), a convention some reports use; `"as_zero"` is not offered
  because a geometric mean with a zero is zero.
- Speedups are against eager PyTorch (`speedup`) unless `key="speedup_compile"` is given.
"""

from __future__ import annotations

import math
import re

DEFAULT_PS = (1.0, 1.2, 1.5, 2.0, 3.0)


def _field(result, name: str):
    if result is None:
        return None
    if isinstance(result, dict):
        return result.get(name)
    return getattr(result, name, None)


def is_correct(result) -> bool:
    """Correct and not hacked: the kernel counts for the benchmark."""
    return bool(_field(result, "correct")) and not _field(result, "hacked")


def valid_speedup(result, key: str = "speedup") -> float | None:
    """The result's speedup when it is correct, not hacked, and timed with a finite positive speedup."""
    if not is_correct(result):
        return None
    value = _field(result, key)
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def is_fast(result, p: float, key: str = "speedup") -> bool:
    s = valid_speedup(result, key)
    return s is not None and s >= p


def outcome(result) -> str:
    """How an evaluation ended, in one word: "correct" (correct, not hacked, no error), else the
    harness's error kind ("mismatch", "syntax", "no_code", ...)."""
    if is_correct(result) and _field(result, "error_kind") is None:
        return "correct"
    return _field(result, "error_kind") or ("hacked" if _field(result, "hacked") else "wrong")


def fast_p(results, p: float = 1.2, key: str = "speedup", n_tasks: int | None = None) -> float:
    """Share of all tasks (len(results), or n_tasks when some tasks have no entry) that are correct,
    not hacked and at least p times faster than the baseline."""
    results = list(results)
    total = len(results) if n_tasks is None else n_tasks
    if total < len(results):
        raise ValueError(f"n_tasks={n_tasks} is smaller than the {len(results)} results given")
    if total == 0:
        return 0.0
    return sum(is_fast(r, p, key) for r in results) / total


def correct_rate(results, n_tasks: int | None = None) -> float:
    results = list(results)
    total = len(results) if n_tasks is None else n_tasks
    return sum(is_correct(r) for r in results) / total if total else 0.0


def _speedups(results, key: str, failures: str) -> list[float]:
    if failures not in ("exclude", "as_one"):
        raise ValueError(f"failures must be 'exclude' or 'as_one', got {failures!r}")
    values = []
    for r in results:
        s = valid_speedup(r, key)
        if s is not None:
            values.append(s)
        elif failures == "as_one":
            values.append(1.0)
    return values


def geomean_speedup(results, key: str = "speedup", failures: str = "exclude") -> float | None:
    """Geometric mean speedup. failures="exclude" (default, KernelBench): over correct, non-hacked, timed
    results only; None when there is none. failures="as_one": failed or untimed tasks count as 1.0."""
    values = _speedups(list(results), key, failures)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def mean_speedup(results, key: str = "speedup", failures: str = "exclude") -> float | None:
    """Arithmetic mean speedup over the same population as geomean_speedup."""
    values = _speedups(list(results), key, failures)
    return sum(values) / len(values) if values else None


def best_result(turn_results, key: str = "speedup"):
    """The best of one task's results: the fastest correct one, else the first correct one, else the last."""
    turn_results = [r for r in turn_results if r is not None]
    if not turn_results:
        return None
    timed = [r for r in turn_results if valid_speedup(r, key) is not None]
    if timed:
        return max(timed, key=lambda r: valid_speedup(r, key))
    correct = [r for r in turn_results if is_correct(r)]
    return correct[0] if correct else turn_results[-1]


def best_over_turns(per_task_turn_results, key: str = "speedup") -> dict:
    """{task: best result over its turns} (see best_result)."""
    return {task: best_result(turns, key) for task, turns in _as_task_dict(per_task_turn_results).items()}


def _as_task_dict(per_task_turn_results) -> dict:
    if isinstance(per_task_turn_results, dict):
        return {k: list(v) for k, v in per_task_turn_results.items()}
    return {i: list(v) for i, v in enumerate(per_task_turn_results)}


def p_label(p: float) -> str:
    return f"fast@{p:g}"


def fast_p_table(per_task_turn_results, ps=DEFAULT_PS, key: str = "speedup") -> list[dict]:
    """Fast@p per turn and best-so-far over turns.

    per_task_turn_results: {task: [result of turn 1, turn 2, ...]} or a list of such lists. A task with
    fewer turns than the longest counts as failed at the turns it lacks (its best so far still counts).
    One row per turn t (1-based): "turn", "tasks", "fast@p" (turn t alone), "best_fast@p" (any turn <= t),
    "correct" and "best_correct" (shares of tasks).
    """
    tasks = _as_task_dict(per_task_turn_results)
    n = len(tasks)
    n_turns = max((len(t) for t in tasks.values()), default=0)
    rows = []
    for t in range(n_turns):
        at_turn = [turns[t] if t < len(turns) else None for turns in tasks.values()]
        so_far = [best_result(turns[: t + 1], key) for turns in tasks.values()]
        row = {"turn": t + 1, "tasks": n}
        for p in ps:
            row[p_label(p)] = fast_p(at_turn, p, key)
        for p in ps:
            row["best_" + p_label(p)] = fast_p(so_far, p, key)
        row["correct"] = correct_rate(at_turn)
        row["best_correct"] = correct_rate(so_far)
        rows.append(row)
    return rows


def _level_of(task_key) -> int | None:
    if isinstance(task_key, int) and not isinstance(task_key, bool):
        return task_key
    level = getattr(task_key, "level", None)
    if level is not None:
        return int(level)
    m = re.match(r"level_?(\d+)", str(task_key), re.IGNORECASE)
    return int(m.group(1)) if m else None


def level_summary(results, levels: dict | None = None, ps=DEFAULT_PS, key: str = "speedup") -> list[dict]:
    """Dr. Kernel-style summary: one row per level present, then "all".

    results: {task name: result} (level from `levels[name]`, else a "level{N}/" prefix of the name), or a
    list of (task, result) pairs where task is a Task, a level number or such a name. Columns: "level",
    "tasks", "fast@p" for each p, "correct" (share), "n_correct", "mean_speedup" and "geomean_speedup"
    (over correct, timed kernels; see the module docstring).
    """
    pairs = list(results.items()) if isinstance(results, dict) else list(results)
    by_level: dict = {}
    for task, result in pairs:
        level = (levels or {}).get(task) if isinstance(task, str) and levels else None
        level = level if level is not None else _level_of(task)
        by_level.setdefault(level, []).append(result)
    groups = [("no level" if lv is None else f"level {lv}", by_level[lv])
              for lv in sorted(by_level, key=lambda lv: (lv is None, lv or 0))]
    groups.append(("all", [r for _, r in pairs]))
    rows = []
    for name, rs in groups:
        row = {"level": name, "tasks": len(rs)}
        for p in ps:
            row[p_label(p)] = fast_p(rs, p, key)
        row["correct"] = correct_rate(rs)
        row["n_correct"] = sum(is_correct(r) for r in rs)
        row["mean_speedup"] = mean_speedup(rs, key)
        row["geomean_speedup"] = geomean_speedup(rs, key)
        rows.append(row)
    return rows


_SHARES = ("fast@", "best_fast@", "correct", "best_correct")


def _cell(column: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and column.startswith(_SHARES):
        return f"{100 * value:.1f}"
    if isinstance(value, float):
        return f"{value:.2f}x" if "speedup" in column else f"{value:.3g}"
    return str(value)


def _header(column: str) -> str:
    if column.startswith(("fast@", "best_fast@")):
        return column.replace("fast@", "Fast@").replace("best_", "best ")
    return {"correct": "correct %", "best_correct": "best correct %", "mean_speedup": "mean speedup",
            "geomean_speedup": "geomean speedup", "n_correct": "n correct"}.get(column, column)


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Plain-text table of rows from level_summary or fast_p_table (shares shown as percentages)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    cells = [[_header(c) for c in columns]] + [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(w) if i == 0 else text.rjust(w) for i, (text, w) in enumerate(zip(line, widths)))
             for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
