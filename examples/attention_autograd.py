"""Attention with autograd from tkir kernels: `attention(q, k, v, causal=False) -> o`, differentiable in q, k, v.

    o = softmax(q k^T / sqrt(D) [+ causal mask]) v          q, o: [B, H, N, D], k, v: [B, H / G, N, D] bf16 CUDA

Grouped-query attention when k and v have fewer heads than q (G = H / their heads, as SDPA's enable_gqa):
query head h reads K/V head h // G; dK and dV have k's and v's shape, each K/V head's summed over its G
query heads. The kernels take G as a const (-D G: K/V dims `H / G`, the launch refuses H not a multiple of
G); `attention` checks the head counts first and compiles one set of kernels per (D, causal, G).

Forward: examples/attention_fwd.tk (BQ, BKV chosen by plan-occupancy's budget: BQ=auto, BKV=auto), which also
writes L, each query row's natural log-sum-exp of the scaled scores; the Function saves Q, K, V, O and L.
Backward, three tkir kernels (docs/torch.md, "Attention with autograd"):

    attention_bwd_prep.tk   Delta = rowsum(dO * O)                                   [B, H, N] f32
    attention_bwd_dkdv.tk   dK, dV: per key block, a loop over the query blocks      (BQ=auto: 32 at D = 128 causal)
    attention_bwd_dq.tk     dQ: per query block, a loop over the key blocks          (no atomics: deterministic)

wired with tkir.torch.autograd (the forward op's outputs O and L, the backward a tkir.torch.backward of the
three ops, by the names Q, K, V, O, L, DO -> DQ, DK, DV). Head dims 64 and 128 forward and backward; 256 forward
only (dK and dV of 256 columns do not fit a warpgroup's registers: attention_bwd_dkdv.tk's static_assert), so
`attention` refuses D = 256 when a gradient is wanted. Any N >= 1.

    import importlib.util
    spec = importlib.util.spec_from_file_location("attention_autograd", "examples/attention_autograd.py")
    ...
    o = mod.attention(q, k, v, causal=True)
    (o.float() * do).sum().backward()

tests/gpu/test_attention_bwd_gpu.py checks the gradients against autograd through SDPA in f32;
scripts/bench/attention_bwd.py times forward + backward against SDPA's cuDNN and flash backends.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BACKWARD_HEAD_DIMS = (64, 128)  # attention_bwd_dkdv.tk's static_assert: dK and dV in registers need D <= 128
FORWARD_HEAD_DIMS = (64, 128, 256)  # attention_fwd.tk's


@dataclass(frozen=True)
class AttentionOps:
    """The tkir ops of attention for one head dim and masking, and the autograd Function made of them."""

    forward: Any  # attention_fwd: (Q, K, V) -> (O, L)
    prep: Any  # attention_bwd_prep: (O, DO) -> DELTA
    dkdv: Any  # attention_bwd_dkdv: (Q, K, V, DO, L, DELTA) -> (DK, DV)
    dq: Any  # attention_bwd_dq: (Q, K, V, DO, L, DELTA) -> DQ
    function: Any  # a torch.autograd.Function: apply(q, k, v) -> (o, lse)


@functools.cache
def ops(d: int, causal: bool, g: int = 1) -> AttentionOps:
    """Compile and register the four kernels for head dim `d` (64 or 128), `causal` and `g` query heads to a
    K/V head, once per process."""
    import tkir.torch as tt

    if d not in BACKWARD_HEAD_DIMS:
        raise ValueError(f"attention backward: head dim {d} is not supported; the backward kernels take "
                         f"{', '.join(map(str, BACKWARD_HEAD_DIMS))} (attention_bwd_dkdv.tk holds dK and dV in "
                         "registers)")
    c = int(causal)
    gqa = {"G": g} if g > 1 else {}
    forward = tt.op(HERE / "attention_fwd.tk", outputs=["O", "L"], D=d, CAUSAL=c, BQ="auto", BKV="auto", **gqa)
    prep = tt.op(HERE / "attention_bwd_prep.tk", outputs=["DELTA"], D=d)
    dkdv = tt.op(HERE / "attention_bwd_dkdv.tk", outputs=["DK", "DV"], D=d, CAUSAL=c, BQ="auto", **gqa)
    dq = tt.op(HERE / "attention_bwd_dq.tk", outputs=["DQ"], D=d, CAUSAL=c, **gqa)

    @tt.backward(inputs=["Q", "K", "V", "O", "L", "DO"], outputs=["DQ", "DK", "DV"])
    def attention_backward(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple[Any, Any, Any]:
        delta = prep(o, do)
        dk, dv = dkdv(q, k, v, do, lse, delta)
        return dq(q, k, v, do, lse, delta), dk, dv

    # saves Q, K, V (inputs) and O, L (outputs): what attention_backward reads besides DO
    return AttentionOps(forward, prep, dkdv, dq, tt.autograd(forward, attention_backward))


@functools.cache
def _forward_only(d: int, causal: bool, g: int = 1) -> Any:
    import tkir.torch as tt

    gqa = {"G": g} if g > 1 else {}
    return tt.op(HERE / "attention_fwd.tk", outputs=["O", "L"], D=d, CAUSAL=int(causal), BQ="auto", BKV="auto",
                 **gqa)


def group_size(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...]) -> int:
    """G, the query heads to each K/V head: q is [B, H, N, D], k and v [B, H / G, N, D] (one shape); a
    ValueError that says what differs otherwise."""
    if tuple(k_shape) != tuple(v_shape):
        raise ValueError(f"attention: k and v must have one shape, got {list(k_shape)} and {list(v_shape)}")
    b, h, n, d = q_shape
    if (k_shape[0], k_shape[2], k_shape[3]) != (b, n, d):
        raise ValueError(f"attention: q {list(q_shape)} and k, v {list(k_shape)} must agree in batch, sequence "
                         "length and head dim ([B, H, N, D] and [B, H / G, N, D])")
    hkv = k_shape[1]
    if hkv < 1 or h % hkv:
        raise ValueError(f"attention: q has {h} heads and k, v have {hkv}: grouped-query attention needs the query "
                         f"heads a multiple of the K/V heads (H = G x HKV)")
    return h // hkv


def attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v of bf16 CUDA tensors, q [B, H, N, D] and k, v [B, H / G, N, D]
    (G = 1: one shape for all three; G > 1: grouped-query attention), differentiable in q, k and v. The inputs
    are made contiguous (the runtime takes C-contiguous tensors)."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.bfloat16 or t.dim() != 4:
            raise TypeError(f"attention: {name} must be a 4-dim [B, H, N, D] bfloat16 tensor, got {t.dim()} dims "
                            f"of {t.dtype}")
    g = group_size(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    d = q.shape[-1]
    if d not in FORWARD_HEAD_DIMS:
        raise ValueError(f"attention: head dim {d}; the kernels take {', '.join(map(str, FORWARD_HEAD_DIMS))}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if not wants_grad:
        return _forward_only(d, bool(causal), g)(q, k, v)[0]
    o, _lse = ops(d, bool(causal), g).function.apply(q, k, v)
    return o
