"""Reused warm workers: what a worker checks before another job (in this process), and that the
sandbox retires a worker after anything it cannot vouch for (real workers, the Triton interpreter)."""

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import drk_lab as drk
from drk_lab.harness import settings
from drk_lab.harness.caller import configure
from drk_lab.harness.protocol import Job, new_key, signed
from drk_lab.harness.reuse import WorldState
from drk_lab.harness.supervisor import WorkerWatch

pytestmark = pytest.mark.slow  # a zygote and warm workers per test


def take_world() -> WorldState:
    """Taken inside the test: pytest changes PYTEST_CURRENT_TEST between a fixture and the test."""
    import triton  # noqa: F401  (a worker has it; forget_job reaches for it)

    state = WorldState(torch.device("cpu"))
    assert state.differences() == []
    return state


def test_a_replaced_function_is_seen():
    world = take_world()
    original = torch.nn.functional.relu
    torch.nn.functional.relu = lambda x: x
    try:
        assert world.differences() == ["torch.nn.functional.relu was replaced"]
    finally:
        torch.nn.functional.relu = original
    assert world.differences() == []


def test_a_method_added_to_a_class_is_seen():
    world = take_world()
    torch.nn.Linear.__torch_function__ = classmethod(lambda cls, *a, **k: None)
    try:
        assert "torch.nn.modules.linear.Linear.__torch_function__ was added" in world.differences()
    finally:
        del torch.nn.Linear.__torch_function__
    assert world.differences() == []


@pytest.mark.parametrize("change, undo, expected", [
    (lambda: torch.set_grad_enabled(False), lambda: torch.set_grad_enabled(True), "grad enabled changed"),
    (lambda: torch.set_num_threads(torch.get_num_threads() + 1),
     lambda: torch.set_num_threads(torch.get_num_threads() - 1), "torch threads changed"),
    (lambda: torch.backends.cudnn.__setattr__("benchmark", not torch.backends.cudnn.benchmark),
     lambda: torch.backends.cudnn.__setattr__("benchmark", not torch.backends.cudnn.benchmark),
     "torch.backends.cudnn.benchmark changed"),
    (lambda: os.environ.__setitem__("DRK_TEST_LEAK", "1"), lambda: os.environ.pop("DRK_TEST_LEAK"), "environment changed"),
])
def test_process_settings_are_seen(change, undo, expected):
    world = take_world()
    change()
    try:
        assert expected in world.differences()
    finally:
        undo()
    assert world.differences() == []


def test_threads_and_open_files_are_seen():
    world = take_world()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        found = world.differences()
        assert "python threads changed" in found
        assert any(f.startswith("open files changed") and os.devnull in f for f in found), found
    finally:
        stop.set()
        thread.join()
        os.close(fd)
    assert world.differences() == []


def test_forget_job_drops_the_jobs_modules_and_folder(tmp_path):
    from drk_lab.common.models import load_module

    world = take_world()
    (tmp_path / "candidate_probe.py").write_text("X = 1\n")
    os.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    load_module("candidate_probe", str(tmp_path / "candidate_probe.py"))  # as a worker loads a job's files

    assert "candidate_probe" in sys.modules
    world.forget_job(str(tmp_path))
    assert "candidate_probe" not in sys.modules and str(tmp_path) not in sys.path
    assert os.getcwd() == world.cwd
    assert world.differences() == []


@pytest.fixture
def reusing_sandbox():
    """A pool of its own: one warm pair (so at most two alive), each worker up to 3 jobs (drk.configure)."""
    before = settings.current()
    configure(warm_workers=1, worker_uses=3)
    yield
    configure(**vars(before))  # and the test's pool is stopped


def honest_runs(relu_small, relu_solution, n=4):
    results = [drk.evaluate(relu_small, relu_solution, device="cpu", correctness_trials=1) for _ in range(n)]
    assert all(r.ok for r in results), [r.error for r in results]
    return results


