"""Training that fits a device call: stop before a step that would pass the call's time limit.

    timer = StepTimer(time_limit_s=500)     # None: no limit
    while steps_left and timer.next_fits():
        train_one_step()
        timer.step_done()
    # not finished: save the state; the next call resumes from it (rl/pretrain.py, rl/sft.py)

A step is judged by the longest one so far in this call, and the first step of a call always runs, so
every call makes progress even when loading took most of its time.
"""

from __future__ import annotations

import time


class StepTimer:
    def __init__(self, time_limit_s: float | None):
        self.time_limit_s = time_limit_s
        self.started = self.last = time.perf_counter()
        self.longest = 0.0

    def next_fits(self) -> bool:
        """Whether one more step fits in the limit; the next step's time counts from here."""
        self.last = time.perf_counter()
        return (self.time_limit_s is None or not self.longest
                or self.last - self.started + self.longest <= self.time_limit_s)

    def step_done(self) -> None:
        self.longest = max(self.longest, time.perf_counter() - self.last)


def stop_before_limit(time_limit_s: float):
    """A transformers TrainerCallback that ends training with a checkpoint (Trainer's own: model,
    optimizer, schedule, data position, RNG) before a step that would pass time_limit_s seconds from
    now: made before the trainer, it counts the data's preparation and the loading as well."""
    from transformers import TrainerCallback

    timer = StepTimer(time_limit_s)

    class StopBeforeLimit(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timer.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            timer.step_done()
            if state.global_step < state.max_steps and not timer.next_fits():
                control.should_training_stop = control.should_save = True

    return StopBeforeLimit()
