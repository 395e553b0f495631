"""Evaluations spread over GPUs and nodes with Ray: one actor per GPU, each wrapping the local evaluator.

    pool = RayPool()                                   # one actor per GPU of the Ray cluster (or 2 on a CPU machine)
    results = pool.evaluate_many([(task, code), ...])  # = drk.evaluate_many(pairs, backend="ray")

An actor (EvalActor) is an ordinary drk_lab caller: it runs `drk_lab.harness.evaluate` with its own worker
pool (zygote, supervisors, isolated workers) on the one GPU Ray gave it (CUDA_VISIBLE_DEVICES), so every
guarantee of the local evaluator holds unchanged. It takes `slots` evaluations at once (a threaded actor),
which overlap their loading and correctness work while timing holds the GPU's lock. Many nodes: start the
Ray cluster as usual (`ray start --head` / `ray start --address=...`) and pass `address="auto"`; Ray places
one actor per GPU wherever they are.

An actor that dies (its process killed, its node lost) fails the evaluations it held; each is retried once
on another actor (RETRIES), and Ray restarts the dead actor in the background. A second death gives a
`worker_crash` result that says so.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from dataclasses import asdict

from drk_lab.harness import settings as harness_settings
from drk_lab.harness.protocol import MAX_LOCK_WAIT_S
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import Task

RETRIES = 1  # an evaluation whose actor died runs once more, elsewhere


class EvalActor:
    """One Ray actor: the local evaluator on one device (wrapped by ray.remote in RayPool)."""

    def __init__(self, device: str, settings: dict):
        from drk_lab.harness.caller import configure, get_sandbox
        from drk_lab.harness.devices import resolve_device

        configure(**settings)
        self.device = resolve_device(device)
        self.sandbox_info = get_sandbox(self.device).start()  # the zygote starts now, not in the first evaluation

    def info(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": self.device,
                "device_name": self.sandbox_info.get("device_name", self.device),
                "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "") if self.device != "cpu" else ""}

    def evaluate(self, task: dict, code: str, options: dict) -> dict:
        from drk_lab.harness.evaluate import evaluate

        return evaluate(Task.from_dict(task), code, device=self.device, **options).to_dict()


def start_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to a Ray cluster (address="auto" or "host:port"), or start a local one on this machine."""
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
        return
    # Ray waits a fixed 30 s for its raylet to register; on a busy small machine that start can miss it once
    for attempt in range(3):
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            return
        except Exception as error:
            if "timed out during startup" not in str(error) or attempt == 2:
                raise
            ray.shutdown()


def ran_on(index: int, info: dict) -> str:
    """The note that says which actor, machine and GPU ran an evaluation (a multi-GPU run counts by it)."""
    return f"ran on Ray actor {index} (host {info['host']}" + (f", GPU {info['gpu']})" if info["gpu"] else ", cpu)")


