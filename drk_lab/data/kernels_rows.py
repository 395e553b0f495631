"""The teacher's Triton pieces for pointwise chains and row operators, as source text per turn style.

Each function returns (kernel source, tuning block (turn 3; else ""), forward lines); the forward
lines read `src` (a contiguous tensor) and leave the result in `dst`. Styles: "plain" (turn 1: fixed blocks, rows in chunks),
"tuned" (turn 2: larger blocks and more warps, the whole row in registers), "autotune" (turn 3:
triton.autotune over two configurations, pruned for small problems, with a short benchmark; on the CPU
the interpreter keeps the first). A turn-3 kernel is followed, after all kernels, by its tuning block
(configurations, prune function, the autotuner around it): see autotune_wrap.

Pointwise math runs in fp32 and, for fp16/bf16 tasks, rounds to the storage dtype after every step,
where PyTorch's eager reference rounds too (so the kernel follows the reference's own rounding).
"""

from __future__ import annotations

import textwrap

from drk_lab.data.operators import CHANNEL, POINTWISE, RESIDUAL, ROW, base_name, triton_expression
from drk_lab.data.spec import TaskSpec

OUT = "y_ptr.dtype.element_ty"
# milliseconds of warm-up and of timed runs per autotune configuration (triton.testing.do_bench's
# defaults are 25 and 100): enough to rank a handful of configurations of one kernel
BENCH_WARMUP_MS, BENCH_REP_MS = 5, 20
CPU_NOTE = "if not torch.cuda.is_available():  # the interpreter cannot benchmark configurations: keep the first"


def pointwise_steps(spec: TaskSpec) -> list[tuple[int, str]]:
    return [(i, s) for i, s in enumerate(spec.steps) if base_name(s) not in ROW]


def bias_names(spec: TaskSpec) -> list[str]:
    return [f"b{i}_ptr" for i, s in pointwise_steps(spec) if base_name(s) == "bias"]


def bias_args(spec: TaskSpec) -> str:
    """The forward's arguments for the bias pointers (with a trailing comma), in kernel order."""
    return "".join(f"self.bias{i}, " for i, s in pointwise_steps(spec) if base_name(s) == "bias")


def chain_lines(spec: TaskSpec, bias_load) -> list[str]:
    """Lines that turn `h` (the head's output, fp32, already rounded) into `v`. bias_load(i) is the
    expression loading bias i broadcast to the tile."""
    rounding = spec.dtype != "float32"
    lines = ["v = h"]
    for i, step in pointwise_steps(spec):
        if base_name(step) == "bias":
            lines.append(f"b{i} = {bias_load(i)}")
        lines.append(f"v = {triton_expression(step, i)}")
        if rounding:
            lines.append(f"v = v.to({OUT}).to(tl.float32)")
    return lines


def chain_written(code: str) -> list[str]:
    """The pointwise steps a reply's code computes, as their Triton expressions in order: each line
    `v = EXPR` whose EXPR is some step's (chain_lines writes them so). Equal to chain_wanted(spec) when a
    model wrote the task's operators, whatever else went wrong."""
    lines = (line.strip() for line in code.splitlines())
    return [line[4:] for line in lines if line.startswith("v = ") and line[4:] in KNOWN_EXPRESSIONS]


def chain_wanted(spec: TaskSpec) -> list[str]:
    return [triton_expression(step, i) for i, step in pointwise_steps(spec)]


# every expression a step can have: each operator with each parameter, at each place in a chain
KNOWN_EXPRESSIONS = {triton_expression(f"{name}:{p}" if o.params else name, i)
                     for name, o in {**POINTWISE, "bias": CHANNEL, "residual": RESIDUAL}.items()
                     for p in (o.params or ("",)) for i in range(16)}


def configs(name: str, entries: list[tuple[dict, int]]) -> str:
    items = ",\n    ".join(f"triton.Config({meta!r}, num_warps={warps})" for meta, warps in entries)
    return f"{name} = [\n    {items},\n]\n{CPU_NOTE}\n    {name} = {name}[:1]\n"


