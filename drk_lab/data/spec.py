"""TaskSpec: what a generated task computes (head, chain, dtype, sizes), and its KernelBench-format source.

    spec = TaskSpec(level=2, head="linear", steps=("bias", "gelu_tanh", "scale:0.5", "softmax"),
                    dtype="float16", sizes=(("batch_size", 4096), ("in_features", 2048), ("out_features", 4096)),
                    small=(("batch_size", 37), ("in_features", 48), ("out_features", 80)))
    source = render_source(spec)

The source has the sizes as module-level constants, get_inputs()/get_init_inputs(), and SMALL_SIZES
(the interpreter's sizes, read by Task.small()).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from drk_lab.data.operators import ROW, base_name, describe_step, torch_dtype, torch_statement

SHORT_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class TaskSpec:
    level: int
    head: str | None  # "linear", "conv" or None (the chain runs on the input)
    steps: tuple[str, ...]  # the chain after the head: op names, a parameter after a colon ("scale:0.5")
    dtype: str  # float32 | float16 | bfloat16
    sizes: tuple[tuple[str, int], ...]  # full sizes, in the order of the module's constants
    small: tuple[tuple[str, int], ...]  # the interpreter's sizes (SMALL_SIZES)
    kernel_size: int = 0  # conv only (a constant that SMALL_SIZES leaves alone)

    @property
    def ops(self) -> list[str]:
        """The operator list: the head (if any) then each step's op name, in order."""
        return ([self.head] if self.head else []) + [base_name(s) for s in self.steps]

    @property
    def combination(self) -> str:
        """The set of operators, sorted and joined: what the held-out split keeps apart from training."""
        return "+".join(sorted(set(self.ops)))

    @property
    def key(self) -> str:
        """The dedupe key: the operator graph (head, chain with parameters), dtype and sizes."""
        graph = [self.head, list(self.steps), self.dtype, [list(s) for s in self.sizes], self.kernel_size]
        return hashlib.sha256(json.dumps(graph).encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        return f"L{self.level}_{'_'.join(self.ops)}_{SHORT_DTYPE[self.dtype]}_{self.key[:6]}"

    @property
    def rank(self) -> int:
        return len(input_shape(self))

    @property
    def row_op(self) -> str | None:
        return next((base_name(s) for s in self.steps if base_name(s) in ROW), None)

    @property
    def features(self) -> str:
        """The constant holding the size of the last dim (linear, none) or the channels (conv)."""
        return {"linear": "out_features", "conv": "out_channels"}.get(self.head, "dim")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TaskSpec:
        return cls(level=int(d["level"]), head=d.get("head"), steps=tuple(d["steps"]), dtype=d["dtype"],
                   sizes=tuple((str(k), int(v)) for k, v in d["sizes"]),
                   small=tuple((str(k), int(v)) for k, v in d["small"]), kernel_size=int(d.get("kernel_size") or 0))


def init_args(spec: TaskSpec) -> list[str]:
    return {"linear": ["in_features", "out_features"], "conv": ["in_channels", "out_channels", "kernel_size"]}.get(
        spec.head, ["dim"])


def input_shape(spec: TaskSpec) -> list[str]:
    names = [n for n, _ in spec.sizes]
    if spec.head == "conv":
        return ["batch_size", "in_channels", "height", "width"]
    last = "in_features" if spec.head == "linear" else "dim"
    return [n for n in ("batch_size", "seq_len") if n in names] + [last]


def init_lines(spec: TaskSpec) -> list[str]:
    """The constructor's body after super().__init__(): the teacher's ModelNew repeats it line for line,
    so that both modules hold the same parameters (they are built after the same seed)."""
    dt = torch_dtype(spec.dtype)
    feat = spec.features
    lines = []
    if spec.head == "linear":
        lines.append(f"self.linear = nn.Linear(in_features, out_features, dtype={dt})")
    elif spec.head == "conv":
        lines.append(f"self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, dtype={dt})")
    for i, step in enumerate(spec.steps):
        name = base_name(step)
        if name == "bias":
            shape = f"{feat}, 1, 1" if spec.head == "conv" else feat
            lines.append(f"self.bias{i} = nn.Parameter(torch.randn({shape}, dtype={dt}) * 0.5)")
        elif name == "layernorm":
            lines += [f"self.norm = nn.LayerNorm({feat}, dtype={dt})",
                      "with torch.no_grad():  # affine parameters as if trained, so that they matter",
                      "    self.norm.weight.uniform_(0.5, 1.5)",
                      "    self.norm.bias.uniform_(-0.5, 0.5)"]
        elif name == "rmsnorm":
            lines.append(f"self.norm_weight = nn.Parameter(torch.rand({feat}, dtype={dt}) + 0.5)")
    return lines


def forward_lines(spec: TaskSpec) -> list[str]:
    # the head's output stays in h for a residual step; without a head (level 1) the chain starts at x
    start = {"linear": ["h = self.linear(x)", "y = h"], "conv": ["h = self.conv(x)", "y = h"]}.get(spec.head, ["y = x"])
    return start + [torch_statement(step, i) for i, step in enumerate(spec.steps)] + ["return y"]


def description(spec: TaskSpec) -> str:
    head = {"linear": "Linear layer (x @ W^T + b)", "conv": f"Conv2d ({spec.kernel_size}x{spec.kernel_size}, "
            "same padding, with bias)"}.get(spec.head)
    parts = ([head] if head else []) + [describe_step(s) for s in spec.steps]
    return f"{', then '.join(parts)}; {SHORT_DTYPE[spec.dtype]}."


def render_source(spec: TaskSpec) -> str:
    dt = torch_dtype(spec.dtype)
    args = init_args(spec)
    body = "".join("\n        " + line for line in init_lines(spec))
    forward = "\n".join("        " + line for line in forward_lines(spec))
    constants = "\n".join(f"{name} = {value}" for name, value in spec.sizes)
    if spec.head == "conv":
        constants += f"\nkernel_size = {spec.kernel_size}"
    small = ", ".join(f'"{name}": {value}' for name, value in spec.small)
    typed = ", ".join(f"{a}: int" for a in args)
    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """{description(spec)}"""

    def __init__(self, {typed}):
        super().__init__(){body}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{forward}


{constants}


def get_inputs():
    return [torch.randn({", ".join(input_shape(spec))}, dtype={dt})]


def get_init_inputs():
    return [{", ".join(args)}]


SMALL_SIZES = {{{small}}}
'''
