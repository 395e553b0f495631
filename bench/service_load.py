"""Load test of `drk serve` on the CPU: 1,000 requests, 4 Ray workers, one worker killed mid-run; and a soak.

    python bench/service_load.py [--requests 1000] [--workers 4] [--clients 64] [--kill-after 300]
    python bench/service_load.py --soak [--requests 10000]   # two kills and a server restart at random moments

Starts `drk serve --pool ray --workers 4 --slots 1 --device cpu` on 127.0.0.1 with a fresh store, then sends
the requests from `--clients` threads at once (POST /v1/evaluate, waiting for the answer; each thread has its
own HTTP client). The candidates are level-1 tasks at their small sizes (Triton's interpreter; timing and
profiling off, since CPU times mean nothing): every built-in solution in several copies that differ only in a
comment (correct), planted broken candidates from data/variants (wrong values, shapes, dtypes, crashes, no
kernel, ...) and planted cheats from data/hacks (hacked). Requests draw from these with replacement, so many
repeat: a repeat finds the result in the store (`cached`) or joins the evaluation of the same key in flight.

The kill: once `--kill-after` requests are answered, the script sends a planted slow candidate (a correct ReLU
that sleeps while it is built) and SIGKILLs the Ray actor whose worker runs it (found through /proc: the
worker's folder holds its candidate.py). Both always come, so the kill happens in every run, mid-evaluation;
the evaluation must then finish on another actor. The soak (`--soak`) kills twice, at random numbers of
answers, and SIGKILLs the whole server once at another, starting a new one on the same store and port; the
clients retry until it answers.

A client's own trouble (a connection refused or reset, a timeout) is counted and the request sent again
(safe: a request lands on its key). The script exits non-zero only when the service lost or corrupted
something: a request without a 200 answer and a finished result, a job left unfinished or failed, a verdict
other than expected, two answers to one candidate that differ, a result stored twice or not at all, a kill
that was not survived. It prints and writes $OUT/service_load.json (latency p50/p99 overall, for store
answers, for the rest; throughput; retries; the server's resident memory at start and end).
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
OPTIONS = {"timing": False, "profile": False, "seed": 0, "correctness_trials": 3}
GIVE_UP_S = 1800.0  # a request still without an answer after this long is lost
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


def slow_candidate(tag: str) -> dict:
    """A correct ReLU that sleeps while it is built: its actor is busy with it long enough to be found and killed."""
    code = (DATA / "solutions" / "level1" / "01_relu.py").read_text()
    code = f"# {tag}\nimport time\n" + code.replace("super().__init__()", "super().__init__()\n        time.sleep(4)")
    return {"task": "level1/01_relu", "code": code, "kind": "correct"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return round(next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024, 1)


def session_weight(pid: int, nice: int) -> None:
    """The CPU weight of a session (Linux autogroups: each session gets an equal share of the CPU)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


def start_server(port: int, store: str, workers: int) -> subprocess.Popen | None:
    """The server once it answers; None if it exited first. Its raylet waits a fixed 15 s for Ray's agents to start:
    on two cores shared with other sessions (each harness worker is a session of its own) they can take longer,
    so the server's session, where Ray starts, gets a higher weight until it answers."""
    proc = subprocess.Popen([sys.executable, "-m", "drk_lab.cli", "serve", "--port", str(port), "--store", store,
                             "--pool", "ray", "--workers", str(workers), "--slots", "1", "--device", "cpu"],
                            env={**os.environ, "DRK_SERVICE_TOKEN": TOKEN}, start_new_session=True)
    session_weight(proc.pid, -10)
    try:
        for _ in range(1200):
            if proc.poll() is not None:
                return None
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return proc
            except httpx.TransportError:
                time.sleep(0.5)
    finally:
        session_weight(proc.pid, 0)
    raise SystemExit("the server did not come up in 10 minutes")


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except OSError:
            pass
    found, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        found += frontier
    return found


