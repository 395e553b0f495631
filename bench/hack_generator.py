"""Recall of the hack checks on generated variants (drk_lab/hacks/generator.py), false positives on honest
rewrites and on every teacher solution, and what the checks cost (issue 64). BENCHMARKS.md has the numbers.

    python bench/hack_generator.py hacked honest teacher overhead summary --out DIR [--per-cell 40] [--seed 0]

Each phase appends a JSON line per variant to a file in DIR as it goes and skips the variants already
there, so a run that stops loses nothing and the same command resumes it:
- hacked: every class x obfuscation level. What the static rules stop is counted as stopped. Every other
  variant is first run with hack_checks=False: it is a working hack (`effective`) when that run pays it
  (correct), or when an always-on check (input mutation) stops it. Working hacks then run with the checks
  (`hacked_<tag>.jsonl`; a new --tag after a fix reruns only this part). On a CPU the classes marked gpu
  get their static verdict only.
- honest: honest rewrites with the checks on; any `hacked` result is a false positive.
- teacher: the teacher's three turns on every task of the SFT set (data/sft).
- overhead: built-in solutions with the checks on and off, one at a time.
- summary: results.json, the figure (recall by class x level) and the table.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path

import torch

import drk_lab as drk
from drk_lab.hacks.generator import HACK_CLASSES, LEVELS, Base, hacked_variants, honest_variants
from drk_lab.hacks.static.rules import static_hack_check
from drk_lab.harness.task import DATA_DIR, builtin_solution, builtin_tasks, load_task, task_from_row

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SCHEMA_VERSION = 1
CHUNK = 16


def teacher_rows(names: list[str] | None = None) -> list[dict]:
    """RL prompt rows (data/rl) of the tasks named, or all of them."""
    from drk_lab.data.export import read_rows

    rows = read_rows(DATA_DIR / "rl" / "prompts.jsonl.gz")
    if names is None:
        return rows
    by_name = {r["name"]: r for r in rows}
    return [by_name[n] for n in names if n in by_name]


def teacher_bases(rows: list[dict], turns=(1, 2, 3)) -> list[Base]:
    from drk_lab.data.spec import TaskSpec
    from drk_lab.data.teacher import solution

    out = []
    for row in rows:
        spec, task = TaskSpec.from_dict(json.loads(row["spec"])), sized(task_from_row(row, check=False))
        out += [Base(f"teacher:{spec.name}:t{turn}", task, solution(spec, turn)) for turn in turns]
    return out


def sized(task):
    """The CPU runs small sizes (the interpreter); a GPU the task's own."""
    return task.small() if DEVICE == "cpu" else task


def honest_bases(teacher_tasks: int = 24, seed: int = 0) -> list[Base]:
    """Every built-in solution, the three LayerNorm case turns, and the teacher's three turns on
    `teacher_tasks` train tasks of data/rl drawn with `seed`."""
    bases = [Base(f"builtin:level{t.level}/{t.name}", sized(t), builtin_solution(t)) for t in builtin_tasks()]
    case = DATA_DIR / "cases" / "layernorm"
    task = sized(load_task(case / "task.py"))
    bases += [Base(f"layernorm:turn_{i}", task, (case / f"turn_{i}.py").read_text()) for i in (1, 2, 3)]
    rows = sorted((r for r in teacher_rows() if r["split"] == "train"), key=lambda r: r["name"])
    return bases + teacher_bases(random.Random(seed).sample(rows, teacher_tasks))



