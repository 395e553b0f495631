"""1x1 conv as one GEMM per image: out[n] = W (C_out x C_in) @ x[n] (C_in x H*W), fp32 accumulation;
conv bias, inference BatchNorm (folded per output channel inside the kernel) and ReLU fused in the epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv1x1_bn_relu_kernel(
    x_ptr, w_ptr, conv_bias_ptr, mean_ptr, var_ptr, gamma_ptr, beta_ptr, out_ptr,
    C_out, HW, C_in, eps,
    stride_xn, stride_xc, stride_xp, stride_wo, stride_wi, stride_on, stride_oc, stride_op,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    # Output-channel tiles vary fastest, so the tiles sharing one block of x run together (L2 reuse).
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(C_out, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    image = tl.program_id(1).to(tl.int64)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output channels
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # pixels
    offs_k = tl.arange(0, BLOCK_K)                    # input channels
    # Wrap out-of-range channels/pixels (masked at the store) so loads need no M/N mask.
    chans = offs_m % C_out
    pixels = offs_n % HW
    w_ptrs = w_ptr + chans[:, None] * stride_wo + offs_k[None, :] * stride_wi
    x_ptrs = x_ptr + image * stride_xn + offs_k[:, None] * stride_xc + pixels[None, :] * stride_xp

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, C_in, BLOCK_K):
        if EVEN_K:
            a = tl.load(w_ptrs)
            b = tl.load(x_ptrs)
        else:
            a = tl.load(w_ptrs, mask=offs_k[None, :] < C_in - k0, other=0.0)
            b = tl.load(x_ptrs, mask=offs_k[:, None] < C_in - k0, other=0.0)
        acc = tl.dot(a, b, acc)
        w_ptrs += BLOCK_K * stride_wi
        x_ptrs += BLOCK_K * stride_xc

    # BatchNorm(conv + bias) = conv * scale + shift, with scale = gamma / sqrt(var + eps)
    conv_bias = tl.load(conv_bias_ptr + chans).to(tl.float32)
    scale = tl.load(gamma_ptr + chans).to(tl.float32) * tl.rsqrt(tl.load(var_ptr + chans).to(tl.float32) + eps)
    shift = tl.load(beta_ptr + chans).to(tl.float32) + (conv_bias - tl.load(mean_ptr + chans).to(tl.float32)) * scale
    result = tl.maximum(acc * scale[:, None] + shift[:, None], 0.0)
    out_ptrs = out_ptr + image * stride_on + offs_m[:, None] * stride_oc + offs_n[None, :] * stride_op
    tl.store(out_ptrs, result.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < C_out) & (offs_n[None, :] < HW))


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, dtype=torch.float16)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C_in, H, W = x.shape
        x3d = x.contiguous().view(N, C_in, H * W)
        weight = self.conv.weight.view(self.conv.out_channels, C_in)
        C_out, HW = weight.shape[0], H * W
        out = torch.empty((N, C_out, H, W), dtype=x.dtype, device=x.device)
        out3d = out.view(N, C_out, HW)
        BLOCK_M = min(128, max(16, triton.next_power_of_2(C_out)))
        BLOCK_N = min(128, max(16, triton.next_power_of_2(HW)))
        BLOCK_K = min(64, max(16, triton.next_power_of_2(C_in)))
        grid = (triton.cdiv(C_out, BLOCK_M) * triton.cdiv(HW, BLOCK_N), N)
        conv1x1_bn_relu_kernel[grid](
            x3d, weight, self.conv.bias, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, out3d,
            C_out, HW, C_in, self.bn.eps,
            *x3d.stride(), *weight.stride(), *out3d.stride(),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, EVEN_K=(C_in % BLOCK_K == 0),
            num_warps=8, num_stages=3,
        )
        return out
