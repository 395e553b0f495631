"""The service on GPUs: its throughput against in-process evaluate_many on the same candidates, and, on a
machine with several GPUs, one Ray actor per GPU (per-GPU and total throughput, one kernel's timing on each).

    OUT=out python bench/service_gpu.py                       # both phases (multi_gpu skips on one GPU)
    OUT=out python bench/service_gpu.py throughput --copies 2 --in-flight 8
    OUT=out python bench/service_gpu.py multi_gpu --copies 8 --in-flight 16    # 264 fresh candidates a pass

throughput: the built-in suite's solutions (all levels, full size, timing and profiling on) plus `--copies`
fresh variants of each (a unique comment in every kernel body: never seen by Triton's cache, as a model's
new answer would be). Baselines are measured first, so no phase pays for them. Then, each on its own fresh
variants of the same solutions: (1) drk.evaluate_many in this process, `--in-flight` at once; (2) the same
through `drk serve --pool local --slots N` on 127.0.0.1 (HTTP, store, job table); (3) through
`drk serve --pool ray` (one actor per GPU); (4) pass (2)'s candidates again: all answered from the store.
multi_gpu: `drk serve --pool ray` (one Ray actor per GPU) on GPU 0 alone and then on every GPU, each
warmed with the suite's solutions and then given `--copies` fresh variants of each: evaluations/s per GPU
and in all, the scaling efficiency (all GPUs' rate / (GPUs x one GPU's rate)), and on every GPU repeats of
one solution (softmax, layernorm): whether its runtime differs across GPUs by more than its repeats spread
on one. Without Ray (or with `--multi-gpu-pool threads`): one drk.evaluate_many(device="cuda:N") per GPU,
each in its own thread of this process. Writes $OUT/service_gpu.json. Ray and FastAPI on a machine
without network: bench/device_wheels.sh, docs/service.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_speed import fresh_kernel  # noqa: E402  the same fresh variants as the other benchmarks

import drk_lab as drk  # noqa: E402
from drk_lab.service.client import ServiceClient  # noqa: E402

OUT = Path(os.environ.get("OUT", "bench_out"))
TOKEN = "gpu-bench-token-" + os.urandom(8).hex()
OPTIONS = {"timing_trials": 100, "correctness_trials": 5}


def solutions() -> list[tuple]:
    return [(t, drk.builtin_solution(t)) for t in drk.builtin_tasks()]


def fresh(pairs: list[tuple], copies: int) -> list[tuple]:
    return [(task, fresh_kernel(code)) for task, code in pairs for _ in range(copies)]


def summary(results: list, wall: float) -> dict:
    return {"evaluations": len(results), "wall_s": round(wall, 2), "evaluations_per_s": round(len(results) / wall, 3),
            "correct": sum(r.correct for r in results), "hacked": sum(r.hacked for r in results),
            "errors": sorted({r.error_kind for r in results if r.error_kind}),
            "hack_reasons": sorted({reason for r in results for reason in r.hack_reasons}),
            "median_speedup": statistics.median([r.speedup for r in results if r.speedup] or [0])}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    store = os.path.join(tempfile.mkdtemp(prefix="drk_gpu_bench_"), "store.sqlite")
    proc = subprocess.Popen([sys.executable, "-m", "drk_lab.cli", "serve", "--port", str(port), "--store", store, *args],
                            env={**os.environ, "DRK_SERVICE_TOKEN": TOKEN, **(env or {})}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"drk serve {' '.join(args)} exited during start-up")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.5)
    raise SystemExit("the server did not come up in 10 minutes")


def through_service(pairs: list[tuple], warm: tuple, *args: str, again: bool = False) -> dict:
    """The pairs through a fresh `drk serve ARGS`, after one warm-up request (`warm`, evaluated in the
    warm-up pass already: its baseline is cached), so that neither side pays for starting its workers."""
    proc, url = start_server(*args)
    client = ServiceClient(url, token=TOKEN, timeout_s=600)
    try:
        client.evaluate(*warm, **OPTIONS)
        t0 = time.monotonic()
        results = client.evaluate_many(pairs, **OPTIONS)
        out = summary(results, time.monotonic() - t0)
        if again:
            t0 = time.monotonic()
            repeat = client.evaluate_many(pairs, **OPTIONS)
            out["again_from_store"] = summary(repeat, time.monotonic() - t0)
        out["workers"] = client.workers()
        return out
    finally:
        client.close()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)


def phase_throughput(copies: int, in_flight: int) -> dict:
    base = solutions()
    print("baselines and warm-up: every solution once", flush=True)
    warm = drk.evaluate_many(base, max_in_flight=in_flight, **OPTIONS)
    report = {"candidates_per_pass": len(base) * copies, "in_flight": in_flight,
              "warm_up": summary(warm, 1.0) | {"wall_s": None, "evaluations_per_s": None}}
    t0 = time.monotonic()
    local = drk.evaluate_many(fresh(base, copies), max_in_flight=in_flight, **OPTIONS)
    report["in_process_evaluate_many"] = summary(local, time.monotonic() - t0)
    save({"throughput (partial)": report})
    drk.shutdown()  # the GPU's worker pools belong to the server from here
    report["service_local_pool"] = through_service(fresh(base, copies), base[0], "--pool", "local", "--slots",
                                                   str(in_flight), again=True)
    save({"throughput (partial)": report})
    if not have_ray():
        report["service_ray_pool"] = {"skipped": "ray is not installed (bench/device_wheels.sh)"}
        return report
    report["service_ray_pool"] = through_service(fresh(base, copies), base[0], "--pool", "ray", "--slots", str(in_flight))
    return report


def save(report: dict) -> None:
    """Written after every pass, so that a run cut short by its time limit still reports what it measured."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "service_gpu.json").write_text(json.dumps(report, indent=1, default=str))


