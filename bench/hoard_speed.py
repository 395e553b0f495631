"""How fast host memory grows inside a worker against the same loop outside any worker, and what the supervisor's
memory poll costs. On the CPU, no GPU needed.

    python bench/hoard_speed.py [--gib 6] [--rounds 2]

1. Side by side: a candidate that appends 256 MiB torch tensors in its forward (in a worker, under the
   supervisor's poll) and the same loop in a plain Python process, started at the same moment so that both get the
   same machine. Each reports GB/s and CPU seconds per GiB (its own process time).
2. The poll: a plain process grows by `--gib` while this one reads its /proc/PID/statm (what the supervisor reads)
   never, every 0.1 s (the supervisor's pace), every 1 ms, or flat out: the grower's GB/s and the cost of one read.
Writes $OUT/hoard_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import drk_lab as drk

OUT = Path(os.environ.get("OUT", "bench_out"))
LOOP = """
hoard, t0, c0 = [], time.perf_counter(), time.process_time()
for _ in range(STEPS):
    hoard.append(torch.ones(64 << 20))  # 256 MiB
print("HOARD", STEPS / 4 * 2**30 / 1e9 / (time.perf_counter() - t0), (time.process_time() - c0) / (STEPS / 4))
"""


def outside(steps: int) -> subprocess.Popen:
    code = "import time\nimport torch\n" + LOOP.replace("STEPS", str(steps))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def rates(text: str) -> dict:
    line = next(line for line in text.splitlines() if line.startswith("HOARD"))
    return {"gb_per_s": round(float(line.split()[1]), 3), "cpu_s_per_gib": round(float(line.split()[2]), 3)}


def side_by_side(steps: int) -> dict:
    task = next(t for t in drk.builtin_tasks(level=1) if t.name == "01_relu")
    body = "".join("        " + line + "\n" for line in LOOP.replace("STEPS", str(steps)).strip().splitlines())
    code = "import time\n" + drk.builtin_solution(task).replace(
        "        x = x.contiguous()\n", body + "        raise RuntimeError('done')\n")
    found = {}
    worker = threading.Thread(target=lambda: found.update(r=drk.evaluate(
        task.small(), code, device="cpu", timeout_s=600, host_memory_bytes=(steps // 4 + 2) << 30)))
    worker.start()
    time.sleep(1.0)  # the worker builds its model first
    plain = outside(steps)
    plain_out = plain.communicate()[0]
    worker.join()
    return {"in_worker": rates(found["r"].stdout), "outside": rates(plain_out)}


def poll(steps: int, every: float | None) -> dict:
    grower, reads, spent = outside(steps), 0, 0.0
    while grower.poll() is None:
        if every is None:
            time.sleep(0.1)
            continue
        t0 = time.perf_counter()
        with open(f"/proc/{grower.pid}/statm") as f:
            f.read()
        spent, reads = spent + time.perf_counter() - t0, reads + 1
        time.sleep(every)
    return {"every_s": every, **rates(grower.stdout.read()), "reads": reads,
            "us_per_read": round(1e6 * spent / reads, 1) if reads else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    steps = 4 * args.gib
    drk.evaluate(*next((t.small(), drk.builtin_solution(t)) for t in drk.builtin_tasks(level=1)), device="cpu")  # warm pool
    report = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "gib": args.gib,
              "load_average_at_start": os.getloadavg()[0], "side_by_side": [], "poll": []}
    for _ in range(args.rounds):
        report["side_by_side"].append(side_by_side(steps))
        print(report["side_by_side"][-1], flush=True)
    for _ in range(args.rounds):
        for every in (None, 0.1, 0.001, 0.0):
            report["poll"].append(poll(steps, every))
            print(report["poll"][-1], flush=True)
    report["load_average_at_end"] = os.getloadavg()[0]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hoard_speed.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
