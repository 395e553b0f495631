"""How fast and how steady is evaluate()? Results go to $OUT/bench_<phase>.json; see BENCHMARKS.md.

python bench/eval_speed.py solutions latency          # per-task speedups; seconds per evaluation
python bench/eval_speed.py throughput stability stability_serial trials

Each evaluation of a "new kernel" gets a unique comment inside its @triton.jit functions, so
Triton compiles it afresh, as it would a model's new answer.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import torch

import drk_lab as drk
from drk_lab.harness.profiler import measure_copy_bandwidth
from drk_lab.harness.profiler import io_bytes as forward_bytes  # the same count as the harness's bandwidth figure
from drk_lab.harness.settings import current as harness_settings

OUT = Path(os.environ.get("OUT", "bench_out"))
OUT.mkdir(parents=True, exist_ok=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# evaluations in flight in the throughput and stability phases: 16 on a GPU, the RL target's setting
# (results record it as in_flight); 8 on a CPU
IN_FLIGHT = int(os.environ.get("DRK_BENCH_IN_FLIGHT", "16" if DEVICE == "cuda" else "8"))


def tasks(levels=(1, 2, 3)):
    found = [t for t in drk.builtin_tasks() if t.level in levels]
    return found if DEVICE == "cuda" else [t.small() for t in found]


def fresh_kernel(code: str) -> str:
    """The same solution with a unique comment in every kernel body: a cache miss for Triton."""
    lines, out, pending = code.splitlines(), [], False
    for line in lines:
        out.append(line)
        if line.lstrip().startswith("@triton.jit"):
            pending = True
        elif pending and line.rstrip().endswith(":") and not line.lstrip().startswith("@"):
            out.append(f"    # fresh {uuid.uuid4().hex}")
            pending = False
    return "\n".join(out) + "\n"


def io_bytes(task) -> int:
    """Bytes of all inputs plus all outputs of the reference forward, from a meta-device run."""
    namespace = {}
    exec(compile(task.source, task.name, "exec"), namespace)
    with torch.device("meta"):
        inputs = namespace["get_inputs"]()
        model = namespace["Model"](*namespace["get_init_inputs"]())
        return forward_bytes(inputs, model(*inputs))


def save(name: str, data) -> None:
    (OUT / f"bench_{name}.json").write_text(json.dumps(data, indent=1))


def phase_solutions():
    """Every built-in solution at full size: speedups, and bandwidth against a measured copy."""
    bandwidth = measure_copy_bandwidth("cuda") if DEVICE == "cuda" else None
    ts = tasks()
    results = drk.evaluate_many([(t, drk.builtin_solution(t)) for t in ts], max_in_flight=IN_FLIGHT, device=DEVICE)
    rows = []
    for t, r in zip(ts, results):
        row = {"task": f"level{t.level}/{t.name}", "ok": r.ok, "error": r.error, "speedup": r.speedup,
               "speedup_compile": r.speedup_compile, "runtime_ms": r.runtime_ms, "iqr_ms": r.runtime_iqr_ms,
               "ref_ms": r.ref_runtime_ms, "ref_compile_ms": r.ref_compile_runtime_ms}
        if r.runtime_ms:
            row["io_bytes"] = io_bytes(t)
            row["achieved_bytes_per_s"] = row["io_bytes"] / (r.runtime_ms * 1e-3)
            row["fraction_of_copy"] = row["achieved_bytes_per_s"] / bandwidth
        rows.append(row)
        print(f"{row['task']:38s} ok={r.ok} x{r.speedup or 0:6.2f} compile x{r.speedup_compile or 0:5.2f} "
              f"{r.runtime_ms or 0:8.4f} ms  {row.get('fraction_of_copy', 0):5.1%} of copy", flush=True)
    save("solutions", {"copy_bytes_per_s": bandwidth, "rows": rows})


def phase_plain():
    """Each built-in level-1/2 solution timed by the harness and by a plain triton.testing.do_bench loop
    (median, its own L2 clearing) in this process, on a model built straight from the files: do the
    harness's numbers match an independent measurement?"""
    import tempfile

    from triton.testing import do_bench

    from drk_lab.common.models import load_module

    ts = tasks((1, 2))
    results = drk.evaluate_many([(t, drk.builtin_solution(t)) for t in ts], max_in_flight=IN_FLIGHT, device=DEVICE)
    folder = Path(tempfile.mkdtemp())
    rows = []
    for t, r in zip(ts, results):
        (folder / f"{t.name}.py").write_text(drk.builtin_solution(t))
        (folder / f"ref_{t.name}.py").write_text(t.source)
        solution = load_module(f"solution_{t.name}", str(folder / f"{t.name}.py"))
        reference = load_module(f"ref_{t.name}", str(folder / f"ref_{t.name}.py"))
        torch.manual_seed(0)
        with torch.device(DEVICE):  # only while building: the device mode slows every torch call inside it
            model = solution.ModelNew(*reference.get_init_inputs())
            inputs = reference.get_inputs()
        with torch.no_grad():
            plain_ms = do_bench(lambda m=model, a=inputs: m(*a), warmup=25, rep=100, return_mode="median")
        del model, inputs
        torch.cuda.empty_cache()
        rows.append({"task": f"level{t.level}/{t.name}", "harness_ms": r.runtime_ms, "plain_ms": plain_ms,
                     "timing_trials": r.timing_trials,
                     "ratio": r.runtime_ms / plain_ms if r.runtime_ms else None})
        print(rows[-1], flush=True)
    save("plain", rows)