def have_ray() -> bool:
    return importlib.util.find_spec("ray") is not None


def gpu_count() -> int:
    return torch.cuda.device_count()


def phase_multi_gpu(copies: int, in_flight: int, pool_kind: str = "auto") -> dict:
    gpus = gpu_count()
    if gpus < 2:
        return {"skipped": f"{gpus} GPU(s): one evaluator per GPU needs several"}
    if pool_kind == "threads" or (pool_kind == "auto" and not have_ray()):
        return {"pool": "threads"} | per_device_threads([f"cuda:{i}" for i in range(gpus)], copies, in_flight)
    return {"pool": "ray service"} | ray_service(gpus, copies, in_flight)


def per_device_threads(devices: list[str], copies: int, in_flight: int, pairs: list[tuple] | None = None,
                       same_kernel_tasks: tuple[str, ...] = ("08_softmax", "10_layernorm")) -> dict:
    """The multi-GPU measurement without Ray: one drk.evaluate_many(device=D) per device, each in a thread of
    this process (the harness keeps one worker pool per device, and the GPU lock is per physical GPU)."""
    base = pairs or solutions()
    for device in devices:  # baselines and warm workers on every device first
        drk.evaluate_many(base, device=device, max_in_flight=in_flight, progress=False, **OPTIONS)
    per_device = {}

    def run_on(index: int) -> None:
        t0 = time.monotonic()
        results = drk.evaluate_many(fresh(base, copies), device=devices[index], max_in_flight=in_flight,
                                    progress=False, **OPTIONS)
        per_device[index] = {"device": devices[index], **summary(results, time.monotonic() - t0)}

    t0 = time.monotonic()
    with ThreadPoolExecutor(len(devices)) as threads:
        list(threads.map(run_on, range(len(devices))))
    total_wall = time.monotonic() - t0
    share = len(base) * copies
    same_kernel = {}
    for name in same_kernel_tasks:
        task, code = next((t, c) for t, c in base if t.name == name)
        with ThreadPoolExecutor(len(devices)) as threads:
            runs = list(threads.map(lambda d: drk.evaluate(task, code, device=d, timing_trials=200), devices))
        same_kernel[name] = spread([r.runtime_ms for r in runs]) | {"devices": devices}
    return {"gpus": len(devices), "per_gpu": [per_device[i] for i in range(len(devices))],
            "total": {"evaluations": share * len(devices), "wall_s": round(total_wall, 2),
                      "evaluations_per_s": round(share * len(devices) / total_wall, 3)},
            "same_kernel_each_gpu": same_kernel}


def spread(times: list) -> dict:
    return {"runtime_ms_per_gpu": times,
            "spread_pct": round(100 * (max(times) - min(times)) / min(times), 2) if all(times) else None}


