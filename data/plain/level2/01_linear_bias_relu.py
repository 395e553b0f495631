"""Plain fused linear + bias + ReLU in fp16 (starting point for the launch-parameter search): one program per
16x16 output tile of x @ W^T, walking K in steps of 16 with tl.dot and an fp32 accumulator; bias and ReLU in
the epilogue. Slow on purpose: tiny tiles, one warp, no pipelining.
Tunable: BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_bias_relu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                            stride_om, stride_on,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        w_t = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                      mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(x, w_t, acc)
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    y = tl.maximum(acc + bias[None, :], 0.0)
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = weight.shape[0]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        BLOCK_M = 16
        BLOCK_N = 16
        BLOCK_K = 16
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        linear_bias_relu_kernel[grid](x, weight, bias, out, M, N, K, x.stride(0), x.stride(1),
                                      weight.stride(0), weight.stride(1), out.stride(0), out.stride(1),
                                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=1, num_stages=1)
        return out
