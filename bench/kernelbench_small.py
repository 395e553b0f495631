"""Derived small sizes on KernelBench: for every problem of levels 1-3, the sizes Task.small() derives
(KernelBench files declare no SMALL_SIZES) and whether the reference then runs on the CPU in seconds.

    python bench/kernelbench_small.py [--kernelbench DIR] [--levels 1,2,3] [--limit-s 5]

Each problem runs in its own forked process (fresh memory, a wall-clock limit): derive the small sizes
on the meta device, then build the reference Model and its inputs on the CPU and call forward once. A
problem works when small() gives a task, the reference builds and runs, and build plus call take at most
--limit-s seconds. Writes $OUT/kernelbench_small.jsonl (one row per problem: sizes, measured cost on the
meta device, seconds, error) and prints the rows that did not work and the count. The KernelBench
checkout is $DRK_KERNELBENCH_DIR, default ../shared/kernelbench beside the repository.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import time
from pathlib import Path

from drk_lab.harness.task import REPO_DIR, TaskError, load_tasks

OUT = Path(os.environ.get("OUT", "bench_out"))
KERNELBENCH = Path(os.environ.get("DRK_KERNELBENCH_DIR", REPO_DIR.parent / "shared" / "kernelbench"))


def measure(task, limit_s: float, queue) -> None:
    """In the child: derive, then run the reference once on the CPU; put one row on the queue."""
    import torch

    from drk_lab.harness.sizes import derive_small_sizes

    row = {"task": f"level{task.level}/{task.name}"}
    start = time.perf_counter()
    try:
        small = task.small()
    except TaskError as e:
        queue.put({**row, "derive_s": time.perf_counter() - start, "error": str(e)})
        return
    derived = derive_small_sizes(task.source)
    row.update(derive_s=time.perf_counter() - start, sizes={k: small.constants[k] for k in small.full_sizes},
               fits=derived.fits, elements=derived.cost.elements, flops=derived.cost.flops)
    try:
        namespace = {"__name__": "drk_bench_reference"}
        exec(compile(small.source, "reference.py", "exec"), namespace)
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.no_grad():
            model = namespace["Model"](*namespace["get_init_inputs"]())
            inputs = namespace["get_inputs"]()
            row["build_s"] = time.perf_counter() - start
            start = time.perf_counter()
            model(*inputs)
        row["call_s"] = time.perf_counter() - start
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    row["works"] = "error" not in row and row["build_s"] + row["call_s"] <= limit_s
    queue.put(row)


def run_one(task, limit_s: float) -> dict:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=measure, args=(task, limit_s, queue))
    child.start()
    child.join(limit_s * 12 + 60)  # the derivation is included: an LSTM's takes seconds on the meta device
    if child.is_alive():
        child.kill()
        child.join()
        return {"task": f"level{task.level}/{task.name}", "error": "timed out", "works": False}
    if queue.empty():
        return {"task": f"level{task.level}/{task.name}", "error": f"exit code {child.exitcode}", "works": False}
    return queue.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", default=str(KERNELBENCH))
    parser.add_argument("--levels", default="1,2,3")
    parser.add_argument("--limit-s", type=float, default=5.0)
    args = parser.parse_args()
    importlib.import_module("torch.utils.flop_counter")  # once here, so a child's seconds are its own work

    tasks = [t for level in args.levels.split(",") for t in load_tasks(Path(args.kernelbench) / f"level{level}")]
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(OUT / "kernelbench_small.jsonl", "w") as f:
        for task in tasks:
            row = run_one(task, args.limit_s)
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            if not row["works"]:
                print(f"{row['task']:70s} {row.get('error') or 'build + call %.1f s' % (row['build_s'] + row['call_s'])}",
                      flush=True)
    works = sum(r["works"] for r in rows)
    fits = sum(bool(r.get("fits")) for r in rows)
    calls = sorted(r["call_s"] for r in rows if "call_s" in r)
    print(f"\n{works} of {len(rows)} problems work at derived small sizes ({fits} within the small budget; "
          f"the rest at their smallest valid shape); median call {calls[len(calls) // 2]:.3f} s, "
          f"slowest {calls[-1]:.2f} s; derivation {sum(r.get('derive_s', 0) for r in rows):.0f} s in all")
    for level in sorted({r["task"].split("/")[0] for r in rows}):
        mine = [r for r in rows if r["task"].startswith(level + "/")]
        print(f"  {level}: {sum(r['works'] for r in mine)} of {len(mine)}")


if __name__ == "__main__":
    main()
