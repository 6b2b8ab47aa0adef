"""Companion of based.tk: Based linear attention, forward, causal, numerator only.

With the 2nd-order Taylor feature map of ThunderKittens' kernels/based (F = 16 features)

    phi(x) = [1, x / 16^(1/4), (x (x) x) / (sqrt(2) * 4)]          (273 features),
    phi(q).phi(k) = 1 + (q.k) / 4 + (q.k)^2 / 32,

the kernel writes, per (batch, head), O[t] = sum_{u <= t} phi(q_t).phi(k_u) v_u, i.e.

    O = cumsum(V) + tril(Q K^T) V / 4 + tril((Q K^T)^2) V / 32,

the same function as flash-linear-attention's `parallel_based(q, k, v, scale=None, use_norm=False)`
(scale 1, no normaliser), and the final states (what a decoder continues from):

    A0 = sum_u v_u                          [B, H, DV]       (f32)
    A1 = sum_u (k_u / 2) (x) v_u            [B, H, F, DV]    (f32)
    A2 = sum_u phi2(k_u) (x) v_u            [B, H, F*F, DV]  (f32), phi2(k) = (k (x) k) / (4 sqrt 2),
                                                             row i*F + j holding k_i k_j / (4 sqrt 2)

so that O[t] = phi(q_t) . [A0; A1; A2] after the whole sequence for the last token.

Tensors are (B, H, N, D), as the kernel reads them; fla's functions take (B, T, H, D) and are given
transposed views.
"""

from __future__ import annotations

import importlib.util
import math

import ml_dtypes
import numpy as np

KERNEL = "based.tk"
PARAMS = ["Q", "K", "V", "O", "A0", "A1", "A2"]
OUTPUTS = ["O", "A0", "A1", "A2"]
DEFAULT_CONSTS = dict(C=64, F=16, DV=64, STAGES=2)

F, DV = 16, 64
PHI1 = 1 / math.sqrt(math.sqrt(F))   # 1 / 16^(1/4) = 1/2
PHI2 = 1 / (math.sqrt(2) * 4)        # phi2(x) = (x (x) x) / (4 sqrt 2)
FEATURES = 1 + F + F * F             # 273

# Interpreter sizes: one chunk exactly, and a ragged length over several chunks and two batches.
CHECK_SIZES = [dict(B=1, H=1, N=64), dict(B=2, H=1, N=200)]
CHECK_CONSTS = [{}, {}]
# GPU correctness sizes (the small ones also run in the interpreter tests).
GPU_SIZES = [dict(B=1, H=1, N=64), dict(B=2, H=4, N=1000), dict(B=16, H=16, N=1024), dict(B=16, H=16, N=16384)]
# The bench: B = H = 16 and five lengths (ThunderKittens' benchmark.py sizes).
BENCH_SIZES = [dict(B=16, H=16, N=n) for n in (1024, 2048, 4096, 8192, 16384)]
BENCH_CONSTS = [{} for _ in BENCH_SIZES]
PEER = "PyTorch chunked (bf16)"
# Timed in the same run as PEER. flash-linear-attention's kernels only where the fla-core wheel is
# installed (`peer` says when it is not, so a bench without them says why their columns are missing).
FLA_INSTALLED = importlib.util.find_spec("fla") is not None
EXTRA_PEERS = {"PyTorch chunked (fp32)": "torch32"}
if FLA_INSTALLED:
    EXTRA_PEERS.update({"fla parallel_based": "parallel_based", "fla fused_chunk_based": "fused_chunk_based"})

