"""evaluate(..., profile="ncu") on a few built-in solutions: Nsight Compute's figures per candidate
kernel and what the ncu run adds to an evaluation. Results go to $OUT/bench_ncu.json."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import drk_lab as drk

OUT = Path(os.environ.get("OUT", "bench_out"))
NAMES = ["level1/01_relu", "level1/08_softmax", "level1/10_layernorm", "level1/12_matmul_fp16",
         "level2/01_linear_bias_relu"]


def main() -> None:
    tasks = {f"level{t.level}/{t.name}": t for t in drk.builtin_tasks()}
    rows = []
    for name in NAMES:
        code = drk.builtin_solution(tasks[name])
        seconds = {}
        for profile in (True, "ncu"):
            start = time.perf_counter()
            r = drk.evaluate(tasks[name], code, profile=profile)
            seconds[str(profile)] = time.perf_counter() - start
        own = [{k: row.get(k) for k in ("name", "mean_us", "dram_throughput_pct", "achieved_occupancy_pct")}
               for row in r.kernels if row["candidate"]]
        rows.append({"task": name, "ok": r.ok, "error": r.error, "notes": r.notes, "kernels": own,
                     "bandwidth_fraction": r.bandwidth_fraction, "bottleneck": r.bottleneck,
                     "seconds_profile": seconds["True"], "seconds_ncu": seconds["ncu"]})
        print(json.dumps(rows[-1]), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_ncu.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
