"""Case studies: a fixed multi-turn story on one task, replayed through the real harness.

A case lives in data/cases/NAME/: the task (task.py, KernelBench format), the model's answer at each
turn (turn_1.py, turn_2.py, ...: complete ModelNew sources, each opening with a comment line saying
what changed) and shipped measurements (DEVICE.jsonl, one Trajectory each: h200.jsonl from
experiments/layernorm_case.py on an H200, cpu.jsonl from the CPU interpreter, correctness only).

    traj = load_case("layernorm")              # the H200 measurement when shipped, else the CPU one
    rows = case_table(traj)                    # one dict per turn: speedups, coverage, reward, ...
    traj = measure_case("layernorm", device="cpu")   # evaluate the turns again here
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from drk_lab.agent.context import build_messages, episode_schedule
from drk_lab.agent.feedback import format_feedback, messages_tokens
from drk_lab.agent.prompts import initial_prompt
from drk_lab.agent.rewards import get_reward
from drk_lab.agent.trajectory import Trajectory, Turn, read_jsonl
from drk_lab.harness.devices import default_device
from drk_lab.harness.evaluate import evaluate
from drk_lab.harness.task import DATA_DIR, Task, TaskError, load_task

CASES_DIR = DATA_DIR / "cases"
PREFERRED_MEASUREMENTS = ("h200", "cpu")  # load_case's order when no device_name is given
TABLE_FIELDS = ("correct", "hacked", "speedup", "speedup_compile", "coverage", "bandwidth_fraction", "runtime_ms")


def case_dir(name: str = "layernorm") -> Path:
    folder = CASES_DIR / name
    if not (folder / "task.py").is_file():
        known = sorted(p.name for p in CASES_DIR.iterdir() if (p / "task.py").is_file()) if CASES_DIR.is_dir() else []
        raise TaskError(f"no case {name!r} under {CASES_DIR} (known: {', '.join(known) or 'none'})")
    return folder


def case_task(name: str = "layernorm") -> Task:
    """The case's task at full size (task.small() is what the CPU path runs), named after the case."""
    return replace(load_task(case_dir(name) / "task.py"), name=name)


def case_turns(name: str = "layernorm") -> list[str]:
    """The sources of the case's turns, in order (turn_1.py, turn_2.py, ...)."""
    files = sorted(case_dir(name).glob("turn_*.py"), key=lambda p: int(p.stem.split("_")[1]))
    return [p.read_text() for p in files]


def measure_case(name: str = "layernorm", device: str | None = None, reward_fn: str = "drkernel",
                 feedback_tokens: int = 2048, **eval_kwargs) -> Trajectory:
    """Evaluate every turn of the case (on the CPU at the task's small sizes, on CUDA at full size) and
    build the Trajectory a model writing those answers would have produced: each turn's prompt holds
    the first message and every earlier reply with its feedback. `eval_kwargs` go to evaluate()."""
    device = device or default_device()
    task = case_task(name)
    task = task.small() if device == "cpu" else task
    reward = get_reward(reward_fn)
    prompt = initial_prompt(task)
    sources = case_turns(name)
    traj = Trajectory(task.name, prompt, reward_fn=reward_fn, schedule=asdict(episode_schedule(len(sources))))
    for index, code in enumerate(sources):
        context = list(range(index))  # a plain episode: every earlier turn stays in the prompt
        messages = build_messages(prompt, traj.turns, context)
        result = evaluate(task, code, device=device, **eval_kwargs)
        last = index == len(sources) - 1
        traj.turns.append(Turn(
            task=task.name, index=index, iteration=0, context=context,
            prompt_tokens=messages_tokens(messages),  # estimated (about 4 characters a token): no tokenizer here
            prompt_chars=sum(len(m["content"]) for m in messages),
            response=f"```python\n{code.rstrip()}\n```", finish_reason="stop", extraction="ok", code=code,
            result=result, reward=float(reward(result)),
            feedback=format_feedback(result, feedback_tokens, request=not last)))
    return traj


def case_files(name: str = "layernorm") -> dict[str, Path]:
    """The shipped measurements of a case: {device name (file stem): path}."""
    return {p.stem: p for p in sorted(case_dir(name).glob("*.jsonl"))}


def load_case(name: str = "layernorm", device_name: str | None = None) -> Trajectory:
    """A shipped measurement of the case: `device_name` names the file (h200 -> h200.jsonl, cpu ->
    cpu.jsonl); None takes the H200 measurement when it is shipped, else the CPU one."""
    files = case_files(name)
    if device_name is None:
        device_name = next((d for d in PREFERRED_MEASUREMENTS if d in files), next(iter(files), None))
    if device_name not in files:
        raise FileNotFoundError(f"case {name!r}: no measurement {device_name!r} in {case_dir(name)} "
                                f"(shipped: {', '.join(files) or 'none'})")
    return read_jsonl(files[device_name])[-1]


def case_table(trajectory: Trajectory) -> list[dict]:
    """One row per turn: turn (from 1), correctness, hack verdict, speedups, coverage, bandwidth, runtime, reward."""
    rows = []
    for turn in trajectory.turns:
        row = {"turn": turn.index + 1}
        row.update({f: getattr(turn.result, f) for f in TABLE_FIELDS})
        row["reward"] = turn.reward
        rows.append(row)
    return rows


def case_trajectory(name: str = "layernorm", device: str = "cpu") -> Trajectory:
    """What a notebook shows: measured again on a GPU, the shipped measurement on a CPU (where nothing
    can be timed)."""
    return load_case(name) if device == "cpu" else measure_case(name, device=device)