def test_workers_are_reused_up_to_their_limit(reusing_sandbox, relu_small, relu_solution):
    results = honest_runs(relu_small, relu_solution, n=7)
    assert len({r.worker_pid for r in results}) < len(results)  # reused
    assert max(r.worker_job for r in results) >= 2
    jobs_per_worker = {}
    for r in results:
        jobs_per_worker[r.worker_pid] = jobs_per_worker.get(r.worker_pid, 0) + 1
        assert r.worker_job == jobs_per_worker[r.worker_pid]  # counted from 1 in a fresh worker
    assert max(jobs_per_worker.values()) <= 3


@pytest.mark.parametrize("name, change, hack_checks, expect", [
    # not a hack, but the next job would inherit it
    ("leaky", "torch.set_num_threads(torch.get_num_threads() + 1)\n", True, None),
    ("patcher", "torch.relu = lambda x: x * 0\n", False, None),  # unflagged with checks off: the world check still sees it
    ("hacked", "torch.relu = lambda x: x * 0\n", True, "hacked"),
    ("crash", "import os\nos._exit(3)\n", False, "exit"),
])
def test_a_worker_that_cannot_be_vouched_for_retires(reusing_sandbox, relu_small, relu_solution,
                                                    name, change, hack_checks, expect):
    honest_runs(relu_small, relu_solution, n=2)
    code = relu_solution.replace("class ModelNew", change + "\n\nclass ModelNew")
    if "torch.relu" in change:  # the reference then agrees with a kernel that writes zeros
        code = code.replace("tl.where(x > 0, x, 0.0)", "x * 0.0")
    bad = drk.evaluate(relu_small, code, device="cpu", correctness_trials=1, hack_checks=hack_checks)
    assert bad.error_kind == expect, bad.error
    after = honest_runs(relu_small, relu_solution, n=4)
    assert bad.worker_pid not in {r.worker_pid for r in after}


