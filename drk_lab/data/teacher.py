"""The programmatic teacher: a Triton ModelNew for a generated task, one per turn, each improving the last.

    code = solution(spec, turn=1)          # the module's source
    text = answer(spec, turn=1)            # a short plan, then the code in a ```python block

Turn 1 is straightforward: the head (GEMM or implicit-GEMM conv) with fixed 64x64 tiles writes its output,
one fused kernel runs the pointwise chain, row operators read their row in chunks (LayerNorm with a
Welford pass). Turn 2 tunes: larger tiles, grouped tile order, more warps and stages, the pointwise chain
fused into the head's epilogue, rows held in registers. Turn 3 and later wrap the kernels in triton.autotune over two
configurations and contiguity hints for vectorised access. The constructor repeats the reference's line
for line, so both modules hold the same parameters.
"""

from __future__ import annotations

from drk_lab.data.kernels_gemm import conv_kernel, gemm_kernel
from drk_lab.data.kernels_rows import chain_kernel, pointwise_steps, row_kernel
from drk_lab.data.spec import TaskSpec, init_args, init_lines

STYLES = {1: "plain", 2: "tuned"}  # turn 3 and later: "autotune"

PLANS = {
    "plain": "A first, straightforward version: {what}. Fixed block sizes; correctness first.",
    "tuned": "The previous version was correct. Now tune it: {what}. Larger tiles and more warps keep more "
             "work in flight, and fusing the chain saves a round trip through global memory.",
    "autotune": "Next: let Triton pick the launch configuration. {what}, with triton.autotune over two "
                "tile and warp configurations (keyed on the sizes; a small problem keeps only the one that fills "
                "the GPU best){hints}.",
}


REPAIR_PLAN = "The previous version computed the wrong values: {what}. Fixed below; the rest is unchanged."


def style_of(turn: int) -> str:
    return STYLES.get(turn, "autotune")


def _pieces(spec: TaskSpec, style: str) -> tuple[list[str], list[str], list[str], str]:
    """(kernel sources, their autotuning blocks (turn 3; else empty), forward lines, a phrase saying what
    the kernels do)."""
    kernels, tunings, forward = [], [], []
    pointwise = bool(pointwise_steps(spec))
    fused = style != "plain"
    if spec.head is None:
        forward.append("src = x.contiguous()")
        what = "one program per row" if spec.row_op else "one fused elementwise kernel over the flat tensor"
    else:
        make = gemm_kernel if spec.head == "linear" else conv_kernel
        kernel, tuning, lines = make(spec, style, fused)
        kernels.append(kernel)
        tunings.append(tuning)
        forward += lines + ["src = dst"]
        head = "a tiled GEMM" if spec.head == "linear" else "an implicit-GEMM convolution"
        what = f"{head} with the bias{' and the pointwise chain' if fused and pointwise else ''} in its epilogue"
    if pointwise and (spec.head is None or not fused):
        inner = "H * W" if spec.head == "conv" else "1"
        kernel, tuning, lines = chain_kernel(spec, style, inner)
        kernels.append(kernel)
        tunings.append(tuning)
        forward += [f"C = {'C_out' if spec.head == 'conv' else 'src.shape[-1]'}"] + lines + ["src = dst"]
        if spec.head is not None:
            what += ", then one fused kernel for the pointwise chain"
    if spec.row_op:
        kernel, tuning, lines = row_kernel(spec, style)
        kernels.append(kernel)
        tunings.append(tuning)
        forward += lines + ["src = dst"]
        if spec.head is not None:
            what += f", then a row kernel for {spec.row_op}"
        else:
            what += f" for {spec.row_op} ({'chunks of the row, ' + ('Welford statistics' if spec.row_op == 'layernorm' else 'one pass per statistic') if style == 'plain' else 'the whole row in registers'})"
    return kernels, [t for t in tunings if t], forward + ["return src"], what


def solution(spec: TaskSpec, turn: int) -> str:
    """The teacher's ModelNew for `turn` (1-based) as a complete module."""
    style = style_of(turn)
    kernels, tunings, forward, what = _pieces(spec, style)
    args = ", ".join(f"{a}: int" for a in init_args(spec))
    init = "".join("\n        " + line for line in init_lines(spec))
    body = "\n".join("        " + line for line in forward)
    return f'''"""{what[0].upper() + what[1:]}."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


{"""


""".join(k.strip() for k in kernels + tunings)}


class ModelNew(nn.Module):
    def __init__(self, {args}):
        super().__init__(){init}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{body}
'''


def answer(spec: TaskSpec, turn: int) -> str:
    """The assistant's reply for `turn`: the plan in a sentence or two, then the module."""
    style = style_of(turn)
    what = _pieces(spec, style)[3]
    hints = " and contiguity hints so the elementwise loads vectorise" if spec.head is None and not spec.row_op else ""
    plan = PLANS[style].format(what=what[0].upper() + what[1:] if style == "autotune" else what, hints=hints)
    return f"{plan}\n\n```python\n{solution(spec, turn)}```"


def repair_answer(spec: TaskSpec, what: str) -> str:
    """The reply that fixes a first turn whose mistake was `what` (drk_lab.data.bugs): a plan naming the
    mistake, then the turn-1 module."""
    return f"{REPAIR_PLAN.format(what=what)}\n\n```python\n{solution(spec, 1)}```"
