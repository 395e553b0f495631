"""Where a teacher run's evaluation time goes, per turn, from its trajectories' evaluation records.

    python experiments/teacher/stages.py runs/teacher_sft [OUT_JSON]

For each turn: evaluations, mean eval_seconds (the worker's wall time for the job), the mean time before
the first stage (a worker still warming up), and the mean of each stage (the correctness trials summed).
Reads trajectories*.jsonl and trajectories.jsonl.gz in the folder, or one such file. Writes JSON to
OUT_JSON (or prints it).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def read_lines(path: Path) -> list[str]:
    if path.is_dir():
        files = sorted(path.glob("trajectories*.jsonl")) or sorted(path.glob("trajectories.jsonl.gz"))
        return [line for f in files for line in read_lines(f)]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [line for line in f if line.strip()]


def stage_table(lines: list[str]) -> dict:
    per_turn: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        for turn in json.loads(line)["turns"]:
            result = turn["result"]
            stages = result.get("stage_seconds") or {}
            if result.get("eval_seconds") is None:
                continue
            row = per_turn[turn["index"] + 1]
            row["eval_seconds"].append(result["eval_seconds"])
            row["before_first_stage"].append(result["eval_seconds"] - sum(stages.values()))
            for name, seconds in stages.items():
                row["trials" if name.startswith("trial") else name].append(seconds)
    out = {}
    for turn, row in sorted(per_turn.items()):
        count = len(row["eval_seconds"])
        out[f"turn{turn}"] = {"evaluations": count, **{name: round(sum(values) / count, 3)
                                                       for name, values in row.items()}}
        out[f"turn{turn}"]["eval_seconds_median"] = round(statistics.median(row["eval_seconds"]), 3)
    return out


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0]).exists():
        print("usage: python experiments/teacher/stages.py RUN_FOLDER_OR_FILE [OUT_JSON]", file=sys.stderr)
        return 2
    table = stage_table(read_lines(Path(argv[0])))
    text = json.dumps(table, indent=1)
    if len(argv) > 1:
        Path(argv[1]).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
