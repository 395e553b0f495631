# Turn 3: single-pass statistics with Welford's online update over column blocks (fp32, block by block), autotuned over block size, num_stages and warps; a row that fits one block stays in registers for the normalise+affine pass.
import torch
import torch.nn as nn
import triton
import triton.language as tl


def prune_wide_blocks(configs, named_args, **kwargs):
    # a block wider than the row only adds masked lanes: try the blocks that fit the row, else the narrowest one
    width = triton.next_power_of_2(named_args["N"])
    fitting = [c for c in configs if c.kwargs["BLOCK_SIZE"] <= width]
    return fitting or [min(configs, key=lambda c: c.kwargs["BLOCK_SIZE"])]


@triton.jit
def welford_update(mean, m2, count, block_mean, block_m2, block_count):
    # Welford's online update, merging a whole block's (mean, M2, count) into the running statistics
    total = count + block_count
    delta = block_mean - mean
    mean = mean + delta * (block_count / total)
    m2 = m2 + block_m2 + delta * delta * (count * block_count / total)
    return mean, m2, total


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=4, num_stages=1),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8, num_stages=1),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8, num_stages=2),
    ],
    key=["N"],
    prune_configs_by={"early_config_prune": prune_wide_blocks},
)
@triton.heuristics({"ROW_IN_ONE_BLOCK": lambda args: args["BLOCK_SIZE"] >= args["N"]})
@triton.jit
def layernorm_welford_kernel(X, W, B, Y, stride, N, eps, BLOCK_SIZE: tl.constexpr, ROW_IN_ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK_SIZE)
    # statistics of the first block, in fp32
    mask = cols < N
    x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(N, BLOCK_SIZE).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    xc = tl.where(mask, x - mean, 0.0)
    m2 = tl.sum(xc * xc, axis=0)
    if ROW_IN_ONE_BLOCK:
        # the whole row is in registers: normalise it without reading it again
        rstd = 1.0 / tl.sqrt(m2 / count + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, (xc * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
    else:
        # one pass over the remaining blocks: Welford updates of (mean, M2, count)
        for off in range(BLOCK_SIZE, N, BLOCK_SIZE):
            mask = off + cols < N
            # keep the row in L2 for the normalise pass below
            x = tl.load(X + off + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            block_count = tl.minimum(N - off, BLOCK_SIZE).to(tl.float32)
            block_mean = tl.sum(x, axis=0) / block_count
            xc = tl.where(mask, x - block_mean, 0.0)
            mean, m2, count = welford_update(mean, m2, count, block_mean, tl.sum(xc * xc, axis=0), block_count)
        rstd = 1.0 / tl.sqrt(m2 / count + eps)
        # normalise and apply the affine
        for off in range(0, N, BLOCK_SIZE):
            mask = off + cols < N
            x = tl.load(X + off + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            w = tl.load(W + off + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(B + off + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(Y + off + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        self.ln.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N = x.shape[-1]
        x2d = x.contiguous().view(-1, N)
        y = torch.empty_like(x2d)
        layernorm_welford_kernel[(x2d.shape[0],)](x2d, self.ln.weight, self.ln.bias, y, x2d.stride(0), N, self.ln.eps)
        return y.view(x.shape)
