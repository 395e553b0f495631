"""The Ray pool on a local Ray cluster (CPU actors, the Triton interpreter): `evaluate_many(..., backend="ray")`,
and an actor killed mid-evaluation: its evaluation is retried once on another actor and stored once.
One cluster and one pool for the whole module (Ray takes seconds to start)."""

import os
import signal
import threading
import time

import pytest

pytest.importorskip("ray")

import drk_lab as drk  # noqa: E402
from drk_lab.service import ray_pool  # noqa: E402
from drk_lab.service.jobs import JobRunner  # noqa: E402
from drk_lab.service.store import Store  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster per test

SLEEPY = """
import time
import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        time.sleep(3)  # long enough to kill its actor meanwhile

    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""


@pytest.fixture(scope="module")
def pool():
    import ray

    os.environ.pop("RAY_ADDRESS", None)
    ray_pool.start_ray(num_cpus=3)
    pool = ray_pool.default_pool()  # what backend="ray" uses: 2 CPU actors here
    yield pool
    pool.close()
    ray_pool._default_pool = None
    ray.shutdown()


def test_evaluate_many_on_ray_matches_the_local_evaluator(pool, tasks, relu_small, relu_solution):
    wrong = relu_solution.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x, 1.0)")
    softmax = tasks["level1/08_softmax"]
    pairs = [(relu_small, relu_solution), (relu_small, wrong), (softmax.small(), drk.builtin_solution(softmax)),
             (relu_small, "class ModelNew: pass")]
    results = drk.evaluate_many(pairs, backend="ray", seed=3, progress=False)
    local = drk.evaluate_many(pairs, device="cpu", seed=3, progress=False)
    assert [(r.correct, r.error_kind, r.seeds) for r in results] == [(r.correct, r.error_kind, r.seeds) for r in local]
    assert [r.correct for r in results] == [True, False, True, False]
    assert len(pool.actors) == 2 and {w["device"] for w in pool.workers()} == {"cpu"}
    # each result names its actor (a multi-GPU run counts per GPU by it); 4 pairs on 2x2 slots reach both
    assert {r.notes[-1] for r in results} == {ray_pool.ran_on(i, info) for i, info in enumerate(pool.infos)}
    assert pool.infos[0]["gpu"] == "" and results[0].notes[-1].endswith(", cpu)")
    one = drk.evaluate(relu_small, relu_solution, backend="ray", seed=3)
    assert one.correct and one.seeds == local[0].seeds


def busy_actor(pool, deadline_s=60.0) -> tuple[int, int]:
    """The index of an actor running an evaluation, and its pid (asked now: a restarted actor has a new one).
    Only that actor is asked: asking one that is still restarting would wait while the evaluation finishes."""
    import ray

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        busy = [i for i, w in enumerate(pool.workers()) if w["busy"]]
        if busy:
            return busy[0], ray.get(pool.actors[busy[0]].info.remote(), timeout=30)["pid"]
        time.sleep(0.05)
    raise AssertionError("no actor took the evaluation")


def test_a_killed_actor_is_retried_once_elsewhere_and_stored_once(pool, relu_small, tmp_path):
    runner = JobRunner(pool, Store(tmp_path / "store.sqlite"))
    request = {"task_name": relu_small.name, "task_source": relu_small.source, "code": SLEEPY,
               "options": {"seed": 9, "hack_checks": False}}
    first = runner.submit(request)
    second = runner.submit(request)  # the same key while the first is in flight: one evaluation for both
    victim, pid = busy_actor(pool)
    time.sleep(1.0)  # inside the candidate's 3 s constructor
    os.kill(pid, signal.SIGKILL)
    runner.wait(first.key, timeout=180)
    jobs = [runner.status(first.job_id), runner.status(second.job_id)]
    assert [j["state"] for j in jobs] == ["done", "done"], jobs
    result = drk.EvalResult.from_dict(jobs[0]["result"])
    assert result.correct, result.summary()
    assert any("died" in note and "retried on another actor" in note for note in result.notes), result.notes
    assert runner.evaluations == 1 and runner.store.count_results() == 1  # stored exactly once
    assert pool.workers()[victim]["deaths"] == 1
    runner.executor.shutdown(wait=True)


def test_two_deaths_end_as_a_worker_crash(pool, relu_small):
    """Both tries killed: the result says so instead of hanging or raising."""
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(r=pool.evaluate(relu_small, SLEEPY, seed=1,
                                                                            hack_checks=False)))
    thread.start()
    for _ in range(2):
        victim, pid = busy_actor(pool, deadline_s=120)
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while pool.workers()[victim]["busy"] and time.monotonic() < deadline:
            time.sleep(0.05)
    thread.join(timeout=180)
    result = outcome["r"]
    assert result.error_kind == "worker_crash" and "died 2 times" in result.error
    assert sum("died" in n for n in result.notes) == 2
