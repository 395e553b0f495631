"""The quickstart: every built-in solution plus broken and cheating variants, in one table."""

from __future__ import annotations

import re
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from drk_lab.harness.devices import resolve_device
from drk_lab.harness.evaluate import evaluate_many
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import DATA_DIR, Task, builtin_solution, builtin_tasks

VARIANTS_DIR = DATA_DIR / "variants"
HACKS_DIR = DATA_DIR / "hacks"  # one or more planted cheats per hack code (hacks/catalogue.py)


@dataclass
class Variant:
    """A planted broken or cheating candidate; its header says which task and what should happen."""

    name: str
    task: str  # "level1/01_relu"
    expect: str  # an error kind, or "ok"
    what: str
    device: str | None  # "cuda" when it only makes sense on a GPU
    code: str
    hack_checks: bool = True  # off for crash tests whose crash the static checks would prevent
    known_gap: str | None = None  # a cheat the checks do not catch yet, and why


def load_variants(folder: Path = VARIANTS_DIR) -> list[Variant]:
    variants = []
    for path in sorted(folder.glob("*.py")):
        code = path.read_text()
        header = dict(re.findall(r"^# (\w+): (.+)$", code, flags=re.M))
        variants.append(Variant(path.stem, header["task"], header["expect"], header.get("what", ""),
                                header.get("device") or ("cuda" if header.get("check") == "gpu" else None), code,
                                not header.get("hack_checks", "").startswith("off"), header.get("known_gap")))
    return variants


def task_by_id(tasks: list[Task], task_id: str) -> Task:
    level, name = task_id.split("/")
    return next(t for t in tasks if t.name == name and f"level{t.level}" == level)


def run_quickstart(device: str | None = None, max_in_flight: int | None = None, variant_timeout_s: float = 15.0,
                   show: bool = True) -> list[tuple[str, Task, EvalResult, str]]:
    """Evaluate every built-in task's solution and the variants; return the rows (label, task, result,
    expected outcome) and, with `show`, print them as a table."""
    device = resolve_device(device)  # ValueError in one line for a device that is not there
    tasks = builtin_tasks()
    if device == "cpu":  # the interpreter runs the small sizes
        tasks = [t.small() for t in tasks]
    variants = [v for v in load_variants() + load_variants(HACKS_DIR) if v.device in (None, device)]
    say = print if show else (lambda *_: None)
    say(f"drk_lab quickstart on {device}: {len(tasks)} built-in solutions, {len(variants)} planted variants")
    if device == "cpu":
        print("No CUDA GPU: the Triton interpreter checks correctness at each task's small sizes; timings need CUDA.")
    # workers evaluating small sizes on the CPU stay near 220 MiB; a 1 GiB limit lets the host-memory hoarder
    # reach it in about a second even where memory faults in at 1 GB/s shared by 2 cores (at 4 GiB, 4 of them
    # in flight sometimes outlasted the 15 s limit and ended as timeouts); CUDA workers need more room
    host_memory = 1 << 30 if device == "cpu" else 4 << 30
    started = time.time()
    solutions = evaluate_many([(t, builtin_solution(t)) for t in tasks], max_in_flight=max_in_flight, device=device)
    planted = {}
    for checks in (True, False):
        group = [v for v in variants if v.hack_checks == checks]
        results = evaluate_many([(task_by_id(tasks, v.task), v.code) for v in group], max_in_flight=max_in_flight,
                                device=device, timeout_s=variant_timeout_s, timing=False,
                                host_memory_bytes=host_memory, hack_checks=checks)
        planted.update({v.name: r for v, r in zip(group, results)})
    planted = [planted[v.name] for v in variants]
    rows = [("solution", t, r, "ok") for t, r in zip(tasks, solutions)]
    rows += [(f"variant:{v.name}", task_by_id(tasks, v.task), r, "known gap" if v.known_gap else v.expect)
             for v, r in zip(variants, planted)]
    say(format_table(rows))
    unexpected = [label for label, _, r, expect in rows if verdict(r, expect) == "NO"]
    gaps = [label for label, _, r, expect in rows if expect == "known gap" and verdict(r, expect) != "yes"]
    print(f"\n{len(rows)} evaluations in {time.time() - started:.0f} s; "
          f"{len(rows) - len(unexpected) - len(gaps)} behaved as expected" + (f"; known gaps: {gaps}" if gaps else "")
          + (f"; UNEXPECTED: {unexpected}" if unexpected else ""))
    return rows


def verdict(result: EvalResult, expect: str) -> str:
    got = result.error_kind or "ok"
    if got == expect:
        return "yes"
    if expect == "hacked" and got == "mismatch":
        return "caught as mismatch"  # no reward either way; the runtime checks did not name it
    if expect == "known gap":
        return "NOT CAUGHT (known gap)"
    return "NO"


def format_table(rows, width: int = 150) -> str:
    """Whole names (the name columns are as wide as the longest), and a hacked result's reason under its
    row, wrapped at words to `width`."""
    def fmt(x):
        return "-" if x is None else f"{x:.2f}x"

    name_w = max([len("task")] + [len(task.name) for _, task, _, _ in rows])
    label_w = max([len("candidate")] + [len(label) for label, _, _, _ in rows])
    header = (f"{'task':{name_w}s} {'lvl':>3s} {'candidate':{label_w}s} {'correct':7s} {'hacked':6s} {'error kind':19s} "
              f"{'vs eager':>8s} {'vs compile':>10s}  expected")
    lines = [header, "-" * len(header)]
    indent = " " * (name_w + 5)
    for label, task, r, expect in rows:
        lines.append(f"{task.name:{name_w}s} {task.level or '-':>3} {label:{label_w}s} {str(r.correct):7s} "
                     f"{str(r.hacked):6s} {r.error_kind or '-':19s} {fmt(r.speedup):>8s} {fmt(r.speedup_compile):>10s}  "
                     f"{verdict(r, expect)}")
        if r.hacked:
            reason = (r.error or "").splitlines()[0] if r.error else ""
            lines += textwrap.wrap(reason, max(60, width), initial_indent=indent + "-> ",
                                   subsequent_indent=indent + "   ")
    notes = {r.timing_note for _, _, r, _ in rows if r.timing_note and not r.timings_valid}
    return "\n".join(lines + [f"note: {n}" for n in sorted(notes)])
