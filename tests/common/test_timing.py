"""Timing: the summary statistics by hand, and what goes into the timed region (CPU stand-ins for CUDA's operations)."""

import gc
import time

import pytest

from drk_lab.common.timing import median_precision, run_trials, summarize, warm_up


# -- summarize --------------------------------------------------------------------------------
def test_summary_of_an_odd_count():
    # sorted: 1 2 3 5 9; quartiles (inclusive) at positions 1 and 3 of 0..4 -> 2 and 5
    s = summarize([9.0, 1.0, 5.0, 3.0, 2.0])
    assert s["median_ms"] == 3.0
    assert s["iqr_ms"] == 3.0
    assert s["mean_ms"] == 4.0
    assert (s["min_ms"], s["max_ms"], s["trials"]) == (1.0, 9.0, 5)
    assert s["times_ms"] == [9.0, 1.0, 5.0, 3.0, 2.0]  # every trial, in the order measured


def test_summary_of_an_even_count():
    # sorted: 1 2 4 8 16 32; median (4 + 8) / 2 = 6; quartiles at positions 1.25 and 3.75 of 0..5:
    # 2 + 0.25 * (4 - 2) = 2.5 and 8 + 0.75 * (16 - 8) = 14
    s = summarize([32.0, 1.0, 16.0, 2.0, 8.0, 4.0])
    assert s["median_ms"] == 6.0
    assert s["iqr_ms"] == 11.5
    assert s["mean_ms"] == 10.5
    assert s["trials"] == 6


def test_summary_of_one_sample():
    s = summarize([0.25])
    assert s["median_ms"] == s["mean_ms"] == s["min_ms"] == s["max_ms"] == 0.25
    assert s["iqr_ms"] == 0.0 and s["trials"] == 1


def test_one_outlier_moves_neither_median_nor_iqr():
    s = summarize([1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 1000.0])
    assert s["median_ms"] == 2.0
    assert s["iqr_ms"] == 1.25  # positions 1.75 and 5.25: 1 + 0.75 and 3 + 0.25 * 0
    assert s["max_ms"] == 1000.0


# -- run_trials: the timed region ---------------------------------------------------------------
class FakeEvent:
    """Records the fake clock's time, like a CUDA event records the GPU's."""

    def __init__(self, log, clock):
        self.log, self.clock, self.t = log, clock, None

    def record(self):
        self.t = self.clock[0]
        self.log.append(("record", self))

    def elapsed_time(self, end):
        return end.t - self.t


def recorded_run(durations: list[float], warmup: int = 3, chunk: int = 25, min_trials: int = 50,
                 precision: float | None = None, after_call=None):
    """run_trials with stand-ins that log every operation and advance a fake clock: the call by its
    trial's duration, the flush and the synchronize by far more (they must fall outside the region)."""
    log, clock = [], [0.0]
    measured = iter(durations)
    gc_during_calls = []

    def fn(x):
        assert x == "input"
        started = any(entry[0] == "record" for entry in log)
        log.append(("call",))
        if started:
            gc_during_calls.append(gc.isenabled())
            clock[0] += next(measured)
        else:
            clock[0] += 0.001
        return f"output {len(gc_during_calls)}"

    def flush():
        log.append(("flush",))
        clock[0] += 100.0

    def sync():
        log.append(("sync",))
        clock[0] += 7.0

    def spin(seconds):
        log.append(("spin", seconds))
        clock[0] += 50.0

    clocks = iter([{"sm_clock_mhz": 1980, "slowdown": []}, {"sm_clock_mhz": 1700, "slowdown": ["hw_thermal"]}])

    def read_clock():
        log.append(("clock",))
        return next(clocks)

    def handed_over(trial, out, chunk_end):
        log.append(("after_call", trial))
        clock[0] += 1000.0  # would show in the statistics if it ran between the events
        after_call(trial, out, chunk_end)

    stats = run_trials(fn, ["input"], warmup, len(durations), flush=flush, lead_spin=spin,
                       new_event=lambda: FakeEvent(log, clock),
                       synchronize=sync, read_clock=read_clock, after_call=after_call and handed_over, chunk=chunk,
                       min_trials=min_trials, precision=precision)
    return stats, log, gc_during_calls


def test_each_trial_times_exactly_one_call_after_a_flush():
    durations = [3.0, 1.0, 2.0, 5.0, 4.0]
    _, log, _ = recorded_run(durations)
    first_record = next(i for i, entry in enumerate(log) if entry[0] == "record")
    assert log[first_record - 2][0] == "spin"  # the chunk's lead, before its first flush
    measured = log[first_record - 1:-2]  # from the first trial's flush to the last trial's end event
    assert len(measured) == 4 * len(durations)
    starts = []
    for t in range(len(durations)):
        flush, start, call, end = measured[4 * t: 4 * t + 4]
        assert [flush, call] == [("flush",), ("call",)]
        assert start[0] == end[0] == "record" and start[1] is not end[1]
        starts.append(start[1])
    assert len({id(e) for e in starts}) == len(durations)  # a fresh pair of events per trial
    assert log[-2:] == [("sync",), ("clock",)]  # one synchronize for the chunk, then the clock


