"""Tables for notebooks: results, profiles, groups of samples, metrics, as pandas DataFrames (they
render as HTML in JupyterLab and as text under papermill)."""

from __future__ import annotations

import pandas as pd

from drk_lab.harness.profiler import format_kernel_table
from drk_lab.harness.result import EvalResult


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def results_frame(rows) -> pd.DataFrame:
    """One line per evaluation: rows of (label, task, EvalResult) or (label, task, EvalResult, expected)."""
    lines = []
    for label, task, result, *expected in rows:
        lines.append({
            "task": f"level{task.level}/{task.name}" if task.level else task.name,
            "candidate": label,
            "correct": result.correct,
            "hacked": ", ".join(result.hack_reasons) if result.hacked else "",
            "error": result.error_kind or "",
            "vs eager": _x(result.speedup),
            "vs compile": _x(result.speedup_compile),
            "coverage": _pct(result.coverage),
            **({"expected": expected[0]} if expected else {}),
        })
    return pd.DataFrame(lines)


def profile_text(result: EvalResult) -> str:
    """One evaluation's profile: the kernel table, bandwidth against the measured copy, the bottleneck."""
    if not result.kernels:
        return f"No profile: {result.timing_note or result.error or 'the evaluation was not profiled'}"
    lines = [format_kernel_table(result.kernels)]
    if result.bandwidth_fraction is not None:
        lines.append(f"Memory traffic: {_pct(result.bandwidth_fraction)} of the measured copy bandwidth")
    if result.runtime_ms is not None:
        lines.append(f"Runtime: {result.runtime_ms:.4f} ms (eager reference {result.ref_runtime_ms or 0:.4f} ms)")
    if result.bottleneck:
        lines.append(f"Bottleneck: {result.bottleneck}")
    return "\n".join(lines)


def groups_frame(trajectories, reply_chars: int = 60) -> pd.DataFrame:
    """Sampled completions per group (task), turn by turn: reward, outcome and the reply's start."""
    lines = []
    for traj in trajectories:
        for turn in traj.turns:
            r = turn.result
            outcome = "hacked" if r.hacked else (r.error_kind or ("correct" if r.correct else "-"))
            lines.append({"task": traj.task, "sample": traj.sample, "turn": turn.index + 1,
                          "reward": round(turn.reward, 3), "outcome": outcome, "speedup": _x(r.speedup),
                          "reply": " ".join(turn.response.split())[:reply_chars]})
    return pd.DataFrame(lines)


def rows_frame(rows: list[dict], columns: list[str] | None = None) -> pd.DataFrame:
    """Plain dict rows (metric tables, case tables, run-log rows), optionally only some columns."""
    frame = pd.DataFrame(rows)
    return frame[[c for c in columns if c in frame.columns]] if columns else frame


def whole(frame: pd.DataFrame):
    """The frame with every row shown (pandas cuts long frames to their first and last rows)."""
    return frame.style.hide(axis="index")


def outcome(result: EvalResult) -> str:
    """One word for how an evaluation ended: correct, hacked, or the harness's error kind."""
    return "hacked" if result.hacked else (result.error_kind or ("correct" if result.correct else "wrong"))


def candidate_outcomes(rows) -> list[dict]:
    """Quickstart rows (label, task, result, expected) -> per kind of candidate (the built-in solutions, the
    planted variants: broken code and a few correct ones, the planted cheats) the count of each outcome, as
    plots.outcome_chart takes them."""
    counts: dict[str, dict] = {}
    for label, _, result, expected in rows:
        kind = "solutions" if label == "solution" else \
            ("planted cheats" if expected in ("hacked", "known gap") else "planted variants")
        row = counts.setdefault(kind, {"checkpoint": kind})
        row[outcome(result)] = row.get(outcome(result), 0) + 1
    return list(counts.values())


def correct_per_turn(trajectories) -> list[dict]:
    """Per turn: the episodes that reached it, the share with a correct (not hacked) kernel at that turn and
    the share correct at some turn so far; what a CPU can show of a policy (nothing is timed there)."""
    rows, best = [], {}
    for turn in range(max((len(t.turns) for t in trajectories), default=0)):
        reached = [t for t in trajectories if len(t.turns) > turn]
        ok = {id(t) for t in reached if t.turns[turn].result.correct and not t.turns[turn].result.hacked}
        best.update({k: True for k in ok})
        rows.append({"turn": turn + 1, "episodes": len(reached), "correct": len(ok) / max(len(reached), 1),
                     "best_correct": len(best) / max(len(trajectories), 1)})
    return rows