# bf16 inputs and O; the kernel rounds s-terms, phi2(q) products and the states it reads back
# (a1s, a2s) to bf16, accumulating in f32: ~3e-3 relative error at N = 16384 (the bar is < 1e-2).
TOLERANCE = 1e-2
CHUNK = 64


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    B, H, N = sizes["B"], sizes["H"], sizes["N"]
    bf16 = ml_dtypes.bfloat16
    # unit-normal q, k: s = q.k / 4 is about N(0, 1), so 1, s and s^2 / 2 weigh alike and every term
    # of the kernel shows in O (with q, k scaled down the s^2 term would vanish in the error)
    q = rng.standard_normal((B, H, N, F), np.float32).astype(bf16)
    k = rng.standard_normal((B, H, N, F), np.float32).astype(bf16)
    v = rng.standard_normal((B, H, N, DV), np.float32).astype(bf16)
    return [q, k, v, np.full((B, H, N, DV), np.nan, bf16), np.full((B, H, DV), np.nan, np.float32),
            np.full((B, H, F, DV), np.nan, np.float32), np.full((B, H, F * F, DV), np.nan, np.float32)]


def phi2(x: np.ndarray) -> np.ndarray:
    """(..., F) -> (..., F*F): element i*F + j is x_i x_j / (4 sqrt 2)."""
    return (x[..., :, None] * x[..., None, :]).reshape(*x.shape[:-1], -1) * PHI2


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    """float64, quadratic form per chunk of queries (exact: O = cumsum V + tril(QK^T)V/4 + tril((QK^T)^2)V/32),
    the states in closed form."""
    q, k, v = (a.astype(np.float64) for a in inputs[:3])
    N = q.shape[2]
    o = np.empty_like(v)
    for r0 in range(0, N, 1024):
        r1 = min(N, r0 + 1024)
        s = q[:, :, r0:r1] @ np.swapaxes(k[:, :, :r1], -1, -2)  # (B, H, rows, r1)
        w = 1 + s / 4 + s * s / 32
        w *= np.arange(r1)[None, :] <= np.arange(r0, r1)[:, None]
        o[:, :, r0:r1] = w @ v[:, :, :r1]
    return {"O": o, "A0": v.sum(axis=2), "A1": np.einsum("bhnf,bhnd->bhfd", k * PHI1, v),
            "A2": np.einsum("bhnf,bhnd->bhfd", phi2(k), v)}


def flops(sizes: dict, consts: dict) -> int:
    """ThunderKittens' count (kernels/based/benchmark.py): the feature map, 2 B N H 273, and the
    linear form's two products with the 273-feature state, 4 B N H DV 273: 70,434 per token and head
    at DV = 64. What the kernel issues is larger (docs/experiments.md, Based)."""
    B, H, N = sizes["B"], sizes["H"], sizes["N"]
    return 2 * B * N * H * FEATURES + 4 * B * N * H * DV * FEATURES