def phase_baselines():
    """Every built-in task's eager and torch.compile baselines measured afresh, IN_FLIGHT tasks at once
    (what `drk baselines builtin` does): wall time, and how long each timing held the GPU alone."""
    from drk_lab.harness.evaluate import ensure_baselines

    ts = tasks()
    since, start = time.time(), time.perf_counter()
    baselines = ensure_baselines(ts, device=DEVICE, max_in_flight=IN_FLIGHT)
    wall = time.perf_counter() - start
    summary = {"tasks": len(ts), "wall_s": wall, "measured": sum(bool(b.get("eager")) for b in baselines),
               "gpu_lock": lock_holds(since, time.time()),  # with DRK_LOCK_LOG: how long each timing held the GPU
               "trials": [b["eager"]["trials"] for b in baselines if b.get("eager")]}
    print(summary)
    save("baselines", summary)


def phase_latency():
    """One evaluation at a time, each compiling a new kernel: seconds per evaluation."""
    rows = []
    for t in tasks((1, 2)):
        code = drk.builtin_solution(t)
        start = time.perf_counter()
        r = drk.evaluate(t, fresh_kernel(code), device=DEVICE)
        rows.append({"task": f"level{t.level}/{t.name}", "level": t.level, "seconds": time.perf_counter() - start,
                     "ok": r.ok, "stages": r.stage_seconds, "error": r.error})
        print(f"{rows[-1]['task']:38s} {rows[-1]['seconds']:5.2f} s ok={r.ok} {r.stage_seconds}", flush=True)
    summary = {f"level{lvl}_median_s": statistics.median(x["seconds"] for x in rows if x["level"] == lvl) for lvl in (1, 2)}
    print(summary)
    save("latency", {"rows": rows, "summary": summary})


def lock_holds(since: float, until: float) -> dict | None:
    """bench/lock_report.py's summary of the DRK_LOCK_LOG holds asked for in [since, until]."""
    from lock_report import report

    path = os.environ.get("DRK_LOCK_LOG")
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        holds = [json.loads(line) for line in f if line.strip()]
    return report([h for h in holds if since <= h["asked"] <= until])


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine so far (/proc/stat), or None where there is none."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return sum(ticks) - idle, sum(ticks)


