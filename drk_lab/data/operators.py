"""The generator's vocabulary: each operator's PyTorch statement, its Triton expression and where it may go.

Three kinds of operator follow a head (or the input itself, at level 1):
- pointwise: y -> f(y), elementwise, any rank and dtype (relu, gelu_tanh, scale, clamp, ...);
- channel: y -> y + a learned bias per feature (last dim after a linear, dim 1 after a conv);
- residual: y -> y + h, where h is the head's output (level 2 only);
- row: a normalisation or reduction over the last dim, only last in a chain and never after a conv.
Heads: linear (x @ W^T + b) and conv (Conv2d with bias, stride 1, same padding).

Every Triton expression reads and writes `v`, an fp32 value of the current tile, and may read `h`
(the head's output, fp32) and `b{i}` (bias number i, loaded by the kernel). The PyTorch statements
read and write `y`.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("float32", "float16", "bfloat16")
ROW_OPS = ("softmax", "log_softmax", "layernorm", "rmsnorm", "l2norm", "sum", "mean", "amax", "logsumexp")
HEADS = ("linear", "conv")


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # pointwise | channel | residual | row | head
    torch: str  # statement(s) on `y`; {p} is the op's parameter, {i} its position
    triton: str = ""  # expression of `v` (pointwise, channel, residual); row ops have their own kernels
    params: tuple = ()  # the values {p} is drawn from
    describe: str = ""  # for the task's docstring; {p} as above


POINTWISE = {
    "relu": Op("relu", "pointwise", "y = torch.relu(y)", "tl.maximum(v, 0.0)", describe="ReLU"),
    "leaky_relu": Op("leaky_relu", "pointwise", "y = F.leaky_relu(y, negative_slope={p})",
                     "tl.where(v > 0, v, v * {p})", (0.01, 0.1, 0.2), "LeakyReLU({p})"),
    "gelu_tanh": Op("gelu_tanh", "pointwise", 'y = F.gelu(y, approximate="tanh")',
                    "0.5 * v * (1.0 + (2.0 * tl.sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v)) - 1.0))",
                    describe="GELU (tanh)"),
    "silu": Op("silu", "pointwise", "y = F.silu(y)", "v * tl.sigmoid(v)", describe="SiLU"),
    "sigmoid": Op("sigmoid", "pointwise", "y = torch.sigmoid(y)", "tl.sigmoid(v)", describe="sigmoid"),
    "tanh": Op("tanh", "pointwise", "y = torch.tanh(y)", "2.0 * tl.sigmoid(2.0 * v) - 1.0", describe="tanh"),
    "hardswish": Op("hardswish", "pointwise", "y = F.hardswish(y)",
                    "v * tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0", describe="hardswish"),
    "elu": Op("elu", "pointwise", "y = F.elu(y)", "tl.where(v > 0, v, tl.exp(v) - 1.0)", describe="ELU"),
    "softplus": Op("softplus", "pointwise", "y = F.softplus(y)",
                   "tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))", describe="softplus"),
    "scale": Op("scale", "pointwise", "y = y * {p}", "v * {p}", (0.5, 1.5, 2.0, 0.125), "scale by {p}"),
    "clamp": Op("clamp", "pointwise", "y = torch.clamp(y, min=-{p}, max={p})",
                "tl.minimum(tl.maximum(v, -{p}), {p})", (0.5, 1.0, 2.0), "clamp to [-{p}, {p}]"),
}
# activations a level-1 task may consist of alone (scale and clamp are too trivial to be a task)
ACTIVATIONS = tuple(n for n in POINTWISE if n not in ("scale", "clamp"))
CHANNEL = Op("bias", "channel", "y = y + self.bias{i}", "v + b{i}", describe="add a learned bias")
RESIDUAL = Op("residual", "residual", "y = y + h", "v + h", describe="add the head's output (residual)")

ROW = {
    "softmax": Op("softmax", "row", "y = torch.softmax(y, dim=-1)", describe="softmax over the last dim"),
    "log_softmax": Op("log_softmax", "row", "y = torch.log_softmax(y, dim=-1)", describe="log-softmax over the last dim"),
    "layernorm": Op("layernorm", "row", "y = self.norm(y)", describe="LayerNorm over the last dim"),
    "rmsnorm": Op("rmsnorm", "row",
                  "y = (y.float() * torch.rsqrt(y.float().pow(2).mean(-1, keepdim=True) + 1e-6) "
                  "* self.norm_weight.float()).to(y.dtype)", describe="RMSNorm over the last dim"),
    "l2norm": Op("l2norm", "row", "y = F.normalize(y, dim=-1)", describe="L2-normalise the last dim"),
    "sum": Op("sum", "row", "y = torch.sum(y, dim=-1, keepdim=True)", describe="sum over the last dim"),
    "mean": Op("mean", "row", "y = torch.mean(y, dim=-1, keepdim=True)", describe="mean over the last dim"),
    "amax": Op("amax", "row", "y = torch.amax(y, dim=-1, keepdim=True)", describe="max over the last dim"),
    "logsumexp": Op("logsumexp", "row", "y = torch.logsumexp(y, dim=-1, keepdim=True)",
                    describe="logsumexp over the last dim"),
}
REDUCTIONS = ("sum", "mean", "amax", "logsumexp")  # rows that end as one value (keepdim)


def op(name: str) -> Op:
    """The Op of a name from the vocabulary (a KeyError names an unknown one)."""
    if name == "bias":
        return CHANNEL
    if name == "residual":
        return RESIDUAL
    if name in POINTWISE:
        return POINTWISE[name]
    if name in ROW:
        return ROW[name]
    raise KeyError(f"unknown operator {name!r}")


def base_name(step: str) -> str:
    """'scale:0.5' -> 'scale' (a chain's step is the op's name, with its parameter after a colon)."""
    return step.partition(":")[0]


def param_of(step: str) -> str:
    return step.partition(":")[2]


def torch_statement(step: str, index: int) -> str:
    return op(base_name(step)).torch.format(p=param_of(step), i=index)


def triton_expression(step: str, index: int) -> str:
    return op(base_name(step)).triton.format(p=param_of(step), i=index)


def describe_step(step: str) -> str:
    return op(base_name(step)).describe.format(p=param_of(step))


def torch_dtype(dtype: str) -> str:
    return f"torch.{dtype}"
