"""Attention with autograd from tkir kernels: `attention(q, k, v, causal=False) -> o`, differentiable in q, k, v.

    o = softmax(q k^T / sqrt(D) [+ causal mask]) v          q, o: [B, H, N, D], k, v: [B, H / G, N, D] bf16 CUDA

Grouped-query attention when k and v have fewer heads than q (G = H / their heads, as SDPA's enable_gqa):
query head h reads K/V head h // G; dK and dV have k's and v's shape, each K/V head's summed over its G
query heads. The kernels take G as a const (-D G: K/V dims `H / G`, the launch refuses H not a multiple of
G); `attention` checks the head counts first and compiles one set of kernels per (D, causal, G).

Forward: examples/attention_fwd.tk (BQ, BKV chosen by plan-occupancy's budget: BQ=auto, BKV=auto), which also
writes L, each query row's natural log-sum-exp of the scaled scores; the Function saves Q, K, V, O and L.
Backward, by default the one-kernel path (backward="fused"):

    attention_bwd_prep.tk        Delta = rowsum(dO * O)                                  [B, H, N] f32
    attention_bwd.tk             dK, dV, and dQ^T added into a zeroed f32 workspace      [B, H, D, NP] f32
                                 (TMA reduce-add; per key block, a loop over the query blocks)
    attention_bwd_dq_convert.tk  dQ = bf16(scale * workspace^T)

or the three kernels that came before it (backward="three-kernel", or TKIR_ATTENTION_BWD=three-kernel), which
scripts/bench/attention_bwd.py --variant compares. The fused path is the default since it ran on an H100: correct
there (tests/gpu, the bench's check) and faster at every shape of both bench runs (backward 0.51-0.64x SDPA's
cuDNN at D = 128 against 0.43-0.50x for the three kernels at the same shapes in an earlier run, 231-300 TFLOP/s
against 179-276; docs/experiments.md):

    attention_bwd_prep.tk   Delta = rowsum(dO * O)
    attention_bwd_dkdv.tk   dK, dV: per key block, a loop over the query blocks      (BQ=auto: 32 at D = 128 causal)
    attention_bwd_dq.tk     dQ: per query block, a loop over the key blocks          (no atomics: deterministic)

wired with tkir.torch.autograd (the forward op's outputs O and L, the backward a tkir.torch.backward of the
ops, by the names Q, K, V, O, L, DO -> DQ, DK, DV). The fused path's dQ sums the key blocks' parts in the order
the hardware adds them: not bitwise reproducible from run to run (the three-kernel path is), unless
`deterministic=True`: then attention_bwd.tk (-D DET=1) writes each key block's dQ^T part into its own slot of a
workspace cdiv(N, BKV) times larger, [B, H, cdiv(N, BKV) * D, NP] f32, and attention_bwd_dq_convert.tk (-D DET=1)
sums the slots in key-block order: the same bits every run. Head dims 64, 128 and 256 forward and backward;
at D = 256 the backward is the fused path (the three-kernel one holds dK and dV of 256 columns in registers,
which do not fit: refused), whose blocks each own a quarter of the head dim (FUSED_TILES: -D DS=4). Any N >= 1.

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
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BACKWARD_HEAD_DIMS = (64, 128, 256)  # the fused backward's (attention_bwd.tk's DS splits D = 256)
THREE_KERNEL_HEAD_DIMS = (64, 128)  # attention_bwd_dkdv.tk's static_assert: dK and dV in registers need D <= 128
FORWARD_HEAD_DIMS = (64, 128, 256)  # attention_fwd.tk's
# attention_bwd.tk's tiles per head dim. D = 64 and 128: BQ=auto, BKV=auto, WG=auto (plan-occupancy's budget
# picks 64 x 64 on one consumer warpgroup, and 128 keys on two with 64 queries; tests/ir/test_attention_bwd_fused.py
# checks the choice) and BKV the value they resolve to, which the deterministic convert needs. D = 256: each
# block owns D / DS = 64 columns of dK and dV (and rows of dQ^T), so the accumulators are D = 64's; 2 x 4 of the
# 11 products' work is S and dP recomputed per quarter (11 / 5 = 2.2x the flops of an unsplit block). DS = 2
# spills on sm_90a (200 bytes at BQ = 32, 20-44 at BQ = 16) and BKV = 128 does not fit shared memory.
FUSED_TILES = {64: dict(BQ="auto", BKV="auto", WG="auto"), 128: dict(BQ="auto", BKV="auto", WG="auto"),
               256: dict(BQ=32, BKV=64, WG=1, DS=4)}
FUSED_BKV = {64: 64, 128: 128, 256: 64}  # the key block each head dim's tiles resolve to
BACKWARDS = ("fused", "three-kernel")  # the backward paths `attention(..., backward=)` takes
BACKWARD_ENV = "TKIR_ATTENTION_BWD"  # the default path's override (the bench's --variant sets the keyword)


def default_backward() -> str:
    """The backward path `attention` takes when not told: $TKIR_ATTENTION_BWD, else "fused" (the faster one
    measured on a GPU; "three-kernel" is bitwise reproducible without the fused path's larger workspace)."""
    name = os.environ.get(BACKWARD_ENV, "fused")
    if name not in BACKWARDS:
        raise ValueError(f"{BACKWARD_ENV}={name!r}: expected one of {', '.join(BACKWARDS)}")
    return name


@dataclass(frozen=True)
class AttentionOps:
    """The tkir ops of attention for one head dim and masking, and the autograd Function made of them."""

    forward: Any  # attention_fwd: (Q, K, V) -> (O, L)
    prep: Any  # attention_bwd_prep: (O, DO) -> DELTA
    dkdv: Any  # three-kernel: attention_bwd_dkdv: (Q, K, V, DO, L, DELTA) -> (DK, DV); fused: None
    dq: Any  # three-kernel: attention_bwd_dq: (Q, K, V, DO, L, DELTA) -> DQ; fused: attention_bwd_dq_convert
    function: Any  # a torch.autograd.Function: apply(q, k, v) -> (o, lse)
    main: Any = None  # fused: attention_bwd: (Q, K, V, DO, L, DELTA, DQACC, DK, DV) -> (DQACC, DK, DV), .out only


def fused_consts(d: int, causal: bool, g: int = 1, deterministic: bool = False) -> tuple[dict, dict]:
    """The consts attention_bwd.tk and attention_bwd_dq_convert.tk are compiled with for head dim `d` (FUSED_TILES),
    `causal`, `g` and `deterministic` (-D DET=1 on both; the convert then needs the main kernel's BKV and CAUSAL,
    and R = 32 at D = 256, where a 64 x 256 f32 sum would not fit its registers)."""
    gqa = {"G": g} if g > 1 else {}
    main = dict(D=d, CAUSAL=int(causal), **FUSED_TILES[d], **gqa)
    convert: dict[str, Any] = dict(D=d)
    if deterministic:
        main |= dict(DET=1, BKV=FUSED_BKV[d])
        convert |= dict(DET=1, BKV=FUSED_BKV[d], CAUSAL=int(causal), R=32 if d == 256 else 64)
    return main, convert


def workspace_rows(d: int, n: int, deterministic: bool = False) -> int:
    """The rows of the fused backward's dQ^T workspace: D, or deterministic, D per key block (cdiv(N, BKV) D)."""
    return d * -(-n // FUSED_BKV[d]) if deterministic else d


@functools.cache
def ops(d: int, causal: bool, g: int = 1, backward: str = "three-kernel", deterministic: bool = False) -> AttentionOps:
    """Compile and register the kernels for head dim `d` (64, 128, or with the fused backward 256), `causal`,
    `g` query heads to a K/V head, the `backward` path ("fused" or "three-kernel") and, for the fused one,
    `deterministic` (dQ summed in a fixed order), once per process."""
    import tkir.torch as tt

    if backward not in BACKWARDS:
        raise ValueError(f"attention: backward={backward!r}; expected one of {', '.join(BACKWARDS)}")
    dims = BACKWARD_HEAD_DIMS if backward == "fused" else THREE_KERNEL_HEAD_DIMS
    if d not in dims:
        raise ValueError(f"attention backward: head dim {d} is not supported by the {backward} backward; it takes "
                         f"{', '.join(map(str, dims))} (attention_bwd_dkdv.tk holds dK and dV in registers; "
                         "attention_bwd.tk splits D = 256 over blocks)")
    c = int(causal)
    gqa = {"G": g} if g > 1 else {}
    forward = tt.op(HERE / "attention_fwd.tk", outputs=["O", "L"], D=d, CAUSAL=c, BQ="auto", BKV="auto", **gqa)
    prep = tt.op(HERE / "attention_bwd_prep.tk", outputs=["DELTA"], D=d)
    if backward == "fused":
        main_consts, convert_consts = fused_consts(d, causal, g, deterministic)
        main = tt.op(HERE / "attention_bwd.tk", outputs=["DQACC", "DK", "DV"], **main_consts)
        convert = tt.op(HERE / "attention_bwd_dq_convert.tk", outputs=["DQ"], **convert_consts)

        @tt.backward(inputs=["Q", "K", "V", "O", "L", "DO"], outputs=["DQ", "DK", "DV"])
        def attention_backward_fused(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple[Any, Any, Any]:
            delta = prep(o, do)
            b, h, n, _ = q.shape
            # the kernel adds into it: zero first; deterministic, it stores every element of each slot the convert
            # reads (tests/ir/test_attention_bwd_fused.py poisons the rest with NaN): no memset of the larger one
            acc = _new_zeros(q, (b, h, workspace_rows(d, n, deterministic), workspace_cols(n)),
                             written=deterministic)
            dq, dk, dv = (_new_zeros(t, tuple(t.shape), like=True) for t in (q, k, v))  # written whole
            main.out(q, k, v, do, lse, delta, acc, dk, dv)
            convert.out(acc, dq)  # (out variant: N is no plain dim of the workspace, so dQ is passed in)
            return dq, dk, dv

        return AttentionOps(forward, prep, None, convert, tt.autograd(forward, attention_backward_fused), main)
    dkdv = tt.op(HERE / "attention_bwd_dkdv.tk", outputs=["DK", "DV"], D=d, CAUSAL=c, BQ="auto", **gqa)
    dq = tt.op(HERE / "attention_bwd_dq.tk", outputs=["DQ"], D=d, CAUSAL=c, **gqa)

    @tt.backward(inputs=["Q", "K", "V", "O", "L", "DO"], outputs=["DQ", "DK", "DV"])
    def attention_backward(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any) -> tuple[Any, Any, Any]:
        delta = prep(o, do)
        dk, dv = dkdv(q, k, v, do, lse, delta)
        return dq(q, k, v, do, lse, delta), dk, dv

    # saves Q, K, V (inputs) and O, L (outputs): what attention_backward reads besides DO
    return AttentionOps(forward, prep, dkdv, dq, tt.autograd(forward, attention_backward))


def workspace_cols(n: int) -> int:
    """NP, the columns of attention_bwd.tk's dQ^T workspace [B, H, D, NP]: N rounded up to 4 (16-byte rows)."""
    return -(-n // 4) * 4


def _new_zeros(t: Any, shape: tuple[int, ...], like: bool = False, written: bool = False) -> Any:
    """f32 zeros of `shape` beside tensor `t` (its device), or with `like` a tensor of t's dtype a kernel writes
    whole (torch: uninitialized), or with `written` an f32 tensor a kernel writes wherever it is read (torch:
    uninitialized; numpy: NaN, so that a read of an unwritten element shows). torch tensors, or numpy arrays
    (tests/runtime/test_attention_autograd_wiring.py runs the wiring on numpy in the interpreter)."""
    if hasattr(t, "new_zeros"):
        import torch

        if written:
            return t.new_empty(shape, dtype=torch.float32)
        return t.new_empty(shape) if like else t.new_zeros(shape, dtype=torch.float32)
    import numpy as np

    if written:
        return np.full(shape, np.nan, np.float32)
    return np.zeros(shape, t.dtype if like else np.float32)


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


def attention(q: Any, k: Any, v: Any, causal: bool = False, backward: str | None = None,
              deterministic: bool = False) -> Any:
    """softmax(q k^T / sqrt(D) [+ causal mask]) v of bf16 CUDA tensors, q [B, H, N, D] and k, v [B, H / G, N, D]
    (G = 1: one shape for all three; G > 1: grouped-query attention), differentiable in q, k and v. The inputs
    are made contiguous (the runtime takes C-contiguous tensors). `backward`: "fused" (one main kernel) or
    "three-kernel"; None takes default_backward(), except at D = 256, which only the fused path takes.
    `deterministic`: the fused backward's dQ summed in a fixed order (the same bits every run; a workspace
    cdiv(N, BKV) times larger); the three-kernel backward is deterministic anyway."""
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
    if backward is None:
        backward = "fused" if d not in THREE_KERNEL_HEAD_DIMS else default_backward()
    fused_det = bool(deterministic) and backward == "fused"
    o, _lse = ops(d, bool(causal), g, backward, fused_det).function.apply(q, k, v)
    return o
