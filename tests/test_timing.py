"""Timing: the summary statistics by hand, and what goes into the timed region (CPU stand-ins for CUDA's operations)."""

import gc

from drk_lab.harness.timing import run_trials, summarize


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


def recorded_run(durations: list[float], warmup: int = 3):
    """run_trials with stand-ins that log every operation and advance a fake clock: the call by its
    trial's duration, the flush and the spin by far more (they must fall outside the region)."""
    log, clock = [], [0.0]
    measured = iter(durations)
    gc_during_calls = []

    def advance(ms):
        clock[0] += ms

    def fn(x):
        assert x == "input"
        started = any(entry[0] == "record" for entry in log)
        log.append(("call",))
        if started:
            gc_during_calls.append(gc.isenabled())
            advance(next(measured))
        else:
            advance(0.001)

    def flush():
        log.append(("flush",))
        advance(100.0)

    def spin():
        log.append(("spin",))
        advance(50.0)

    def sync():
        log.append(("sync",))
        advance(7.0)

    clocks = iter([{"sm_clock_mhz": 1980, "slowdown": []}, {"sm_clock_mhz": 1700, "slowdown": ["hw_thermal"]}])

    def read_clock():
        log.append(("clock",))
        return next(clocks)

    stats = run_trials(fn, ["input"], warmup, len(durations), flush=flush, lead_spin=spin,
                       new_event=lambda: FakeEvent(log, clock), synchronize=sync, read_clock=read_clock)
    return stats, log, gc_during_calls


def test_each_trial_times_exactly_one_call_after_flush_and_spin():
    durations = [3.0, 1.0, 2.0, 5.0, 4.0]
    _, log, _ = recorded_run(durations)
    first_record = next(i for i, entry in enumerate(log) if entry[0] == "record")
    measured = log[first_record - 2:-1]  # from the first trial's flush to the last sync; then the clock
    assert len(measured) == 6 * len(durations)
    starts = []
    for t in range(len(durations)):
        flush, spin, start, call, end, sync = measured[6 * t: 6 * t + 6]
        assert [flush, spin, call, sync] == [("flush",), ("spin",), ("call",), ("sync",)]
        assert start[0] == end[0] == "record" and start[1] is not end[1]
        starts.append(start[1])
    assert len({id(e) for e in starts}) == len(durations)  # a fresh pair of events per trial
    assert log[-1] == ("clock",)


def test_warmup_calls_come_before_any_event():
    _, log, _ = recorded_run([1.0, 2.0], warmup=4)
    first_record = next(i for i, entry in enumerate(log) if entry[0] == "record")
    before = log[:first_record - 2]
    calls = before.count(("call",))
    assert 4 <= calls <= 100  # at least `warmup`, at most 100 (then MIN_WARMUP_S decides)
    assert before[:-1] == [("call",), ("sync",)] * calls  # each warm-up call synchronized
    assert before[-1] == ("clock",)  # the clock read after warming up, before timing
    assert log[first_record:].count(("call",)) == 2


def test_stats_are_the_summary_of_the_measured_intervals():
    durations = [3.0, 1.0, 2.0, 5.0, 4.0]
    stats, _, gc_during_calls = recorded_run(durations)
    gpu_clock = stats.pop("gpu_clock")
    assert stats == summarize(durations)
    assert stats["median_ms"] == 3.0  # neither flush (100) nor spin (50) nor sync (7) in any interval
    assert gpu_clock == {"sm_clock_mhz": [1980, 1700], "slowdown": ["hw_thermal"]}
    assert gc_during_calls == [False] * len(durations)  # no collection inside the timed region
    assert gc.isenabled()


def test_each_timed_output_is_handed_over_after_its_trial_is_over():
    """What the timed calls return is checked afterwards (changes_after_checks): each trial's output goes
    to after_call once the trial's synchronize is done, never inside the timed region."""
    log, clock, handed = [], [0.0], []

    def fn(x):
        log.append(("call",))
        clock[0] += 1.0
        return f"output {clock[0]}"

    def after_call(trial, out):
        log.append(("after_call", trial))
        handed.append((trial, out))
        clock[0] += 1000.0  # would show in the statistics if it ran between the events

    stats = run_trials(fn, ["input"], 3, 4, flush=lambda: log.append(("flush",)), lead_spin=lambda: None,
                       new_event=lambda: FakeEvent(log, clock), synchronize=lambda: log.append(("sync",)),
                       read_clock=lambda: None, after_call=after_call)
    assert [t for t, _ in handed] == [0, 1, 2, 3] and all(out.startswith("output") for _, out in handed)
    timed = [entry for entry in log if entry[0] in ("record", "sync", "after_call")]
    assert [e[0] for e in timed[-4:]] == ["record", "record", "sync", "after_call"]
    assert stats["median_ms"] == 1.0  # after_call's time is not in any interval
