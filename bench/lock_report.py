"""Who held the GPU lock, and who kept timing waiting: a summary of a DRK_LOCK_LOG file.

python bench/lock_report.py lock_log.jsonl [more.jsonl ...]

For the exclusive holds (timing, ncu): how long they held the GPU and how long they waited for it;
for the shared holds, per label (the worker's stage, "supervisor", "warm_up", "reuse_check"):
count, median and total hold, and how many seconds of exclusive waiting they overlapped.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def report(holds: list[dict]) -> dict:
    if not holds:
        return {}
    start, end = min(h["asked"] for h in holds), max(h["released"] for h in holds)
    exclusive = [h for h in holds if h["mode"] == "exclusive"]
    shared = [h for h in holds if h["mode"] == "shared"]
    by_label = defaultdict(lambda: {"count": 0, "held_s": [], "blocked_exclusive_s": 0.0})
    for h in shared:
        row = by_label[h["label"]]
        row["count"] += 1
        row["held_s"].append(h["released"] - h["got"])
        for x in exclusive:  # seconds of this hold inside an exclusive hold's wait
            row["blocked_exclusive_s"] += max(0.0, min(h["released"], x["got"]) - max(h["got"], x["asked"]))
    wall = end - start
    return {
        "wall_s": wall,
        "exclusive_holds": len(exclusive),
        "exclusive_busy_fraction": sum(x["released"] - x["got"] for x in exclusive) / wall if wall else None,
        "exclusive_median_hold_s": statistics.median(x["released"] - x["got"] for x in exclusive) if exclusive else None,
        "exclusive_max_hold_s": max((x["released"] - x["got"] for x in exclusive), default=None),
        "exclusive_median_wait_s": statistics.median(x["got"] - x["asked"] for x in exclusive) if exclusive else None,
        "exclusive_total_wait_s": sum(x["got"] - x["asked"] for x in exclusive),
        "shared": {label: {"count": row["count"], "median_hold_s": statistics.median(row["held_s"]),
                           "total_hold_s": sum(row["held_s"]), "blocked_exclusive_s": row["blocked_exclusive_s"]}
                   for label, row in sorted(by_label.items(), key=lambda kv: -kv[1]["blocked_exclusive_s"])},
    }


if __name__ == "__main__":
    for path in sys.argv[1:]:
        with open(path) as f:
            print(path, json.dumps(report([json.loads(line) for line in f if line.strip()]), indent=1))
