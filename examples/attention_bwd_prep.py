"""Companion of attention_bwd_prep.tk: Delta = rowsum(dO * O) per query row (float32), the first step of
attention's backward; and the float64 reference of the whole attention forward and backward that the
companions of attention_bwd_dkdv.tk and attention_bwd_dq.tk load from here (`forward64`, `backward64`,
`problem`).

The inputs are those of a real backward: O is attention_fwd's output (float64, rounded to bf16 as the
forward stores it) of unit-normal Q, K, V; dO is unit normal.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KERNEL = "attention_bwd_prep.tk"
PARAMS = ["O", "DO", "DELTA"]
OUTPUTS = ["DELTA"]
DEFAULT_CONSTS = dict(ROWS=16, D=128, WG=1)

# Ragged N (not a multiple of ROWS = 16: rows past N load as zeros and are not stored), one row, and the
# three head dims.
CHECK_SIZES = [dict(B=1, H=2, N=200), dict(B=2, H=1, N=1), dict(B=1, H=1, N=65), dict(B=1, H=1, N=37)]
CHECK_CONSTS = [{}, {"D": 64}, {"D": 256}, {"D": 64, "ROWS": 64}]
BENCH_SIZES = [dict(B=16, H=16, N=4096), dict(B=16, H=32, N=2048)]
BENCH_CONSTS = [{}, {"D": 64}]
PEER = "(dO.float() * O.float()).sum(-1)"

# f32 output: a sum of D products of bf16 values in f32 (rounding ~1e-7 each).
TOLERANCE = 1e-5


def _consts(consts: dict) -> dict:
    return {**DEFAULT_CONSTS, **consts}


# --- the float64 attention forward and backward (shared by the three backward companions) -------------

def _heads(kv: np.ndarray, q: np.ndarray) -> np.ndarray:
    """K or V with its H / G heads repeated G times each (grouped-query attention: query head h reads K/V
    head h // G), so that it lines up with Q's H heads."""
    return np.repeat(kv, q.shape[1] // kv.shape[1], axis=1)


def forward64(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """O and L (each query row's natural log-sum-exp of the scaled scores) of attention_fwd.tk in float64:
    O = softmax(Q K^T / sqrt(D) [+ causal mask]) V, arrays [B, H, N, D] (K and V may have H / G heads)."""
    q = np.asarray(q, np.float64)
    k, v = (_heads(np.asarray(a, np.float64), q) for a in (k, v))
    n, d = q.shape[-2], q.shape[-1]
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones((n, n), bool), k=1), -np.inf, s)
    mx = s.max(-1, keepdims=True)
    p = np.exp(s - mx)
    total = p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p / total, v), (mx + np.log(total))[..., 0]


def backward64(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, lse: np.ndarray, delta: np.ndarray,
               causal: bool) -> dict[str, np.ndarray]:
    """dQ, dK, dV of attention in float64 from the forward's L and Delta = rowsum(dO * O):
    P = exp(S / sqrt(D) - L) (0 where masked), dV = P^T dO, dP = dO V^T, dS = P (dP - Delta),
    dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D). K and V may have H / G heads (grouped-query attention): dK and
    dV of a K/V head are the sums over the G query heads that read it."""
    q, k_own, v_own, do, lse, delta = (np.asarray(a, np.float64) for a in (q, k, v, do, lse, delta))
    k, v = _heads(k_own, q), _heads(v_own, q)
    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / np.sqrt(d)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones((n, n), bool), k=1), -np.inf, s)
    p = np.exp(s - lse[..., None])
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, v)
    ds = p * (dp - delta[..., None])
    dk = np.einsum("bhqk,bhqd->bhkd", ds, q) * scale

    def group_sum(a: np.ndarray) -> np.ndarray:
        return a.reshape(k_own.shape[0], k_own.shape[1], -1, *a.shape[2:]).sum(2)
    return {"DQ": np.einsum("bhqk,bhkd->bhqd", ds, k) * scale, "DK": group_sum(dk), "DV": group_sum(dv)}