class RayPool:
    """Actors on a Ray cluster and the free slots among them; thread-safe."""

    def __init__(self, actors: int | None = None, device: str = "auto", slots: int = 2, address: str | None = None,
                 cpus_per_actor: float | None = None):
        import ray

        start_ray(address, num_cpus=max(os.cpu_count() or 1, actors or 0) if not address else None)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if device == "auto":
            device = "cuda" if gpus else "cpu"
        on_gpu = device != "cpu"
        count = actors or (gpus if on_gpu else 2)
        if count < 1:
            raise ValueError(f"no actors to start: device {device!r} and {gpus} GPUs in the Ray cluster")
        cpus = cpus_per_actor if cpus_per_actor is not None else (
            1.0 if on_gpu else min(1.0, ray.cluster_resources().get("CPU", 1) / count))
        remote = ray.remote(EvalActor).options(
            num_gpus=1 if on_gpu else 0, num_cpus=cpus, max_concurrency=slots,
            max_restarts=-1, max_task_retries=0)  # Ray restarts a dead actor; the retry is ours (RETRIES)
        # cuda: each actor sees one GPU, as cuda:0 (Ray sets CUDA_VISIBLE_DEVICES)
        settings = {k: v for k, v in asdict(harness_settings.current()).items() if v is not None}
        self.actors = [remote.remote("cuda" if on_gpu else "cpu", settings) for _ in range(count)]
        self.infos = ray.get([a.info.remote() for a in self.actors])
        self.device, self.slots = device, slots
        self.free: queue.Queue[int] = queue.Queue()
        for _ in range(slots):
            for index in range(count):
                self.free.put(index)
        self.busy = [0] * count
        self.deaths = [0] * count
        self.down = [False] * count  # dead or restarting: none of its slots is handed out
        self.lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return len(self.actors) * self.slots

    @property
    def device_name(self) -> str:
        """The name that goes into the store's keys: the actors' device names (one name on a uniform cluster)."""
        return "+".join(sorted({info["device_name"] for info in self.infos}))

    def take(self) -> int:
        """A free slot of an actor that is up (a dead one is down until Ray has restarted it)."""
        skipped = []
        try:
            while True:
                index = self.free.get()
                with self.lock:
                    if not self.down[index]:
                        self.busy[index] += 1
                        return index
                skipped.append(index)
                if self.free.empty():  # only slots of actors that are down are free: wait a little
                    for i in skipped:
                        self.free.put(i)
                    skipped = []
                    time.sleep(0.05)
        finally:
            for i in skipped:
                self.free.put(i)

    def mark_dead(self, index: int) -> bool:
        """Take a dead actor out of service until it answers again; True for the first report of this death."""
        with self.lock:
            if self.down[index]:
                return False
            self.down[index] = True
            self.deaths[index] += 1
        threading.Thread(target=self.wait_for_restart, args=(index,), daemon=True).start()
        return True

    def wait_for_restart(self, index: int, limit_s: float = 900.0) -> None:
        """Ray restarts the actor (a new process, a new worker pool); it is back once it answers."""
        import ray

        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                self.infos[index] = ray.get(self.actors[index].info.remote(), timeout=60)
                break
            except Exception:  # still restarting
                time.sleep(0.5)
        with self.lock:
            self.down[index] = False

    def give_back(self, index: int) -> None:
        with self.lock:
            self.busy[index] -= 1
        self.free.put(index)

    def evaluate(self, task: Task, code: str, **options) -> EvalResult:
        """One evaluation on a free actor; retried once on another actor if the first one dies."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        options.pop("device", None)  # each actor evaluates on its own device
        wait_s = options.get("timeout_s", 120.0) + MAX_LOCK_WAIT_S + 300.0  # the harness has its own limits
        notes = []
        for attempt in range(RETRIES + 1):
            index = self.take()
            try:
                data = ray.get(self.actors[index].evaluate.remote(task.to_dict(), code, options), timeout=wait_s)
            except (RayActorError, ActorUnavailableError) as e:
                who = self.infos[index]  # before the restart replaces it
                self.mark_dead(index)
                then = "not retried again" if attempt == RETRIES else (
                    "retried on another actor" if len(self.actors) > 1 else "retried once it restarted")
                notes.append(f"the Ray actor (pid {who['pid']} on {who['host']}) running this evaluation died "
                             f"({type(e).__name__}); {then}")
                continue
            finally:
                self.give_back(index)
            result = EvalResult.from_dict(data)
            result.notes = result.notes + notes + [ran_on(index, self.infos[index])]
            return result
        return EvalResult(error_kind="worker_crash", error=f"the evaluation's Ray actor died {RETRIES + 1} times",
                          notes=notes)

    def evaluate_many(self, pairs: list[tuple[Task, str]], progress: bool = True, **options) -> list[EvalResult]:
        """Every pair on the pool, up to `capacity` at once; results in the order given."""
        from drk_lab.harness.evaluate import map_in_threads

        options.pop("max_in_flight", None)
        return map_in_threads(lambda pair: self.evaluate(pair[0], pair[1], **options), pairs,
                              max(1, min(len(pairs), self.capacity)), "evaluate (ray)" if progress else None, "eval")

    def workers(self) -> list[dict]:
        with self.lock:
            return [{**info, "busy": self.busy[i], "slots": self.slots, "deaths": self.deaths[i],
                     "state": "restarting" if self.down[i] else "up"} for i, info in enumerate(self.infos)]

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []


_default_pool: RayPool | None = None
_default_lock = threading.Lock()


def default_pool() -> RayPool:
    """The pool `evaluate(..., backend="ray")` uses: one per process, started on first use (RAY_ADDRESS, if
    set, names the cluster)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = RayPool(address=os.environ.get("RAY_ADDRESS") or None)
        return _default_pool