def start_ray_service(gpus: int, slots: int, cpu: bool = False) -> tuple[subprocess.Popen, str]:
    """`drk serve --pool ray` with one actor on each of GPUs 0..gpus-1 (`gpus` CPU actors with cpu=True)."""
    where = ["--device", "cpu", "--workers", str(gpus)] if cpu else []
    return start_server("--pool", "ray", "--slots", str(slots), *where,
                        env={"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus))})


def ray_service(gpus: int, copies: int, in_flight: int, repeats: int = 6, pairs: list[tuple] | None = None,
                device: str = "cuda") -> dict:
    """`drk serve --pool ray` on GPU 0 alone, then on all GPUs (one actor each, CUDA_VISIBLE_DEVICES), each
    server warmed with the suite's solutions and then given its own fresh candidates; per-GPU counts come
    from each result's "ran on Ray actor" note. On all GPUs, `repeats` fresh variants of one solution per
    GPU say whether a kernel times the same on every GPU, against the spread of its repeats on one.
    device="cpu" (the test) runs `gpus` CPU actors instead and times nothing."""
    base = pairs or solutions()
    report = {"gpus": gpus, "candidates_per_pass": len(base) * copies, "slots_per_gpu": in_flight}
    for k in sorted({1, gpus}):
        proc, url = start_ray_service(k, in_flight, cpu=device == "cpu")
        client = ServiceClient(url, token=TOKEN, timeout_s=600)
        try:
            t0 = time.monotonic()
            run = {"warm_up": summary(client.evaluate_many(base, **OPTIONS), time.monotonic() - t0)}
            t0 = time.monotonic()
            results = client.evaluate_many(fresh(base, copies), **OPTIONS)
            wall = time.monotonic() - t0
            run["pass"] = summary(results, wall) | {"per_gpu": per_gpu(results, wall)}
            if k == gpus > 1 and device != "cpu":
                run["same_kernel_each_gpu"] = {name: same_kernel(client, base, name, repeats * k)
                                               for name in ("08_softmax", "10_layernorm")}
            run["workers"] = client.workers()
        finally:
            client.close()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
        report[f"{k}_gpu"] = run
        save({"multi_gpu (partial)": report})
    one, every = report["1_gpu"]["pass"]["evaluations_per_s"], report[f"{gpus}_gpu"]["pass"]["evaluations_per_s"]
    report["scaling_efficiency"] = round(every / (gpus * one), 3)  # 1.0: all GPUs do gpus times one GPU's work
    return report


def gpu_of(result) -> str:
    """"GPU 1" from the note "ran on Ray actor 0 (host h, GPU 1)"; "actor 0" for an actor on the CPU."""
    note = next(n for n in result.notes if n.startswith("ran on Ray actor"))
    actor, _, where = note.removeprefix("ran on Ray ").partition(" (")
    return "GPU " + where.partition("GPU ")[2].rstrip(")") if "GPU " in where else actor


def per_gpu(results: list, wall: float) -> dict:
    """Evaluations each GPU finished in the pass, and its rate over the pass's wall time."""
    counts = Counter(gpu_of(r) for r in results)
    return {gpu: {"evaluations": n, "evaluations_per_s": round(n / wall, 3)} for gpu, n in sorted(counts.items())}


def same_kernel(client: ServiceClient, base: list[tuple], name: str, count: int) -> dict:
    """`count` fresh variants of one solution at once (each GPU gets about as many); per GPU its runtimes,
    their median and spread; across GPUs the medians' difference, which agrees when it is within the
    largest spread of one GPU's repeats."""
    task, code = next((t, c) for t, c in base if t.name == name)
    results = client.evaluate_many([(task, fresh_kernel(code)) for _ in range(count)], progress=False,
                                   **(OPTIONS | {"timing_trials": 200}))
    runs: dict[str, list[float]] = {}
    for r in results:
        runs.setdefault(gpu_of(r), []).append(r.runtime_ms)
    per = {gpu: {"runtime_ms": times, "median_ms": statistics.median(times),
                 "spread_pct": round(100 * (max(times) - min(times)) / statistics.median(times), 2)}
           for gpu, times in sorted(runs.items())}
    medians = [p["median_ms"] for p in per.values()]
    across = round(100 * (max(medians) - min(medians)) / min(medians), 2)
    noise = max(p["spread_pct"] for p in per.values())
    return {"per_gpu": per, "across_gpus_pct": across, "one_gpu_spread_pct": noise, "agrees": across <= noise}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phases", nargs="*", default=["throughput", "multi_gpu"])
    parser.add_argument("--copies", type=int, default=2, help="fresh variants of each solution per pass")
    parser.add_argument("--in-flight", type=int, default=8, help="evaluations at once (per GPU)")
    parser.add_argument("--multi-gpu-pool", choices=["auto", "ray", "threads"], default="auto",
                        help="multi_gpu: one Ray actor per GPU, or one evaluate_many thread per GPU (auto: Ray if installed)")
    args = parser.parse_args()
    unknown = [p for p in args.phases if p not in ("throughput", "multi_gpu")]
    if unknown:
        print(f"bench/service_gpu.py: unknown phase {unknown[0]!r} (throughput, multi_gpu)", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        raise SystemExit("bench/service_gpu.py needs a CUDA GPU (bench/service_load.py is the CPU load test)")
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(0), "options": OPTIONS}
    for phase in args.phases:
        print(f"== {phase}", flush=True)
        report[phase] = (phase_throughput(args.copies, args.in_flight) if phase == "throughput"
                         else phase_multi_gpu(args.copies, args.in_flight, args.multi_gpu_pool))
        save(report)
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
