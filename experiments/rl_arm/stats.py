"""The pre-registered comparison: McNemar's test on paired per-task outcomes, and the evaluation's summary.

    mcnemar(b=40, c=20)                       # {"b", "c", "p_exact", "chi2", "p_chi2"}
    compare(sft_records, step_records)        # overall, by part and kind, turn-2 keeps, each with its test

Paired: the same tasks, greedy, before (the SFT model) and after. Only the discordant tasks carry evidence:
b = solved only after, c = solved only before. Under no effect each is a fair coin's, so the exact p is the
two-sided binomial tail of min(b, c) in b + c draws at 1/2 (what the run's README pre-registers); the
chi-square with continuity correction is given beside it for readers who expect it.
"""

from __future__ import annotations

import math
from collections import defaultdict


def mcnemar(b: int, c: int) -> dict:
    """Exact two-sided McNemar: b tasks solved only after, c only before."""
    n = b + c
    if n == 0:
        return {"b": b, "c": c, "p_exact": 1.0, "chi2": 0.0, "p_chi2": 1.0}
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    p_exact = min(1.0, 2 * tail / 2**n)
    chi2 = (abs(b - c) - 1) ** 2 / n
    p_chi2 = math.erfc(math.sqrt(chi2 / 2))  # the chi-square survival function with one degree of freedom
    return {"b": b, "c": c, "p_exact": p_exact, "chi2": chi2, "p_chi2": p_chi2}


def paired(before: dict[str, bool], after: dict[str, bool]) -> dict:
    """Counts over the tasks both sides have: solved by both, neither, only after (b), only before (c); the test."""
    shared = sorted(set(before) & set(after))
    b = sum(after[t] and not before[t] for t in shared)
    c = sum(before[t] and not after[t] for t in shared)
    return {"tasks": len(shared), "before": sum(before[t] for t in shared), "after": sum(after[t] for t in shared),
            "both": sum(before[t] and after[t] for t in shared), **mcnemar(b, c)}


def solved_by(records: list[dict], keep=lambda r: True) -> dict[str, bool]:
    return {r["task"]: bool(r["solved"]) for r in records if keep(r)}


def kept_second(records: list[dict]) -> dict[str, bool]:
    """Tasks whose first kernel was correct: did the second stay correct? (the secondary endpoint)"""
    return {r["task"]: bool(len(r["correct"]) > 1 and r["correct"][1]) for r in records if r["correct"] and r["correct"][0]}


def summary(records: list[dict]) -> dict:
    """Solved counts overall, by part (heldout, fresh) and by held-out kind; Fast@1 and Fast@1.2 where timed."""
    out: dict = {"tasks": len(records), "solved": sum(r["solved"] for r in records), "by_part": {}, "by_kind": {}}
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        groups[("by_part", r["part"])].append(r)
        if r["part"] == "heldout":
            groups[("by_kind", r["kind"])].append(r)
    for (where, name), rows in sorted(groups.items()):
        out[where][name] = {"tasks": len(rows), "solved": sum(r["solved"] for r in rows)}
    timed = [r for r in records if r.get("fast@1") is not None]
    if timed:
        out["fast@1"] = sum(r["fast@1"] for r in timed) / len(timed)
        out["fast@1.2"] = sum(r["fast@1.2"] for r in timed) / len(timed)
    return out


def compare(before: list[dict], after: list[dict]) -> dict:
    """The paired comparison of two evaluations' records: the primary (held-out), the fresh train-side tasks,
    every held-out kind, and the turn-2 keeps of tasks whose first kernel both got right."""
    out = {"heldout": paired(solved_by(before, lambda r: r["part"] == "heldout"),
                             solved_by(after, lambda r: r["part"] == "heldout")),
           "fresh": paired(solved_by(before, lambda r: r["part"] == "fresh"),
                           solved_by(after, lambda r: r["part"] == "fresh")),
           "by_kind": {}}
    for kind in sorted({r["kind"] for r in before if r["part"] == "heldout"}):
        def of_kind(r, kind=kind):
            return r["part"] == "heldout" and r["kind"] == kind
        out["by_kind"][kind] = paired(solved_by(before, of_kind), solved_by(after, of_kind))
    first_both = set(kept_second(before)) & set(kept_second(after))
    out["second_turn_keeps"] = paired({t: v for t, v in kept_second(before).items() if t in first_both},
                                      {t: v for t, v in kept_second(after).items() if t in first_both})
    return out