def prune_function(fn_name: str, sizes: str, score: str, least: int, why: str) -> str:
    """An early_config_prune function: `sizes` binds names from the kernel's named_args; it keeps the
    configurations `c` whose `score` is at least `least`, or else the one with the highest score alone.
    Small problems, such as the harness's other shape, then compile a single configuration and time none."""
    doc = textwrap.fill(why, 96, initial_indent="    ", subsequent_indent="    ").strip()
    return f'''

def {fn_name}(configs, named_args, **kwargs):
    """{doc}"""
    {sizes}
    scores = [{score} for c in configs]
    kept = [c for c, s in zip(configs, scores) if s >= {least}]
    return kept or [configs[scores.index(max(scores))]]
'''


def autotune_wrap(kernel: str, name: str, key: str, prune: str) -> str:
    """`kernel` = triton.autotune(...)(kernel): over the configurations `name`, keyed on `key` (argument names
    as a list literal), pruned by the function `prune`, timing each configuration briefly (Triton's default
    benchmark spends ~0.125 s per configuration and key, and each evaluation loads a fresh module that tunes
    again). Applied after the kernel's definition rather than as its decorator, so the kernel starts on the
    line it has in turn 2: Triton's compile cache key includes that line, so turn 2's compiled
    configuration is found there."""
    return (f'\n\n# Triton times the configurations left on the first call of each new key and keeps the fastest\n'
            f'{kernel} = triton.autotune(\n'
            f'    configs={name}, key={key}, prune_configs_by={{"early_config_prune": {prune}}},\n'
            f'    do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup={BENCH_WARMUP_MS}, '
            f'rep={BENCH_REP_MS}, quantiles=quantiles),\n)({kernel})\n')


FILLS_THE_GPU = ("Configurations whose grid has at least 128 programs (fewer leave streaming multiprocessors idle); "
                 "for a smaller problem, the one with the most programs alone.")


# -- pointwise chain over a flat tensor ----------------------------------------------------------
def flat_bias_load(i: int) -> str:
    return f"tl.load(b{i}_ptr + (offs // INNER) % C, mask=mask, other=0.0).to(tl.float32)"


def chain_kernel(spec: TaskSpec, style: str, inner: str = "1") -> tuple[str, str, list[str]]:
    """The chain over every element. A bias is per feature: index (i // inner) % C."""
    biases = bias_names(spec)
    body = chain_lines(spec, flat_bias_load)
    body_text = "\n".join("    " + line for line in body)
    tuning = ""
    offs = "offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)"
    if style == "autotune":
        tuning = configs("CHAIN_CONFIGS", [({"BLOCK": 2048}, 8), ({"BLOCK": 1024}, 4)])
        tuning += prune_function("chain_configs_for", 'n = named_args["n"]', 'triton.cdiv(n, c.kwargs["BLOCK"])',
                                 128, FILLS_THE_GPU)
        tuning += autotune_wrap("chain_kernel", "CHAIN_CONFIGS", '["n"]', "chain_configs_for")
        # whole blocks start at multiples of BLOCK: tell the compiler, so loads and stores vectorise
        offs = "offs = tl.max_contiguous(tl.multiple_of(pid * BLOCK + tl.arange(0, BLOCK), BLOCK), BLOCK)"
    kernel = f'''
@triton.jit
def chain_kernel(x_ptr, {"".join(b + ", " for b in biases)}y_ptr, n, C, INNER, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    {offs}
    mask = offs < n
    h = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
{body_text}
    tl.store(y_ptr + offs, v.to({OUT}), mask=mask)
'''
    args = f"src, {bias_args(spec)}dst, n, C, {inner}"
    if style == "autotune":
        launch = ["grid = lambda meta: (triton.cdiv(n, meta['BLOCK']),)", f"chain_kernel[grid]({args})"]
    else:
        block, warps = (1024, 4) if style == "plain" else (4096, 8)
        launch = [f"chain_kernel[(triton.cdiv(n, {block}),)]({args}, BLOCK={block}, num_warps={warps})"]
    return kernel, tuning, ["dst = torch.empty_like(src)", "n = src.numel()"] + launch


