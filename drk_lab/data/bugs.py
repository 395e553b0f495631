"""Planted bugs for repair turns: a first reply that computes a slightly wrong function.

A model trained only on correct teacher turns never sees feedback on a failure, so after a failed
first turn it does not know what to write. A repair trajectory shows it: turn 1 is the teacher's
kernel for a slightly different task (one pointwise operator swapped for another, or left out: the
mistake small models make most), the harness's real feedback on it, then the teacher's kernel for the
task with a plan that names the mistake. Only pointwise operators change, so the module's constructor
and parameters stay the task's own.

    bug = plant_bug(spec, random.Random(0))    # None when the chain has no pointwise operator to change
    bug.spec                                   # the task the wrong reply solves instead
    bug.what                                   # "it applied sigmoid where the task asks for tanh"
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from drk_lab.data.operators import POINTWISE, base_name, describe_step
from drk_lab.data.spec import TaskSpec


@dataclass(frozen=True)
class PlantedBug:
    spec: TaskSpec  # the task the buggy reply solves instead of the real one
    what: str  # the mistake, as the fixing turn's plan names it


def plant_bug(spec: TaskSpec, rng: random.Random) -> PlantedBug | None:
    steps = list(spec.steps)
    places = [i for i, s in enumerate(steps) if base_name(s) in POINTWISE]
    if not places:
        return None
    i = rng.choice(places)
    old = steps[i]
    # leaving a step out renumbers the steps after it, and a learned bias is named by its number
    can_drop = len(steps) > 1 and not any(base_name(s) == "bias" for s in steps[i + 1:])
    if can_drop and rng.random() < 0.3:
        del steps[i]
        what = f"it left out the {describe_step(old)} step"
    else:
        name = rng.choice([n for n in POINTWISE if n != base_name(old)])
        new = f"{name}:{rng.choice(POINTWISE[name].params)}" if POINTWISE[name].params else name
        steps[i] = new
        what = f"it applied {describe_step(new)} where the task asks for {describe_step(old)}"
    return PlantedBug(replace(spec, steps=tuple(steps)), what)
