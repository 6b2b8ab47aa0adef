"""Attention's backward in three kernels (examples/attention_bwd_prep.tk, attention_bwd_dkdv.tk,
attention_bwd_dq.tk) in the reference interpreter, compiled with the default pipeline on sm_90a and sm_80.

* Each companion's CHECK_SIZES on both targets.
* The whole backward (prep, then dK/dV and dQ from its Delta) against the float64 backward of the float64
  forward, at ragged N = 1, 63, 64, 65, 127, 200, causal and not, D = 64 and 128. At N = 1 a query has one
  key, P = 1 whatever the score, and dQ = dK = 0 in exact arithmetic: there they are held to an absolute bound.
* A float64 finite-difference check at B = H = 1, N = 5, D = 64: the loss <dO, O> of the float64 forward,
  perturbed entry by entry, against the float64 backward (1e-7) and against the gradients of the three kernels
  run after attention_fwd.tk in the interpreter (its O and L, as the autograd wiring runs them), and against
  the gradients of the one-kernel path (attention_bwd.tk; tests/ir/test_attention_bwd_fused.py has the rest).
* Mutants of the causal parts (the mask, the dK/dV loop's first query block, the dQ loop's last key block) fail.
* ptxas assembles all three on both targets; on sm_90a without spills or local memory. D = 256 in dK/dV is a
  located static_assert.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.diagnostics import CompileError
from tkir.interp import interpret
from tkir.tools.examples import check_interpreted, load_companion, max_error, relative_error

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERNELS = ("attention_bwd_prep", "attention_bwd_dkdv", "attention_bwd_dq")
TARGETS = ("sm_90a", "sm_80")
GRAD_TOL = 2e-2  # the companions' bound: bf16 outputs from bf16 products of P and dS
# At N = 1, dQ and dK are rounding noise: f32 dP - Delta of two equal values (~1e-7 of |dP|), times q or k.
ZERO_GRAD_TOL = 1e-4  # max |dQ|, max |dK| against max |dV| (the gradient's scale)
FD_STEP = 1e-5  # central differences in float64: truncation ~h^2, rounding ~1e-16 / h
FD_TOL = 1e-7  # the float64 backward against the finite differences
RAGGED_N = (1, 63, 64, 65, 127, 200)


def _sizes(n: int) -> dict:
    """Batch and head counts beside N: two heads at N = 200, two batches at N = 65 (the block indices of
    both grid dims), one of each otherwise."""
    return {200: dict(B=1, H=2, N=n), 65: dict(B=2, H=1, N=n)}.get(n, dict(B=1, H=1, N=n))


@functools.cache
def _companion(name: str):  # noqa: ANN202 - a companion module
    return load_companion(str(EXAMPLES / f"{name}.tk"))


@functools.cache
def _compile(name: str, target: str, **consts: int | str) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)


def _kernels(target: str, d: int, causal: int) -> dict[str, tkir.CompiledKernel]:
    """The three kernels as the autograd wiring compiles them (dK/dV's query block: BQ=auto)."""
    return {"prep": _compile("attention_bwd_prep", target, D=d),
            "dkdv": _compile("attention_bwd_dkdv", target, D=d, CAUSAL=causal, BQ="auto"),
            "dq": _compile("attention_bwd_dq", target, D=d, CAUSAL=causal)}


def _backward(ks: dict, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
              do: np.ndarray) -> dict[str, np.ndarray]:
    """Delta, dQ, dK, dV from the three kernels in the interpreter, in the order the autograd wiring runs them."""
    b, h, n, d = q.shape
    sizes = dict(B=b, H=h, N=n)
    delta = np.full((b, h, n), np.nan, np.float32)
    interpret(ks["prep"].module, o, do, delta, sizes=sizes)
    dq, dk, dv = (np.full(q.shape, np.nan, q.dtype) for _ in range(3))
    interpret(ks["dkdv"].module, q, k, v, do, lse, delta, dk, dv, sizes=sizes)
    interpret(ks["dq"].module, q, k, v, do, lse, delta, dq, sizes=sizes)
    return {"DELTA": delta, "DQ": dq, "DK": dk, "DV": dv}


# --- the companions' checks --------------------------------------------------------------------------------

def _check_cases() -> list:
    out = []
    for name in KERNELS:
        comp = _companion(name)
        assert len(comp.CHECK_SIZES) == len(comp.CHECK_CONSTS) >= 4
        for i in range(len(comp.CHECK_SIZES)):
            for target in TARGETS:
                out.append(pytest.param(name, target, i, id=f"{name}-{i}-{target}"))
    return out


@pytest.mark.parametrize("name, target, i", _check_cases())
def test_companion_check_sizes(name: str, target: str, i: int) -> None:
    comp = _companion(name)
    sizes, consts = comp.CHECK_SIZES[i], comp.CHECK_CONSTS[i]
    results = check_interpreted(_compile(name, target, **consts).module, comp, sizes, consts, seed=i)
    assert results and all(r.ok for r in results), [str(r) for r in results]


# --- the whole backward at ragged N --------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("n", RAGGED_N)
def test_whole_backward_matches_float64(n: int, causal: int, d: int, target: str) -> None:
    prep = _companion("attention_bwd_prep")
    p = prep.problem(np.random.default_rng(n + 7 * causal), _sizes(n), d, bool(causal))
    got = _backward(_kernels(target, d, causal), p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
    delta_ref = prep.reference([p["O"], p["DO"]], {}, {})["DELTA"]
    assert relative_error(got["DELTA"], delta_ref) < prep.TOLERANCE
    assert relative_error(got["DV"], want["DV"]) < GRAD_TOL and max_error(got["DV"], want["DV"]) < GRAD_TOL
    for g in ("DQ", "DK"):
        out = got[g].astype(np.float64)
        assert np.isfinite(out).all(), g
        if n == 1:  # zero in exact arithmetic
            assert np.abs(out).max() <= ZERO_GRAD_TOL * np.abs(want["DV"]).max(), (g, np.abs(out).max())
        else:
            assert relative_error(out, want[g]) < GRAD_TOL, (g, relative_error(out, want[g]))
            assert max_error(out, want[g]) < GRAD_TOL, (g, max_error(out, want[g]))


# --- finite differences ----------------------------------------------------------------------------------------

def _fd_grads(prep, q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray,  # noqa: ANN001 - companion
              causal: bool) -> dict[str, np.ndarray]:
    """d<dO, O>/dX for X in Q, K, V by central differences of the float64 forward, entry by entry."""
    base = {"DQ": np.asarray(q, np.float64), "DK": np.asarray(k, np.float64), "DV": np.asarray(v, np.float64)}
    dof = np.asarray(do, np.float64)
    out = {}
    for name, x in base.items():
        g = np.empty_like(x)
        for idx in np.ndindex(x.shape):
            losses = []
            for sign in (1.0, -1.0):
                xs = dict(base)
                xs[name] = x.copy()
                xs[name][idx] += sign * FD_STEP
                o, _ = prep.forward64(xs["DQ"], xs["DK"], xs["DV"], causal)
                losses.append(float((dof * o).sum()))
            g[idx] = (losses[0] - losses[1]) / (2 * FD_STEP)
        out[name] = g
    return out


@pytest.mark.parametrize("causal", [0, 1])
def test_finite_differences_through_the_interpreter(causal: int) -> None:
    """B = H = 1, N = 5, D = 64: attention_fwd.tk gives O and L in the interpreter, the three backward kernels
    give dQ, dK, dV; the loss <dO, O> of the float64 forward, perturbed entry by entry, gives the same gradients
    (and the float64 backward matches those to 1e-7, so the reference the other tests use is the derivative)."""
    import ml_dtypes

    prep = _companion("attention_bwd_prep")
    rng = np.random.default_rng(11 + causal)
    shape = (1, 1, 5, 64)
    q, k, v, do = (rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16) for _ in range(4))
    fd = _fd_grads(prep, q, k, v, do, bool(causal))
    o64, lse64 = prep.forward64(q, k, v, bool(causal))
    exact = prep.backward64(q, k, v, do, lse64, (do.astype(np.float64) * o64).sum(-1), bool(causal))
    for g in ("DQ", "DK", "DV"):
        assert relative_error(exact[g], fd[g]) < FD_TOL, (g, relative_error(exact[g], fd[g]))
    fwd = _compile("attention_fwd", "sm_90a", D=64, CAUSAL=causal)
    o = np.full(shape, np.nan, ml_dtypes.bfloat16)
    lse = np.full(shape[:3], np.nan, np.float32)
    interpret(fwd.module, q, k, v, o, lse, sizes=dict(B=1, H=1, N=5))
    for target in TARGETS:
        got = _backward(_kernels(target, 64, causal), q, k, v, o, lse, do)
        for g in ("DQ", "DK", "DV"):
            err = relative_error(got[g], fd[g])
            assert err < GRAD_TOL, (target, g, err)
        # the loss change along one random direction of all three inputs, against <dX, direction>
        dirs = {g: rng.standard_normal(shape) for g in ("DQ", "DK", "DV")}
        xs = [a.astype(np.float64) for a in (q, k, v)]
        plus = [x + FD_STEP * dirs[g] for x, g in zip(xs, ("DQ", "DK", "DV"), strict=True)]
        minus = [x - FD_STEP * dirs[g] for x, g in zip(xs, ("DQ", "DK", "DV"), strict=True)]
        dof = do.astype(np.float64)
        change = ((dof * prep.forward64(*plus, bool(causal))[0]).sum()
                  - (dof * prep.forward64(*minus, bool(causal))[0]).sum()) / (2 * FD_STEP)
        predicted = sum(float((got[g].astype(np.float64) * dirs[g]).sum()) for g in dirs)
        assert abs(predicted - change) < GRAD_TOL * abs(change), (target, predicted, change)
    # the one-kernel path (examples/attention_bwd.tk between prep and the dQ conversion; D = 64: its tiles)
    for target in TARGETS:
        got = _fused_backward(target, causal, q, k, v, o, lse, do)
        for g in ("DQ", "DK", "DV"):
            err = relative_error(got[g], fd[g])
            assert err < GRAD_TOL, ("fused", target, g, err)


def _fused_backward(target: str, causal: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                    lse: np.ndarray, do: np.ndarray) -> dict[str, np.ndarray]:
    """dQ, dK, dV of the one-kernel path at D = 64 in the interpreter, as examples/attention_autograd.py runs it:
    prep, the main kernel adding dQ^T into a zeroed f32 workspace, the conversion."""
    b, h, n, d = q.shape
    sizes = dict(B=b, H=h, N=n)
    delta = np.full((b, h, n), np.nan, np.float32)
    interpret(_compile("attention_bwd_prep", target, D=d).module, o, do, delta, sizes=sizes)
    acc = np.zeros((b, h, d, -(-n // 4) * 4), np.float32)
    dk, dv, dq = (np.full(q.shape, np.nan, q.dtype) for _ in range(3))
    main = _compile("attention_bwd", target, D=d, CAUSAL=causal, BQ="auto", BKV="auto", WG="auto")
    interpret(main.module, q, k, v, do, lse, delta, acc, dk, dv, sizes=sizes)
    interpret(_compile("attention_bwd_dq_convert", target, D=d).module, acc, dq, sizes=sizes)
    return {"DQ": dq, "DK": dk, "DV": dv}


# --- mutants -----------------------------------------------------------------------------------------------

MUTANTS = [
    # the causal mask of dK/dV dropped: keys after the query get weight
    ("attention_bwd_dkdv", "st = where(row_index(st) + block.x * BKV <= col_index(st) + i * BQ, st, -inf)",
     "st = st", ["DK", "DV"]),
    # dK/dV's loop starting one query block late: the diagonal block is missed
    ("attention_bwd_dkdv", "let q_first = block.x * BKV / BQ", "let q_first = block.x * BKV / BQ + 1", ["DK", "DV"]),
    # dQ's loop stopping one key block early: the diagonal block is missed
    ("attention_bwd_dq", "let kv_blocks = min(cdiv((block.x + 1) * BQ, BKV), cdiv(N, BKV))",
     "let kv_blocks = min(cdiv((block.x + 1) * BQ, BKV) - 1, cdiv(N, BKV))", ["DQ"]),
    # dQ without the causal mask
    ("attention_bwd_dq", "s = mask_causal(s, block.x * BQ, j * BKV)", "s = s", ["DQ"]),
]


@pytest.mark.parametrize("name, old, new, failing", MUTANTS, ids=[f"{m[0]}-{i}" for i, m in enumerate(MUTANTS)])
def test_causal_mutants_fail(tmp_path: Path, name: str, old: str, new: str, failing: list[str]) -> None:
    src = (EXAMPLES / f"{name}.tk").read_text()
    assert src.count(old) == 1
    path = tmp_path / f"{name}.tk"
    path.write_text(src.replace(old, new))
    comp = _companion(name)
    consts, sizes = {"CAUSAL": 1}, dict(B=1, H=1, N=130)
    good = check_interpreted(_compile(name, "sm_90a", **consts).module, comp, sizes, consts, seed=3)
    assert all(r.ok for r in good), [str(r) for r in good]
    bad = check_interpreted(tkir.compile(str(path), **consts).module, comp, sizes, consts, seed=3)
    assert sorted(r.output for r in bad if not r.ok) == failing, [str(r) for r in bad]


# --- assembly ----------------------------------------------------------------------------------------------

SM90_CONFIGS = [("attention_bwd_prep", {}), ("attention_bwd_dkdv", {"D": 128, "CAUSAL": 1, "BQ": "auto"}),
                ("attention_bwd_dq", {"D": 128, "CAUSAL": 1}), ("attention_bwd_dq", {"D": 256})]


@pytest.mark.parametrize("name, consts", SM90_CONFIGS, ids=[f"{n}-{c}" for n, c in SM90_CONFIGS])
def test_sm90a_assembles_without_spills(name: str, consts: dict) -> None:
    k = _compile(name, "sm_90a", **consts)
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res
    assert not local_memory_ops(k.asm["sass"])
    if name != "attention_bwd_prep":
        assert "HGMMA" in k.asm["sass"] and "UTMALDG" in k.asm["sass"]


@pytest.mark.parametrize("name", KERNELS)
def test_sm80_assembles(name: str) -> None:
    k = _compile(name, "sm_80")
    assert ".target sm_80" in k.asm["ptx"]
    assert k.asm["ptxas"].registers > 0  # ptxas ran and accepted the PTX
    if name != "attention_bwd_prep":
        assert "mma.sync.aligned.m16n8k16" in k.asm["ptx"]


def test_dkdv_d256_is_a_located_error() -> None:
    path = str(EXAMPLES / "attention_bwd_dkdv.tk")
    with pytest.raises(CompileError) as e:
        tkir.compile(path, D=256)
    msg = str(e.value)
    assert msg.startswith(f"{path}:") and "static_assert failed" in msg and "D = 256" in msg, msg


def test_dkdv_auto_query_block_fits_the_registers() -> None:
    """BQ=auto: 64-row query blocks at D = 64, and at D = 128 causal too now that the register estimate counts
    addresses as ptxas keeps them (ptxas holds it at 255 registers without spilling); where ptxas spills the
    64-row block (grouped-query, test_attention_gqa.py), auto takes 32."""
    assert _compile("attention_bwd_dkdv", "sm_90a", D=64, BQ="auto").module.kernel.attrs["auto"] == {"BQ": 64}
    k = _compile("attention_bwd_dkdv", "sm_90a", D=128, CAUSAL=1, BQ="auto")
    assert k.module.kernel.attrs["auto"] == {"BQ": 64}
    stats = k.asm["ptxas"]
    assert stats.spill_stores == stats.spill_loads == 0