# -- row operators ---------------------------------------------------------------------------------
def _finish(op: str) -> list[str]:
    """From the row statistics to the stored values `v` (x: the row's values, fp32)."""
    return {
        "softmax": ["v = tl.exp(x - m) / s"],
        "log_softmax": ["v = x - m - tl.log(s)"],
        "layernorm": ["w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)",
                      "b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)",
                      "v = (x - mean) * rstd * w + b"],
        "rmsnorm": ["w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)", "v = x * rstd * w"],
        "l2norm": ["v = x / tl.maximum(tl.sqrt(ss), 1e-12)"],
    }[op]


def _stats_in_registers(op: str) -> list[str]:
    return {
        "softmax": ["m = tl.max(tl.where(mask, x, float('-inf')), axis=0)",
                    "s = tl.sum(tl.where(mask, tl.exp(x - m), 0.0), axis=0)"],
        "log_softmax": ["m = tl.max(tl.where(mask, x, float('-inf')), axis=0)",
                        "s = tl.sum(tl.where(mask, tl.exp(x - m), 0.0), axis=0)"],
        "logsumexp": ["m = tl.max(tl.where(mask, x, float('-inf')), axis=0)",
                      "s = tl.sum(tl.where(mask, tl.exp(x - m), 0.0), axis=0)", "r = m + tl.log(s)"],
        "layernorm": ["mean = tl.sum(x, axis=0) / N", "d = tl.where(mask, x - mean, 0.0)",
                      "rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)"],
        "rmsnorm": ["rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + 1e-6)"],
        "l2norm": ["ss = tl.sum(x * x, axis=0)"],
        "sum": ["r = tl.sum(x, axis=0)"],
        "mean": ["r = tl.sum(x, axis=0) / N"],
        "amax": ["r = tl.max(tl.where(mask, x, float('-inf')), axis=0)"],
    }[op]


def _stats_chunked(op: str) -> list[str]:
    """Statistics of a row read in chunks of BLOCK (each line is inside the kernel at one indent)."""
    load = ["    cols = start + offs", "    mask = cols < N",
            "    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)"]
    loop = "for start in range(0, N, BLOCK):"
    if op in ("softmax", "log_softmax", "logsumexp"):
        return (["mx = tl.full([BLOCK], float('-inf'), tl.float32)", loop] + load
                + ["    mx = tl.maximum(mx, tl.where(mask, x, float('-inf')))", "m = tl.max(mx, axis=0)",
                   "acc = tl.zeros([BLOCK], dtype=tl.float32)", loop] + load
                + ["    acc += tl.where(mask, tl.exp(x - m), 0.0)", "s = tl.sum(acc, axis=0)"]
                + (["r = m + tl.log(s)"] if op == "logsumexp" else []))
    if op == "layernorm":  # Welford per lane, then the lanes merged: one read for both moments
        return (["cnt = tl.zeros([BLOCK], dtype=tl.float32)", "mu = tl.zeros([BLOCK], dtype=tl.float32)",
                 "m2 = tl.zeros([BLOCK], dtype=tl.float32)", loop] + load
                + ["    new_cnt = cnt + tl.where(mask, 1.0, 0.0)",
                   "    delta = tl.where(mask, x - mu, 0.0)",
                   "    mu = mu + delta / tl.maximum(new_cnt, 1.0)",
                   "    m2 = m2 + delta * tl.where(mask, x - mu, 0.0)",
                   "    cnt = new_cnt",
                   "mean = tl.sum(cnt * mu, axis=0) / N",
                   "var = tl.sum(m2 + cnt * (mu - mean) * (mu - mean), axis=0) / N",
                   "rstd = 1.0 / tl.sqrt(var + eps)"])
    acc_line = {"rmsnorm": "x * x", "l2norm": "x * x", "sum": "x", "mean": "x"}.get(op)
    if acc_line:
        tail = {"rmsnorm": "rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + 1e-6)", "l2norm": "ss = tl.sum(acc, axis=0)",
                "sum": "r = tl.sum(acc, axis=0)", "mean": "r = tl.sum(acc, axis=0) / N"}[op]
        return ["acc = tl.zeros([BLOCK], dtype=tl.float32)", loop] + load + [f"    acc += {acc_line}", tail]
    return (["mx = tl.full([BLOCK], float('-inf'), tl.float32)", loop] + load
            + ["    mx = tl.maximum(mx, tl.where(mask, x, float('-inf')))", "r = tl.max(mx, axis=0)"])


