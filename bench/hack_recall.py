"""Recall of the hack checks on the planted corpus, false positives on the built-in solutions, and
what the checks cost. Results go to $OUT/hacks_<phase>.json; see BENCHMARKS.md.

python bench/hack_recall.py recall false_positives overhead

On CUDA everything runs at the tasks' full sizes with timing and profiling; on the CPU at the small
sizes through the interpreter (the GPU-only plants are skipped there).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

import drk_lab as drk
from drk_lab.quickstart import HACKS_DIR, load_variants, task_by_id

OUT = Path(os.environ.get("OUT", "bench_out"))
OUT.mkdir(parents=True, exist_ok=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
IN_FLIGHT = int(os.environ.get("DRK_BENCH_IN_FLIGHT", "8"))


def tasks():
    found = drk.builtin_tasks()
    return found if DEVICE == "cuda" else [t.small() for t in found]


def save(name: str, data) -> None:
    (OUT / f"hacks_{name}.json").write_text(json.dumps(data, indent=1))


def outcome(result, code: str) -> str:
    if result.hacked:
        return "named" if code in result.hack_reasons else "hacked, other reason"
    return "failed unnamed" if result.error_kind else "NOT CAUGHT"


def phase_recall():
    plants = [p for p in load_variants(HACKS_DIR) if p.device in (None, DEVICE)]
    ts = tasks()
    pairs = [(task_by_id(ts, p.task), p.code) for p in plants]
    results = drk.evaluate_many(pairs, max_in_flight=IN_FLIGHT, device=DEVICE, timeout_s=60)
    rows = []
    for plant, r in zip(plants, results):
        code = re.search(r"^# reason: (\S+)", plant.code, re.M).group(1)
        rows.append({"plant": plant.name, "reason": code, "gpu_only": plant.device == "cuda", "outcome": outcome(r, code),
                     "error_kind": r.error_kind, "hack_reasons": r.hack_reasons, "error": (r.error or "")[:300]})
        print(f"{plant.name:45s} {rows[-1]['outcome']:22s} {r.error_kind or 'ok':10s} {r.hack_reasons}", flush=True)
    counts = {k: sum(x["outcome"] == k for x in rows) for k in ("named", "hacked, other reason", "failed unnamed", "NOT CAUGHT")}
    summary = {"device": DEVICE, "plants": len(rows), **counts,
               "recall_hacked": (counts["named"] + counts["hacked, other reason"]) / len(rows),
               "gpu_only_plants": sum(x["gpu_only"] for x in rows)}
    print(summary)
    save(f"recall_{DEVICE}", {"rows": rows, "summary": summary})


def phase_false_positives():
    ts = tasks()
    results = drk.evaluate_many([(t, drk.builtin_solution(t)) for t in ts], max_in_flight=IN_FLIGHT, device=DEVICE)
    rows = [{"task": f"level{t.level}/{t.name}", "ok": r.ok, "hacked": r.hacked, "hack_reasons": r.hack_reasons,
             "error_kind": r.error_kind, "error": (r.error or "")[:300], "coverage": r.coverage,
             "bandwidth_fraction": r.bandwidth_fraction, "bottleneck": r.bottleneck} for t, r in zip(ts, results)]
    for row in rows:
        if not row["ok"]:
            print("FLAGGED" if row["hacked"] else "FAILED", row, flush=True)
    summary = {"device": DEVICE, "solutions": len(rows), "flagged": sum(x["hacked"] for x in rows),
               "failed": sum(not x["ok"] for x in rows)}
    print(summary)
    save(f"false_positives_{DEVICE}", {"rows": rows, "summary": summary})


def phase_overhead(repeats: int = int(os.environ.get("DRK_BENCH_REPEATS", "3"))):
    """Seconds per evaluation, one at a time, with the hack checks (and on CUDA the profiler) on and off."""
    ts = [t for t in tasks() if t.level in (1, 2)]
    rows = []
    for t in ts:
        code = drk.builtin_solution(t)
        row = {"task": f"level{t.level}/{t.name}"}
        for checks in (False, True):
            runs = [drk.evaluate(t, code, device=DEVICE, hack_checks=checks, profile=checks) for _ in range(repeats)]
            row["checks" if checks else "plain"] = statistics.median(r.eval_seconds for r in runs)
            row["stages_checks" if checks else "stages_plain"] = runs[-1].stage_seconds
        row["ratio"] = row["checks"] / row["plain"]
        rows.append(row)
        print(f"{row['task']:38s} plain {row['plain']:.2f} s  checks {row['checks']:.2f} s  x{row['ratio']:.2f}", flush=True)
    summary = {"device": DEVICE, "median_plain_s": statistics.median(x["plain"] for x in rows),
               "median_checks_s": statistics.median(x["checks"] for x in rows),
               "median_ratio": statistics.median(x["ratio"] for x in rows), "max_ratio": max(x["ratio"] for x in rows)}
    print(summary)
    save(f"overhead_{DEVICE}", {"rows": rows, "summary": summary})


if __name__ == "__main__":
    for phase in sys.argv[1:]:
        start = time.perf_counter()
        globals()[f"phase_{phase}"]()
        print(f"== {phase}: {time.perf_counter() - start:.0f} s", flush=True)
