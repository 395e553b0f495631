"""Load test of `drk serve` on the CPU: 1,000 requests, 4 Ray workers, one worker killed mid-run.

    python bench/service_load.py [--requests 1000] [--workers 4] [--clients 64] [--kill-after 300]

Starts `drk serve --pool ray --workers 4 --device cpu` on 127.0.0.1 with a fresh store, then sends the
requests from `--clients` threads at once (POST /v1/evaluate, waiting for the answer). The candidates are
level-1 tasks at their small sizes (Triton's interpreter; timing and profiling off, since CPU times mean
nothing): every built-in solution in several copies that differ only in a comment (correct), planted broken
candidates from data/variants (wrong values, shapes, dtypes, crashes, no kernel, ...) and planted cheats
from data/hacks (hacked). Requests draw from these with replacement, so many repeat: a repeat either finds
the result in the store (`cached`) or joins the evaluation of the same key in flight. After `--kill-after`
answers the script SIGKILLs the process of one busy Ray actor. It checks that every request was answered
exactly once, with a result, every verdict as expected; prints and writes $OUT/service_load.json
(p50/p99 latency, overall, for store answers, for the rest; throughput; retries).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
OUT = Path(os.environ.get("OUT", "bench_out"))
TOKEN = "load-test-token-" + os.urandom(8).hex()
# planted broken candidates that end quickly (no hangs, sleeps, floods or memory hogs)
QUICK_VARIANTS = ("wrong_value", "wrong_shape", "wrong_dtype", "raises_in_forward", "raises_in_init", "no_triton",
                  "syntax_error", "compile_error", "no_modelnew", "half_written")


def header(path: Path) -> dict:
    return dict(re.findall(r"^# (\w+): (.+)$", path.read_text(), flags=re.M))


def candidates(copies: int) -> list[dict]:
    """(task, code, kind) for every unique candidate."""
    found = []
    for path in sorted((DATA / "solutions" / "level1").glob("*.py")):
        for copy in range(copies):
            found.append({"task": f"level1/{path.stem}", "code": f"# copy {copy}\n" + path.read_text(), "kind": "correct"})
    for name in QUICK_VARIANTS:
        path = DATA / "variants" / f"{name}.py"
        if path.is_file():
            kind = "hacked" if header(path).get("expect") == "hacked" else "wrong"
            found.append({"task": header(path)["task"], "code": path.read_text(), "kind": kind})
    for path in sorted((DATA / "hacks").glob("*.py")):
        meta = header(path)
        if meta.get("task", "").startswith("level1/") and meta.get("expect") == "hacked":
            found.append({"task": meta["task"], "code": path.read_text(), "kind": "hacked"})
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, store: str, workers: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "drk_lab.cli", "serve", "--port", str(port), "--store", store,
                             "--pool", "ray", "--workers", str(workers), "--slots", "1", "--device", "cpu"],
                            env={**os.environ, "DRK_SERVICE_TOKEN": TOKEN}, start_new_session=True)
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit("the server exited during start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.5)
    raise SystemExit("the server did not come up in 5 minutes")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_s": round(percentile(values, 50), 4), "p99_s": round(percentile(values, 99), 4),
            "mean_s": round(statistics.fmean(values), 4), "max_s": round(max(values), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--copies", type=int, default=6, help="copies of each solution (unique code, same verdict)")
    parser.add_argument("--kill-after", type=int, default=300, help="answers before one worker is killed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    pool = candidates(args.copies)
    rng = random.Random(args.seed)
    plan = [rng.choice(pool) for _ in range(args.requests)]
    port, store = free_port(), os.path.join(tempfile.mkdtemp(prefix="drk_load_"), "store.sqlite")
    url = f"http://127.0.0.1:{port}"
    started_at = time.monotonic()
    server = start_server(port, store, args.workers)
    print(f"server up in {time.monotonic() - started_at:.1f} s; {len(plan)} requests over {len(pool)} unique candidates "
          f"({len({id(c) for c in plan})} of them drawn)", flush=True)
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=900,
                        limits=httpx.Limits(max_connections=args.clients))
    answers: dict[int, list[dict]] = {i: [] for i in range(len(plan))}
    lock, done = threading.Lock(), [0]
    killed: dict = {}

    def send(index: int) -> None:
        item = plan[index]
        body = {"task": item["task"], "code": item["code"], "wait_s": 600,
                "options": {"timing": False, "profile": False, "seed": 0, "correctness_trials": 3}}
        t0 = time.monotonic()
        response = http.post("/v1/evaluate", json=body)
        latency = time.monotonic() - t0
        with lock:
            answers[index].append({"status": response.status_code, "latency": latency, **response.json()})
            done[0] += 1

    def killer() -> None:
        while done[0] < args.kill_after:
            time.sleep(0.05)
        while "pid" not in killed:
            busy = [w for w in http.get("/v1/workers").json()["workers"] if w["busy"]]
            if busy:
                killed.update(pid=busy[0]["pid"], at_answers=done[0])
                os.kill(busy[0]["pid"], signal.SIGKILL)
                print(f"killed Ray actor pid {busy[0]['pid']} after {done[0]} answers", flush=True)
            time.sleep(0.05)

    threading.Thread(target=killer, daemon=True).start()
    t0 = time.monotonic()
    try:
        from tqdm import tqdm

        with ThreadPoolExecutor(args.clients) as clients:
            list(tqdm(clients.map(send, range(len(plan))), total=len(plan), desc="requests"))
        wall = time.monotonic() - t0
        health = http.get("/health").json()
        workers = http.get("/v1/workers").json()["workers"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)

    # every request answered exactly once, with a finished result, and the expected verdict
    assert all(len(a) == 1 for a in answers.values()), "a request was answered more or less than once"
    flat = [(plan[i], a[0]) for i, a in answers.items()]
    assert all(a["status"] == 200 and a["state"] == "done" and a["result"] for _, a in flat), "a request lost its result"
    # planted cheats: on the CPU some checks cannot run (side streams, L2 tricks, ...), so a cheat may end as
    # a mismatch or, for the GPU-only ones, pass; they are counted, not asserted
    verdicts = {"correct": lambda r: r["correct"] and not r["hacked"], "hacked": lambda r: True,
                "wrong": lambda r: not r["correct"] and not r["hacked"]}
    unexpected = [(item["task"], item["kind"], a["result"]["error_kind"]) for item, a in flat
                  if not verdicts[item["kind"]](a["result"])]
    assert not unexpected, f"unexpected verdicts: {unexpected[:5]}"
    by_candidate: dict = {}
    for item, a in flat:  # one result per candidate, however it was answered
        by_candidate.setdefault((item["task"], item["code"]), []).append(json.dumps(a["result"], sort_keys=True))
    assert all(len(set(r)) == 1 for r in by_candidate.values()), "two answers to the same candidate differ"
    cheats = [a["result"] for item, a in flat if item["kind"] == "hacked"]
    cheat_outcomes = {"hacked": sum(r["hacked"] for r in cheats),
                      "wrong": sum(not r["hacked"] and not r["correct"] for r in cheats),
                      "passed (GPU-only checks)": sum(r["correct"] and not r["hacked"] for r in cheats)}
    assert len({a["job_id"] for _, a in flat}) == len(plan), "two requests were given the same job"
    retried = [any("retried on another actor" in n for n in a["result"]["notes"]) for _, a in flat]
    retried_candidates = len({(item["task"], item["code"]) for (item, _), r in zip(flat, retried) if r})
    assert killed and sum(w["deaths"] for w in workers) >= 1, "no worker was killed"
    assert health["jobs"] == {"done": len(plan)}, health["jobs"]
    assert health["results"] == health["evaluations"] == len({(i["task"], i["code"]) for i in plan})

    latency = [a["latency"] for _, a in flat]
    report = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores, no GPU (Triton interpreter)",
        "requests": len(plan), "workers": args.workers, "clients": args.clients, "unique_candidates": health["results"],
        "kinds": {k: sum(item["kind"] == k for item in plan) for k in verdicts},
        "planted_cheat_requests": cheat_outcomes,
        "answered_from_store": sum(a["cached"] for _, a in flat),
        "joined_an_evaluation_in_flight": len(plan) - sum(a["cached"] for _, a in flat) - health["evaluations"],
        "evaluations": health["evaluations"], "killed_actor": killed, "evaluations_retried_on_another_actor": retried_candidates,
        "requests_answered_with_a_retried_result": sum(retried),
        "wall_s": round(wall, 2), "requests_per_s": round(len(plan) / wall, 2),
        "evaluations_per_s": round(health["evaluations"] / wall, 2),
        "latency_all": stats(latency),
        "latency_from_store": stats([a["latency"] for _, a in flat if a["cached"]]),
        "latency_not_from_store": stats([a["latency"] for _, a in flat if not a["cached"]]),
        "answered_exactly_once": True, "lost": 0,
    }
    (OUT / "service_load.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
