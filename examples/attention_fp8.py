"""Companion of attention_fp8.tk: fp8 (e4m3) attention forward, O = softmax(S) V and L = logsumexp(S) per query
row (natural log, f32), S = (Q Kᵀ) ∘ (sq ⊗ sk) / sqrt(D) [+ causal mask], O in bf16.

The inputs are quantised as FlashAttention-3's fp8 users quantise: one scale per (batch, head) for each of Q, K
and V, the head's largest magnitude over 448 (e4m3's largest finite value), rounded to e4m3. The kernel takes
them as vectors: SQK[b, h, :] repeats the product of Q's and K's head scales over the N query rows, SV[b, h, :]
repeats V's over the D columns (per-row Q and per-column V scales are the same kernel). V is passed transposed,
VT[b, h, d, n] = V[b, h, n, d], its rows padded with zeros to a multiple of 16 keys (attention_fp8.tk says why).
The reference is float64 of the dequantised inputs, so it measures the kernel (P's e4m3 rounding included), not
the quantisation of Q, K and V.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from tkir.tools.examples import load_module

KERNEL = "attention_fp8.tk"
PARAMS = ["Q", "K", "VT", "SQK", "SV", "O", "L"]
OUTPUTS = ["O", "L"]
DEFAULT_CONSTS = dict(BQ=128, BKV=128, D=128, CAUSAL=0, STAGES=2)
E4M3_MAX = 448.0  # the largest finite e4m3 value (OCP FP8 E4M3FN; tkir/scalar.py FP8_MAX)
KEY_PAD = 16  # VT's rows hold a multiple of 16 keys: TMA's 16-byte row strides of fp8

# N not a multiple of the tiles (the masks and clipped stores are exercised), small enough for the interpreter.
CHECK_SIZES = [dict(B=1, H=2, N=200), dict(B=1, H=2, N=131), dict(B=2, H=1, N=70)]
CHECK_CONSTS = [{}, {"CAUSAL": 1}, {"D": 64, "CAUSAL": 1, "BQ": 64, "BKV": 64}]
# The bench point, causal and not (scripts/bench/attention_fp8.py times it beside the bf16 kernel).
BENCH_SIZES = [dict(B=8, H=16, N=4096)] * 2
BENCH_CONSTS = [{"CAUSAL": 0}, {"CAUSAL": 1}]
PEER = "SDPA, cuDNN backend (bf16: torch's SDPA takes no fp8 inputs)"

# O: relative L2 error against float64 of the dequantised inputs. P's rounding to e4m3 (3 mantissa bits, 2^-4
# relative) dominates and averages over the keys to about 1e-2 at these inputs; bf16 output adds 2^-9. 3e-2 is
# the acceptance bound (FlashAttention-3 reports an RMSE of 9.1e-3 to 2.4e-2 for its fp8 forward, Shah et al.
# 2024, table 3). L comes from the f32 scores only (no P rounding): 1e-5 in the interpreter; on the GPU fp8
# wgmma's accumulation keeps fewer bits than f32 (about 14, DeepSeek-V3 report §3.3.2), hence 1e-4.
TOLERANCE = {"O": 3e-2, "L": 1e-4}
# Q K^T and P V: two matmuls of 2*N*N*D flops per (batch, head); causal does half the work.
MATMULS = 2


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def padded_keys(n: int) -> int:
    return -(-n // KEY_PAD) * KEY_PAD


def quantize_heads(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e4m3 tensor, f32 scale per (batch, head)) of x [B, H, N, D]: x ≈ q * scale, each head's largest
    magnitude at 448."""
    amax = np.maximum(np.abs(x).max(axis=(2, 3)), np.finfo(np.float32).tiny)
    scale = (amax / E4M3_MAX).astype(np.float32)
    q = np.clip(x / scale[:, :, None, None], -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
    return q, scale


def transpose_v(v: np.ndarray) -> np.ndarray:
    """VT [B, H, D, NP] of V [B, H, N, D]: keys contiguous, NP = N padded with zero keys to a multiple of 16."""
    B, H, N, D = v.shape
    vt = np.zeros((B, H, D, padded_keys(N)), v.dtype)
    vt[..., :N] = np.swapaxes(v, 2, 3)
    return vt


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    # Unit-normal Q and K make the scaled scores N(0, 1): neither one-hot nor uniform rows.
    q, sq = quantize_heads(rng.standard_normal((B, H, N, D)))
    k, sk = quantize_heads(rng.standard_normal((B, H, N, D)))
    v, sv = quantize_heads(rng.standard_normal((B, H, N, D)))
    rows = lambda s, n: np.repeat(s[:, :, None], n, axis=2).astype(np.float32)  # noqa: E731
    o = np.full((B, H, N, D), np.nan, ml_dtypes.bfloat16)
    return [q, k, transpose_v(v), rows(sq * sk, N), rows(sv, D), o, np.full((B, H, N), np.nan, np.float32)]


def dequantised(inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 Q, K, V [B, H, N, D] of the kernel's arguments (Q carries the scores' scale SQK, K none)."""
    q8, k8, vt8, sqk, sv = inputs[:5]
    N = q8.shape[2]
    q = q8.astype(np.float64) * sqk[..., None]
    k = k8.astype(np.float64)
    v = np.swapaxes(vt8[..., :N].astype(np.float64), 2, 3) * sv[:, :, None, :]
    return q, k, v


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    """O and L in float64 of the dequantised inputs, one (batch, head) at a time."""
    q_all, k_all, v_all = dequantised(inputs)
    B, H, N, D = q_all.shape
    masked = np.triu(np.ones((N, N), bool), k=1) if _consts(consts)["CAUSAL"] else None
    out_o, out_l = np.empty((B, H, N, D)), np.empty((B, H, N))
    head_attention = load_module(Path(__file__).resolve().parent / "attention_fwd.py",
                                 "tkir_example_attention_fwd_math").head_attention
    for b in range(B):
        for h in range(H):
            out_o[b, h], out_l[b, h] = head_attention(q_all[b, h], k_all[b, h], v_all[b, h], masked)
    return {"O": out_o, "L": out_l}


def flops(sizes: dict, consts: dict) -> int:
    c = _consts(consts)
    full = MATMULS * 2 * sizes["B"] * sizes["H"] * sizes["N"] ** 2 * c["D"]
    return full // 2 if c["CAUSAL"] else full


def bytes_moved(sizes: dict, consts: dict) -> int:
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    D = _consts(consts)["D"]
    return 3 * rows * D + 2 * rows * D + 4 * rows + 4 * (rows + sizes["B"] * sizes["H"] * D)  # fp8 in, bf16 O


# --- GPU hooks (tkc bench / GPU tests): torch tensors on the GPU -------------------------------------


def torch_quantize_heads(x):
    """quantize_heads in torch (on x's device)."""
    import torch

    scale = x.abs().amax(dim=(2, 3)).clamp_min(torch.finfo(torch.float32).tiny) / E4M3_MAX
    q = (x / scale[:, :, None, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.float()


def torch_transpose_v(v):
    """transpose_v in torch: VT [B, H, D, NP], zero keys past N."""
    import torch

    B, H, N, D = v.shape
    # the bytes moved as uint8 (zeros and strided copies of any 1-byte dtype), then viewed as fp8
    vt = torch.zeros(B, H, D, padded_keys(N), device=v.device, dtype=torch.uint8)
    vt[..., :N] = v.view(torch.uint8).transpose(2, 3)
    return vt.view(v.dtype)


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    B, H, N, D = sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"]
    (q, sq), (k, sk), (v, sv) = (torch_quantize_heads(torch.randn(B, H, N, D, device="cuda")) for _ in range(3))
    rows = lambda s, n: s[:, :, None].expand(B, H, n).contiguous()  # noqa: E731
    return [q, k, torch_transpose_v(v), rows(sq * sk, N), rows(sv, D),
            torch.full((B, H, N, D), float("nan"), device="cuda", dtype=torch.bfloat16),
            torch.full((B, H, N), float("nan"), device="cuda", dtype=torch.float32)]


def torch_dequantised(inputs: list, dtype=None) -> tuple:  # noqa: ANN001
    """Q, K, V [B, H, N, D] of the kernel's arguments, dequantised (float64 unless dtype says otherwise; Q carries
    the scores' scale SQK, K none)."""
    import torch

    dtype = dtype or torch.float64
    q8, k8, vt8, sqk, sv = inputs[:5]
    N = q8.shape[2]
    q = q8.float().to(dtype) * sqk[..., None].to(dtype)  # fp8 -> f32 is exact, and so is f32 -> f64
    k = k8.float().to(dtype)
    v = vt8[..., :N].float().transpose(2, 3).to(dtype) * sv[:, :, None, :].to(dtype)
    return q, k, v


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """O and L in float64 of the dequantised inputs, per (batch, head) so the scores fit in memory."""
    import torch

    q, k, v = torch_dequantised(inputs)
    B, H, N, D = q.shape
    out_o = torch.empty(B, H, N, D, device=q.device, dtype=torch.float64)
    out_l = torch.empty(B, H, N, device=q.device, dtype=torch.float64)
    causal = bool(_consts(consts)["CAUSAL"])
    mask = torch.ones(N, N, device=q.device, dtype=torch.bool).triu(1) if causal else None
    for b in range(B):
        for h in range(H):
            s = q[b, h] @ k[b, h].T / D ** 0.5
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            out_l[b, h] = torch.logsumexp(s, dim=-1)
            out_o[b, h] = torch.softmax(s, dim=-1) @ v[b, h]
    return {"O": out_o, "L": out_l}


def peer(inputs: list, sizes: dict, consts: dict, backend: str = "CUDNN_ATTENTION"):
    """SDPA (cuDNN) in bf16 on the dequantised inputs: torch's SDPA has no fp8 path, so the bf16 kernel is the bar."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.contiguous() for t in torch_dequantised(inputs, torch.bfloat16))
    causal = bool(_consts(consts)["CAUSAL"])
    chosen = getattr(SDPBackend, backend)

    def run():
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run
