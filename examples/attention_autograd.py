"""Attention with autograd from tkir kernels: `attention(q, k, v, causal=False) -> o`, differentiable in q, k, v.

    o = softmax(q k^T / sqrt(D) [+ causal mask]) v          q, k, v, o: [B, H, N, D] bf16 CUDA tensors

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
def ops(d: int, causal: bool) -> AttentionOps:
    """Compile and register the four kernels for head dim `d` (64 or 128) and `causal`, once per process."""
    import tkir.torch as tt

    if d not in BACKWARD_HEAD_DIMS:
        raise ValueError(f"attention backward: head dim {d} is not supported; the backward kernels take "
                         f"{', '.join(map(str, BACKWARD_HEAD_DIMS))} (attention_bwd_dkdv.tk holds dK and dV in "
                         "registers)")
    c = int(causal)
    forward = tt.op(HERE / "attention_fwd.tk", outputs=["O", "L"], D=d, CAUSAL=c, BQ="auto", BKV="auto")
    prep = tt.op(HERE / "attention_bwd_prep.tk", outputs=["DELTA"], D=d)
    dkdv = tt.op(HERE / "attention_bwd_dkdv.tk", outputs=["DK", "DV"], D=d, CAUSAL=c, BQ="auto")
    dq = tt.op(HERE / "attention_bwd_dq.tk", outputs=["DQ"], D=d, CAUSAL=c)

    @tt.backward(inputs=["Q", "K", "V", "O", "L", "DO"], outputs=["DQ", "DK", "DV"])
    def attention_backward(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple[Any, Any, Any]:
        delta = prep(o, do)
        dk, dv = dkdv(q, k, v, do, lse, delta)
        return dq(q, k, v, do, lse, delta), dk, dv

    # saves Q, K, V (inputs) and O, L (outputs): what attention_backward reads besides DO
    return AttentionOps(forward, prep, dkdv, dq, tt.autograd(forward, attention_backward))


@functools.cache
def _forward_only(d: int, causal: bool) -> Any:
    import tkir.torch as tt

    return tt.op(HERE / "attention_fwd.tk", outputs=["O", "L"], D=d, CAUSAL=int(causal), BQ="auto", BKV="auto")


def attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v of bf16 CUDA tensors [B, H, N, D] (one shape for all three),
    differentiable in q, k and v. The inputs are made contiguous (the runtime takes C-contiguous tensors)."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.bfloat16 or t.dim() != 4:
            raise TypeError(f"attention: {name} must be a 4-dim [B, H, N, D] bfloat16 tensor, got {t.dim()} dims "
                            f"of {t.dtype}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"attention: q, k, v must have one shape, got {list(q.shape)}, {list(k.shape)}, "
                         f"{list(v.shape)}")
    d = q.shape[-1]
    if d not in FORWARD_HEAD_DIMS:
        raise ValueError(f"attention: head dim {d}; the kernels take {', '.join(map(str, FORWARD_HEAD_DIMS))}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if not wants_grad:
        return _forward_only(d, bool(causal))(q, k, v)[0]
    o, _lse = ops(d, bool(causal)).function.apply(q, k, v)
    return o
