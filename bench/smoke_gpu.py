"""First look on a GPU: built-in solutions at full size, every variant's classification."""
import json, os, re, sys, time
from pathlib import Path
import drk_lab as drk

out_dir = Path(os.environ.get("OUT", "."))
rows = []
relu = next(t for t in drk.builtin_tasks(1) if t.name == "01_relu")
for variant in sorted(Path("data/variants").glob("*.py")):
    code = variant.read_text()
    expect = re.search(r"# expect: (\w+)", code).group(1)
    t0 = time.time()
    r = drk.evaluate(relu, code, timeout_s=30, timing_trials=20)
    got = r.error_kind or "ok"
    print(f"{'OK ' if got == expect else 'BAD'} {variant.stem:18s} expect={expect:20s} got={got:20s} {time.time()-t0:5.1f}s {(r.error or '')[:200]!r}", flush=True)
    rows.append({"variant": variant.stem, "expect": expect, "result": r.to_dict()})
for task in drk.builtin_tasks():
    try:
        code = drk.builtin_solution(task)
    except drk.TaskError:
        continue
    t0 = time.time()
    r = drk.evaluate(task, code)
    t1 = time.time()
    r2 = drk.evaluate(task, code)
    t2 = time.time()
    print(f"L{task.level} {task.name:28s} first {t1-t0:5.1f}s again {t2-t1:4.1f}s  {r.summary()}  ms={r.runtime_ms} iqr={r.runtime_iqr_ms} ref={r.ref_runtime_ms} comp={r.ref_compile_runtime_ms} | again speedup {r2.speedup} {r2.stage_seconds}", flush=True)
    rows.append({"task": task.name, "result": r.to_dict(), "again": r2.to_dict(), "first_s": t1 - t0, "again_s": t2 - t1})
(out_dir / "smoke.json").write_text(json.dumps(rows, indent=1))