def test_the_supervisor_lets_go_of_the_gpu_before_the_cpu_part_of_the_check(tmp_path):
    import fcntl

    from drk_lab.harness.gpulock import GpuLock

    def timing_could_start() -> bool:
        fd = os.open(guard.main_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    guard = GpuLock(str(tmp_path), 0)
    guard.acquire(exclusive=False)  # held for the worker, as join_gpu_lock does
    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    seen = []

    def worker():  # the GPU part passed; while the rest of the check runs, timing must be free
        os.write(status_w, signed({"gpu_released": True}, key))
        time.sleep(0.3)
        seen.append(timing_could_start())
        os.write(status_w, signed({"reuse": True, "why": []}, key))

    assert not timing_could_start()
    key = new_key()
    watch = WorkerWatch(Job(mode="candidate", task_source="", key=key), 0, status_r, out_r, reaper=False)
    watch.gpu_guard = guard
    thread = threading.Thread(target=worker)
    thread.start()
    assert watch.reuse_verdict() is True and watch.gpu_guard is None  # released on "gpu_released"
    thread.join()
    assert seen == [True]

    guard.acquire(exclusive=False)
    watch.gpu_guard = guard
    os.close(status_w)  # a worker that dies before its GPU part passed: the lock stays held
    assert watch.reuse_verdict() is False and watch.gpu_guard is guard
    assert not timing_could_start()
    guard.release()
    for fd in (status_r, out_r, out_w):
        os.close(fd)


def test_slots_let_at_most_their_count_through_and_free_a_dead_holders(tmp_path):
    from drk_lab.harness.zygote import Slots

    slots = Slots(str(tmp_path / "pool"), 2)
    first, second = slots.take(), slots.take()
    got = []
    waiter = threading.Thread(target=lambda: got.append(slots.take()), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert got == []  # both slots held: the third waits
    os.close(first)
    waiter.join(5)
    assert len(got) == 1
    os.close(second)
    os.close(got[0])
    holder = subprocess.Popen(  # takes a slot, says so, then is killed while holding it
        [sys.executable, "-c", "import sys, time; from drk_lab.harness.zygote import Slots; "
         f"s = Slots({str(tmp_path / 'pool')!r}, 1); s.take(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    one = Slots(str(tmp_path / "pool"), 1)
    got.clear()
    waiter = threading.Thread(target=lambda: got.append(one.take()), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert got == []
    holder.kill()
    holder.wait()
    waiter.join(5)
    assert len(got) == 1  # the kernel freed the dead holder's slot
    os.close(got[0])


def test_a_late_ready_line_is_dropped_and_a_forged_one_is_not():
    from drk_lab.harness.zygote import READY

    key = new_key()
    watch = WorkerWatch(Job(mode="candidate", task_source="", key=key), 0, -1, -1, reaper=False)
    watch.late_line = READY  # the worker's warm-up outlasted the supervisor's wait
    watch.pending = READY + signed({"stage": "load"}, key) + READY
    assert watch.take_message() == {"stage": "load"}
    assert "forged" in watch.take_message()  # only the first line may be READY


@pytest.fixture
def small_pool():
    """One warm pair: two evaluations at once, up to three pairs alive; workers reused (drk.configure)."""
    before = settings.current()
    configure(warm_workers=1, worker_uses=32)
    yield
    configure(**vars(before))


def test_workers_checking_themselves_do_not_take_evaluation_slots(small_pool, relu_small, relu_solution):
    """More evaluations in flight than slots: never more than two evaluate at once, and while a worker checks
    itself after a job another one takes the next (with only as many workers as slots, 1 in 3 evaluations
    waited at the socket for a worker's self-check to end)."""
    code = relu_solution.replace("    def forward(self, x: torch.Tensor) -> torch.Tensor:\n",
                                 "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
                                 "        print('at', __import__('time').time())\n")
    assert code != relu_solution
    # 16, not 8: under load the third pair's warm-up can outlast the first self-checks, and then the
    # first 8 evaluations may all go to the first two workers
    results = drk.evaluate_many([(relu_small, code)] * 16, max_in_flight=4, device="cpu", progress=False,
                                correctness_trials=2, hack_checks=False)
    assert all(r.ok for r in results), [r.error for r in results]
    spans = []
    for r in results:
        times = [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("at ")]
        spans.append((min(times), max(times)))
    most = max(sum(began <= t <= end for began, end in spans) for t, _ in spans)
    assert most <= 2  # the slots: at most 2 x warm_workers evaluate at once
    assert len({r.worker_pid for r in results}) >= 3  # a third worker served while the others checked


def test_without_spare_workers_only_as_many_are_alive_as_may_evaluate(small_pool, relu_small, relu_solution):
    """spare_workers=0 (the default on a GPU): the same load is served by the two
    workers that may evaluate at once, and nothing else is forked while they are alive."""
    configure(spare_workers=0)  # beside small_pool's one warm pair
    results = drk.evaluate_many([(relu_small, relu_solution)] * 6, max_in_flight=4, device="cpu", progress=False,
                                correctness_trials=2, hack_checks=False)
    assert all(r.ok for r in results), [r.error for r in results]
    assert len({r.worker_pid for r in results}) == 2


def test_the_zygote_leaves_tritons_compiler_imported_for_its_workers():
    # a worker's first never-seen kernel would otherwise import the code generator inside its evaluation
    code = ("import sys; from drk_lab.harness.warm import precompute_in_zygote; precompute_in_zygote(); "
            "print('triton.compiler.code_generator' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "True"


def test_only_a_baseline_job_that_ran_torch_compile_retires_its_worker():
    """An eager-only baseline runs nothing but the task's reference, as every candidate job does, so the
    world check decides; torch.compile leaves compiled graphs and caches behind, so that job always retires."""
    from drk_lab.harness.protocol import RawResult
    from drk_lab.harness.worker import refusal

    clean = RawResult()
    assert refusal(Job(mode="baseline", task_source="", compile_baseline=False), clean) == []
    assert refusal(Job(mode="baseline", task_source="", compile_baseline=True), clean) == [
        "a baseline job compiled with torch.compile, which changes too much"]
    assert refusal(Job(mode="candidate", task_source=""), clean) == []
    assert refusal(Job(mode="candidate", task_source=""), RawResult(error_kind="timeout")) == [
        "the evaluation ended timeout"]
