"""Two Triton GEMM kernels (tl.dot, fp32 accumulate, grouped ordering): one computes x W_gate^T and x W_up^T together
(x tile loaded once, two accumulators) and writes silu(gate) * up in fp16; the second is the W_down GEMM."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_up_silu_kernel(
    x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
    stride_xm, stride_xk, stride_gn, stride_gk, stride_un, stride_uk, stride_hm, stride_hn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # h[M, N] = silu(x @ wg^T) * (x @ wu^T); wg and wu are [N, K]
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % group_rows
    pid_n = (pid % pids_per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + (offs_m % M)[:, None] * stride_xm + offs_k[None, :] * stride_xk
    wg_ptrs = wg_ptr + (offs_n % N)[None, :] * stride_gn + offs_k[:, None] * stride_gk
    wu_ptrs = wu_ptr + (offs_n % N)[None, :] * stride_un + offs_k[:, None] * stride_uk

    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        wg = tl.load(wg_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        wu = tl.load(wu_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc_gate = tl.dot(x, wg, acc_gate)
        acc_up = tl.dot(x, wu, acc_up)
        x_ptrs += BLOCK_K * stride_xk
        wg_ptrs += BLOCK_K * stride_gk
        wu_ptrs += BLOCK_K * stride_uk

    h = acc_gate / (1.0 + tl.exp(-acc_gate)) * acc_up
    h_ptrs = h_ptr + offs_m[:, None] * stride_hm + offs_n[None, :] * stride_hn
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])


@triton.jit
def linear_kernel(
    a_ptr, w_ptr, out_ptr, M, N, K,
    stride_am, stride_ak, stride_wn, stride_wk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # out[M, N] = a[M, K] @ w[N, K]^T
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % group_rows
    pid_n = (pid % pids_per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + (offs_n % N)[None, :] * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk

    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])


def gemm_blocks(M, N, K, max_n):
    return (min(128, max(16, triton.next_power_of_2(M))), min(max_n, max(16, triton.next_power_of_2(N))),
            min(64, max(16, triton.next_power_of_2(K))))


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden_dim, bias=False, dtype=torch.float16)
        self.w_up = nn.Linear(dim, hidden_dim, bias=False, dtype=torch.float16)
        self.w_down = nn.Linear(hidden_dim, dim, bias=False, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1])
        M, K = x2d.shape
        wg, wu, wd = self.w_gate.weight, self.w_up.weight, self.w_down.weight
        hidden_dim = wg.shape[0]
        h = torch.empty((M, hidden_dim), device=x.device, dtype=x.dtype)
        bm, bn, bk = gemm_blocks(M, hidden_dim, K, 64)  # two accumulators: half-width N tile
        grid = (triton.cdiv(M, bm) * triton.cdiv(hidden_dim, bn),)
        gate_up_silu_kernel[grid](
            x2d, wg, wu, h, M, hidden_dim, K,
            x2d.stride(0), x2d.stride(1), wg.stride(0), wg.stride(1), wu.stride(0), wu.stride(1),
            h.stride(0), h.stride(1),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=8, num_stages=4,
        )
        N = wd.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=x.dtype)
        bm, bn, bk = gemm_blocks(M, N, hidden_dim, 128)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        linear_kernel[grid](
            h, wd, out, M, N, hidden_dim,
            h.stride(0), h.stride(1), wd.stride(0), wd.stride(1), out.stride(0), out.stride(1),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=8, num_stages=4,
        )
        return out.view(*x.shape[:-1], N)
