"""Pre-norm transformer layer in 7 Triton launches: LayerNorm, QKV GEMM (+bias), flash attention reading q/k/v straight
from the QKV buffer and writing [batch, seq, heads, head_dim], out-proj GEMM (+bias +residual), LayerNorm,
fc1 GEMM (+bias +GELU), fc2 GEMM (+bias +residual). GEMMs: tl.dot tiles, fp32 accumulate, grouped ordering."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, weight_ptr, bias_ptr, out_ptr, M, N, stride_x, stride_out, eps,
                     BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # BLOCK_ROWS whole rows per program, held in registers, fp32 statistics
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_N)
    in_row = cols < N
    mask = (rows < M)[:, None] & in_row[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, 1) / N
    centered = tl.where(in_row[None, :], x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, 1) / N + eps)
    weight = tl.load(weight_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    y = centered * rstd[:, None] * weight[None, :] + bias[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(x2d, norm):
    M, N = x2d.shape
    out = torch.empty_like(x2d)
    block_n = triton.next_power_of_2(N)
    block_rows = min(triton.next_power_of_2(M), max(1, 4096 // block_n))
    layernorm_kernel[(triton.cdiv(M, block_rows),)](
        x2d, norm.weight, norm.bias, out, M, N, x2d.stride(0), out.stride(0), norm.eps,
        BLOCK_ROWS=block_rows, BLOCK_N=block_n, num_warps=8)
    return out


@triton.jit
def linear_kernel(
    a_ptr, w_ptr, bias_ptr, res_ptr, out_ptr, M, N, K,
    stride_am, stride_ak, stride_wn, stride_wk, stride_rm, stride_rn, stride_om, stride_on,
    APPLY_GELU: tl.constexpr, ADD_RESIDUAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # out[M, N] = act(a[M, K] @ w[N, K]^T + bias[N]) (+ res[M, N])
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

    acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if APPLY_GELU:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    out_mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    if ADD_RESIDUAL:
        res_ptrs = res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn
        acc += tl.load(res_ptrs, mask=out_mask, other=0.0).to(tl.float32)
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


def linear(x2d, weight, bias, apply_gelu=False, residual=None):
    M, K = x2d.shape
    N = weight.shape[0]
    out = torch.empty((M, N), device=x2d.device, dtype=x2d.dtype)
    block_m = min(128, max(16, triton.next_power_of_2(M)))
    block_n = min(128, max(16, triton.next_power_of_2(N)))
    block_k = min(64, max(16, triton.next_power_of_2(K)))
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    res = out if residual is None else residual
    linear_kernel[grid](
        x2d, weight, bias, res, out, M, N, K,
        x2d.stride(0), x2d.stride(1), weight.stride(0), weight.stride(1),
        res.stride(0), res.stride(1), out.stride(0), out.stride(1),
        APPLY_GELU=apply_gelu, ADD_RESIDUAL=residual is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        num_warps=8, num_stages=4,
    )
    return out


@triton.jit
def causal_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, num_heads, seq_len, head_dim, qk_scale_log2,
    sq_b, sq_h, sq_s, sq_d, sk_b, sk_h, sk_s, sk_d, sv_b, sv_h, sv_s, sv_d, so_b, so_h, so_s, so_d,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    batch = pid_bh // num_heads
    head = pid_bh % num_heads
    q_base = q_ptr + batch * sq_b + head * sq_h
    k_base = k_ptr + batch * sk_b + head * sk_h
    v_base = v_ptr + batch * sv_b + head * sv_h

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < head_dim
    q = tl.load(q_base + offs_m[:, None] * sq_s + offs_d[None, :] * sq_d,
                mask=(offs_m < seq_len)[:, None] & d_ok[None, :], other=0.0)

    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    # Key blocks entirely before this query block: every key is visible and in bounds, no mask.
    block_start = pid_m * BLOCK_M
    for start_n in range(0, block_start, BLOCK_N):
        keys = start_n + offs_n
        k_t = tl.load(k_base + keys[None, :] * sk_s + offs_d[:, None] * sk_d, mask=d_ok[:, None], other=0.0)
        v = tl.load(v_base + keys[:, None] * sv_s + offs_d[None, :] * sv_d, mask=d_ok[None, :], other=0.0)
        scores = tl.dot(q, k_t) * qk_scale_log2
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        alpha = tl.exp2(row_max - new_max)
        p = tl.exp2(scores - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        row_max = new_max

    # Key blocks overlapping the diagonal: causal and sequence-end masks.
    block_end = tl.minimum(block_start + BLOCK_M, seq_len)
    for start_n in range(block_start, block_end, BLOCK_N):
        keys = start_n + offs_n
        key_ok = keys < seq_len
        k_t = tl.load(k_base + keys[None, :] * sk_s + offs_d[:, None] * sk_d,
                      mask=key_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_base + keys[:, None] * sv_s + offs_d[None, :] * sv_d,
                    mask=key_ok[:, None] & d_ok[None, :], other=0.0)
        scores = tl.dot(q, k_t) * qk_scale_log2
        visible = (keys[None, :] <= offs_m[:, None]) & key_ok[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        alpha = tl.exp2(row_max - new_max)
        p = tl.exp2(scores - new_max[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        row_max = new_max

    out = acc / row_sum[:, None]
    o_ptrs = o_ptr + batch * so_b + head * so_h + offs_m[:, None] * so_s + offs_d[None, :] * so_d
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=(offs_m < seq_len)[:, None] & d_ok[None, :])


def causal_attention(q, k, v, out):
    """q, k, v, out: [batch, heads, seq, head_dim] views with any strides; writes out."""
    batch, heads, seq, head_dim = q.shape
    block_m = min(128, max(16, triton.next_power_of_2(seq) // 2))
    block_n = min(64, block_m)
    block_d = max(16, triton.next_power_of_2(head_dim))
    qk_scale_log2 = (1.0 / math.sqrt(head_dim)) * 1.4426950408889634
    grid = (batch * heads, triton.cdiv(seq, block_m))
    causal_attention_kernel[grid](
        q, k, v, out, heads, seq, head_dim, qk_scale_log2,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=8, num_stages=3,
    )
    return out


class ModelNew(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(dim, dtype=torch.float16)
        self.qkv = nn.Linear(dim, 3 * dim, dtype=torch.float16)
        self.proj = nn.Linear(dim, dim, dtype=torch.float16)
        self.ln2 = nn.LayerNorm(dim, dtype=torch.float16)
        self.fc1 = nn.Linear(dim, 4 * dim, dtype=torch.float16)
        self.fc2 = nn.Linear(4 * dim, dim, dtype=torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        heads = self.num_heads
        x2d = x.reshape(batch * seq, dim).contiguous()
        qkv = linear(layernorm(x2d, self.ln1), self.qkv.weight, self.qkv.bias)
        qkv5 = qkv.view(batch, seq, 3, heads, dim // heads)
        q, k, v = (qkv5[:, :, i].permute(0, 2, 1, 3) for i in range(3))  # [batch, heads, seq, head_dim] views
        attn = torch.empty((batch, seq, heads, dim // heads), device=x.device, dtype=x.dtype)
        causal_attention(q, k, v, attn.permute(0, 2, 1, 3))
        x2d = linear(attn.view(batch * seq, dim), self.proj.weight, self.proj.bias, residual=x2d)
        hidden = linear(layernorm(x2d, self.ln2), self.fc1.weight, self.fc1.bias, apply_gelu=True)
        out = linear(hidden, self.fc2.weight, self.fc2.bias, residual=x2d)
        return out.view(batch, seq, dim)
