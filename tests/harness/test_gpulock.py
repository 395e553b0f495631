"""The per-GPU readers-writer lock, with real processes and real flock."""

import multiprocessing as mp
import os
import time

from drk_lab.harness.gpulock import GpuLock

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


def hold(lock_dir, exclusive, start_after, hold_for, events):
    time.sleep(start_after)
    lock = GpuLock(lock_dir, 0)
    with lock.exclusive() if exclusive else lock.shared():
        events.put(("got", "writer" if exclusive else f"reader{start_after}", time.monotonic()))
        time.sleep(hold_for)
        # the last moment it surely holds the lock: a time taken after the release can come later than
        # the next holder's "got" when the machine is busy
        events.put(("released", "writer" if exclusive else f"reader{start_after}", time.monotonic()))


def test_timing_waits_for_readers_and_new_readers_queue_behind_it(tmp_path):
    ctx = mp.get_context("fork")
    events = ctx.Queue()
    procs = [ctx.Process(target=hold, args=(str(tmp_path), False, 0.0, 0.6, events)),  # correctness work
             ctx.Process(target=hold, args=(str(tmp_path), True, 0.2, 0.4, events)),  # timing arrives
             ctx.Process(target=hold, args=(str(tmp_path), False, 0.4, 0.0, events))]  # more correctness
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
    seen = {}
    while not events.empty():
        what, who, when = events.get()
        seen[(what, who)] = when
    assert seen[("got", "writer")] >= seen[("released", "reader0.0")]
    assert seen[("got", "reader0.4")] >= seen[("got", "writer")] + 0.35  # it queued behind the writer


def test_compilation_gives_the_gpu_back(tmp_path):
    from triton import knobs

    lock = GpuLock(str(tmp_path), 0)
    lock.release_while_compiling()
    try:
        with lock.shared():
            knobs.runtime.jit_cache_hook(key=None)
            assert lock.held is None
            other = GpuLock(str(tmp_path), 0)
            with other.exclusive():  # a timing process can run while we compile
                pass
            knobs.runtime.jit_post_compile_hook(key=None)
            assert lock.held is not None
        assert lock.held is None
    finally:
        knobs.runtime.jit_cache_hook = knobs.runtime.jit_post_compile_hook = None


def test_sandboxes_are_kept_apart_by_whether_their_workers_profile():
    from drk_lab.harness.caller import get_sandbox

    assert get_sandbox("cuda", "fork", profiler=False) is not get_sandbox("cuda", "fork", profiler=True)
    assert get_sandbox("cuda", "fork", profiler=False).profiler is False
    assert get_sandbox("cpu", "fork", profiler=False) is get_sandbox("cpu", "fork")  # the CPU path never profiles


def test_lock_log_shows_who_kept_timing_waiting(tmp_path, monkeypatch):
    import importlib.util
    import json

    from dataclasses import replace

    from drk_lab.harness import settings

    log = tmp_path / "holds.jsonl"
    monkeypatch.setattr(settings, "_current", replace(settings.current(), lock_log=str(log)))
    ctx = mp.get_context("fork")  # the children see the patched settings
    events = ctx.Queue()
    procs = [ctx.Process(target=hold, args=(str(tmp_path), False, 0.0, 1.0, events)),
             ctx.Process(target=hold, args=(str(tmp_path), True, 0.2, 0.1, events))]
    procs[0].start()
    assert events.get(timeout=10)[0] == "got"  # the writer starts once the reader holds (a busy machine forks late)
    procs[1].start()
    for p in procs:
        p.join(10)
    holds = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(h["mode"] for h in holds) == ["exclusive", "shared"]
    spec = importlib.util.spec_from_file_location("lock_report", os.path.join(BENCH, "lock_report.py"))
    lock_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock_report)
    summary = lock_report.report(holds)
    assert summary["exclusive_holds"] == 1
    assert 0.3 < summary["exclusive_total_wait_s"] < 2.0  # asked 0.2 s into the read, got it when the reader left at 1 s
    assert 0.3 < summary["shared"]["?"]["blocked_exclusive_s"] <= summary["exclusive_total_wait_s"] + 0.01