def runs_candidate(pid: int, tag: str) -> bool:
    """Whether a process works in a job folder whose candidate.py carries `tag`."""
    try:
        with open(f"/proc/{pid}/cwd/candidate.py") as f:
            return tag in f.read(200)
    except OSError:
        return False


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_s": round(percentile(values, 50), 4), "p99_s": round(percentile(values, 99), 4),
            "mean_s": round(statistics.fmean(values), 4), "max_s": round(max(values), 4)}


class Run:
    """The server (restarted in place when asked), the clients' answers and the counts of their own trouble."""

    def __init__(self, args):
        self.args = args
        self.port, self.store = free_port(), os.path.join(tempfile.mkdtemp(prefix="drk_load_"), "store.sqlite")
        self.url = f"http://127.0.0.1:{self.port}"
        self.local = threading.local()
        self.lock = threading.Lock()
        self.answered = 0
        self.client_errors: dict[str, int] = {}
        self.servers: list[dict] = []  # per server: pid, RSS at start and at its end
        self.server = self.start()

    def start(self) -> subprocess.Popen:
        t0 = time.monotonic()
        for attempt in range(1, 4):
            server = start_server(self.port, self.store, self.args.workers)
            if server is not None:
                self.servers.append({"pid": server.pid, "start_s": round(time.monotonic() - t0, 1),
                                     "start_attempts": attempt, "rss_start_mib": rss_mib(server.pid)})
                return server
            time.sleep(30)  # a busy moment of the machine may pass
        raise SystemExit("the server exited during start-up three times")

    def stop(self, sig: int) -> None:
        self.servers[-1]["rss_end_mib"] = rss_mib(self.server.pid)
        os.killpg(self.server.pid, sig)  # the server and its Ray cluster
        self.server.wait(timeout=120)

    def http(self) -> httpx.Client:
        """This thread's client: httpx's shared pool can close a connection another thread is using (httpcore #1110)."""
        if not hasattr(self.local, "http"):
            self.local.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"},
                                           timeout=httpx.Timeout(700.0, connect=10.0))
        return self.local.http

    def call(self, method: str, path: str, **kwargs) -> httpx.Response | None:
        """The service's answer, sending again after a client-side failure (counted) until GIVE_UP_S."""
        deadline, wait = time.monotonic() + GIVE_UP_S, 0.5
        while time.monotonic() < deadline:
            try:
                return self.http().request(method, path, **kwargs)
            except httpx.TransportError as e:  # refused while the server restarts, reset, timed out
                with self.lock:
                    self.client_errors[type(e).__name__] = self.client_errors.get(type(e).__name__, 0) + 1
                time.sleep(wait)
                wait = min(2 * wait, 5.0)
        return None

    def evaluate(self, item: dict, wait_s: float = 600) -> dict:
        """One request, to its final answer: status, latency and the job's fields (with result when done)."""
        t0 = time.monotonic()
        response = self.call("POST", "/v1/evaluate", json={"task": item["task"], "code": item["code"],
                                                            "options": OPTIONS, "wait_s": wait_s})
        while response is not None and response.status_code == 202:  # not done within wait_s: ask about the job
            response = self.call("GET", f"/v1/jobs/{response.json()['job_id']}", params={"wait_s": 60})
        answer = {"status": None} if response is None else {"status": response.status_code, **response.json()}
        answer["latency"] = time.monotonic() - t0
        return answer

    def kill_actor_running(self, tag: str) -> dict:
        """Send the slow candidate carrying `tag`, SIGKILL the Ray actor whose worker runs it, return its answer."""
        slow = slow_candidate(tag)
        job = self.call("POST", "/v1/evaluate", json={"task": slow["task"], "code": slow["code"], "options": OPTIONS,
                                                      "wait_s": 0}).json()
        at, t0 = self.answered, time.monotonic()
        while True:
            actors = [w["pid"] for w in self.call("GET", "/v1/workers").json()["workers"]]
            victim = next((a for a in actors if any(runs_candidate(p, tag) for p in descendants(a))), None)
            if victim is not None:
                os.kill(victim, signal.SIGKILL)
                break
            time.sleep(0.1)
        print(f"\nkilled Ray actor pid {victim} (running {tag!r}) after {at} answers", flush=True)
        answer = self.call("GET", f"/v1/jobs/{job['job_id']}", params={"wait_s": 600}).json()
        result = answer.get("result") or {}
        return {"pid": victim, "at_answers": at, "found_after_s": round(time.monotonic() - t0, 1),
                "job_state": answer["state"], "correct": bool(result.get("correct")),
                "retried": any("retried on another actor" in n for n in result.get("notes", []))}

    def restart(self) -> dict:
        at = self.answered
        self.stop(signal.SIGKILL)  # a crash, not a shutdown: jobs in flight are left running in the store
        print(f"\nkilled the server after {at} answers; starting a new one on the same store", flush=True)
        self.server = self.start()
        return {"at_answers": at, "new_server_up_s": self.servers[-1]["start_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=None, help="default 1,000 (10,000 with --soak)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--copies", type=int, default=None, help="copies of each solution (default 6, 20 with --soak)")
    parser.add_argument("--kill-after", type=int, default=300, help="answers before the one planned kill")
    parser.add_argument("--soak", action="store_true", help="two kills and a server restart at random moments")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.requests = args.requests or (10_000 if args.soak else 1000)
    if not args.soak and not 0 <= args.kill_after < args.requests:
        parser.error("--kill-after must be below --requests: the kill comes after that many answers")
    OUT.mkdir(parents=True, exist_ok=True)
    pool = candidates(args.copies or (20 if args.soak else 6))
    rng = random.Random(args.seed)
    plan = [rng.choice(pool) for _ in range(args.requests)]
    moments = random.Random(time.time_ns()) if args.soak else None  # the soak's moments differ run to run
    window = range(args.requests // 10, args.requests * 9 // 10)
    kills = sorted(moments.sample(window, 2)) if args.soak else [args.kill_after]
    restart_at = moments.choice(window) if args.soak else None
    run = Run(args)
    print(f"server up in {run.servers[0]['start_s']} s; {len(plan)} requests over {len(pool)} unique candidates "
          f"({len({id(c) for c in plan})} of them drawn); kills after {kills} answers"
          + (f", server restart after {restart_at}" if restart_at is not None else ""), flush=True)
    answers: dict[int, dict] = {}
    events: list[dict] = []

    def send(index: int) -> None:
        answer = run.evaluate(plan[index])
        with run.lock:
            answers[index] = answer
            run.answered += 1

    def chaos() -> None:  # the kills and the restart, one after another, each once its number of answers is reached
        todo = sorted([(n, "kill", f"drk load test: the actor running this is killed ({i})") for i, n in enumerate(kills)]
                      + ([(restart_at, "restart", "")] if restart_at is not None else []))
        for at, what, tag in todo:
            while run.answered < at:
                time.sleep(0.05)
            events.append({"kill": run.kill_actor_running, "restart": lambda _: run.restart()}[what](tag) | {"what": what})

    t0 = time.monotonic()
    chaos_thread = threading.Thread(target=chaos, daemon=True)
    chaos_thread.start()
    from tqdm import tqdm

    with ThreadPoolExecutor(args.clients) as clients:
        list(tqdm(clients.map(send, range(len(plan))), total=len(plan), desc="requests", mininterval=5))
    chaos_thread.join(timeout=GIVE_UP_S)
    wall = time.monotonic() - t0
    health = run.call("GET", "/health").json()
    run.stop(signal.SIGTERM)

    failures = check(plan, answers, events, health, kills, restart_at)
    flat = [(plan[i], answers[i]) for i in range(len(plan)) if i in answers]
    done = [(item, a) for item, a in flat if a.get("result")]
    cheats = [a["result"] for item, a in done if item["kind"] == "hacked"]
    report = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores, no GPU (Triton interpreter)",
        "requests": len(plan), "workers": args.workers, "clients": args.clients,
        "unique_candidates": len({(i["task"], i["code"]) for i in plan}),
        "kinds": {k: sum(item["kind"] == k for item in plan) for k in ("correct", "wrong", "hacked")},
        # planted cheats: on the CPU some checks cannot run (side streams, L2 tricks, ...), so a cheat may end as
        # a mismatch or, for the GPU-only ones, pass; they are counted, not asserted
        "planted_cheat_requests": {"hacked": sum(r["hacked"] for r in cheats),
                                   "wrong": sum(not r["hacked"] and not r["correct"] for r in cheats),
                                   "passed (GPU-only checks)": sum(r["correct"] and not r["hacked"] for r in cheats)},
        "answered_from_store": sum(bool(a.get("cached")) for _, a in flat),
        "evaluations_by_the_last_server": health["evaluations"], "stored_results": health["results"],
        "jobs": health["jobs"], "events": events,
        "requests_answered_with_a_retried_result": sum(any("retried on another actor" in n for n in a["result"]["notes"])
                                                       for _, a in done),
        "client_side_failures_retried": run.client_errors, "servers": run.servers,
        "wall_s": round(wall, 2), "requests_per_s": round(len(plan) / wall, 2),
        "latency_all": stats([a["latency"] for _, a in flat]),
        "latency_from_store": stats([a["latency"] for _, a in flat if a.get("cached")]),
        "latency_not_from_store": stats([a["latency"] for _, a in flat if not a.get("cached")]),
        "lost_or_corrupted": failures,
    }
    (OUT / "service_load.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    if failures:
        raise SystemExit(f"FAILED: the service lost or corrupted something: {failures}")


def check(plan: list[dict], answers: dict, events: list[dict], health: dict, kills: list, restart_at) -> list[str]:
    """What the service lost or corrupted (empty when nothing)."""
    failures = []
    missing = [i for i in range(len(plan)) if not (i in answers and answers[i]["status"] == 200
                                                   and answers[i].get("state") == "done" and answers[i].get("result"))]
    if missing:
        failures.append(f"{len(missing)} requests without a finished result, e.g. "
                        f"{[answers.get(i, {}).get('status') for i in missing[:3]]}")
    verdicts = {"correct": lambda r: r["correct"] and not r["hacked"], "hacked": lambda r: True,
                "wrong": lambda r: not r["correct"] and not r["hacked"]}
    flat = [(plan[i], answers[i]) for i in range(len(plan)) if i not in missing]
    unexpected = [(item["task"], item["kind"], a["result"]["error_kind"]) for item, a in flat
                  if not verdicts[item["kind"]](a["result"])]
    if unexpected:
        failures.append(f"unexpected verdicts: {unexpected[:5]}")
    by_candidate: dict = {}
    for item, a in flat:  # one result per candidate, however it was answered
        by_candidate.setdefault((item["task"], item["code"]), set()).add(json.dumps(a["result"], sort_keys=True))
    if any(len(r) > 1 for r in by_candidate.values()):
        failures.append("two answers to the same candidate differ")
    if len({a["job_id"] for _, a in flat}) != len(flat):
        failures.append("two requests were given the same job")
    if set(health["jobs"]) != {"done"}:
        failures.append(f"jobs left unfinished or failed: {health['jobs']}")
    unique = len({(i["task"], i["code"]) for i in plan}) + len(kills)  # each slow candidate is one more
    if health["results"] != unique:
        failures.append(f"{health['results']} stored results for {unique} keys")
    if restart_at is None and health["evaluations"] != unique:
        failures.append(f"{health['evaluations']} evaluations for {unique} keys")
    survived = [e for e in events if e["what"] == "kill" and e["job_state"] == "done" and e["correct"] and e["retried"]]
    if len(survived) != len(kills):
        failures.append(f"{len(kills)} planned kills, {len(survived)} evaluations finished on another actor: {events}")
    if restart_at is not None and not any(e["what"] == "restart" for e in events):
        failures.append("the server was not restarted")
    return failures


if __name__ == "__main__":
    main()