def row_kernel(spec: TaskSpec, style: str) -> tuple[str, str, list[str]]:
    """The row operator over a (rows, N) view of `src`; `dst` gets the operator's output shape."""
    op = spec.row_op
    reduces = op in ("sum", "mean", "amax", "logsumexp")
    params = {"layernorm": "w_ptr, b_ptr, ", "rmsnorm": "w_ptr, "}.get(op, "")
    lines = ["row = tl.program_id(0).to(tl.int64)", "x_row = x_ptr + row * N", "offs = tl.arange(0, BLOCK)"]
    if style == "plain":
        lines += _stats_chunked(op)
        if reduces:
            lines.append(f"tl.store(y_ptr + row, r.to({OUT}))")
        else:
            lines += ["for start in range(0, N, BLOCK):", "    cols = start + offs", "    mask = cols < N",
                      "    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)"]
            lines += ["    " + line for line in _finish(op)]
            lines.append(f"    tl.store(y_ptr + row * N + cols, v.to({OUT}), mask=mask)")
    else:
        lines += ["cols = offs", "mask = cols < N", "x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)"]
        lines += _stats_in_registers(op)
        if reduces:
            lines.append(f"tl.store(y_ptr + row, r.to({OUT}))")
        else:
            lines += _finish(op) + [f"tl.store(y_ptr + row * N + cols, v.to({OUT}), mask=mask)"]
    tuning = ""
    if style == "autotune":
        tuning = configs("ROW_CONFIGS", [({}, 8), ({}, 4)])
        tuning += prune_function("row_configs_for", 'block = triton.next_power_of_2(named_args["N"])',
                               "block // (32 * c.num_warps)", 4,
                               "Warp counts that give each thread at least 4 of the row's elements (one 16-byte "
                               "load of fp32); for a short row, the fewest warps alone.")
        tuning += autotune_wrap("row_kernel", "ROW_CONFIGS", '["N"]', "row_configs_for")
    body = "\n".join("    " + line for line in lines)
    kernel = f'''
@triton.jit
def row_kernel(x_ptr, {params}y_ptr, N, eps, BLOCK: tl.constexpr):
{body}
'''
    call_params = {"layernorm": "self.norm.weight, self.norm.bias, ", "rmsnorm": "self.norm_weight, "}.get(op, "")
    eps = "self.norm.eps" if op == "layernorm" else "0.0"
    shape = "src.shape[:-1] + (1,)" if reduces else "src.shape"
    forward = ["N = src.shape[-1]", "rows = src.numel() // N", f"dst = torch.empty({shape}, dtype=src.dtype, device=src.device)"]
    args = f"src, {call_params}dst, N, {eps}"
    if style == "plain":
        forward.append(f"row_kernel[(rows,)]({args}, BLOCK=min(1024, triton.next_power_of_2(N)), num_warps=4)")
    elif style == "tuned":
        forward.append("block = triton.next_power_of_2(N)")
        forward.append(f"row_kernel[(rows,)]({args}, BLOCK=block, num_warps=min(16, max(4, block // 512)))")
    else:
        forward.append(f"row_kernel[(rows,)]({args}, BLOCK=triton.next_power_of_2(N))")
    return kernel, tuning, forward
