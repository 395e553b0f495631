# Turn 2: the same two-pass kernel, now with @triton.autotune over the block size and num_warps (keyed on the row length); rows longer than the block are looped over.
import torch
import torch.nn as nn
import triton
import triton.language as tl


def prune_wide_blocks(configs, named_args, **kwargs):
    # a block wider than the row only adds masked lanes: try the blocks that fit the row, else the narrowest one
    width = triton.next_power_of_2(named_args["N"])
    fitting = [c for c in configs if c.kwargs["BLOCK_SIZE"] <= width]
    return fitting or [min(configs, key=lambda c: c.kwargs["BLOCK_SIZE"])]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=16),
    ],
    key=["N"],
    prune_configs_by={"early_config_prune": prune_wide_blocks},
)
@triton.jit
def layernorm_fwd_kernel(X, W, B, Y, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK_SIZE)
    # pass 1: the mean
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        mask = off + cols < N
        acc += tl.load(X + off + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    # pass 2: the variance of the centred values
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        mask = off + cols < N
        x = tl.load(X + off + cols, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        acc += xc * xc
    var = tl.sum(acc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    # normalise and apply the affine
    for off in range(0, N, BLOCK_SIZE):
        mask = off + cols < N
        x = tl.load(X + off + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + off + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(B + off + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + off + cols, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        self.ln.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N = x.shape[-1]
        x2d = x.contiguous().view(-1, N)
        y = torch.empty_like(x2d)
        layernorm_fwd_kernel[(x2d.shape[0],)](x2d, self.ln.weight, self.ln.bias, y, x2d.stride(0), N, self.ln.eps)
        return y.view(x.shape)