def issued_flops(sizes: dict, consts: dict) -> int:
    """Tensor-core FLOPs the kernel issues per (batch, head): per 64-token chunk (cdiv(N, 64) chunks)
    q k^T (64x64x16), tril(.) v (64x64x64), q a1 (64x64x16), phi2(q) a2 (64x64x256), v^T k (64x16x64)
    and phi2(k)^T v (256x64x64), each 2 m n k."""
    B, H, N = sizes["B"], sizes["H"], sizes["N"]
    c = CHUNK
    per_chunk = 2 * (c * c * F + c * c * DV + c * DV * F + c * DV * F * F + DV * F * c + F * F * DV * c)
    return B * H * -(-N // c) * per_chunk


def bytes_moved(sizes: dict, consts: dict) -> int:
    B, H, N = sizes["B"], sizes["H"], sizes["N"]
    return 2 * B * H * N * (2 * F + 2 * DV) + 4 * B * H * DV * (1 + F + F * F)


# --- GPU hooks (tkc bench / GPU tests) -------------------------------------------------------------


def torch_inputs(sizes: dict, consts: dict) -> list:
    import torch

    B, H, N = sizes["B"], sizes["H"], sizes["N"]
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(B, H, N, F, device=dev).to(bf)
    k = torch.randn(B, H, N, F, device=dev).to(bf)
    v = torch.randn(B, H, N, DV, device=dev).to(bf)
    nan = float("nan")
    return [q, k, v, torch.full((B, H, N, DV), nan, device=dev, dtype=bf),
            torch.full((B, H, DV), nan, device=dev), torch.full((B, H, F, DV), nan, device=dev),
            torch.full((B, H, F * F, DV), nan, device=dev)]


def torch_phi2(x):
    return (x[..., :, None] * x[..., None, :]).flatten(-2) * PHI2


def based_chunked(q, k, v, chunk: int = CHUNK):
    """The chunked linear form in torch, in the dtype of q, k, v (fp32: the reference; bf16: what a
    user would run): per chunk, the intra-chunk tril(phi(q) phi(k)^T) v plus phi(q) times the state
    of the earlier chunks (a0, A1, A2 together as one (273, DV) matrix), then the state update.
    Returns O and the final state (a0, A1, A2). Memory is O(B H chunk 273)."""
    import torch

    B, H, N, _ = q.shape
    feat = lambda x: torch.cat([torch.ones_like(x[..., :1]), x * PHI1, torch_phi2(x)], dim=-1)  # noqa: E731
    state = torch.zeros(B, H, FEATURES, v.shape[-1], device=q.device, dtype=q.dtype)
    o = torch.empty_like(v)
    mask = torch.ones(chunk, chunk, device=q.device, dtype=torch.bool).tril()
    for c0 in range(0, N, chunk):
        c1 = min(N, c0 + chunk)
        fq, fk, vc = feat(q[:, :, c0:c1]), feat(k[:, :, c0:c1]), v[:, :, c0:c1]
        n = c1 - c0
        att = (fq @ fk.transpose(-1, -2)).masked_fill(~mask[:n, :n], 0)
        o[:, :, c0:c1] = att @ vc + fq @ state
        state = state + fk.transpose(-1, -2) @ vc
    return o, state[:, :, 0], state[:, :, 1:1 + F], state[:, :, 1 + F:]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    """fp32 chunked linear form (based_chunked on the bf16 inputs converted to fp32), per batch so
    B = H = 16 at N = 16384 fits in memory: the same function as the quadratic form and as fla's
    parallel_based(q, k, v, scale=None, use_norm=False)."""
    q, k, v = (x.float() for x in inputs[:3])
    outs = [based_chunked(q[b:b + 1], k[b:b + 1], v[b:b + 1]) for b in range(q.shape[0])]
    import torch

    o, a0, a1, a2 = (torch.cat(parts) for parts in zip(*outs, strict=True))
    return {"O": o, "A0": a0, "A1": a1, "A2": a2}


_SAID_NO_FLA: list = []


def peer(inputs: list, sizes: dict, consts: dict):
    """The chunked linear form in bf16, as a PyTorch user would run it."""
    if not FLA_INSTALLED and not _SAID_NO_FLA:
        print("based: flash-linear-attention (pip package fla-core) is not installed: its "
              "parallel_based and fused_chunk_based are not timed")
        _SAID_NO_FLA.append(True)
    q, k, v = inputs[:3]
    return lambda: based_chunked(q, k, v)


def extra_peer(name: str, inputs: list, sizes: dict, consts: dict):
    """EXTRA_PEERS: the fp32 chunked form, and flash-linear-attention's Triton kernels (the fla-core
    wheel; (B, T, H, D) layout; scale=None is 1 / sqrt(16) = 1/4, so their 1 + s + s^2 / 2 with
    s = q.k / 4 is this kernel's weight; no normaliser).
    EXTRA_PEERS lists them only where fla is installed."""
    which = EXTRA_PEERS[name]
    q, k, v = inputs[:3]
    if which == "torch32":
        qf, kf, vf = (x.float() for x in (q, k, v))
        return lambda: based_chunked(qf, kf, vf)
    from fla.ops.based import fused_chunk_based, parallel_based  # fla-core: flash-linear-attention

    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # (B, T, H, D)
    if which == "parallel_based":
        return lambda: parallel_based(qt, kt, vt, scale=None, use_norm=False)
    return lambda: fused_chunk_based(qt, kt, vt, scale=None, use_norm=False)
