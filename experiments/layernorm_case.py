"""The LayerNorm case study on a GPU: the three turns of data/cases/layernorm evaluated at full size.

Each turn is evaluated through the harness like any candidate (correctness, hack checks, timing
against eager and torch.compile with 100 trials, profile), and the three results become one
Trajectory (drk_lab.agent.cases.measure_case), written as JSONL, with the case table printed.

On the H200, from the repository root (the machine's python3 holds torch and Triton):

    PYTHONPATH=$PWD DRK_CACHE_DIR=/tmp/drk_cache python3 experiments/layernorm_case.py            # -> $OUT/layernorm_h200.jsonl
    PYTHONPATH=$PWD DRK_CACHE_DIR=/tmp/drk_cache python3 experiments/layernorm_case.py --sweep    # also times launch configs

then ship the measurement with the case, where drk_lab.agent.cases.load_case prefers it over cpu.jsonl:

    cp <the fetched $OUT>/layernorm_h200.jsonl data/cases/layernorm/h200.jsonl

--sweep (or --sweep-only, without the harness measurement) times each turn's kernel directly
(triton.testing.do_bench, L2 cleared between calls) at a grid of block sizes, warps and stages, next
to eager and torch.compile, so one can see how far each turn's autotune list is from the best launch
the kernel allows; --also FILE... times variant ModelNew files as written. These in-process numbers
are a guide only: the harness's (in the JSONL) are the measurement.

Measured on an H200 (torch 2.11, Triton 3.6; the shipped h200.jsonl), 8192x4096 bf16, harness medians:
eager 58.0 us, torch.compile 53.2 us; turn 1 38.5 us (1.51x eager, 1.38x compile), turn 2 43.7 us
(1.33x, 1.22x: three reads of each row), turn 3 38.7 us (1.50x, 1.38x).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository

from drk_lab.agent.cases import case_dir, case_table, measure_case
from drk_lab.agent.trajectory import write_jsonl


def print_table(rows: list[dict]) -> None:
    def fmt(v):
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
    cols = list(rows[0])
    print("  ".join(f"{c:>18}" for c in cols))
    for row in rows:
        print("  ".join(f"{fmt(row[c]):>18}" for c in cols))


def sweep(name: str = "layernorm", extra: tuple[str, ...] = ()) -> None:
    import torch
    import triton
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    torch.manual_seed(0)
    spec = importlib.util.spec_from_file_location("case_task", case_dir(name) / "task.py")
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    with torch.device("cuda"):
        ref = task.Model(*task.get_init_inputs())
        (x,) = task.get_inputs()
    w, b, n = ref.ln.weight, ref.ln.bias, x.shape[-1]
    moved = 2 * x.numel() * x.element_size()

    def report(label, fn):
        try:
            ms = triton.testing.do_bench(fn, return_mode="median")
        except Exception as e:  # noqa: BLE001  (a launch config the kernel cannot take)
            print(f"{label:<48} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            return float("inf")
        print(f"{label:<48} {1000 * ms:8.1f} us  {moved / ms / 1e9:6.2f} TB/s", flush=True)
        return ms

    eager = report("eager nn.LayerNorm", lambda: ref(x))
    compiled_ref = torch.compile(ref)
    compiled_ref(x)
    compiled = report("torch.compile", lambda: compiled_ref(x))
    for path in sorted(case_dir(name).glob("turn_*.py")) + [Path(p) for p in extra]:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        model = mod.ModelNew(*task.get_init_inputs()).cuda()
        model.load_state_dict(ref.state_dict())
        ms = report(f"{path.stem}: ModelNew as written", lambda m=model: m(x))
        print(f"{'':<48} {eager / ms:.2f}x eager, {compiled / ms:.2f}x compile", flush=True)
        if not path.stem.startswith("turn_"):
            continue  # a variant: timed as written only
        kernels = [v for v in vars(mod).values() if isinstance(v, Autotuner)] or [
            v for v in vars(mod).values() if isinstance(v, JITFunction) and "BLOCK_SIZE" in v.arg_names]
        kernel = kernels[0]  # the launched kernel, not a @triton.jit helper
        if isinstance(kernel, Autotuner):
            print(f"{'':<48} autotune picked {kernel.best_config}", flush=True)
            jit, blocks = kernel.fn, (1024, 2048, 4096)
        else:
            jit, blocks = kernel, (triton.next_power_of_2(n),)
        stages = (1, 3) if "num_stages" in path.read_text() else (None,)
        y = torch.empty_like(x)
        for block in blocks:
            for warps in (4, 8, 16):
                for st in stages:
                    opts = {"num_stages": st} if st else {}
                    report(f"  BLOCK_SIZE={block} num_warps={warps} num_stages={st}",
                           lambda k=jit, o=y, bl=block, nw=warps, kw=opts: k[(x.shape[0],)](
                               x, w, b, o, x.stride(0), n, 1e-5, BLOCK_SIZE=bl, num_warps=nw, **kw))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", default="layernorm")
    parser.add_argument("--out", default=None, help="default: $OUT/layernorm_h200.jsonl, else runs/")
    parser.add_argument("--timing-trials", type=int, default=100)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="also time launch configs of each turn's kernel")
    parser.add_argument("--sweep-only", action="store_true", help="the sweep alone, no harness measurement")
    parser.add_argument("--also", nargs="*", default=[], help="more ModelNew files for the sweep (variants)")
    args = parser.parse_args()
    out = Path(args.out or Path(os.environ.get("OUT", "runs")) / f"{args.case}_h200.jsonl")
    if args.sweep_only:
        return sweep(args.case, tuple(args.also))
    started = time.perf_counter()
    traj = measure_case(args.case, device="cuda", timing_trials=args.timing_trials, profile=not args.no_profile)
    write_jsonl([traj], out, append=False)
    print(f"{args.case}: {len(traj.turns)} turns measured in {time.perf_counter() - started:.0f} s -> {out}")
    print_table(case_table(traj))
    for turn in traj.turns:
        res = turn.result
        print(f"\nturn {turn.index + 1}: {res.error_kind or 'ok'} {res.error or ''}"
              f" ref {res.ref_runtime_ms} ms, compiled ref {res.ref_compile_runtime_ms} ms, notes {res.notes}")
        print(turn.feedback)
    if args.sweep:
        sweep(args.case, tuple(args.also))


if __name__ == "__main__":
    main()