class GpuBusy:
    """NVML's GPU utilization sampled every 0.2 s in a thread while the block runs; mean() is the share of
    the time a kernel was running (None on a CPU). With cpu_busy it says which side sets the rate."""

    def __enter__(self):
        import threading

        from drk_lab.common.gpu_clocks import busy_percent

        self.samples, self.stop = [], threading.Event()

        def sample():
            while not self.stop.wait(0.2):
                if (percent := busy_percent(0)) is not None:
                    self.samples.append(percent / 100)

        self.thread = threading.Thread(target=sample, daemon=True)
        if DEVICE == "cuda":
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def throughput(isolation: str, pairs, profile: bool = True) -> dict:
    """Seconds for `pairs` once the pool is warm: two untimed rounds of IN_FLIGHT evaluations first (the
    pool grows past IN_FLIGHT workers, for those checking themselves between jobs), then SETTLE_S for the
    last workers forked to warm up, so that workers starting (about 4 s each before any work) are not
    counted. What evaluate_many does, with each evaluation's start and end seen from the caller."""
    from drk_lab.harness.evaluate import evaluate, map_in_threads

    warm = [(t, fresh_kernel(code)) for t, code in (pairs * 2)[:2 * IN_FLIGHT]]
    drk.evaluate_many(warm, max_in_flight=IN_FLIGHT, device=DEVICE, isolation=isolation, profile=profile,
                      progress=False)
    time.sleep(float(os.environ.get("DRK_BENCH_SETTLE_S", "8" if DEVICE == "cuda" else "2")))
    spans = [(0.0, 0.0)] * len(pairs)

    def one(i: int):
        began = time.perf_counter()
        result = evaluate(*pairs[i], device=DEVICE, isolation=isolation, profile=profile)
        spans[i] = (began - start, time.perf_counter() - start)
        return result

    since = time.time()
    start, ticks = time.perf_counter(), cpu_ticks()
    with GpuBusy() as gpu:
        results = map_in_threads(one, list(range(len(pairs))), IN_FLIGHT, "evaluate", "eval")
    seconds, ticks_after = time.perf_counter() - start, cpu_ticks()
    # the share of all cores busy meanwhile: near 1, the CPUs (compiles, and waits that spin) set the rate
    cpu_busy = ((ticks_after[0] - ticks[0]) / max(ticks_after[1] - ticks[1], 1)) if ticks and ticks_after else None
    stages, parts = {}, {}
    for r in results:
        for stage, t in (r.stage_seconds or {}).items():
            stages.setdefault(stage.rstrip("0123456789") or stage, []).append(t)
        for part, t in r.trial_seconds.items():
            parts.setdefault(part, []).append(t)
    return {"isolation": isolation, "profile": profile, "evaluations": len(pairs), "seconds": seconds,
            "per_second": len(pairs) / seconds, "all_ok": all(r.ok for r in results),
            "failures": [r.error for r in results if not r.ok][:3],
            "cpu_busy": cpu_busy, "gpu_busy": gpu.mean(),
            "lifecycle_lock": harness_settings().lifecycle_lock,
            "worker_uses": harness_settings().worker_uses_for(DEVICE) if isolation == "fork" else 1,
            "on_reused_workers": sum(r.worker_job > 1 for r in results),
            "median_stage_seconds": {k: statistics.median(v) for k, v in stages.items()},
            "median_trial_seconds": {k: statistics.median(v) for k, v in parts.items()},  # all trials together
            "median_eval_seconds": statistics.median(r.eval_seconds for r in results if r.eval_seconds),
            **in_flight_summary(results, spans, seconds), "gpu_lock": lock_holds(since, time.time())}


def in_flight_summary(results, spans, seconds: float) -> dict:
    """Where the wall time between evaluations goes. By Little's law, evaluations/s = (evaluations running at
    once) / (mean seconds each): `worker_in_flight` (the sum of the workers' eval_seconds over the wall time)
    against IN_FLIGHT says how many ran at once in workers; `caller_in_flight` (the caller's threads'
    time inside evaluate()) is lower than IN_FLIGHT only by the batch's ramp-down (`tail_s`: from the
    last evaluation's start to the end) and the caller's own work; the difference between the two is time an
    evaluation spent outside its worker: waiting for a free worker (one of the pool's at most 2 x warm
    evaluating, or one still checking itself), the caller's static checks, the transfers."""
    took = sorted(r.eval_seconds for r in results if r.eval_seconds)
    outside = sorted(end - began - (r.eval_seconds or 0.0) for r, (began, end) in zip(results, spans))
    warm = harness_settings().warm_workers_for(DEVICE)
    return {"in_flight": IN_FLIGHT, "warm_workers": warm, "spare_workers": harness_settings().spare_workers_for(warm, DEVICE),
            "mean_eval_seconds": statistics.fmean(took) if took else None,
            "p90_eval_seconds": took[int(0.9 * (len(took) - 1))] if took else None,
            "max_eval_seconds": took[-1] if took else None,
            "worker_in_flight": sum(took) / seconds,
            "caller_in_flight": sum(end - began for began, end in spans) / seconds,
            "median_outside_worker_s": statistics.median(outside), "max_outside_worker_s": outside[-1],
            "tail_s": seconds - max(began for began, _ in spans),
            "workers_used": len({r.worker_pid for r in results if r.worker_pid})}


def phase_throughput(isolations=("fork", "spawn"), profile: bool = True, name: str = "throughput"):
    """Many candidates in flight (each built-in level-1/2 task DRK_BENCH_ROUNDS times, every one a
    new kernel): the fork server against a fresh Python per evaluation."""
    # 4 rounds on a GPU (112 kernels): with 16 in flight, 2 rounds leave a third of the window to the tail
    ts, rounds = tasks((1, 2)), int(os.environ.get("DRK_BENCH_ROUNDS", "4" if DEVICE == "cuda" else "2"))
    rows = []
    for isolation in isolations:
        pairs = [(t, fresh_kernel(drk.builtin_solution(t))) for _ in range(rounds) for t in ts]
        rows.append(throughput(isolation, pairs, profile))
        print(rows[-1], flush=True)
    if len(rows) == 2:
        rows.append({"ratio": rows[0]["per_second"] / rows[1]["per_second"]})
        print(rows[-1])
    lifecycle = "" if harness_settings().lifecycle_lock else "_no_lifecycle_lock"
    save(name + lifecycle, rows)