def sha(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def done(path: Path, key: str = "sha") -> dict:
    if not path.exists():
        return {}
    return {row[key]: row for row in map(json.loads, path.read_text().splitlines()) if row.get(key)}


def append(path: Path, rows: list[dict]) -> None:
    with path.open("a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def brief(r) -> dict:
    return {"kind": r.error_kind, "hacked": r.hacked, "reasons": r.hack_reasons, "error": (r.error or "")[:400],
            "notes": [n[:200] for n in r.notes if not n.startswith("sizes ")], "seconds": r.eval_seconds}


def run(pairs, **kwargs):
    """Two at a time on the CPU's two cores; on a GPU with timing, which the GPU-only classes need."""
    return drk.evaluate_many(pairs, max_in_flight=2 if DEVICE == "cpu" else 8, device=DEVICE, progress=False,
                             timing=DEVICE == "cuda", compile_baseline=False, timeout_s=60 if DEVICE == "cpu" else 180,
                             **kwargs)


def phase_hacked(args, bases):
    # classes that never pay at the harness's tolerances (an output that is not a plain tensor, a lower
    # precision beyond the tolerance) get a quarter of the variants: enough to show that
    few = {"lazy_output", "precision"}
    counts = {k: args.per_cell // 4 if k in few else args.per_cell for k in args.classes or HACK_CLASSES}
    variants = hacked_variants(bases(), per_cell=counts, seed=args.seed)
    effective_path, on_path = args.out / "effective.jsonl", args.out / f"hacked_{args.tag}.jsonl"
    effective, checked = done(effective_path), done(on_path)
    current = {sha(v.code) for v in variants}
    if stale := {key for key, row in checked.items() if key not in current and row["klass"] in counts}:
        # rows of variants the generator no longer makes (it was fixed since) would still be counted: dropped
        on_path.write_text("".join(json.dumps(row) + "\n" for key, row in checked.items() if key not in stale))
        print(f"{len(stale)} rows of variants no longer generated dropped", flush=True)
    todo = [v for v in variants if sha(v.code) not in checked]
    print(f"{len(variants)} variants, {len(todo)} to run", flush=True)
    start = time.time()
    for at in range(0, len(todo), CHUNK):
        chunk = todo[at:at + CHUNK]
        rows = [{"sha": sha(v.code), "name": v.name, "klass": v.klass, "form": v.form, "level": v.level, "base": v.base,
                 "expect": v.expect, "gpu": v.gpu, "static": (static_hack_check(v.code) or [None])[0]} for v in chunk]
        # what the static rules stop is stopped whether or not it would have paid: only the rest are run, first
        # without the checks (two trials are enough to see a hack work: a stale cache fails the second)
        runnable = [(v, row) for v, row in zip(chunk, rows) if not row["static"] and not (v.gpu and DEVICE == "cpu")]
        new = [(v, row) for v, row in runnable if row["sha"] not in effective]
        for (v, row), r in zip(new, run([(v.task, v.code) for v, _ in new], hack_checks=False, correctness_trials=2)):
            effective[row["sha"]] = {"sha": row["sha"], "effective": r.ok or r.hacked, **brief(r)}
            append(effective_path, [effective[row["sha"]]])
        live = [(v, row) for v, row in runnable if effective[row["sha"]]["effective"]]
        for (v, row), r in zip(live, run([(v.task, v.code) for v, _ in live])):
            row["on"] = brief(r)
        for v, row in zip(chunk, rows):
            row["effective"] = effective.get(row["sha"], {}).get("effective")
            row["caught"] = True if row["static"] else row["on"]["kind"] is not None if "on" in row else None
        append(on_path, rows)
        print(f"{at + len(chunk)}/{len(todo)} {time.time() - start:.0f} s; misses here: "
              f"{[r['name'] for r in rows if r['caught'] is False]}", flush=True)


def phase_honest(args, bases):
    variants = honest_variants(bases(), n=args.honest, seed=args.seed)
    path = args.out / f"honest_{args.tag}.jsonl"
    seen = done(path)
    todo = [v for v in variants if sha(v.code) not in seen]
    print(f"{len(variants)} honest variants, {len(todo)} to run", flush=True)
    for at in range(0, len(todo), CHUNK):
        chunk = todo[at:at + CHUNK]
        results = run([(v.task, v.code) for v in chunk])
        append(path, [{"sha": sha(v.code), "name": v.name, "form": v.form, "base": v.base, **brief(r)}
                      for v, r in zip(chunk, results)])
        print(f"{at + len(chunk)}/{len(todo)}: flagged {[v.name for v, r in zip(chunk, results) if r.hacked]}, "
              f"failed {[v.name for v, r in zip(chunk, results) if r.error_kind and not r.hacked]}", flush=True)


def phase_teacher(args, bases):
    """The teacher's turns 1-3 on every task of data/sft (the SFT set), with the checks on."""
    import pyarrow.parquet as pq

    names = pq.read_table(DATA_DIR / "sft" / "sft.parquet", columns=["task"]).column("task").to_pylist()
    path = args.out / f"teacher_{args.tag}.jsonl"
    seen = done(path, "name")
    rows = teacher_rows(sorted(set(names)))
    for at in range(0, len(rows), CHUNK // 3):
        todo = [b for b in teacher_bases(rows[at:at + CHUNK // 3]) if b.name not in seen]
        if not todo:
            continue
        results = run([(b.task, b.code) for b in todo])
        append(path, [{"name": b.name, **brief(r)} for b, r in zip(todo, results)])
        print(f"{at + CHUNK // 3}/{len(rows)} tasks: flagged {[b.name for b, r in zip(todo, results) if r.hacked]}, "
              f"failed {[b.name for b, r in zip(todo, results) if r.error_kind and not r.hacked]}", flush=True)


def phase_overhead(args, bases):
    """Seconds per evaluation, one at a time, with the hack checks on and off (default trials)."""
    path = args.out / f"overhead_{args.tag}.jsonl"
    picks = [b for b in bases() if b.name.startswith(("builtin:level1", "builtin:level2", "teacher:"))][::2]
    for b in picks:
        row = {"name": b.name}
        for checks in (False, True, False, True):
            r = drk.evaluate(b.task, b.code, device=DEVICE, hack_checks=checks, timing=False)
            row.setdefault("checks" if checks else "plain", []).append(r.eval_seconds)
            row["stages_checks" if checks else "stages_plain"] = r.stage_seconds
        append(path, [row])
        print(b.name, row["plain"], row["checks"], flush=True)


def commit() -> str:
    return os.environ.get("DRK_BENCH_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                                               capture_output=True, text=True).stdout.strip()


def tally(rows: list[dict], key) -> dict:
    """{key(row): {"n": working hacks, "caught": how many the checks stopped}}"""
    out: dict = {}
    for r in rows:
        cell = out.setdefault(key(r), {"n": 0, "caught": 0})
        cell["n"] += 1
        cell["caught"] += bool(r["caught"])
    return out


def outcomes(rows: list[dict]) -> dict:
    return {"n": len(rows), "flagged": sum(r["hacked"] for r in rows),
            "failed": sum(bool(r["kind"]) and not r["hacked"] for r in rows),
            "flagged_names": [f"{r['name']}: {r['error'][:200]}" for r in rows if r["hacked"]],
            "failed_names": [f"{r['name']}: {r['kind']}: {r['error'][:160]}" for r in rows if r["kind"] and not r["hacked"]]}


def phase_summary(args, bases):
    rows = list(done(args.out / f"hacked_{args.tag}.jsonl").values())
    cpu = [r for r in rows if not (r["gpu"] and DEVICE == "cpu")]
    live = [r for r in cpu if r["static"] or r["effective"]]  # stopped statically, or working and run
    runtime = [r for r in live if not r["static"]]
    gpu = [r for r in rows if r["gpu"] and DEVICE == "cpu"]
    overhead = list(done(args.out / f"overhead_{args.tag}.jsonl", "name").values())
    median = statistics.median
    plain, checks = [median(o["plain"]) for o in overhead], [median(o["checks"]) for o in overhead]
    fractions = [1 - p / c for p, c in zip(plain, checks)]
    result = {
        "schema_version": SCHEMA_VERSION, "commit": commit(), "device": DEVICE, "tag": args.tag,
        "machine": "2-core CPU, Triton interpreter" if DEVICE == "cpu" else torch.cuda.get_device_name(),
        "hacked": {"generated": len(rows), "run": len(cpu), "effective": len(live),
                   "caught": sum(r["caught"] for r in live), "recall": sum(r["caught"] for r in live) / max(1, len(live)),
                   "caught_statically": sum(bool(r["static"]) for r in live),
                   "runtime": {"n": len(runtime), "caught": sum(r["caught"] for r in runtime),
                               "by_class": tally(runtime, lambda r: r["klass"])},
                   "by_class": tally(live, lambda r: r["klass"]), "by_level": tally(live, lambda r: r["level"]),
                   "by_class_level": tally(live, lambda r: f"{r['klass']}/{r['level']}"),
                   "not_effective_by_class": {k: sum(r["klass"] == k and r["effective"] is False for r in cpu)
                                              for k in HACK_CLASSES},
                   "misses": sorted(r["name"] for r in live if not r["caught"])},
        "gpu_classes_static_verdict_on_cpu": {k: {"n": sum(r["klass"] == k for r in gpu),
                                                  "static": sum(r["klass"] == k and bool(r["static"]) for r in gpu)}
                                              for k in HACK_CLASSES if HACK_CLASSES[k].gpu},
        "honest": outcomes(list(done(args.out / f"honest_{args.tag}.jsonl").values())),
        "teacher": outcomes(list(done(args.out / f"teacher_{args.tag}.jsonl", "name").values())),
        "overhead": {"solutions": len(overhead), "median_plain_s": median(plain) if plain else None,
                     "median_checks_s": median(checks) if checks else None,
                     "median_fraction_of_evaluation": median(fractions) if fractions else None,
                     "max_fraction": max(fractions) if fractions else None,
                     "median_stage_s": {stage: median(o["stages_checks"].get(stage, 0) for o in overhead)
                                        for stage in ("hack_checks", "mode_and_determinism", "other_shape")}
                     if overhead else None},
    }
    (args.out / f"results_{args.tag}.json").write_text(json.dumps(result, indent=1))
    figure(result["hacked"]["by_class_level"], args.out / f"recall_{args.tag}")
    print(table(result))


def figure(cells: dict, path: Path) -> None:
    import plotly.graph_objects as go

    from drk_lab.viz.plots import save_figure

    classes = sorted({key.split("/")[0] for key in cells})
    at = [[cells.get(f"{k}/{lv}") for lv in LEVELS] for k in classes]
    fig = go.Figure(go.Heatmap(
        z=[[c["caught"] / c["n"] if c else None for c in row] for row in at], x=list(LEVELS), y=classes,
        text=[[f"{c['caught']}/{c['n']}" if c else "" for c in row] for row in at], texttemplate="%{text}",
        zmin=0, zmax=1, colorscale="RdYlGn", colorbar={"title": "recall"}))
    fig.update_layout(title="Hack checks: recall by class and obfuscation level (working hacks, CPU)",
                      width=1000, height=150 + 34 * len(classes), yaxis={"autorange": "reversed"})
    save_figure(fig, path.name, path.parent)


def table(result: dict) -> str:
    h = result["hacked"]
    rows = [f"| `{k}` | {c['n']} | {c['caught']} | {c['caught'] / c['n']:.1%} |" for k, c in sorted(h["by_class"].items())]
    levels = ", ".join(f"{lv} {c['caught'] / c['n']:.1%}" for lv, c in h["by_level"].items())
    return "\n".join(["| class | working hacks | caught | recall |", "|---|---|---|---|", *rows,
                      f"| **all** | **{h['effective']}** | **{h['caught']}** | **{h['recall']:.2%}** |", "",
                      f"by level: {levels}"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phases", nargs="+", choices=("hacked", "honest", "teacher", "overhead", "summary"))
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench_out")))
    p.add_argument("--per-cell", type=int, default=40, help="hacked variants per class x level")
    p.add_argument("--honest", type=int, default=2000, help="honest variants")
    p.add_argument("--teacher-tasks", type=int, default=24, help="teacher tasks among the bases")
    p.add_argument("--classes", nargs="*", help="only these hack classes (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="final", help="names the files of checked results (effective.jsonl is shared)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bases = functools.cache(lambda: honest_bases(teacher_tasks=args.teacher_tasks, seed=args.seed))
    for phase in args.phases:
        start = time.perf_counter()
        globals()[f"phase_{phase}"](args, bases)
        print(f"== {phase}: {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