def test_the_host_queues_a_chunk_of_trials_between_synchronizations():
    _, log, _ = recorded_run([1.0] * 10, chunk=4, min_trials=100)
    timed = log[next(i for i, entry in enumerate(log) if entry[0] == "record") - 1:]
    calls_between_syncs, calls = [], 0
    for entry in timed:
        if entry == ("call",):
            calls += 1
        elif entry == ("sync",):
            calls_between_syncs.append(calls)
            calls = 0
    assert calls_between_syncs == [4, 4, 2]


def test_warmup_calls_come_before_any_event():
    _, log, _ = recorded_run([1.0, 2.0], warmup=4)
    first_record = next(i for i, entry in enumerate(log) if entry[0] == "record")
    assert log[:first_record - 2] == [("call",)] * 4 + [("sync",), ("clock",)]  # the clock read before timing
    assert log[first_record:].count(("call",)) == 2


def test_each_chunk_starts_with_a_lead_long_enough_to_queue_it():
    log, slow = [], []

    def fn(x):
        time.sleep(0.002)  # a forward that takes 2 ms of host time to queue
        slow.append(1)

    run_trials(fn, ["input"], 3, 10, flush=lambda: None, lead_spin=lambda s: log.append(s),
               new_event=lambda: FakeEvent([], [0.0]), synchronize=lambda: None, read_clock=lambda: None,
               chunk=4, min_trials=100)
    assert len(log) == 3  # chunks of 4, 4 and 2
    assert 4 * 2 * 0.002 <= log[0] <= 0.05 and log[2] == pytest.approx(log[0] / 2)


def test_warm_up_lasts_long_enough_and_no_longer_than_max_calls():
    calls, synced = [], []
    made = warm_up(lambda x: calls.append(x), ["input"], lambda: synced.append(1), min_seconds=0.05)
    assert made == len(calls) == len(synced) and 1 <= made <= 100
    made = warm_up(lambda x: time.sleep(0.001), ["input"], lambda: None, min_seconds=10.0, max_calls=5)
    assert made == 5  # never more than max_calls


def test_stats_are_the_summary_of_the_measured_intervals():
    durations = [3.0, 1.0, 2.0, 5.0, 4.0]
    stats, _, gc_during_calls = recorded_run(durations)
    gpu_clock = stats.pop("gpu_clock")
    assert stats.pop("max_trials") == 5
    assert stats == summarize(durations)
    assert stats["median_ms"] == 3.0  # neither flush (100) nor synchronize (7) in any interval
    assert gpu_clock == {"sm_clock_mhz": [1980, 1700], "slowdown": ["hw_thermal"]}
    assert gc_during_calls == [False] * len(durations)  # no collection inside the timed region
    assert gc.isenabled()


def test_timing_stops_early_once_the_median_is_precise_and_not_before_min_trials():
    steady = [1.0 + 0.001 * (i % 7) for i in range(100)]
    stats, _, _ = recorded_run(steady, chunk=25, min_trials=50, precision=0.005)
    assert stats["trials"] == 50 and stats["max_trials"] == 100
    noisy = [1.0 + (i % 2) for i in range(100)]  # half at 1, half at 2: the median is never pinned down
    stats, _, _ = recorded_run(noisy, chunk=25, min_trials=50, precision=0.005)
    assert stats["trials"] == 100
    stats, _, _ = recorded_run(steady, chunk=10, min_trials=30, precision=None)
    assert stats["trials"] == 100  # no precision: every trial asked for


def test_median_precision_by_hand():
    # n = 9: ranks 4.5 -+ 0.98 * 3 = 1.56 .. 7.44 -> order statistics 0 and 8 (floor - 1, ceil)
    assert median_precision([1, 2, 3, 4, 5, 6, 7, 8, 9]) == (9 - 1) / (2 * 5)
    assert median_precision([2.0, 2.0]) == float("inf")  # too few to say


def test_each_timed_output_is_handed_over_after_its_trial_is_over():
    """What the timed calls return is checked afterwards (changes_after_checks): each trial's output goes
    to after_call after the trial's end event, never inside the timed region, with the chunk's end marked."""
    handed = []

    def after_call(trial, out, chunk_end):
        handed.append((trial, out, chunk_end))

    stats, log, _ = recorded_run([1.0] * 6, chunk=4, min_trials=100, after_call=after_call)
    assert [(t, end) for t, _, end in handed] == [(0, False), (1, False), (2, False), (3, True), (4, False), (5, True)]
    assert all(out.startswith("output") for _, out, _ in handed)
    ends = [i for i, entry in enumerate(log) if entry[0] == "record"][1::2]
    assert [log[i + 1] for i in ends] == [("after_call", t) for t in range(6)]  # right after each end event
    assert stats["median_ms"] == 1.0  # after_call's time is not in any interval