def problem(rng: np.random.Generator, sizes: dict, d: int, causal: bool, g: int = 1) -> dict[str, np.ndarray]:
    """A backward's inputs: Q, K, V, dO unit normal (bf16; K and V with H / g heads); O (bf16) and L (float32)
    from forward64; Delta (float32) = rowsum(dO * O) in float64 on the bf16 O, as attention_bwd_prep.tk
    computes it."""
    shape = (sizes["B"], sizes["H"], sizes["N"], d)
    kv_shape = (sizes["B"], sizes["H"] // g, sizes["N"], d)
    bf16 = ml_dtypes.bfloat16
    q, k, v, do = (rng.standard_normal(s, np.float32).astype(bf16) for s in (shape, kv_shape, kv_shape, shape))
    o, lse = forward64(q, k, v, causal)
    o = o.astype(bf16)
    delta = (do.astype(np.float64) * o.astype(np.float64)).sum(-1)
    return dict(Q=q, K=k, V=v, DO=do, O=o, L=lse.astype(np.float32), DELTA=delta.astype(np.float32))


# --- the same on the GPU in float32 (benchmark sizes: the float64 numpy path costs minutes there) -------

def _row_block(h: int, n: int) -> int:
    """Query rows per block of the GPU reference: about 0.5 GB of f32 scores for one batch's H heads."""
    return max(1, min(n, 2**31 // max(1, h * n * 4) // 4))


def _masked_scores(q, k, r0: int, causal: bool):  # noqa: ANN001, ANN202 - torch tensors
    """S = Q[r0:r0+rows] K^T / sqrt(D) in f32 for one batch ([H, rows, N]), -inf above the diagonal if causal."""
    import torch

    s = q.float() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        rows = torch.arange(r0, r0 + q.shape[-2], device=q.device)
        s.masked_fill_(torch.arange(k.shape[-2], device=q.device)[None, :] > rows[:, None], float("-inf"))
    return s


def torch_problem(sizes: dict, d: int, causal: bool, g: int = 1) -> dict:
    """`problem` on the GPU: Q, K, V, dO unit normal (bf16; K, V with H / g heads), O (bf16) and L (f32) of the
    f32 forward, Delta = rowsum(dO * O) in float64 on the bf16 O, stored f32."""
    import torch

    b, h, n = sizes["B"], sizes["H"], sizes["N"]
    q, do = (torch.randn(b, h, n, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, h // g, n, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    rows = _row_block(h, n)
    for i in range(b):
        kb, vb = (t[i].float().repeat_interleave(g, dim=0) for t in (k, v))
        for r0 in range(0, n, rows):
            s = _masked_scores(q[i, :, r0:r0 + rows], kb, r0, causal)
            lse[i, :, r0:r0 + rows] = torch.logsumexp(s, dim=-1)
            o[i, :, r0:r0 + rows] = (torch.softmax(s, dim=-1) @ vb).to(torch.bfloat16)
            del s
    delta = (do.double() * o.double()).sum(-1).float()
    return dict(Q=q, K=k, V=v, DO=do, O=o, L=lse, DELTA=delta)


def torch_backward(q, k, v, do, lse, delta, causal: bool) -> dict:  # noqa: ANN001 - torch tensors
    """`backward64` on the GPU in f32, per batch and block of query rows (dK, dV summed over the blocks and
    over each K/V head's G query heads): dQ, dK, dV as f32 tensors."""
    import torch

    b, h, n, d = q.shape
    g = h // k.shape[1]
    scale = 1.0 / d ** 0.5
    dq = torch.empty(b, h, n, d, device=q.device, dtype=torch.float32)
    dk = torch.zeros(b, h, n, d, device=q.device, dtype=torch.float32)
    dv = torch.zeros_like(dk)
    rows = _row_block(h, n)
    for i in range(b):
        kb, vb = (t[i].float().repeat_interleave(g, dim=0) for t in (k, v))
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            qb, dob = q[i, :, r0:r1].float(), do[i, :, r0:r1].float()
            p = torch.exp(_masked_scores(qb, kb, r0, causal) - lse[i, :, r0:r1, None])
            dv[i] += p.transpose(-1, -2) @ dob
            ds = p * (dob @ vb.transpose(-1, -2) - delta[i, :, r0:r1, None])
            del p
            dq[i, :, r0:r1] = ds @ kb * scale
            dk[i] += ds.transpose(-1, -2) @ qb * scale
            del ds
    return {"DQ": dq, "DK": dk.reshape(b, h // g, g, n, d).sum(2), "DV": dv.reshape(b, h // g, g, n, d).sum(2)}


# --- this kernel ---------------------------------------------------------------------------------------

def make_inputs(rng: np.random.Generator, sizes: dict, consts: dict) -> list[np.ndarray]:
    p = problem(rng, sizes, _consts(consts)["D"], causal=False)
    return [p["O"], p["DO"], np.full(p["DELTA"].shape, np.nan, np.float32)]


def reference(inputs: list[np.ndarray], sizes: dict, consts: dict) -> dict[str, np.ndarray]:
    o, do = (a.astype(np.float64) for a in inputs[:2])
    return {"DELTA": (do * o).sum(-1)}


def flops(sizes: dict, consts: dict) -> int:
    return 2 * sizes["B"] * sizes["H"] * sizes["N"] * _consts(consts)["D"]


def bytes_moved(sizes: dict, consts: dict) -> int:
    rows = sizes["B"] * sizes["H"] * sizes["N"]
    return 2 * 2 * rows * _consts(consts)["D"] + 4 * rows  # O, dO read (bf16), Delta written (f32)


# --- GPU hooks (tkc bench): the numpy inputs copied to the GPU ------------------------------------------
MEMORY_BOUND = True


def peer(inputs: list, sizes: dict, consts: dict):
    o, do = inputs[:2]
    return lambda: (do.float() * o.float()).sum(-1)


def torch_inputs(sizes: dict, consts: dict) -> list:
    """O and dO unit normal on the GPU (Delta needs no real forward: any O gives rowsum(dO * O)); Delta NaN.
    make_inputs runs the float64 forward, which at benchmark sizes costs minutes and tens of GB."""
    import torch

    shape = (sizes["B"], sizes["H"], sizes["N"], _consts(consts)["D"])
    o, do = (torch.randn(shape, device="cuda").to(torch.bfloat16) for _ in range(2))
    return [o, do, torch.full(shape[:3], float("nan"), device="cuda", dtype=torch.float32)]


def torch_reference(inputs: list, sizes: dict, consts: dict) -> dict:
    o, do = inputs[:2]
    return {"DELTA": (do.double() * o.double()).sum(-1)}