def phase_throughput_no_profile():
    """As phase_throughput with profile=False (hack checks still on): workers skip the profiler's start-up."""
    phase_throughput(profile=False, name="throughput_no_profile")


def phase_throughput_fork():
    """The fork server alone (to compare settings such as DRK_LIFECYCLE_LOCK=0 or DRK_WORKER_USES=1)."""
    spare = f"_spare{harness_settings().spare_workers}" if harness_settings().spare_workers is not None else ""
    phase_throughput(("fork",), name=f"throughput_fork_uses{harness_settings().worker_uses_for(DEVICE)}{spare}")


def cv(values):
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def phase_stability():
    """The same kernel evaluated 10 times, IN_FLIGHT evaluations at once: CV of its speedup."""
    stability(IN_FLIGHT, "stability")


def phase_stability_serial():
    """As phase_stability, one evaluation at a time."""
    stability(1, "stability_serial")


def phase_stability_subset():
    """phase_stability on six tasks, named by the lock setting (for A/B runs of DRK_LIFECYCLE_LOCK=0)."""
    names = {"01_relu", "08_softmax", "10_layernorm", "14_transpose", "06_scaled_masked_softmax", "08_conv1x1_batchnorm_relu"}
    lifecycle = "" if harness_settings().lifecycle_lock else "_no_lifecycle_lock"
    stability(IN_FLIGHT, "stability_subset" + lifecycle, names=names)


def stability(in_flight: int, name: str, repeats: int = 10, names: set[str] | None = None):
    ts = [t for t in tasks((1, 2)) if names is None or t.name in names]
    pairs = [(t, drk.builtin_solution(t)) for t in ts for _ in range(repeats)]
    start = time.perf_counter()
    results = drk.evaluate_many(pairs, max_in_flight=in_flight, device=DEVICE)
    wall = time.perf_counter() - start
    rows = []
    for i, t in enumerate(ts):
        speedups = [r.speedup for r in results[i * repeats:(i + 1) * repeats] if r.speedup]
        mine = results[i * repeats:(i + 1) * repeats]
        rows.append({"task": f"level{t.level}/{t.name}", "speedups": speedups, "cv": cv(speedups) if speedups else None,
                     "eval_seconds": [r.eval_seconds for r in mine], "failures": [r.error for r in mine if not r.ok],
                     "gpu_clock": [r.gpu_clock.get("candidate") for r in mine]})
        print(f"{rows[-1]['task']:38s} cv={rows[-1]['cv']}", flush=True)
    cvs = [x["cv"] for x in rows if x["cv"] is not None]
    summary = {"in_flight": in_flight, "evaluations_per_s": len(pairs) / wall, "median_cv": statistics.median(cvs) if cvs else None,
               "max_cv": max(cvs) if cvs else None}
    print(summary)
    save(name, {"rows": rows, "summary": summary})


def phase_trials(repeats: int = 5):
    """How the candidate's median time and its spread change with the number of timing trials."""
    names = {"01_relu", "08_softmax", "12_matmul_fp16", "16_cross_entropy", "01_linear_bias_relu", "06_scaled_masked_softmax"}
    ts = [t for t in tasks((1, 2)) if t.name in names]
    rows = []
    for trials in (10, 30, 100, 300):
        pairs = [(t, drk.builtin_solution(t)) for t in ts for _ in range(repeats)]
        start = time.perf_counter()
        results = drk.evaluate_many(pairs, max_in_flight=IN_FLIGHT, device=DEVICE, timing_trials=trials)
        seconds = time.perf_counter() - start
        for i, t in enumerate(ts):
            rs = results[i * repeats:(i + 1) * repeats]
            ms = [r.runtime_ms for r in rs if r.runtime_ms]
            sp = [r.speedup for r in rs if r.speedup]
            rows.append({"trials": trials, "task": t.name, "median_ms": statistics.median(ms) if ms else None,
                         "cv_ms": cv(ms) if ms else None, "cv_speedup": cv(sp) if sp else None,
                         "mean_iqr_ms": statistics.fmean(r.runtime_iqr_ms for r in rs if r.runtime_iqr_ms is not None) if ms else None})
        print(f"trials={trials}: {seconds:.1f} s for {len(pairs)} evaluations", flush=True)
        for row in rows[-len(ts):]:
            print("   ", row, flush=True)
    save("trials", rows)


if __name__ == "__main__":
    for phase in sys.argv[1:]:
        start = time.perf_counter()
        globals()[f"phase_{phase}"]()
        print(f"== {phase}: {time.perf_counter() - start:.0f} s", flush=True)
